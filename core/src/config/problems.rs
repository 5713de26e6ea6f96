//! Collecting configuration errors: every problem of a file is recorded (file, key, reason) rather than
//! stopping at the first, so `edge --check` lists them all.

use super::ConfigError;

/// The problems found so far, each becoming a [`ConfigError`] that names `file`.
pub(super) struct Problems<'a> {
    pub(super) file: &'a str,
    pub(super) errors: Vec<ConfigError>,
    /// What does not stop the configuration from loading: endpoint names that do not resolve yet.
    pub(super) warnings: Vec<ConfigError>,
}

impl Problems<'_> {
    /// Records a warning at `key`: the configuration still loads.
    pub(super) fn warn(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.warnings.push(ConfigError {
            file: self.file.into(),
            key: key.into(),
            reason: reason.into(),
        });
    }

    /// Records that the value at `key` is wrong, and why.
    pub(super) fn add(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.into(),
            key: key.into(),
            reason: reason.into(),
        });
    }

    /// The value of `result`, or `None` with its reason recorded under `key`.
    pub(super) fn take<T>(
        &mut self,
        key: impl Into<String>,
        result: Result<T, String>,
    ) -> Option<T> {
        result.map_err(|reason| self.add(key, reason)).ok()
    }
}
