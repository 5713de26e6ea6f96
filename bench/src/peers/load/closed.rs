//! A bounded, closed-loop keep-alive load generator on monoio.
//!
//! `connections` connections are spread round-robin over `threads` threads, each thread a monoio
//! runtime. Every connection sends `GET path HTTP/1.1` back-to-back (the next request goes out
//! when the previous response has been read completely, Content-Length or chunked framing), and
//! records each request's latency, from just before the write to the last body byte, in the
//! thread's own HDR histogram (microseconds). Histograms and counters are merged after the threads
//! join.
//!
//! Bounded: no request starts after `duration`, and every exchange runs under a timeout that ends
//! at the earlier of `request_timeout` and `duration + request_timeout`, so a run lasts at most
//! `duration + request_timeout` whatever the server does. A connection that fails is counted,
//! closed and reopened (after a 50 ms pause when connect itself failed).
//!
//! Being closed-loop, it measures latency at the throughput it achieves; it hides queueing
//! (coordinated omission). Latency-at-rate uses the open-loop generator in [`crate::peers::load::open`]
//! (DESIGN.md, Benchmark method).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;

use crate::peers::http::{parse_response, ResponseInfo};
use crate::peers::wire::{is_disconnect, ReadBuf, SharedBytes};

/// Read buffer per connection; a response head must fit.
pub(crate) const READ_BUF: usize = 16 * 1024;

/// Largest latency the histograms record, in microseconds (longer ones are clamped).
pub(crate) const MAX_LATENCY_US: u64 = 120_000_000;

/// Pause before reconnecting after a failed connect, so a dead target is not hammered.
pub(crate) const CONNECT_BACKOFF: Duration = Duration::from_millis(50);

/// What to send and for how long.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Server address.
    pub target: SocketAddr,
    /// Host header value; defaults to the target address when `None`.
    pub host: Option<String>,
    /// Request target, e.g. `/fast`.
    pub path: String,
    /// Concurrent keep-alive connections, over all threads.
    pub connections: usize,
    /// Threads (monoio runtimes).
    pub threads: usize,
    /// No request starts after this much time.
    pub duration: Duration,
    /// Limit per exchange (write, response head and body); also the grace after `duration`.
    pub request_timeout: Duration,
    /// CPUs to pin threads to (thread i gets `cpus[i % len]`); empty leaves them unpinned.
    pub cpus: Vec<usize>,
}

impl LoadOptions {
    /// Options with the defaults: 64 connections, 1 thread, 10 s, 5 s request timeout.
    pub fn new(target: SocketAddr, path: &str) -> Self {
        Self {
            target,
            host: None,
            path: path.to_string(),
            connections: 64,
            threads: 1,
            duration: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            cpus: Vec::new(),
        }
    }
}

/// Failures by kind; each one also closes its connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Connect refused, unreachable or timed out.
    pub connect: u64,
    /// The server closed or reset the connection before a complete response.
    pub closed: u64,
    /// Other read/write errors.
    pub io: u64,
    /// An exchange exceeded its timeout (or was cut off at the end of the run).
    pub timeout: u64,
    /// A response that could not be parsed or framed.
    pub bad_response: u64,
}

impl ErrorCounts {
    /// Sum over all kinds.
    pub fn total(&self) -> u64 {
        self.connect + self.closed + self.io + self.timeout + self.bad_response
    }

    pub(crate) fn add(&mut self, o: &ErrorCounts) {
        self.connect += o.connect;
        self.closed += o.closed;
        self.io += o.io;
        self.timeout += o.timeout;
        self.bad_response += o.bad_response;
    }
}

/// The merged result of a run.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Complete responses, any status.
    pub responses: u64,
    /// Responses with a status outside 200..=399.
    pub non_2xx: u64,
    /// Failed exchanges by kind.
    pub errors: ErrorCounts,
    /// Wall time from start until the last thread finished.
    pub elapsed: Duration,
    /// Latency of complete responses, in microseconds.
    pub latency_us: Histogram<u64>,
}

impl LoadReport {
    /// Complete responses per second of wall time.
    pub fn req_per_sec(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Failed exchanges plus non-2xx/3xx responses.
    pub fn error_total(&self) -> u64 {
        self.errors.total() + self.non_2xx
    }

    /// Latency at quantile `q` (0.0..=1.0).
    pub fn latency(&self, q: f64) -> Duration {
        quantile(&self.latency_us, q)
    }

    /// Largest recorded latency.
    pub fn latency_max(&self) -> Duration {
        Duration::from_micros(self.latency_us.max())
    }
}

/// Per-thread tallies, merged at the end.
struct ThreadStats {
    responses: u64,
    non_2xx: u64,
    errors: ErrorCounts,
    latency_us: Histogram<u64>,
}

impl ThreadStats {
    fn new() -> Self {
        Self {
            responses: 0,
            non_2xx: 0,
            errors: ErrorCounts::default(),
            latency_us: new_histogram(),
        }
    }
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static histogram bounds are valid")
}

/// The value of a µs histogram at quantile `q` (0.0..=1.0).
pub(crate) fn quantile(h: &Histogram<u64>, q: f64) -> Duration {
    Duration::from_micros(h.value_at_quantile(q))
}

/// Adds a thread's µs histogram into the run's.
///
/// # Errors
/// A value outside the run histogram's range (both come from [`new_histogram`], so none in practice).
pub(crate) fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) -> io::Result<()> {
    into.add(from)
        .map_err(|e| io::Error::other(format!("merging histograms: {e}")))
}

/// Runs `make(t)()` on `threads` threads named `{name}-{t}`, thread t pinned to `cpus[t % cpus.len()]`
/// when `cpus` is not empty, and returns their results in thread order once all have ended.
///
/// # Errors
/// A spawn failure; else the first thread's error or panic (after all threads were joined).
pub(crate) fn run_threads<S, F>(
    name: &str,
    threads: usize,
    cpus: &[usize],
    mut make: impl FnMut(usize) -> F,
) -> io::Result<Vec<S>>
where
    S: Send + 'static,
    F: FnOnce() -> io::Result<S> + Send + 'static,
{
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let cpu = (!cpus.is_empty()).then(|| cpus[t % cpus.len()]);
        let work = make(t);
        let handle = std::thread::Builder::new()
            .name(format!("{name}-{t}"))
            .spawn(move || {
                if let Some(id) = cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                work()
            })?;
        handles.push(handle);
    }
    let mut results = Vec::with_capacity(threads);
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => results.push(s),
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some(io::Error::other("load thread panicked"))),
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// Run-wide, read-only settings shared by one thread's connections.
struct Plan {
    target: SocketAddr,
    request: SharedBytes,
    end: Instant,
    hard_end: Instant,
    request_timeout: Duration,
}

/// Runs the load and blocks until it is over (at most `duration + request_timeout`).
///
/// # Errors
/// Thread spawn or runtime setup failures; request failures are counted, not returned.
pub fn run_load(opts: &LoadOptions) -> io::Result<LoadReport> {
    let threads = opts.threads.max(1).min(opts.connections.max(1));
    let host = opts.host.clone().unwrap_or_else(|| opts.target.to_string());
    let request = format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", opts.path, host).into_bytes();
    let start = Instant::now();
    let end = start + opts.duration;
    let hard_end = end + opts.request_timeout;
    let stats = run_threads("load", threads, &opts.cpus, |t| {
        // Connections round-robin over threads: thread t gets every threads-th connection.
        let conns = (opts.connections + threads - 1 - t) / threads;
        let request = request.clone();
        let (target, timeout) = (opts.target, opts.request_timeout);
        move || {
            let plan = Plan {
                target,
                request: Rc::new(request),
                end,
                hard_end,
                request_timeout: timeout,
            };
            run_thread(plan, conns)
        }
    })?;
    let mut report = LoadReport {
        responses: 0,
        non_2xx: 0,
        errors: ErrorCounts::default(),
        elapsed: Duration::ZERO,
        latency_us: new_histogram(),
    };
    for s in stats {
        report.responses += s.responses;
        report.non_2xx += s.non_2xx;
        report.errors.add(&s.errors);
        merge(&mut report.latency_us, &s.latency_us)?;
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// One thread: a runtime running `conns` connection loops to completion.
fn run_thread(plan: Plan, conns: usize) -> io::Result<ThreadStats> {
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()?;
    let stats = Rc::new(RefCell::new(ThreadStats::new()));
    let plan = Rc::new(plan);
    rt.block_on({
        let stats = stats.clone();
        async move {
            let tasks: Vec<_> = (0..conns)
                .map(|_| monoio::spawn(conn_loop(plan.clone(), stats.clone())))
                .collect();
            for t in tasks {
                t.await;
            }
        }
    });
    drop(rt);
    Rc::try_unwrap(stats)
        .map(RefCell::into_inner)
        .map_err(|_| io::Error::other("load tasks outlived their runtime"))
}

/// One connection slot: connect, run exchanges until the end, reconnect after failures.
async fn conn_loop(plan: Rc<Plan>, stats: Rc<RefCell<ThreadStats>>) {
    let mut rb = ReadBuf::with_capacity(READ_BUF);
    while Instant::now() < plan.end {
        let left = plan.hard_end.saturating_duration_since(Instant::now());
        let connect = monoio::time::timeout(
            plan.request_timeout.min(left),
            TcpStream::connect_addr(plan.target),
        );
        let mut stream = match connect.await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) | Err(_) => {
                stats.borrow_mut().errors.connect += 1;
                monoio::time::sleep(CONNECT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        rb.reset();
        while Instant::now() < plan.end {
            let now = Instant::now();
            let limit = plan
                .request_timeout
                .min(plan.hard_end.saturating_duration_since(now));
            let started = Instant::now();
            let outcome =
                monoio::time::timeout(limit, exchange(&mut stream, &mut rb, plan.request.clone()))
                    .await;
            let mut s = stats.borrow_mut();
            match outcome {
                Ok(Ok(resp)) => {
                    let us = started
                        .elapsed()
                        .as_micros()
                        .clamp(1, u128::from(MAX_LATENCY_US));
                    s.latency_us.saturating_record(us as u64);
                    s.responses += 1;
                    if !(200..400).contains(&resp.status) {
                        s.non_2xx += 1;
                    }
                    if !resp.keep_alive {
                        break;
                    }
                }
                Ok(Err(e)) => {
                    match e.kind() {
                        io::ErrorKind::InvalidData => s.errors.bad_response += 1,
                        _ if is_disconnect(&e) => s.errors.closed += 1,
                        _ => s.errors.io += 1,
                    }
                    break;
                }
                Err(_) => {
                    // The read that timed out took the buffer with it; start afresh.
                    s.errors.timeout += 1;
                    rb.reset();
                    break;
                }
            }
        }
    }
}

/// Writes one request and reads its complete response (skipping 1xx interim responses).
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    rb: &mut ReadBuf,
    request: SharedBytes,
) -> io::Result<ResponseInfo> {
    let (res, _) = stream.write_all(request).await;
    res?;
    loop {
        let info = read_head(stream, rb).await?;
        rb.consume(info.head_len);
        if (100..200).contains(&info.status) && info.status != 101 {
            continue;
        }
        rb.skip_body(stream, info.body).await?;
        return Ok(info);
    }
}

/// Reads until a complete response head is buffered and returns it (not yet consumed).
async fn read_head(stream: &mut TcpStream, rb: &mut ReadBuf) -> io::Result<ResponseInfo> {
    loop {
        match parse_response(rb.data(), false) {
            Ok(Some(info)) => return Ok(info),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
        if rb.fill(stream).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed before a complete response",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_total_and_merge() {
        let mut a = ErrorCounts {
            connect: 1,
            closed: 2,
            ..Default::default()
        };
        a.add(&ErrorCounts {
            io: 3,
            timeout: 4,
            bad_response: 5,
            ..Default::default()
        });
        assert_eq!(a.total(), 15);
    }

    #[test]
    fn report_rates_and_quantiles() {
        let mut h = new_histogram();
        for us in [100u64, 200, 300, 400, 10_000] {
            h.record(us).unwrap();
        }
        let r = LoadReport {
            responses: 5,
            non_2xx: 1,
            errors: ErrorCounts {
                timeout: 1,
                ..Default::default()
            },
            elapsed: Duration::from_millis(500),
            latency_us: h,
        };
        assert!((r.req_per_sec() - 10.0).abs() < 1e-9);
        assert_eq!(r.error_total(), 2);
        assert_eq!(r.latency(0.5), Duration::from_micros(300));
        assert!(r.latency_max() >= Duration::from_millis(10));
    }

    fn short_run(origin: &crate::peers::origin::OriginHandle, path: &str) -> LoadReport {
        let mut opts = LoadOptions::new(origin.addr(), path);
        opts.connections = 4;
        opts.threads = 2;
        opts.duration = Duration::from_millis(300);
        opts.request_timeout = Duration::from_secs(2);
        run_load(&opts).unwrap()
    }

    #[test]
    fn load_against_content_length_origin() {
        let origin = crate::peers::origin::spawn_origin(Default::default()).unwrap();
        let r = short_run(&origin, "/fast");
        assert!(r.responses > 10, "{r:?}");
        assert_eq!(r.error_total(), 0, "{r:?}");
        assert!(r.elapsed < Duration::from_secs(2));
    }

    #[test]
    fn load_against_chunked_delayed_origin() {
        let origin = crate::peers::origin::spawn_origin(crate::peers::origin::OriginOptions {
            chunked: true,
            body_bytes: 40_000,
            delay: Some(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap();
        let r = short_run(&origin, "/x");
        assert!(r.responses >= 4, "{r:?}");
        assert_eq!(r.error_total(), 0, "{r:?}");
        assert!(r.latency(0.5) >= Duration::from_millis(20));
    }
}
