//! What one `edge-bench compare` run will do, worked out from its arguments before anything
//! starts: the `--quick` overrides, the checked CPU sets, the workloads and targets without
//! repeats, the targets left out (a missing nginx or HAProxy, with the reason) and the executables.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::target::{Binaries, TargetKind};
use super::workload::Workload;
use super::Args;
use crate::support::cgroup::CpuQuota;
use crate::support::edge_proc::locate_edge_bin;
use crate::support::host::{allowed_cpus, cpu_list, parse_cpus};

impl Args {
    /// The arguments with `--quick` applied: 1 round of 3 s, 1 s warm-up, files under
    /// `OUT_DIR/quick`.
    pub fn quick_adjusted(mut self) -> Args {
        if self.quick {
            self.rounds = 1;
            self.duration = Duration::from_secs(3);
            self.warmup = Duration::from_secs(1);
            self.out_dir = self.out_dir.join("quick");
        }
        self
    }
}

/// The checked setup of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// CPUs of the proxy under test.
    pub proxy_cpus: Vec<usize>,
    /// CPUs of wrk, the origin and edge-bench.
    pub load_cpus: Vec<usize>,
    /// `taskset -c` list of [`proxy_cpus`](Self::proxy_cpus).
    pub proxy_list: String,
    /// `taskset -c` list of [`load_cpus`](Self::load_cpus).
    pub load_list: String,
    /// Workloads, in order, without repeats.
    pub workloads: Vec<Workload>,
    /// Targets to start, in round order, without repeats or skipped ones.
    pub kinds: Vec<TargetKind>,
    /// Targets left out, with the reason.
    pub skipped: Vec<(TargetKind, String)>,
    /// The proxies' CPU quota, % of one CPU (checked: a cgroup with it can be made).
    pub cpu_quota: Option<u32>,
    /// The executables.
    pub bins: Binaries,
}

impl Plan {
    /// Checks `args` and finds the executables; prints the targets it skips and a warning when
    /// the CPU sets overlap.
    ///
    /// # Errors
    /// `InvalidInput` for bad or empty CPU lists, CPUs outside this process's affinity, zero
    /// rounds or connections, no targets or workloads; `NotFound` for a missing wrk (or h2load,
    /// with HTTP/2 workloads); failures to find or build edge.
    pub fn new(args: &Args) -> io::Result<Plan> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        let proxy_cpus = parse_cpus(&args.proxy_cpus).map_err(invalid)?;
        let load_cpus = parse_cpus(&args.load_cpus).map_err(invalid)?;
        let allowed = allowed_cpus()?;
        if let Some(c) = proxy_cpus
            .iter()
            .chain(&load_cpus)
            .find(|c| !allowed.contains(c))
        {
            return Err(invalid(format!(
                "CPU {c} is not in this process's affinity mask {}",
                cpu_list(&allowed)
            )));
        }
        if args.rounds == 0 || args.connections == 0 {
            return Err(invalid(
                "--rounds and --connections must be at least 1".into(),
            ));
        }
        let workloads = distinct(&args.workloads);
        let mut kinds = distinct(&args.targets);
        if kinds.is_empty() || workloads.is_empty() {
            return Err(invalid("no targets or no workloads".into()));
        }
        require_file(&args.wrk_bin, "wrk (install it with bench/setup.sh)")?;
        if workloads.iter().any(|w| w.is_h2()) {
            require_file(&args.h2load_bin, "h2load (apt-get install nghttp2-client)")?;
        }
        let skipped = skip_missing(args, &mut kinds);
        if kinds.is_empty() {
            return Err(invalid("every target was skipped".into()));
        }
        let edge = if kinds.iter().any(|k| k.is_edge()) {
            locate_edge_bin(args.edge_bin.as_deref())?
        } else {
            PathBuf::from("edge")
        };
        let baseline = match (
            kinds.iter().any(|k| k.is_baseline()),
            &args.baseline_edge_bin,
        ) {
            (false, _) => None,
            (true, Some(b)) => {
                require_file(b, "the baseline edge binary (--baseline-edge-bin)")?;
                Some(b.clone())
            }
            (true, None) => {
                return Err(invalid(
                    "baseline targets need --baseline-edge-bin PATH".into(),
                ))
            }
        };
        if let Some(conf) = &args.edge_config {
            require_file(conf, "the edge config file (--edge-config)")?;
            if workloads.iter().any(|w| w.is_h2() || w.is_tls()) {
                return Err(invalid(
                    "--edge-config works with plain HTTP/1.1 workloads only".into(),
                ));
            }
        }
        let bins = Binaries {
            edge,
            baseline,
            edge_config: args.edge_config.clone(),
            nginx: args.nginx_bin.clone(),
            haproxy: args.haproxy_bin.clone(),
        };
        let (proxy_list, load_list) = (cpu_list(&proxy_cpus), cpu_list(&load_cpus));
        if proxy_cpus.iter().any(|c| load_cpus.contains(c)) {
            println!("warning: proxy CPUs {proxy_list} overlap load CPUs {load_list}");
        }
        if let Some(percent) = args.proxy_cpu_quota {
            check_quota(percent, &proxy_cpus, &args.proxy_cpus).map_err(invalid)?;
            let probe = format!("edge-bench-{}-probe", std::process::id());
            CpuQuota::create(&probe, percent).map_err(|e| {
                io::Error::new(e.kind(), format!("--proxy-cpu-quota {percent}: {e}"))
            })?;
        }
        Ok(Plan {
            cpu_quota: args.proxy_cpu_quota,
            proxy_cpus,
            load_cpus,
            proxy_list,
            load_list,
            workloads,
            kinds,
            skipped,
            bins,
        })
    }
}

/// Removes nginx and HAProxy from `kinds` when their executable is missing, printing why; the
/// removed ones with the reason.
fn skip_missing(args: &Args, kinds: &mut Vec<TargetKind>) -> Vec<(TargetKind, String)> {
    let mut skipped: Vec<(TargetKind, String)> = Vec::new();
    for (kind, bin) in [
        (TargetKind::Nginx, &args.nginx_bin),
        (TargetKind::Haproxy, &args.haproxy_bin),
    ] {
        if kinds.contains(&kind) && !bin.is_file() {
            let why = format!("{} not found (bench/setup.sh installs it)", bin.display());
            println!("skipping {}: {why}", kind.name());
            skipped.push((kind, why));
            kinds.retain(|k| *k != kind);
        }
    }
    skipped
}

fn require_file(p: &Path, what: &str) -> io::Result<()> {
    if p.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{what} not found at {}", p.display()),
        ))
    }
}

/// A CPU quota is at most 100 % per CPU of the proxy's set (`list` as given, for the message).
fn check_quota(percent: u32, cpus: &[usize], list: &str) -> Result<(), String> {
    let most = 100 * cpus.len() as u32;
    match percent > most {
        true => Err(format!(
            "--proxy-cpu-quota {percent}: at most {most} (100 per CPU of --proxy-cpus {list})"
        )),
        false => Ok(()),
    }
}

/// Items of `v` without repeats, in first-seen order.
fn distinct<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(*x);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::check_quota;

    #[test]
    fn a_quota_is_at_most_100_per_proxy_cpu() {
        assert!(check_quota(100, &[0], "0").is_ok());
        assert_eq!(
            check_quota(150, &[0], "0").unwrap_err(),
            "--proxy-cpu-quota 150: at most 100 (100 per CPU of --proxy-cpus 0)"
        );
        assert!(check_quota(150, &[0, 1], "0-1").is_ok());
    }
}
