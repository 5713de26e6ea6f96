//! A bounded, open-loop keep-alive load generator on monoio: a fixed request rate, with latency
//! measured from each request's *scheduled* send time (DESIGN.md, Benchmark method).
//!
//! Schedule ([`ConnSchedule`], sans-IO): the run's requests are numbered i = 0, 1, 2, … and
//! request i is due at `start + i / rate`. Request i goes to connection `i mod N`, so connection
//! j sends its k-th request at `(j + k·N) / rate`: every connection runs at `rate / N`, and the
//! connections are staggered by `1 / rate`. Connections are spread round-robin over the threads
//! (connection j on thread `j mod T`). Only requests due before `duration` are scheduled.
//!
//! Each connection keeps one request in flight (HTTP/1.1 without pipelining). When a response is
//! late, the requests due meanwhile are not dropped or re-timed: they go out back to back as soon
//! as the connection is free, and each one's latency still counts from its own due time, so the
//! queueing a slow server causes shows up in the latency (no coordinated omission). A failed
//! request is counted by kind, its connection reopened, and the schedule goes on.
//!
//! Bounded: a connection stops at `duration + request_timeout` (the hard end) whatever is left;
//! requests due before `duration` that were never sent by then are counted as `unsent` and
//! recorded in the latency histogram with the age they had at the hard end (a lower bound), so a
//! server that falls behind cannot improve its percentiles by not answering.
//!
//! Three histograms (µs): `latency` (the figure to quote, see [`latency_start`]) to the last
//! body byte, `service` from the actual write to the last body byte (what a closed-loop tool would
//! report), and `send_lag` from the due time to the actual write.
//!
//! One refinement of "latency from the due time": monoio's timer has a 1 ms tick and rounds
//! sleeps up, so a connection that is free at its due time sends up to about 2 ms late with an
//! idle server. That lateness is the generator's, not the server's (the server had nothing of
//! ours to hold up), so for such a request the latency counts from the actual write. Whenever the
//! connection was still busy at the due time (an earlier response late, or a reconnect after a
//! failure), the latency counts from the due time: that waiting is the queueing a closed-loop
//! tool hides. `send_lag` shows how late the generator itself was.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use monoio::net::TcpStream;

use crate::peers::load::closed::{
    exchange, merge, new_histogram, quantile, run_threads, ErrorCounts, CONNECT_BACKOFF,
    MAX_LATENCY_US, READ_BUF,
};
use crate::peers::wire::{is_disconnect, ReadBuf, SharedBytes};

/// What to send, how fast and for how long.
#[derive(Debug, Clone)]
pub struct OpenLoopOptions {
    /// Server address.
    pub target: SocketAddr,
    /// Host header value; defaults to the target address when `None`.
    pub host: Option<String>,
    /// Request target, e.g. `/fast`.
    pub path: String,
    /// Requests per second over all connections.
    pub rate: f64,
    /// Keep-alive connections, over all threads.
    pub connections: usize,
    /// Threads (monoio runtimes).
    pub threads: usize,
    /// Requests are scheduled over this long.
    pub duration: Duration,
    /// Limit per exchange; also how long after `duration` late requests may still go out.
    pub request_timeout: Duration,
    /// CPUs to pin threads to (thread i gets `cpus[i % len]`); empty leaves them unpinned.
    pub cpus: Vec<usize>,
}

impl OpenLoopOptions {
    /// Options with the defaults: 64 connections, 1 thread, 10 s, 5 s request timeout.
    pub fn new(target: SocketAddr, path: &str, rate: f64) -> Self {
        Self {
            target,
            host: None,
            path: path.to_string(),
            rate,
            connections: 64,
            threads: 1,
            duration: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            cpus: Vec::new(),
        }
    }
}

/// The send schedule of one connection (sans-IO; times relative to the run's start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnSchedule {
    /// This connection's index j (0-based).
    pub conn: usize,
    /// Connections in the run (N).
    pub conns: usize,
    /// Requests per second over all connections.
    pub rate: f64,
}

impl ConnSchedule {
    /// The schedule of connection `conn` of `conns` at `rate` requests/s in total.
    ///
    /// # Panics
    /// When `conns` is 0, `conn >= conns`, or `rate` is not a positive finite number.
    pub fn new(conn: usize, conns: usize, rate: f64) -> Self {
        assert!(conns > 0 && conn < conns, "connection {conn} of {conns}");
        assert!(rate.is_finite() && rate > 0.0, "rate {rate}");
        Self { conn, conns, rate }
    }

    /// Due time of this connection's `k`-th request (0-based): `(conn + k·conns) / rate`.
    /// Computed from the run-wide index each time, so rounding does not accumulate.
    pub fn due(&self, k: u64) -> Duration {
        let i = self.conn as u64 + k * self.conns as u64;
        Duration::from_secs_f64(i as f64 / self.rate)
    }

    /// How many of this connection's requests are due strictly before `end`.
    pub fn count_before(&self, end: Duration) -> u64 {
        // k is scheduled iff (conn + k·conns) / rate < end, i.e. k < (end·rate − conn) / conns.
        let limit = (end.as_secs_f64() * self.rate - self.conn as f64) / self.conns as f64;
        if limit <= 0.0 {
            return 0;
        }
        let mut n = limit.ceil() as u64;
        // Correct float edge cases so that due(n − 1) < end <= due(n).
        while n > 0 && self.due(n - 1) >= end {
            n -= 1;
        }
        while self.due(n) < end {
            n += 1;
        }
        n
    }
}

/// Requests scheduled in a whole run: `Σ_j count_before(duration)` over the connections.
pub fn scheduled_total(rate: f64, conns: usize, duration: Duration) -> u64 {
    (0..conns)
        .map(|j| ConnSchedule::new(j, conns, rate).count_before(duration))
        .sum()
}

/// Latency of a request from its due time, in whole microseconds (at least 1, clamped to the
/// histograms' range). A request sent on time gets its service time; one sent late also gets the
/// time it waited for its connection.
pub fn latency_us(due: Instant, done: Instant) -> u64 {
    (done.saturating_duration_since(due).as_micros()).clamp(1, u128::from(MAX_LATENCY_US)) as u64
}

/// Where a request's latency starts: its due time when the connection was still busy then (the
/// server held it up: no coordinated omission), else the actual write (the connection was free,
/// so any lateness of the send is the generator's timer, not the server). `free_since` is when
/// the connection finished its previous exchange or was connected; `None` counts as busy.
pub fn latency_start(due: Instant, sent: Instant, free_since: Option<Instant>) -> Instant {
    match free_since {
        Some(free) if free <= due => sent.max(due),
        _ => due,
    }
}

/// The merged result of a run.
#[derive(Debug, Clone)]
pub struct OpenLoopReport {
    /// Target rate, requests/s.
    pub rate: f64,
    /// Requests due before `duration`.
    pub scheduled: u64,
    /// Complete responses, any status.
    pub responses: u64,
    /// Responses with a status outside 200..=399.
    pub non_2xx: u64,
    /// Failed exchanges by kind.
    pub errors: ErrorCounts,
    /// Scheduled requests never sent by the hard end.
    pub unsent: u64,
    /// Wall time from the start until the last connection finished.
    pub elapsed: Duration,
    /// From [`latency_start`] to the last body byte (and unsent requests' age at the hard end
    /// from their due time), µs.
    pub latency_us: Histogram<u64>,
    /// Actual write to last body byte, µs.
    pub service_us: Histogram<u64>,
    /// Due time to actual write, µs.
    pub send_lag_us: Histogram<u64>,
}

impl OpenLoopReport {
    /// Complete responses per second over the scheduled duration or the wall time, whichever
    /// is longer (a run that fell behind took longer than its schedule).
    pub fn achieved_rate(&self, duration: Duration) -> f64 {
        let secs = self.elapsed.max(duration).as_secs_f64().max(1e-9);
        self.responses as f64 / secs
    }

    /// Failed exchanges, non-2xx/3xx responses and unsent requests.
    pub fn error_total(&self) -> u64 {
        self.errors.total() + self.non_2xx + self.unsent
    }

    /// Latency from the due time at quantile `q` (0.0..=1.0).
    pub fn latency(&self, q: f64) -> Duration {
        quantile(&self.latency_us, q)
    }

    /// Largest latency from the due time.
    pub fn latency_max(&self) -> Duration {
        Duration::from_micros(self.latency_us.max())
    }
}

/// Per-thread tallies, merged at the end.
struct ThreadStats {
    responses: u64,
    non_2xx: u64,
    errors: ErrorCounts,
    unsent: u64,
    latency_us: Histogram<u64>,
    service_us: Histogram<u64>,
    send_lag_us: Histogram<u64>,
}

impl ThreadStats {
    fn new() -> Self {
        Self {
            responses: 0,
            non_2xx: 0,
            errors: ErrorCounts::default(),
            unsent: 0,
            latency_us: new_histogram(),
            service_us: new_histogram(),
            send_lag_us: new_histogram(),
        }
    }
}

/// Run-wide, read-only settings shared by one thread's connections.
struct Plan {
    target: SocketAddr,
    request: SharedBytes,
    start: Instant,
    duration: Duration,
    hard_end: Instant,
    request_timeout: Duration,
}

/// Runs the load and blocks until it is over (at most `duration + request_timeout`).
///
/// # Errors
/// `InvalidInput` for a rate that is not positive or no connections; thread spawn or runtime
/// setup failures. Request failures are counted, not returned.
pub fn run_open_loop(opts: &OpenLoopOptions) -> io::Result<OpenLoopReport> {
    if !(opts.rate.is_finite() && opts.rate > 0.0) || opts.connections == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "open loop needs a positive rate and connections (rate {}, connections {})",
                opts.rate, opts.connections
            ),
        ));
    }
    let conns = opts.connections;
    let threads = opts.threads.clamp(1, conns);
    let host = opts.host.clone().unwrap_or_else(|| opts.target.to_string());
    let request = format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", opts.path, host).into_bytes();
    // Leave a little time for the threads to start and connect before the first request is due.
    let start = Instant::now() + Duration::from_millis(100);
    let hard_end = start + opts.duration + opts.request_timeout;
    let stats = run_threads("openloop", threads, &opts.cpus, |t| {
        let schedules: Vec<ConnSchedule> = (t..conns)
            .step_by(threads)
            .map(|j| ConnSchedule::new(j, conns, opts.rate))
            .collect();
        let request = request.clone();
        let (target, timeout, duration) = (opts.target, opts.request_timeout, opts.duration);
        move || {
            let plan = Plan {
                target,
                request: Rc::new(request),
                start,
                duration,
                hard_end,
                request_timeout: timeout,
            };
            run_thread(plan, schedules)
        }
    })?;
    let mut report = OpenLoopReport {
        rate: opts.rate,
        scheduled: scheduled_total(opts.rate, conns, opts.duration),
        responses: 0,
        non_2xx: 0,
        errors: ErrorCounts::default(),
        unsent: 0,
        elapsed: Duration::ZERO,
        latency_us: new_histogram(),
        service_us: new_histogram(),
        send_lag_us: new_histogram(),
    };
    for s in stats {
        report.responses += s.responses;
        report.non_2xx += s.non_2xx;
        report.unsent += s.unsent;
        report.errors.add(&s.errors);
        merge(&mut report.latency_us, &s.latency_us)?;
        merge(&mut report.service_us, &s.service_us)?;
        merge(&mut report.send_lag_us, &s.send_lag_us)?;
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// One thread: a runtime running its connections' schedules to completion.
fn run_thread(plan: Plan, schedules: Vec<ConnSchedule>) -> io::Result<ThreadStats> {
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()?;
    let stats = Rc::new(RefCell::new(ThreadStats::new()));
    let plan = Rc::new(plan);
    rt.block_on({
        let stats = stats.clone();
        async move {
            let tasks: Vec<_> = schedules
                .into_iter()
                .map(|s| monoio::spawn(conn_loop(plan.clone(), s, stats.clone())))
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

/// Sleeps until `at` (returns at once when it has passed).
async fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        monoio::time::sleep(at - now).await;
    }
}

/// One connection: its schedule, with reconnects after failures, until done or the hard end.
async fn conn_loop(plan: Rc<Plan>, sched: ConnSchedule, stats: Rc<RefCell<ThreadStats>>) {
    let total = sched.count_before(plan.duration);
    let mut rb = ReadBuf::with_capacity(READ_BUF);
    let mut k = 0u64;
    'connect: while k < total && Instant::now() < plan.hard_end {
        // Connect no earlier than needed, so an idle connection is not held longer than the run.
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
        // Free from the moment it is connected: a (re)connect that ends after the due time is
        // charged to the request from its due time.
        let mut free_since = Some(Instant::now());
        while k < total {
            let due = plan.start + sched.due(k);
            sleep_until(due).await;
            let sent = Instant::now();
            if sent >= plan.hard_end {
                break 'connect;
            }
            let limit = plan
                .request_timeout
                .min(plan.hard_end.saturating_duration_since(sent));
            let outcome =
                monoio::time::timeout(limit, exchange(&mut stream, &mut rb, plan.request.clone()))
                    .await;
            k += 1;
            let done = Instant::now();
            let mut s = stats.borrow_mut();
            match outcome {
                Ok(Ok(resp)) => {
                    let from = latency_start(due, sent, free_since);
                    free_since = Some(done);
                    s.latency_us.saturating_record(latency_us(from, done));
                    s.service_us.saturating_record(latency_us(sent, done));
                    s.send_lag_us.saturating_record(latency_us(due, sent));
                    s.responses += 1;
                    if !(200..400).contains(&resp.status) {
                        s.non_2xx += 1;
                    }
                    if !resp.keep_alive {
                        continue 'connect;
                    }
                }
                Ok(Err(e)) => {
                    match e.kind() {
                        io::ErrorKind::InvalidData => s.errors.bad_response += 1,
                        _ if is_disconnect(&e) => s.errors.closed += 1,
                        _ => s.errors.io += 1,
                    }
                    continue 'connect;
                }
                Err(_) => {
                    // The read that timed out took the buffer with it; start afresh.
                    s.errors.timeout += 1;
                    rb.reset();
                    continue 'connect;
                }
            }
        }
    }
    // Whatever is left was due but never sent: count it, with the age it reached (a lower bound).
    let mut s = stats.borrow_mut();
    for k in k..total {
        s.unsent += 1;
        let due = plan.start + sched.due(k);
        s.latency_us
            .saturating_record(latency_us(due, plan.hard_end.max(due)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_staggered_and_paced() {
        // 1000 req/s over 4 connections: each sends every 4 ms, offset by 1 ms.
        let s: Vec<_> = (0..4).map(|j| ConnSchedule::new(j, 4, 1000.0)).collect();
        assert_eq!(s[0].due(0), Duration::ZERO);
        assert_eq!(s[1].due(0), Duration::from_millis(1));
        assert_eq!(s[3].due(0), Duration::from_millis(3));
        assert_eq!(s[0].due(1), Duration::from_millis(4));
        assert_eq!(s[2].due(10), Duration::from_millis(42));
        // Run-wide, the due times are exactly i / rate: no gaps, no doubles.
        let mut all: Vec<Duration> = s.iter().flat_map(|c| (0..5).map(|k| c.due(k))).collect();
        all.sort();
        for (i, d) in all.iter().enumerate() {
            assert_eq!(*d, Duration::from_millis(i as u64));
        }
    }

    #[test]
    fn no_drift_over_long_runs() {
        // 3 connections at 30000 req/s: interval 100 µs per connection, not representable
        // exactly in f64 seconds; the millionth request must still be due at exactly i / rate.
        let c = ConnSchedule::new(2, 3, 30_000.0);
        let k = 1_000_000u64;
        let i = 2 + k * 3;
        let expect = Duration::from_nanos(i * 1_000_000_000 / 30_000);
        let got = c.due(k);
        let diff = got.abs_diff(expect);
        assert!(diff < Duration::from_nanos(10), "{got:?} vs {expect:?}");
    }

    #[test]
    fn count_before_end() {
        // 10 req/s over 2 connections for 1 s: requests at 0, 0.1, …, 0.9 s → 5 each.
        let a = ConnSchedule::new(0, 2, 10.0);
        let b = ConnSchedule::new(1, 2, 10.0);
        assert_eq!(a.count_before(Duration::from_secs(1)), 5);
        assert_eq!(b.count_before(Duration::from_secs(1)), 5);
        // The end is exclusive: at exactly 0.2 s only 0 s (a) and 0.1 s (b) are due.
        assert_eq!(a.count_before(Duration::from_millis(200)), 1);
        assert_eq!(b.count_before(Duration::from_millis(200)), 1);
        assert_eq!(b.count_before(Duration::from_millis(100)), 0);
        assert_eq!(a.count_before(Duration::ZERO), 0);
        assert_eq!(scheduled_total(10.0, 2, Duration::from_secs(1)), 10);
        // A rate that does not divide: 7 req/s over 3 connections for 2 s → 14 requests.
        assert_eq!(scheduled_total(7.0, 3, Duration::from_secs(2)), 14);
        assert_eq!(
            scheduled_total(20_000.0, 64, Duration::from_secs(10)),
            200_000
        );
        // More connections than requests: the late ones get nothing.
        assert_eq!(scheduled_total(5.0, 64, Duration::from_secs(1)), 5);
        assert_eq!(
            ConnSchedule::new(63, 64, 5.0).count_before(Duration::from_secs(1)),
            0
        );
    }

    #[test]
    fn latency_starts_at_the_due_time_unless_the_connection_was_free() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let due = t0 + ms(10);
        // Free since 5 ms before the due time, timer fired 1.5 ms late: not the server's doing.
        let sent = due + Duration::from_micros(1500);
        assert_eq!(latency_start(due, sent, Some(t0 + ms(5))), sent);
        // Free exactly at the due time: the same.
        assert_eq!(latency_start(due, sent, Some(due)), sent);
        // Busy until 3 ms after the due time (the previous response was late): from the due time.
        let sent = due + ms(3);
        assert_eq!(latency_start(due, sent, Some(due + ms(3))), due);
        // Reconnected first (a failure, or the server closed): from the due time.
        assert_eq!(latency_start(due, sent, None), due);
        // Never after the write, never before the due time.
        assert_eq!(latency_start(due, t0, Some(t0)), due);
    }

    #[test]
    fn latency_counts_from_the_due_time() {
        let due = Instant::now();
        // Sent 3 ms late, answered 1 ms after the send: 4 ms from the due time.
        let sent = due + Duration::from_millis(3);
        let done = sent + Duration::from_millis(1);
        assert_eq!(latency_us(due, done), 4000);
        assert_eq!(latency_us(sent, done), 1000);
        assert_eq!(latency_us(due, sent), 3000);
        // Never below 1 µs, never negative, clamped at the top.
        assert_eq!(latency_us(done, due), 1);
        assert_eq!(
            latency_us(due, due + Duration::from_secs(1000)),
            MAX_LATENCY_US
        );
    }

    #[test]
    fn achieved_rate_uses_the_longer_of_schedule_and_wall_time() {
        let r = OpenLoopReport {
            rate: 100.0,
            scheduled: 100,
            responses: 90,
            non_2xx: 1,
            errors: ErrorCounts {
                closed: 2,
                ..Default::default()
            },
            unsent: 7,
            elapsed: Duration::from_millis(900),
            latency_us: new_histogram(),
            service_us: new_histogram(),
            send_lag_us: new_histogram(),
        };
        assert!((r.achieved_rate(Duration::from_secs(1)) - 90.0).abs() < 1e-9);
        assert!((r.achieved_rate(Duration::from_millis(450)) - 100.0).abs() < 1e-9);
        assert_eq!(r.error_total(), 10);
    }

    #[test]
    fn open_loop_against_origin() {
        let origin = crate::peers::origin::spawn_origin(Default::default()).unwrap();
        let mut opts = OpenLoopOptions::new(origin.addr(), "/fast", 2000.0);
        opts.connections = 4;
        opts.threads = 2;
        opts.duration = Duration::from_millis(300);
        opts.request_timeout = Duration::from_secs(2);
        let r = run_open_loop(&opts).unwrap();
        assert_eq!(r.scheduled, 600);
        assert_eq!(r.responses, 600, "{r:?}");
        assert_eq!(r.error_total(), 0, "{r:?}");
        assert!(r.elapsed < Duration::from_secs(2));
    }

    #[test]
    fn a_slow_server_shows_its_queueing() {
        // Every response takes 50 ms; one connection at 100 req/s can do 20/s, so requests queue
        // behind each other and their latency from the due time grows far past 50 ms.
        let origin = crate::peers::origin::spawn_origin(crate::peers::origin::OriginOptions {
            delay: Some(Duration::from_millis(50)),
            ..Default::default()
        })
        .unwrap();
        let mut opts = OpenLoopOptions::new(origin.addr(), "/x", 100.0);
        opts.connections = 1;
        opts.duration = Duration::from_millis(300);
        opts.request_timeout = Duration::from_secs(2);
        let r = run_open_loop(&opts).unwrap();
        assert_eq!(r.scheduled, 30);
        assert_eq!(r.responses + r.unsent + r.errors.total(), 30, "{r:?}");
        assert!(r.latency_max() > Duration::from_millis(500), "{r:?}");
        assert!(
            r.service_us.max() < 200_000,
            "service stays near 50 ms: {r:?}"
        );
    }
}
