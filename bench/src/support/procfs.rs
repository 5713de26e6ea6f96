//! What edge-bench reads about a process from `/proc` and its limits: resident memory, CPU
//! ticks, run-queue wait, parent and children, allowed CPUs, and the file-descriptor limit.

use std::fs;
use std::io;

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns `(soft, hard)` after the change.
///
/// # Errors
/// getrlimit/setrlimit failures.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Resident memory of a process from /proc/PID/status, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rss {
    /// `VmRSS`: all resident pages (anonymous, file-backed, shared memory).
    pub total: u64,
    /// `RssAnon`: resident anonymous pages (heap, stacks), what connections allocate.
    pub anon: u64,
}

/// Reads [`Rss`] of `pid`.
///
/// # Errors
/// The file cannot be read, or has no `VmRSS` line.
pub fn read_rss(pid: u32) -> io::Result<Rss> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_rss(&status).ok_or_else(|| io::Error::other(format!("no VmRSS in /proc/{pid}/status")))
}

/// [`Rss`] from the text of /proc/PID/status (`VmRSS:   1234 kB`).
fn parse_rss(status: &str) -> Option<Rss> {
    let field = |name: &str| status_kib(status, name).map(|kb| kb * 1024);
    Some(Rss {
        total: field("VmRSS")?,
        anon: field("RssAnon").unwrap_or(0),
    })
}

/// One `/proc/PID/stat` line, the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Parent pid.
    pub ppid: u32,
    /// utime + stime in clock ticks (all threads, live and exited).
    pub cpu_ticks: u64,
}

/// Reads `/proc/PID/stat`.
///
/// # Errors
/// Read failures (no such process) and unparseable content.
pub fn proc_stat(pid: u32) -> io::Result<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::other(format!("cannot parse /proc/{pid}/stat")))
}

/// Parses a `/proc/PID/stat` line (the command name may contain spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state(3) ppid(4) … utime(14) stime(15), numbered as in proc(5).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        cpu_ticks: utime + stime,
    })
}

/// Pids whose parent is `pid` (scans `/proc`; processes that vanish mid-scan are skipped).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut kids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| proc_stat(p).is_ok_and(|s| s.ppid == pid))
        .collect();
    kids.sort_unstable();
    kids
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// A `Key:   1234 kB` value of `/proc/PID/status`, in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        v.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// `Cpus_allowed_list` of a process from `/proc/PID/status`.
pub fn cpus_allowed(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// Run-queue wait of every live thread of `pid` (second field of each thread's `schedstat`), ns;
/// 0 when unavailable.
pub fn run_wait_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| {
            let text = fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            text.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_from_status() {
        let s = "Name:\tedge\nVmRSS:\t    2048 kB\nRssAnon:\t     512 kB\n";
        assert_eq!(
            parse_rss(s),
            Some(Rss {
                total: 2048 * 1024,
                anon: 512 * 1024
            })
        );
        assert_eq!(parse_rss("Name:\tx\n"), None);
        assert!(read_rss(std::process::id()).unwrap().total > 0);
    }

    #[test]
    fn stat_line_with_odd_name() {
        let line = "1234 (ng inx) (x)) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 \
                    5000 1000 200 18446744073709551615\n";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                ppid: 77,
                cpu_ticks: 281
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        let s = proc_stat(me).unwrap();
        assert!(s.ppid > 0);
        assert!(cpus_allowed(me).is_some());
        let _ = run_wait_ns(me);
    }

    #[test]
    fn status_values() {
        let st = "Name:\tnginx\nVmPeak:\t  9000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t 4000 kB\n";
        assert_eq!(status_kib(st, "VmHWM"), Some(5120));
        assert_eq!(status_kib(st, "VmRSS"), Some(4000));
        assert_eq!(status_kib(st, "VmSwap"), None);
        let me = fs::read_to_string("/proc/self/status").unwrap();
        assert!(status_kib(&me, "VmHWM").unwrap() > 0);
    }
}
