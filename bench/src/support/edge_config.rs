//! A temporary edge config file: the keys a scenario changes, merged by edge over its embedded
//! default, removed when dropped.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A TOML config file in the temp directory, removed on drop. Scenarios that need non-default
/// settings write only the keys they change (edge merges the file over its embedded default) and
/// pass [`args`](Self::args) to edge; `--listen`, `--admin-listen` and `--upstream` given by
/// [`Stack`](crate::support::stack::Stack) override the file.
#[derive(Debug)]
pub struct TempConfig {
    path: PathBuf,
}

impl TempConfig {
    /// Writes `toml` to `$TMPDIR/edge-bench-PID-N-name.toml`.
    ///
    /// # Errors
    /// Write failures.
    pub fn write(name: &str, toml: &str) -> io::Result<TempConfig> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "edge-bench-{}-{}-{name}.toml",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::write(&path, toml)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
        Ok(TempConfig { path })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `["--config", PATH]`.
    pub fn args(&self) -> Vec<String> {
        vec!["--config".into(), self.path.display().to_string()]
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A duration as a humantime string edge's config accepts (`"3000ms"`).
pub fn toml_duration(d: Duration) -> String {
    format!("\"{}ms\"", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_config_is_removed() {
        let c = TempConfig::write("t", "[server]\n").unwrap();
        let p = c.path().to_path_buf();
        assert_eq!(fs::read_to_string(&p).unwrap(), "[server]\n");
        assert_eq!(c.args()[0], "--config");
        drop(c);
        assert!(!p.exists());
    }

    #[test]
    fn durations_are_quoted_milliseconds() {
        assert_eq!(toml_duration(Duration::from_secs(3)), "\"3000ms\"");
    }
}
