//! `edge-bench partial` and `edge-bench drip`: the inbound `request` deadline (DESIGN.md
//! "Inbound deadlines", "Status codes", Fault matrix a).
//!
//! edge runs with `server.timeouts.request = "3s"` (a temp config). Each case writes a request
//! that never completes, on its own connection, and reads what edge answers:
//! - `partial`: a POST with `Content-Length: 100` and only 10 bytes of body; and a head without
//!   its final blank line;
//! - `drip`: a request head written one byte every 200 ms, long enough to last three times the
//!   deadline, so a timeout restarted by every read would never fire.
//!
//! Every case expects what the Status codes table says for an inbound deadline: `408` no earlier
//! than the deadline and within deadline + 1 s of the first byte, the connection closed after it,
//! `edge_inbound_timeouts_total{phase="request"}` up by one and one `request.timeout` log line.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peers::origin::OriginOptions;
use crate::support::edge_config::{toml_duration, TempConfig};
use crate::support::edge_proc::{locate_edge_bin, EdgeArgs, STOP_GRACE};
use crate::support::metrics::{count_events, fetch_metrics, metric_sum, wait_for_events};
use crate::support::probe;
use crate::support::stack::Stack;
use crate::support::table::{ms, Table};

/// Slack allowed after the deadline (DESIGN.md: 408 within `request` + 1 s).
pub const LATE_SLACK: Duration = Duration::from_secs(1);

/// Timer slack before the deadline (edge's clock starts when the first byte arrives, which is
/// after we time it, so an honest 408 is never early by more than timer rounding).
pub const EARLY_SLACK: Duration = Duration::from_millis(50);

/// The log event of an inbound deadline.
pub const TIMEOUT_EVENT: &str = "request.timeout";

/// Command line of `edge-bench partial` and of `edge-bench drip`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub edge: EdgeArgs,
}

impl Args {
    /// The scenario's options: these choices over the defaults.
    pub fn options(&self) -> InboundOptions {
        InboundOptions {
            edge_bin: self.edge.edge_bin.clone(),
            edge_args: self.edge.driver_args(),
            ..InboundOptions::default()
        }
    }
}

/// Options of `edge-bench partial` and `edge-bench drip`.
#[derive(Debug, Clone)]
pub struct InboundOptions {
    /// The edge binary; found or built when `None`.
    pub edge_bin: Option<PathBuf>,
    /// edge's `server.timeouts.request`.
    pub request_timeout: Duration,
    /// Time between bytes of the drip.
    pub drip_interval: Duration,
    /// Extra arguments for edge (e.g. `--io-driver epoll`).
    pub edge_args: Vec<String>,
}

impl Default for InboundOptions {
    fn default() -> Self {
        Self {
            edge_bin: None,
            request_timeout: Duration::from_secs(3),
            drip_interval: Duration::from_millis(200),
            edge_args: Vec::new(),
        }
    }
}

/// A request that never completes: `chunks` written `gap` apart, starting at once.
#[derive(Debug, Clone)]
pub struct Case {
    /// Row name.
    pub name: &'static str,
    /// What is written, in order.
    pub chunks: Vec<Vec<u8>>,
    /// Pause between chunks.
    pub gap: Duration,
}

impl Case {
    /// Bytes in all chunks.
    pub fn total_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// How long writing all chunks takes.
    pub fn write_time(&self) -> Duration {
        self.gap * u32::try_from(self.chunks.len().saturating_sub(1)).unwrap_or(u32::MAX)
    }
}

/// The `partial` cases: a body 10 bytes of 100, and a head missing its blank line.
pub fn partial_cases(host: &str) -> Vec<Case> {
    let mut body = format!(
        "POST /upload HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: 100\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&[b'x'; 10]);
    let head =
        format!("GET /partial-head HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n").into_bytes();
    vec![
        Case {
            name: "partial body (10 of 100 bytes)",
            chunks: vec![body],
            gap: Duration::ZERO,
        },
        Case {
            name: "partial head (no blank line)",
            chunks: vec![head],
            gap: Duration::ZERO,
        },
    ]
}

/// The `drip` case: a complete head (so edge would forward it if the deadline never fired),
/// padded with an `X-Drip` field so that writing it one byte per `interval` lasts `span`.
pub fn drip_case(host: &str, interval: Duration, span: Duration) -> Case {
    let bytes_needed = (span.as_secs_f64() / interval.as_secs_f64().max(1e-3)).ceil() as usize + 1;
    let start = format!("GET /drip HTTP/1.1\r\nHost: {host}\r\nX-Drip: ");
    let end = "\r\n\r\n";
    let pad = bytes_needed.saturating_sub(start.len() + end.len()).max(1);
    let head = format!("{start}{}{end}", "d".repeat(pad));
    Case {
        name: "drip (1 byte per interval)",
        chunks: head.bytes().map(|b| vec![b]).collect(),
        gap: interval,
    }
}

/// What one case saw.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The response status, or why there was none.
    pub status: Result<u16, String>,
    /// From the first byte written to the complete response (or the failure).
    pub elapsed: Duration,
    /// Bytes written before the response arrived.
    pub sent: usize,
    /// Bytes the case had to write.
    pub total: usize,
    /// Whether edge closed the connection after the response (EOF or reset within 3 s).
    pub closed: Result<bool, String>,
    /// `request.timeout` lines logged for this case.
    pub log_lines: usize,
    /// Increase of `edge_inbound_timeouts_total{phase="request"}`.
    pub counter: Option<f64>,
}

impl Outcome {
    /// Failed checks, as text (empty when the case passed).
    pub fn failures(&self, deadline: Duration) -> Vec<String> {
        let mut f = Vec::new();
        match &self.status {
            Ok(408) => {}
            Ok(s) => f.push(format!("answered {s}, expected 408")),
            Err(e) => f.push(format!("no response: {e}")),
        }
        if self.status.is_ok() {
            if self.elapsed + EARLY_SLACK < deadline {
                f.push(format!(
                    "answered after {}, before the {} deadline",
                    ms(self.elapsed),
                    ms(deadline)
                ));
            }
            if self.elapsed > deadline + LATE_SLACK {
                f.push(format!(
                    "answered after {}, later than deadline + {}",
                    ms(self.elapsed),
                    ms(LATE_SLACK)
                ));
            }
        }
        match &self.closed {
            _ if self.status.is_err() => {}
            Ok(true) => {}
            Ok(false) => f.push("connection still open after the response".into()),
            Err(e) => f.push(format!("could not tell whether the connection closed: {e}")),
        }
        if self.log_lines == 0 {
            f.push(format!("no {TIMEOUT_EVENT} log line"));
        }
        match self.counter {
            Some(1.0) => {}
            Some(c) => f.push(format!(
                "edge_inbound_timeouts_total{{phase=\"request\"}} moved by {c}, expected 1"
            )),
            None => f.push("metrics unavailable".into()),
        }
        f
    }
}

/// Writes `case` on a fresh connection and reads the answer, waiting at most `read_for` after
/// the last chunk was due.
pub fn exchange(addr: SocketAddr, case: &Case, read_for: Duration) -> io::Result<Outcome> {
    let mut reader = probe::connect(addr, Duration::from_secs(2))?;
    let mut writer = reader.try_clone()?;
    writer.set_write_timeout(Some(Duration::from_secs(2)))?;
    let answered = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let chunks = case.chunks.clone();
    let gap = case.gap;
    let (flag, count) = (answered.clone(), sent.clone());
    let t0 = Instant::now();
    let writer = std::thread::Builder::new()
        .name("inbound-writer".into())
        .spawn(move || {
            for (i, c) in chunks.iter().enumerate() {
                if i > 0 {
                    std::thread::sleep(gap);
                }
                if flag.load(Ordering::SeqCst) || writer.write_all(c).is_err() {
                    return;
                }
                count.fetch_add(c.len(), Ordering::SeqCst);
            }
        })?;
    let deadline = t0 + case.write_time() + read_for;
    let resp = probe::read_response(&mut reader, deadline);
    let elapsed = t0.elapsed();
    answered.store(true, Ordering::SeqCst);
    let sent_then = sent.load(Ordering::SeqCst);
    let closed = match &resp {
        Ok(_) => wait_closed(&mut reader, Duration::from_secs(3)),
        Err(e) if is_closed(e) => Ok(true),
        Err(_) => Ok(false),
    };
    drop(reader);
    let _ = writer.join();
    Ok(Outcome {
        status: resp.map(|r| r.status).map_err(|e| e.to_string()),
        elapsed,
        sent: sent_then,
        total: case.total_bytes(),
        closed,
        log_lines: 0,
        counter: None,
    })
}

/// EOF or reset: the peer closed.
fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// Reads until EOF or reset (`true`), or `timeout` passes with the connection open (`false`).
fn wait_closed(s: &mut TcpStream, timeout: Duration) -> Result<bool, String> {
    let deadline = Instant::now() + timeout;
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(false)
            }
            Err(e) if is_closed(&e) => return Ok(true),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// `edge_inbound_timeouts_total{phase="request"}` now.
fn request_timeouts(stack: &Stack) -> Option<f64> {
    fetch_metrics(stack.admin)
        .ok()
        .map(|t| metric_sum(&t, "edge_inbound_timeouts_total", &[("phase", "request")]))
}

/// Runs one case on its own connection and reads edge's counter and log lines around it.
fn run_case(stack: &mut Stack, case: &Case, deadline: Duration) -> io::Result<Outcome> {
    println!(
        "{}: writing {} bytes{}, request deadline {}",
        case.name,
        case.total_bytes(),
        if case.gap.is_zero() {
            String::new()
        } else {
            format!(
                " one chunk every {} (over {})",
                ms(case.gap),
                ms(case.write_time())
            )
        },
        ms(deadline)
    );
    let _ = io::stdout().flush();
    let logs_before = count_events(&stack.edge.output(), TIMEOUT_EVENT);
    let counter_before = request_timeouts(stack);
    let mut out = exchange(
        stack.traffic,
        case,
        deadline + LATE_SLACK + Duration::from_secs(3),
    )?;
    let logs_after = wait_for_events(
        &stack.edge,
        TIMEOUT_EVENT,
        logs_before,
        Duration::from_secs(2),
    );
    out.log_lines = logs_after - logs_before;
    out.counter = counter_before
        .zip(request_timeouts(stack))
        .map(|(a, b)| b - a);
    stack.check_alive()?;
    Ok(out)
}

/// One row per case: what was sent, what edge answered and when, and what it counted and logged.
fn results_table(cases: &[Case], results: &[Outcome], deadline: Duration) -> Table {
    let mut t = Table::new(&[
        "case",
        "sent",
        "status",
        "time",
        "expected",
        "closed",
        "log lines",
        "counter",
    ]);
    for (case, r) in cases.iter().zip(results) {
        t.row([
            case.name.to_string(),
            format!("{}/{} B", r.sent, r.total),
            match &r.status {
                Ok(s) => s.to_string(),
                Err(_) => "none".into(),
            },
            ms(r.elapsed),
            format!(
                "408 in {:.1}-{:.1} s",
                deadline.as_secs_f64(),
                (deadline + LATE_SLACK).as_secs_f64()
            ),
            match &r.closed {
                Ok(true) => "yes".into(),
                Ok(false) => "no".into(),
                Err(_) => "?".into(),
            },
            r.log_lines.to_string(),
            r.counter.map_or("?".into(), |c| format!("+{c:.0}")),
        ]);
    }
    t
}

/// Starts origin + edge with the `request` deadline and runs `cases` one after the other.
fn run_cases(
    opts: &InboundOptions,
    title: &str,
    cases: impl FnOnce(&str) -> Vec<Case>,
) -> io::Result<bool> {
    let bin = locate_edge_bin(opts.edge_bin.as_deref())?;
    let config = TempConfig::write(
        title,
        &format!(
            "[server.timeouts]\nrequest = {}\ndrain_delay = \"0s\"\n",
            toml_duration(opts.request_timeout)
        ),
    )?;
    let mut args = config.args();
    args.extend_from_slice(&opts.edge_args);
    let mut stack = Stack::start(&bin, OriginOptions::default(), &args)?;
    let driver = stack
        .io_driver()
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let cases = cases(&stack.traffic.to_string());
    let deadline = opts.request_timeout;
    let mut results = Vec::with_capacity(cases.len());
    for case in &cases {
        results.push(run_case(&mut stack, case, deadline)?);
    }
    let t = results_table(&cases, &results, deadline);
    println!();
    println!("io driver: {driver}");
    print!("{}", t.render());
    let mut passed = true;
    for (case, r) in cases.iter().zip(&results) {
        for f in r.failures(deadline) {
            println!("FAIL: {}: {f}", case.name);
            passed = false;
        }
    }
    let stopped = stack.edge.stop(STOP_GRACE)?;
    println!("edge {stopped}");
    drop(config);
    println!("{title}: {}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

/// `edge-bench partial`.
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run.
pub fn run_partial(opts: &InboundOptions) -> io::Result<bool> {
    run_cases(opts, "partial", partial_cases)
}

/// `edge-bench drip`: the head lasts three deadlines at one byte per interval.
///
/// # Errors
/// Setup failures: no edge binary, origin or edge not starting, edge exiting mid-run.
pub fn run_drip(opts: &InboundOptions) -> io::Result<bool> {
    let span = opts.request_timeout * 3;
    let interval = opts.drip_interval;
    run_cases(opts, "drip", |host| vec![drip_case(host, interval, span)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drip_case_lasts_the_span() {
        let c = drip_case(
            "127.0.0.1:1",
            Duration::from_millis(200),
            Duration::from_secs(9),
        );
        assert!(
            c.write_time() >= Duration::from_secs(9),
            "{:?}",
            c.write_time()
        );
        assert!(c.chunks.iter().all(|b| b.len() == 1));
        let head: Vec<u8> = c.chunks.concat();
        assert!(head.ends_with(b"\r\n\r\n"));
        assert!(head.starts_with(b"GET /drip HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"));
    }

    #[test]
    fn partial_cases_are_incomplete() {
        let cases = partial_cases("h");
        let body = &cases[0].chunks[0];
        let split = body.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(body.len() - split, 10);
        assert!(!cases[1].chunks[0].ends_with(b"\r\n\r\n"));
    }

    #[test]
    fn outcome_checks() {
        let ok = Outcome {
            status: Ok(408),
            elapsed: Duration::from_millis(3010),
            sent: 10,
            total: 10,
            closed: Ok(true),
            log_lines: 1,
            counter: Some(1.0),
        };
        let d = Duration::from_secs(3);
        assert!(ok.failures(d).is_empty());
        let late = Outcome {
            elapsed: Duration::from_millis(4200),
            ..ok.clone()
        };
        assert_eq!(late.failures(d).len(), 1);
        let early = Outcome {
            elapsed: Duration::from_millis(500),
            ..ok.clone()
        };
        assert_eq!(early.failures(d).len(), 1);
        let wrong = Outcome {
            status: Ok(200),
            closed: Ok(false),
            log_lines: 0,
            counter: Some(0.0),
            ..ok
        };
        assert_eq!(wrong.failures(d).len(), 4);
    }

    #[test]
    fn exchange_reads_a_response_and_sees_the_close() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 64];
            let _ = s.read(&mut b).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            s.write_all(
                b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 2\r\nConnection: close\r\n\r\nto",
            )
            .unwrap();
        });
        let case = Case {
            name: "t",
            chunks: vec![b"GET / HTTP/1.1\r\n".to_vec()],
            gap: Duration::ZERO,
        };
        let out = exchange(addr, &case, Duration::from_secs(2)).unwrap();
        server.join().unwrap();
        assert_eq!(out.status, Ok(408));
        assert_eq!(out.closed, Ok(true));
        assert_eq!(out.sent, out.total);
        assert!(out.elapsed >= Duration::from_millis(100));
    }
}
