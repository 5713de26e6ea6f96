//! Certificate rotation without a signal (DESIGN.md "TLS"): every `server.tls.reload_check` the
//! supervisor stats each certificate, key and CA file the configuration names (mtime and size, one
//! `stat(2)` per file) and, when one changed, reloads exactly as at SIGHUP ([`crate::process::reload::reload`]):
//! the new files are loaded and validated on the supervisor thread, off the workers, and published;
//! new handshakes use them, existing connections are untouched. A file that does not load keeps the
//! running certificates and logs `tls.reload_failed`; the next change is tried again.
//!
//! Also here: the certificate expiry gauge and the `tls_verify = false` warning, both refreshed at start
//! and after every reload.

use std::{path::PathBuf, time::Instant};

use edge_core::{
    config::{Limit, Resolved},
    runtime::Shared,
    tls::{fingerprint, watched_files, FileStamp},
};

use crate::process::reload::{self, ConfigSource};

/// How often a configuration with `reload_check = "none"` is looked at again (for a reload that
/// turned polling on).
const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// The poll state: when to look next and what the files looked like.
pub struct CertWatch {
    files: Vec<PathBuf>,
    stamps: Vec<FileStamp>,
    next: Instant,
    generation: u64,
}

impl CertWatch {
    /// The watch for the configuration published in `shared` now (it follows reloads: a configuration
    /// with no certificate file or `reload_check = "none"` is watched for nothing, and only SIGHUP
    /// rotates).
    pub fn start(shared: &Shared) -> CertWatch {
        let (cfg, generation) = shared.config.get();
        let files = watched_files(&cfg.config);
        CertWatch {
            stamps: fingerprint(&files),
            files,
            next: Instant::now() + period(&cfg).unwrap_or(IDLE_RECHECK),
            generation,
        }
    }

    /// Polls when due; reloads when a file changed. Returns whether a reload was published.
    pub fn tick(&mut self, shared: &Shared, source: &ConfigSource) -> bool {
        if Instant::now() < self.next {
            return false;
        }
        let (cfg, generation) = shared.config.get();
        if generation != self.generation {
            // Reloaded meanwhile (SIGHUP, discovery): watch what the current configuration names. The
            // same files keep their old stamps: a file that changed after that reload read it must still
            // count as a change (at worst one reload more).
            self.generation = generation;
            let files = watched_files(&cfg.config);
            if files != self.files {
                self.stamps = fingerprint(&files);
                self.files = files;
            }
        }
        let Some(every) = period(&cfg) else {
            self.next = Instant::now() + IDLE_RECHECK;
            return false;
        };
        self.next = Instant::now() + every;
        let stamps = fingerprint(&self.files);
        if stamps == self.stamps {
            return false;
        }
        self.stamps = stamps;
        tracing::info!(
            event = "tls.files_changed",
            "a certificate, key or CA file changed; reloading"
        );
        let published = reload::reload(shared, source, "certificate files changed");
        if published {
            let (cfg, generation) = shared.config.get();
            self.generation = generation;
            self.files = watched_files(&cfg.config);
        }
        published
    }
}

/// `server.tls.reload_check`, or 10 s when only upstream CA files are watched; `None` for "none".
fn period(cfg: &Resolved) -> Option<std::time::Duration> {
    match cfg.config.server.tls.as_ref().map(|t| t.reload_check) {
        Some(Limit(every)) => every,
        None => Some(std::time::Duration::from_secs(10)),
    }
}
