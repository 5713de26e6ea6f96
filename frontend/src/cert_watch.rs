//! Certificate rotation without a signal (DESIGN.md "TLS"): every `server.tls.reload_check` the
//! supervisor stats each certificate, key and CA file the configuration names (mtime and size, one
//! `stat(2)` per file) and, when one changed, reloads exactly as at SIGHUP ([`crate::reload::reload`]):
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

use crate::reload::{self, ConfigSource};

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

/// Labels of the expiry gauges set so far (supervisor thread only).
static ANNOUNCED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// After a configuration was loaded (start, reload): the expiry gauge of each served certificate (a
/// certificate no longer served reads NaN, so an expiry alert does not fire for a rotated-away one), and
/// the warning for each upstream that does not verify its certificates.
pub fn announce(cfg: &Resolved) {
    let served: Vec<(String, f64)> = cfg.tls.as_ref().map_or(Vec::new(), |tls| {
        tls.certificates
            .iter()
            .map(|c| (c.label.clone(), c.not_after as f64))
            .collect()
    });
    let mut announced = ANNOUNCED.lock().unwrap_or_else(|p| p.into_inner());
    for gone in announced
        .iter()
        .filter(|l| !served.iter().any(|(s, _)| s == *l))
    {
        metrics::gauge!("edge_tls_certificate_expiry_timestamp_seconds", "certificate" => gone.clone())
            .set(f64::NAN);
    }
    for (label, not_after) in &served {
        metrics::gauge!("edge_tls_certificate_expiry_timestamp_seconds", "certificate" => label.clone())
            .set(*not_after);
    }
    *announced = served.into_iter().map(|(l, _)| l).collect();
    drop(announced);
    for u in cfg
        .upstreams
        .iter()
        .filter(|u| u.config.tls && !u.config.tls_verify)
    {
        tracing::warn!(event = "upstream.tls_unverified", upstream = %u.config.name, "tls_verify = false: this upstream's certificates are not verified (for labs only)");
    }
}
