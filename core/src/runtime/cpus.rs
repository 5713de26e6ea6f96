//! How many workers to start and where to pin them (DESIGN.md "Process model"): the CPUs of the
//! process's affinity mask, capped by the cgroup CPU quota, so `taskset`, container cpusets and CPU
//! limits are all respected.

use crate::config::{PinWorkers, Workers};

/// CPU ids in this process's affinity mask, ascending.
pub fn affinity_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// ceil(quota / period) from cgroup v2 `cpu.max` (or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`);
/// `None` when there is no quota.
pub fn cgroup_cpu_limit() -> Option<usize> {
    let v2 = cgroup_v2_path().and_then(|p| std::fs::read_to_string(format!("{p}/cpu.max")).ok());
    if let Some(text) = v2 {
        return parse_cpu_max(&text);
    }
    let quota: i64 = std::fs::read_to_string("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let period: i64 = std::fs::read_to_string("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (quota > 0 && period > 0).then(|| (quota as u64).div_ceil(period as u64) as usize)
}

fn cgroup_v2_path() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let path = format!("/sys/fs/cgroup{}", rel.trim_end_matches('/'));
    if std::path::Path::new(&format!("{path}/cpu.max")).exists() {
        Some(path)
    } else {
        Some("/sys/fs/cgroup".into())
    }
}

/// Parses cgroup v2 `cpu.max` ("max 100000" or "150000 100000").
pub fn parse_cpu_max(text: &str) -> Option<usize> {
    let mut it = text.split_whitespace();
    let quota = it.next()?;
    let period: u64 = it.next()?.parse().ok()?;
    if quota == "max" || period == 0 {
        return None;
    }
    let quota: u64 = quota.parse().ok()?;
    Some(quota.div_ceil(period).max(1) as usize)
}

/// The worker count for a `workers` setting, and the CPU each worker is pinned to (`None` = unpinned).
pub fn plan(workers: Workers, pin: PinWorkers) -> (usize, Vec<Option<usize>>) {
    let mask = affinity_cpus();
    let n = match workers {
        Workers::Count(n) => n,
        Workers::Auto => {
            let cpus = mask.len().max(1);
            cgroup_cpu_limit().map_or(cpus, |q| q.min(cpus)).max(1)
        }
    };
    let pinned = match pin {
        PinWorkers::Never => false,
        PinWorkers::Always => !mask.is_empty(),
        PinWorkers::Auto => mask.len() == n,
    };
    let cpus = (0..n)
        .map(|i| pinned.then(|| mask[i % mask.len()]))
        .collect();
    (n, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_parsing() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("150000 100000"), Some(2));
        assert_eq!(parse_cpu_max("50000 100000"), Some(1));
    }

    #[test]
    fn explicit_count_is_kept() {
        let (n, cpus) = plan(Workers::Count(3), PinWorkers::Never);
        assert_eq!(n, 3);
        assert!(cpus.iter().all(Option::is_none));
    }
}
