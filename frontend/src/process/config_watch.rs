//! Reloading the configuration file when it changes, without a signal (DESIGN.md "Configuration",
//! `server.config_check`): every `config_check` the supervisor looks at the file given with `--config`
//! and reloads exactly as at SIGHUP ([`super::reload::reload`]) when it changed. A Kubernetes ConfigMap
//! volume sends no signal: it swaps a `..data` symlink to a new directory, so what is compared is the
//! file the path resolves to now (device, inode, modification time and size, one `stat(2)` through the
//! symlinks): a swap is a change even when the new file has the old size and time. A file that does not
//! load is refused as at SIGHUP (`config.rejected`, the running configuration stays) and not tried
//! again until it changes once more.

use std::{
    os::unix::fs::MetadataExt,
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use edge_core::runtime::Shared;

use super::reload::{self, ConfigSource};

/// How often a configuration with `config_check = "none"` is looked at again, for a reload (by
/// SIGHUP) that turns the check on.
const IDLE_RECHECK: Duration = Duration::from_secs(10);

/// What identifies the file's content: (device, inode, modification time, size) of the file the path
/// resolves to; `None` when it cannot be read (missing while a ConfigMap swaps, no permission).
type Stamp = Option<(u64, u64, SystemTime, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.modified().ok()?, m.len()))
}

/// The poll state of the configuration file.
pub struct ConfigWatch {
    /// `--config FILE`; `None` (the embedded default) is never polled.
    path: Option<PathBuf>,
    stamp: Stamp,
    next: Instant,
}

impl ConfigWatch {
    /// The watch of `source`'s file as it is now, on the published configuration's `config_check`.
    pub fn start(shared: &Shared, source: &ConfigSource) -> ConfigWatch {
        let path = source.path.as_ref().map(PathBuf::from);
        ConfigWatch {
            stamp: path.as_ref().and_then(stamp),
            path,
            next: Instant::now() + period(shared),
        }
    }

    /// Polls when due; reloads when the file changed. Returns whether a new configuration was
    /// published.
    pub fn tick(&mut self, shared: &Shared, source: &ConfigSource) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + period(shared);
        if shared.config.get().0.config.server.config_check.0.is_none() {
            return false;
        }
        let current = stamp(path);
        if current == self.stamp || current.is_none() {
            // Unchanged, or missing for a moment (a swap in progress): look again next period.
            return false;
        }
        self.stamp = current;
        reload::reload(shared, source, "the configuration file changed")
    }

    /// Takes the file as it is now as seen (after a reload by SIGHUP read it).
    pub fn seen(&mut self) {
        self.stamp = self.path.as_ref().and_then(stamp);
    }
}

/// The published configuration's `config_check`, or [`IDLE_RECHECK`] when it is off.
fn period(shared: &Shared) -> Duration {
    shared
        .config
        .get()
        .0
        .config
        .server
        .config_check
        .0
        .unwrap_or(IDLE_RECHECK)
}
