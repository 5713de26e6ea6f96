//! A CPU quota for a process tree, the way a container runtime limits a proxy (`cpus: 0.5` in
//! ECS, `resources.limits.cpu: 500m` in Kubernetes): a cgroup of its own with CFS bandwidth
//! control, `QUOTA` µs of CPU time per 100 ms period.
//!
//! Both cgroup layouts are handled: the v1 `cpu` controller (its own hierarchy, e.g.
//! `/sys/fs/cgroup/cpu`, files `cpu.cfs_quota_us` and `cpu.cfs_period_us`) and the v2 unified
//! hierarchy with the `cpu` controller enabled for the root's children (file `cpu.max`). The
//! cgroup is made directly under the hierarchy's root, which needs root (or a delegated
//! hierarchy); where neither is writable, [`CpuQuota::create`] says so.
//!
//! Processes are moved in by pid ([`CpuQuota::admit`]); writing a pid to `cgroup.procs` moves the
//! whole thread group, and children forked afterwards (nginx's workers) are born inside. The
//! cgroup is removed on drop once its processes have exited.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The CFS bandwidth period, µs (the kernel's and Kubernetes' default).
pub const PERIOD_US: u64 = 100_000;

/// Which cgroup layout holds the `cpu` controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1: `cpu.cfs_quota_us`, `cpu.cfs_period_us`; `cpu.stat` `throttled_time` in ns.
    V1,
    /// cgroup v2: `cpu.max`; `cpu.stat` `throttled_usec`.
    V2,
}

/// A cgroup with a CPU quota; removed on drop.
#[derive(Debug)]
pub struct CpuQuota {
    dir: PathBuf,
    layout: Layout,
    percent: u32,
}

impl CpuQuota {
    /// Makes cgroup `name` with `percent` % of one CPU (e.g. 50: 50 ms per 100 ms period; above
    /// 100 spans CPUs).
    ///
    /// # Errors
    /// `InvalidInput` for 0 %; `NotFound` when no mounted hierarchy has the `cpu` controller; the
    /// directory or file errors otherwise (typically `PermissionDenied` when not root), each
    /// naming the path.
    pub fn create(name: &str, percent: u32) -> io::Result<CpuQuota> {
        if percent == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a CPU quota must be above 0 %",
            ));
        }
        let mounts = fs::read_to_string("/proc/self/mounts")?;
        let (root, layout) = cpu_hierarchy(&mounts, |p| {
            fs::read_to_string(p.join("cgroup.controllers")).ok()
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup hierarchy with the cpu controller is mounted (/proc/self/mounts)",
            )
        })?;
        if layout == Layout::V2 {
            let control = root.join("cgroup.subtree_control");
            let on = fs::read_to_string(&control).unwrap_or_default();
            if !on.split_whitespace().any(|c| c == "cpu") {
                write(&control, "+cpu")?;
            }
        }
        let dir = root.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(at(&dir, e)),
        }
        let quota = CpuQuota {
            dir,
            layout,
            percent,
        };
        let quota_us = quota.quota_us();
        match layout {
            Layout::V1 => {
                write(&quota.dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                write(&quota.dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
            }
            Layout::V2 => write(
                &quota.dir.join("cpu.max"),
                &format!("{quota_us} {PERIOD_US}"),
            )?,
        }
        Ok(quota)
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    ///
    /// # Errors
    /// The write to `cgroup.procs` failing (e.g. the process has exited), naming the path.
    pub fn admit(&self, pid: u32) -> io::Result<()> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    /// CPU time allowed per [`PERIOD_US`], µs.
    fn quota_us(&self) -> u64 {
        u64::from(self.percent) * PERIOD_US / 100
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The share of one CPU it allows (0.5 for 50 %).
    pub fn share(&self) -> f64 {
        f64::from(self.percent) / 100.0
    }

    /// Total time its processes were throttled (held off the CPU for the rest of a period);
    /// `None` when `cpu.stat` is unreadable.
    pub fn throttled(&self) -> Option<Duration> {
        let text = fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        throttled_in(&text, self.layout)
    }

    /// The setting in words, e.g. `50 % of one CPU (cgroup v1 cpu.cfs_quota_us 50000 per
    /// cpu.cfs_period_us 100000)`.
    pub fn describe(&self) -> String {
        let quota_us = self.quota_us();
        let how = match self.layout {
            Layout::V1 => {
                format!("cgroup v1 cpu.cfs_quota_us {quota_us} per cpu.cfs_period_us {PERIOD_US}")
            }
            Layout::V2 => format!("cgroup v2 cpu.max \"{quota_us} {PERIOD_US}\""),
        };
        format!("{} % of one CPU ({how})", self.percent)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // The processes were stopped just before; a dying one can keep the cgroup busy briefly.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!(
            "warning: could not remove cgroup {} (processes still in it?)",
            self.dir.display()
        );
    }
}

/// The root of the hierarchy that holds the `cpu` controller, from `/proc/self/mounts` text: a v1
/// `cgroup` mount with the `cpu` option first, else a `cgroup2` mount whose `cgroup.controllers`
/// (read with `controllers`) lists `cpu`.
pub fn cpu_hierarchy(
    mounts: &str,
    controllers: impl Fn(&Path) -> Option<String>,
) -> Option<(PathBuf, Layout)> {
    let fields = || {
        mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    let v1 =
        fields().find(|f| f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu"));
    if let Some(f) = v1 {
        return Some((PathBuf::from(f[1]), Layout::V1));
    }
    fields()
        .filter(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1]))
        .find(|root| controllers(root).is_some_and(|c| c.split_whitespace().any(|c| c == "cpu")))
        .map(|root| (root, Layout::V2))
}

/// The throttled time in `cpu.stat` text: v1 `throttled_time` (ns), v2 `throttled_usec`.
pub fn throttled_in(cpu_stat: &str, layout: Layout) -> Option<Duration> {
    let key = match layout {
        Layout::V1 => "throttled_time",
        Layout::V2 => "throttled_usec",
    };
    let value: u64 = cpu_stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })?;
    Some(match layout {
        Layout::V1 => Duration::from_nanos(value),
        Layout::V2 => Duration::from_micros(value),
    })
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| at(path, e))
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";

    #[test]
    fn finds_the_v1_cpu_controller_before_a_v2_mount() {
        let found = cpu_hierarchy(HYBRID, |_| Some("cpu memory".into()));
        assert_eq!(
            found,
            Some((PathBuf::from("/sys/fs/cgroup/cpu"), Layout::V1))
        );
        // `cpuacct` alone is not `cpu`.
        let only_acct = HYBRID.replace("rw,relatime,cpu 0", "rw,relatime,blkio 0");
        assert_eq!(cpu_hierarchy(&only_acct, |_| Some(String::new())), None);
    }

    #[test]
    fn takes_a_v2_mount_only_when_it_has_the_cpu_controller() {
        let v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        assert_eq!(
            cpu_hierarchy(v2, |p| (p == Path::new("/sys/fs/cgroup"))
                .then(|| "cpuset cpu io memory pids\n".into())),
            Some((PathBuf::from("/sys/fs/cgroup"), Layout::V2))
        );
        assert_eq!(cpu_hierarchy(v2, |_| Some("cpuset io\n".into())), None);
    }

    #[test]
    fn reads_throttled_time_in_either_layout() {
        let v1 = "nr_periods 120\nnr_throttled 80\nthrottled_time 2500000000\n";
        assert_eq!(
            throttled_in(v1, Layout::V1),
            Some(Duration::from_millis(2500))
        );
        let v2 = "usage_usec 1\nnr_throttled 3\nthrottled_usec 1500\n";
        assert_eq!(
            throttled_in(v2, Layout::V2),
            Some(Duration::from_micros(1500))
        );
        assert_eq!(throttled_in(v1, Layout::V2), None);
    }

    /// A process that spins for a second inside a 20 % quota gets about a fifth of a CPU; when
    /// this host offers no writable cpu controller, the error names why.
    #[test]
    fn a_quota_holds_a_busy_process_to_its_share() {
        let name = format!("edge-bench-test-{}", std::process::id());
        let quota = match CpuQuota::create(&name, 20) {
            Ok(q) => q,
            Err(e) => {
                let why = e.to_string();
                assert!(
                    matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                    ) || why.contains("Read-only"),
                    "unexpected error: {why}"
                );
                eprintln!("no writable cpu controller here: {why}");
                return;
            }
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read go; while :; do :; done"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        quota.admit(child.id()).unwrap();
        let pid = child.id();
        let ticks = || crate::support::procfs::proc_stat(pid).unwrap().cpu_ticks;
        let before = ticks();
        let started = std::time::Instant::now();
        use std::io::Write;
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let used = (ticks() - before) as f64 / crate::support::procfs::clock_ticks_per_sec() as f64;
        let wall = started.elapsed().as_secs_f64();
        let throttled = quota.throttled();
        let dir = quota.path().to_path_buf();
        child.kill().unwrap();
        child.wait().unwrap();
        drop(quota);
        // 20 % of 1.5 s is 0.3 s; unthrottled it would be near 1.5 s.
        assert!(used < 0.5 * wall, "used {used:.2} s of CPU in {wall:.2} s");
        assert!(used > 0.05, "the spinning child barely ran: {used:.2} s");
        assert!(
            throttled.is_some_and(|t| t > Duration::ZERO),
            "{throttled:?}"
        );
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }
}
