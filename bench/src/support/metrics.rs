//! Helpers shared by the fault scenarios (`idle-wedge`, `partial`, `drip`, `idle-memory`): a
//! temporary edge config file, the file-descriptor limit, reading edge's admin metrics and its
//! log events, and reading a process's resident memory from /proc.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::edge_proc::EdgeProcess;
use crate::support::probe;

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

/// `GET /metrics` on edge's admin listener, as text.
///
/// # Errors
/// Request failures or a non-200 answer.
pub fn fetch_metrics(admin: SocketAddr) -> io::Result<String> {
    let resp = probe::get(admin, "/metrics", Duration::from_secs(2))?;
    if resp.status != 200 {
        return Err(io::Error::other(format!(
            "GET /metrics answered {}",
            resp.status
        )));
    }
    Ok(String::from_utf8_lossy(&resp.body).into_owned())
}

/// The sum of every sample of metric `name` whose labels include all of `filter` (0 when there
/// is none), from Prometheus text; e.g. summing `edge_connections_evicted_total` over `worker`.
pub fn metric_sum(text: &str, name: &str, filter: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_sample)
        .filter(|s| s.name == name)
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
        .sum()
}

/// One Prometheus sample line.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses `name{a="x",b="y"} 1` or `name 1`.
fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            inner = inner.trim_start_matches([',', ' ']);
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = inner.find('=')?;
            let key = inner[..eq].trim().to_string();
            let after = inner[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut end = None;
            let mut chars = after.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            inner = &after[end? + 1..];
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Lines of edge's output that carry `event="name"` (text format) or `"event":"name"` (JSON).
pub fn count_events(output: &str, event: &str) -> usize {
    let text = format!("event=\"{event}\"");
    let json = format!("\"event\":\"{event}\"");
    output
        .lines()
        .filter(|l| l.contains(&text) || l.contains(&json))
        .count()
}

/// Waits up to `timeout` until edge's output holds more than `before` lines of `event`; returns
/// the count then (so a log line written just after a response is not missed).
pub fn wait_for_events(edge: &EdgeProcess, event: &str, before: usize, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let n = count_events(&edge.output(), event);
        if n > before || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let v = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb: u64 = v.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    Some(Rss {
        total: field("VmRSS")?,
        anon: field("RssAnon").unwrap_or(0),
    })
}

/// Bytes as KiB/MiB text: `812 B`, `7.3 KiB`, `41.2 MiB`; negative values keep their sign.
pub fn bytes(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs() as f64;
    if a < 1024.0 {
        format!("{v} B")
    } else if a < 1024.0 * 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else {
        format!("{sign}{:.1} MiB", a / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_samples_by_label() {
        let text = "# HELP edge_connections_shed_total shed\n\
                    # TYPE edge_connections_shed_total counter\n\
                    edge_connections_shed_total{worker=\"0\",reason=\"limit\"} 3\n\
                    edge_connections_shed_total{worker=\"1\",reason=\"limit\"} 4\n\
                    edge_connections_shed_total{worker=\"1\",reason=\"fd_limit\"} 1\n\
                    edge_connections_shed_total_other{worker=\"1\",reason=\"limit\"} 100\n\
                    edge_connections_max 256\n";
        let name = "edge_connections_shed_total";
        assert_eq!(metric_sum(text, name, &[]), 8.0);
        assert_eq!(metric_sum(text, name, &[("reason", "limit")]), 7.0);
        assert_eq!(
            metric_sum(text, name, &[("reason", "limit"), ("worker", "1")]),
            4.0
        );
        assert_eq!(metric_sum(text, "edge_connections_max", &[]), 256.0);
        assert_eq!(metric_sum(text, "missing", &[]), 0.0);
    }

    #[test]
    fn parses_escaped_labels() {
        let s = parse_sample("m{a=\"x\\\"y\", b=\"z\"} 2.5").unwrap();
        assert_eq!(s.name, "m");
        assert_eq!(
            s.labels,
            vec![("a".into(), "x\"y".into()), ("b".into(), "z".into())]
        );
        assert_eq!(s.value, 2.5);
        assert_eq!(parse_sample("m{} 1").unwrap().value, 1.0);
        assert_eq!(parse_sample("garbage"), None);
    }

    #[test]
    fn counts_text_and_json_events() {
        let out = "2026 WARN event=\"request.timeout\" worker=0\n\
                   {\"level\":\"WARN\",\"event\":\"request.timeout\"}\n\
                   2026 INFO event=\"request.timeout_other\"\n\
                   2026 INFO event=\"connection.shed\"\n";
        assert_eq!(count_events(out, "request.timeout"), 2);
        assert_eq!(count_events(out, "connection.shed"), 1);
    }

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
    fn temp_config_is_removed() {
        let c = TempConfig::write("t", "[server]\n").unwrap();
        let p = c.path().to_path_buf();
        assert_eq!(fs::read_to_string(&p).unwrap(), "[server]\n");
        assert_eq!(c.args()[0], "--config");
        drop(c);
        assert!(!p.exists());
    }

    #[test]
    fn formats() {
        assert_eq!(toml_duration(Duration::from_secs(3)), "\"3000ms\"");
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(-2048), "-2.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
