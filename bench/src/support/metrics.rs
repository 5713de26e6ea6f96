//! What edge reports about itself: its admin metrics (`GET /metrics`, summed by label) and the
//! log events in its captured output.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::edge_proc::EdgeProcess;
use crate::support::probe;

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
}
