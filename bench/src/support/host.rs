//! The machine and the tree a benchmark run is recorded from, and where its threads run: CPU lists and
//! pinning, tool versions, the workspace commit, the date, CPU model, CPU count and kernel. Shared by
//! `compare` and `scale`.

use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// A CPU list as `taskset -c` takes it.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
/// Pins the calling thread (and threads and children it starts later) to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpus < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
/// First line of `bin arg` (stdout, else stderr), for the versions line.
pub fn version_of(bin: &Path, arg: &str) -> String {
    std::process::Command::new(bin)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{} (no version)", bin.display()))
}

/// `git rev-parse --short HEAD` of the workspace edge-bench was built from, `-dirty` appended
/// when the tree has changes; `unknown` when git fails.
pub fn git_commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        _ => "unknown".to_string(),
    }
}

/// Today's date in UTC as `YYYY-MM-DD`.
pub fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date(secs / 86_400)
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (proleptic Gregorian; H. Hinnant's algorithm).
pub fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The `model name` of the first CPU in `/proc/cpuinfo`.
pub fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// CPUs online on the machine (not this process's affinity mask, which `compare` narrows).
pub fn online_cpus() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u64::try_from(n).ok().filter(|&n| n > 0)
}

/// `uname -r`.
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parses a CPU list such as `1`, `0,2` or `0-3` into sorted, distinct CPU numbers.
///
/// # Errors
/// A message naming the bad element.
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("bad CPU list element {part:?} in {s:?}");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return Err(format!("empty CPU list {s:?}"));
    }
    Ok(cpus)
}

/// CPUs this process may run on.
///
/// # Errors
/// `sched_getaffinity` failures.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(19_782), "2024-02-29");
        assert_eq!(civil_date(20_453), "2025-12-31");
        assert_eq!(utc_date().len(), 10);
        assert!(online_cpus().unwrap() >= 1);
    }

    #[test]
    fn dates_of_unix_times() {
        let utc_date = |secs: u64| civil_date(secs / 86_400);
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_795_996_800), "2026-11-30");
        assert_eq!(utc_date(1_795_996_799), "2026-11-29");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("1"), Ok(vec![1]));
        assert_eq!(parse_cpus("3,0-1, 1"), Ok(vec![0, 1, 3]));
        assert!(parse_cpus("").is_err());
        assert!(parse_cpus("2-1").is_err());
        assert!(parse_cpus("a").is_err());
        assert_eq!(cpu_list(&[0, 2]), "0,2");
    }
}
