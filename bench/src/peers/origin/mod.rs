//! The test origin: a thread-per-core HTTP/1.1 server on monoio that answers every request with
//! one fixed 200 response, optionally after a delay.
//!
//! Each worker thread owns a monoio runtime and its own SO_REUSEPORT listener (built with socket2:
//! monoio's own `bind` turns SO_REUSEPORT on silently, so we set it on purpose and probe-bind the
//! port first to notice another program holding it). Connections are keep-alive; request heads
//! are parsed with httparse and request bodies (Content-Length or chunked) are read and discarded.
//!
//! Delays, so one origin serves both fast load and slow requests:
//! - a path starting with `/fast` is never delayed;
//! - a path starting with `/slow` waits `delay` when set, else [`DEFAULT_SLOW`] (3 s);
//! - any other path waits `delay` when set.
//!
//! Fixed sizes, whatever `--body-bytes` says: `/size/16k` answers 16 KiB and `/size/1m` 1 MiB
//! ([`SIZED_PATHS`]), never delayed and always Content-Length framed, so one origin serves every
//! workload of `edge-bench compare`.
//!
//! Hot path: the response (head and body together) is built once per worker and written with one
//! `write_all` of an `Rc` clone; the read buffer is per connection and reused, so a keep-alive
//! request allocates nothing.
//!
//! [`spawn_origin`] runs it in-process (demo and scenarios); `edge-bench origin` runs it as a
//! process, which [`child::start_origin`] starts for `compare` and `scale`.
//!
//! With [`OriginOptions::h2c`] (`--h2c`) the same workers speak HTTP/2 with prior knowledge instead
//! ([`h2c`]: the same paths plus echo, trailers, gRPC answers and fault knobs); what it saw is in
//! [`OriginHandle::h2c_records`].

pub mod child;
pub mod h2c;
pub mod response;
pub mod tls;

use std::cell::Cell;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use socket2::{Domain, Protocol, Socket, Type};

pub use response::{app_response, build_response};

use crate::peers::http::{parse_request, BodyLen};
use crate::peers::stop::StopSignal;
use crate::peers::wire::{ReadBuf, SharedBytes};

/// Path benchmark load is sent and health-checked on (the origin never delays it).
pub const LOAD_PATH: &str = "/fast";

/// Delay for `/slow` paths when no `delay` is configured.
pub const DEFAULT_SLOW: Duration = Duration::from_secs(3);

/// Paths with a fixed response body size (bytes), matched exactly (a query is ignored).
pub const SIZED_PATHS: [(&str, usize); 2] = [("/size/16k", 16 * 1024), ("/size/1m", 1024 * 1024)];

/// The default response body.
pub const DEFAULT_BODY: &[u8] = b"hello, world\n";

/// Path of the application-like answer (DESIGN.md "Benchmark method", realistic heads): a dozen
/// response fields of about 450 bytes, as a web application's JSON endpoint sends them, and a small
/// JSON body. Never delayed.
pub const APP_PATH: &str = "/app";

/// The body of [`APP_PATH`].
pub const APP_BODY: &[u8] = b"{\"ok\":true,\"items\":[]}\n";

/// The fields of [`APP_PATH`]'s answer besides Content-Length and Connection, one `name: value` each;
/// the nginx origin of `edge-bench compare` sends the same ones.
pub const APP_FIELDS: [(&str, &str); 10] = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Date", "Tue, 01 Dec 2026 10:00:00 GMT"),
    (
        "Cache-Control",
        "private, no-cache, no-store, must-revalidate",
    ),
    ("ETag", "W/\"5e1f-0a3b4c5d6e7f8a9b\""),
    ("Vary", "Accept-Encoding, Origin"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Strict-Transport-Security", "max-age=31536000"),
    ("X-Request-Id", "0f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"),
    (
        "Set-Cookie",
        "sid=2f9c81d4a7e64b03b5c1e0d9; Path=/; HttpOnly; Secure; SameSite=Lax",
    ),
];

/// Read buffer per connection; a request head must fit.
const READ_BUF: usize = 16 * 1024;

/// Listen backlog per worker socket.
const BACKLOG: i32 = 4096;

/// Longest a stopping worker waits for its connection tasks to end.
const STOP_DRAIN: Duration = Duration::from_secs(1);

/// Pause of a worker's accept loop after EMFILE/ENFILE.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Command line of `edge-bench origin`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port; the real one is printed).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Delay every response except /fast…; /slow… waits this or 3 s when unset.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    /// Response body size in bytes.
    #[arg(long, default_value_t = DEFAULT_BODY.len())]
    pub body_bytes: usize,
    /// Frame responses with chunked transfer coding instead of Content-Length.
    #[arg(long)]
    pub chunked: bool,
    /// Worker threads, each with its own runtime and SO_REUSEPORT listener.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Pin workers to these CPUs (comma-separated, worker i gets the i-th, wrapping).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key", conflicts_with = "tls")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Serve HTTPS with a generated CA and leaf (localhost, 127.0.0.1); prints the CA's path.
    #[arg(long)]
    pub tls: bool,
    /// With TLS: require a client certificate signed by this CA (PEM), i.e. mutual TLS.
    #[arg(long)]
    pub tls_client_ca: Option<std::path::PathBuf>,
    /// Speak HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1 (see `h2c` in the docs: echo,
    /// trailers, gRPC answers, fault knobs).
    #[arg(long, conflicts_with_all = ["tls", "tls_cert", "chunked"])]
    pub h2c: bool,
    /// h2c: send GOAWAY (graceful) once this many streams arrived on a connection.
    #[arg(long, requires = "h2c")]
    pub goaway_after: Option<u32>,
    /// h2c: reset every Nth stream (counted over the whole origin) with REFUSED_STREAM.
    #[arg(long, requires = "h2c", value_parser = clap::value_parser!(u32).range(1..))]
    pub refuse_every: Option<u32>,
    /// h2c: announce this SETTINGS_MAX_CONCURRENT_STREAMS (default: none announced).
    #[arg(long, requires = "h2c")]
    pub max_concurrent_streams: Option<u32>,
    /// h2c: messages of a server-streaming gRPC call whose path ends in `Stream` without a count.
    #[arg(long, requires = "h2c", default_value_t = h2c::DEFAULT_STREAM_MESSAGES)]
    pub stream_messages: usize,
}

/// Runs `edge-bench origin` until killed, printing `origin listening on ADDR` first (what
/// [`child::start_origin`] waits for).
///
/// # Errors
/// Bind failures and failures writing to stdout.
pub fn run(args: &Args) -> io::Result<bool> {
    let tls = tls::server_config_of(args)?;
    let origin = spawn_origin(OriginOptions {
        listen: args.listen,
        delay: args.delay,
        body_bytes: args.body_bytes,
        chunked: args.chunked,
        workers: args.workers,
        cpus: args.cpus.clone(),
        tls,
        h2c: args.h2c.then_some(h2c::H2cOptions {
            goaway_after: args.goaway_after,
            refuse_every: args.refuse_every,
            max_concurrent_streams: args.max_concurrent_streams,
            stream_messages: args.stream_messages,
        }),
    })?;
    println!("origin listening on {}", origin.addr());
    io::stdout().flush()?;
    origin.wait();
    Ok(true)
}

/// How the origin answers.
#[derive(Debug, Clone)]
pub struct OriginOptions {
    /// Address to listen on; port 0 picks a free port (see [`OriginHandle::addr`]).
    pub listen: SocketAddr,
    /// Delay for every response except `/fast…` paths (see the module docs).
    pub delay: Option<Duration>,
    /// Response body size in bytes; the body repeats `hello, world\n`.
    pub body_bytes: usize,
    /// Frame the response body with chunked transfer coding instead of Content-Length.
    pub chunked: bool,
    /// Worker threads, each with its own runtime and listener.
    pub workers: usize,
    /// CPUs to pin workers to (worker i gets `cpus[i % len]`); empty leaves them unpinned.
    pub cpus: Vec<usize>,
    /// Serve HTTPS (HTTP/1.1 over TLS, same behaviours) with this config instead of plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Speak h2c (HTTP/2 with prior knowledge) with these knobs instead of HTTP/1.1 ([`h2c`]);
    /// `tls` and `chunked` are then ignored.
    pub h2c: Option<h2c::H2cOptions>,
}

impl Default for OriginOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            delay: None,
            body_bytes: DEFAULT_BODY.len(),
            chunked: false,
            workers: 1,
            cpus: Vec::new(),
            tls: None,
            h2c: None,
        }
    }
}

/// A running origin; stops (listeners and open connections closed, threads joined) on
/// [`stop`](Self::stop) or drop.
#[derive(Debug)]
pub struct OriginHandle {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    /// Duplicates of the workers' listening sockets, used to wake their accepts at stop.
    listeners: Vec<Socket>,
    threads: Vec<JoinHandle<()>>,
    records: Arc<h2c::H2cRecords>,
}

impl OriginHandle {
    /// The bound address (the real port when the options asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the h2c mode saw so far (streams, resets by the peer, refusals, GOAWAYs, frozen
    /// connections, peak concurrency); all zero for the HTTP/1.1 origin. Take a
    /// [`snapshot`](h2c::H2cRecords::snapshot), or wait for an event with
    /// [`wait_until`](h2c::H2cRecords::wait_until).
    pub fn h2c_records(&self) -> &Arc<h2c::H2cRecords> {
        &self.records
    }

    /// Stops accepting, drops open connections and joins the worker threads.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Blocks until the workers exit (they do not, short of [`stop`](Self::stop) from elsewhere
    /// or process exit); used by the `origin` subcommand.
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn shutdown(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // shutdown(2) on a listening socket wakes a pending accept (epoll and io_uring alike)
        // with an error; the worker sees `stopping` and leaves its loop.
        for l in &self.listeners {
            let _ = l.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.listeners.clear();
    }
}

impl Drop for OriginHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts the origin on `opts.workers` threads and returns once every worker is accepting.
///
/// # Errors
/// Bind failures (including the port being held by another program), runtime setup failures,
/// and thread spawn failures.
pub fn spawn_origin(opts: OriginOptions) -> io::Result<OriginHandle> {
    let workers = opts.workers.max(1);
    let sockets = bind_listeners(opts.listen, workers)?;
    let addr = sockets[0]
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("listener has no IP address"))?;
    let stopping = Arc::new(AtomicBool::new(false));
    let opts = Arc::new(opts);
    let records = Arc::new(h2c::H2cRecords::default());
    let mut handle = OriginHandle {
        addr,
        stopping: stopping.clone(),
        listeners: Vec::with_capacity(workers),
        threads: Vec::with_capacity(workers),
        records: records.clone(),
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    for (i, socket) in sockets.into_iter().enumerate() {
        handle.listeners.push(socket.try_clone()?);
        let (opts, stopping, ready) = (opts.clone(), stopping.clone(), ready_tx.clone());
        let records = records.clone();
        let thread = std::thread::Builder::new()
            .name(format!("origin-{i}"))
            .spawn(move || worker_main(i, socket.into(), &opts, &stopping, &ready, records))?;
        handle.threads.push(thread);
    }
    drop(ready_tx);
    for _ in 0..workers {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("origin worker exited during startup")),
        }
    }
    Ok(handle)
}

/// Binds `workers` SO_REUSEPORT listeners on one address (the first one fixes port 0).
fn bind_listeners(listen: SocketAddr, workers: usize) -> io::Result<Vec<Socket>> {
    if listen.port() != 0 {
        // Probe without SO_REUSEPORT: fails when another program holds the port, which a
        // SO_REUSEPORT bind would silently share.
        let probe = Socket::new(
            Domain::for_address(listen),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        probe.set_reuse_address(true)?;
        probe
            .bind(&listen.into())
            .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {listen}: {e}")))?;
    }
    let mut sockets = Vec::with_capacity(workers);
    let mut addr = listen;
    for _ in 0..workers {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        s.set_tcp_nodelay(true)?;
        s.bind(&addr.into())?;
        s.listen(BACKLOG)?;
        if let Some(bound) = s.local_addr()?.as_socket() {
            addr = bound;
        }
        sockets.push(s);
    }
    Ok(sockets)
}

/// Per-worker, read-only state shared by that worker's connections.
struct Worker {
    delay: Option<Duration>,
    keep_alive: SharedBytes,
    close: SharedBytes,
    /// For HTTP/1.0 clients: Content-Length framing even with `--chunked`.
    close_http10: SharedBytes,
    /// Per [`SIZED_PATHS`] entry: keep-alive and close responses.
    sized: Vec<(SharedBytes, SharedBytes)>,
    /// [`APP_PATH`]: keep-alive and close responses.
    app: (SharedBytes, SharedBytes),
    /// Set in TLS mode.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Set in h2c mode.
    h2c: Option<Rc<h2c::H2cWorker>>,
}

/// One worker thread: build the runtime, register the listener, accept until stopped.
fn worker_main(
    index: usize,
    listener: StdListener,
    opts: &OriginOptions,
    stopping: &AtomicBool,
    ready: &mpsc::Sender<io::Result<()>>,
    records: Arc<h2c::H2cRecords>,
) {
    if !opts.cpus.is_empty() {
        let id = opts.cpus[index % opts.cpus.len()];
        core_affinity::set_for_current(core_affinity::CoreId { id });
    }
    let mut rt = match monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let worker = Rc::new(Worker {
        delay: opts.delay,
        keep_alive: Rc::new(build_response(opts.body_bytes, opts.chunked, false)),
        close: Rc::new(build_response(opts.body_bytes, opts.chunked, true)),
        close_http10: Rc::new(build_response(opts.body_bytes, false, true)),
        sized: SIZED_PATHS
            .iter()
            .map(|&(_, n)| {
                (
                    Rc::new(build_response(n, false, false)),
                    Rc::new(build_response(n, false, true)),
                )
            })
            .collect(),
        app: (Rc::new(app_response(false)), Rc::new(app_response(true))),
        tls: opts.tls.clone(),
        h2c: opts
            .h2c
            .clone()
            .map(|h| Rc::new(h2c::H2cWorker::new(h, records, opts.body_bytes, opts.delay))),
    });
    rt.block_on(async move {
        // from_std registers the fd with this thread's driver, so it must run inside the runtime.
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let stop = StopSignal::new();
        let active = Rc::new(Cell::new(0usize));
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    // Accepted sockets must not leak into processes edge-bench starts later (wrk, proxies).
                    // SAFETY: fcntl on a descriptor this task owns.
                    unsafe {
                        libc::fcntl(
                            std::os::fd::AsRawFd::as_raw_fd(&stream),
                            libc::F_SETFD,
                            libc::FD_CLOEXEC,
                        )
                    };
                    let (stop, worker, active) = (stop.clone(), worker.clone(), active.clone());
                    active.set(active.get() + 1);
                    monoio::spawn(async move {
                        stop.or_stop(serve(stream, worker)).await;
                        active.set(active.get() - 1);
                    });
                }
                Err(_) if stopping.load(Ordering::SeqCst) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    monoio::time::sleep(ACCEPT_BACKOFF).await;
                }
                Err(_) => {}
            }
        }
        // Close every connection: the tasks drop their futures (and sockets) when signalled, and
        // the runtime keeps turning a little so io_uring can complete the cancelled operations.
        stop.trigger();
        let deadline = std::time::Instant::now() + STOP_DRAIN;
        while active.get() > 0 && std::time::Instant::now() < deadline {
            monoio::time::sleep(Duration::from_millis(1)).await;
        }
        monoio::time::sleep(Duration::from_millis(10)).await;
    });
}

/// Serves one connection until the client closes, asks to close, or misbehaves; in TLS mode,
/// after the handshake, over [`TlsStream`](crate::peers::tls_stream::TlsStream).
async fn serve(mut stream: TcpStream, worker: Rc<Worker>) {
    if let Some(h2c) = &worker.h2c {
        return h2c::serve_h2c(stream, h2c.clone()).await;
    }
    let mut rb = ReadBuf::with_capacity(READ_BUF);
    match &worker.tls {
        None => {
            let _ = serve_conn(&mut stream, &mut rb, &worker).await;
        }
        Some(config) => {
            let _ = tls::serve_tls(stream, config.clone(), &mut rb, &worker).await;
        }
    }
}

async fn serve_conn<S: AsyncReadRent + AsyncWriteRent>(
    stream: &mut S,
    rb: &mut ReadBuf,
    worker: &Worker,
) -> io::Result<()> {
    loop {
        let (head_len, body, keep_alive, expect_continue, http10, delay, sized) = loop {
            match parse_request(rb.data()) {
                Ok(Some(r)) => {
                    let sized = sized_index(r.path);
                    let delay = delay_for(r.path, worker.delay).filter(|_| sized.is_none());
                    break (
                        r.head_len,
                        r.body,
                        r.keep_alive,
                        r.expect_continue,
                        r.http10,
                        delay,
                        sized,
                    );
                }
                Ok(None) => {
                    if rb.fill(stream).await? == 0 {
                        return Ok(());
                    }
                }
                Err(_) => {
                    let (res, _) = stream.write_all(BAD_REQUEST).await;
                    return res.map(drop);
                }
            }
        };
        rb.consume(head_len);
        if expect_continue && body != BodyLen::Empty {
            let (res, _) = stream.write_all(CONTINUE).await;
            res?;
        }
        rb.skip_body(stream, body).await?;
        if let Some(d) = delay {
            monoio::time::sleep(d).await;
        }
        let response = match (keep_alive, http10, sized) {
            (true, false, Some(i)) if i == APP_INDEX => worker.app.0.clone(),
            (_, _, Some(i)) if i == APP_INDEX => worker.app.1.clone(),
            (true, false, Some(i)) => worker.sized[i].0.clone(),
            (_, _, Some(i)) => worker.sized[i].1.clone(),
            (_, true, None) => worker.close_http10.clone(),
            (true, false, None) => worker.keep_alive.clone(),
            (false, false, None) => worker.close.clone(),
        };
        let (res, _) = stream.write_all(response).await;
        res?;
        if !keep_alive || http10 {
            return Ok(());
        }
    }
}

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\nConnection: close\r\n\r\nbad request\n";

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The delay for a request to `path` (see the module docs for the rules).
pub fn delay_for(path: &str, delay: Option<Duration>) -> Option<Duration> {
    if path.starts_with("/fast") {
        None
    } else if path.starts_with("/slow") {
        Some(delay.unwrap_or(DEFAULT_SLOW))
    } else {
        delay
    }
}

/// What [`sized_index`] returns for [`APP_PATH`] (a fixed answer like the sized ones: never delayed).
const APP_INDEX: usize = usize::MAX;

/// Which [`SIZED_PATHS`] entry `path` names, if any (a reserved index for [`APP_PATH`]).
pub fn sized_index(path: &str) -> Option<usize> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if path == APP_PATH {
        return Some(APP_INDEX);
    }
    SIZED_PATHS.iter().position(|&(p, _)| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::http::parse_response;

    #[test]
    fn delay_rules() {
        let d = Some(Duration::from_millis(200));
        assert_eq!(delay_for("/fast/x", d), None);
        assert_eq!(delay_for("/slow", None), Some(DEFAULT_SLOW));
        assert_eq!(delay_for("/slow", d), d);
        assert_eq!(delay_for("/other", d), d);
        assert_eq!(delay_for("/other", None), None);
    }

    #[test]
    fn sized_paths() {
        assert_eq!(sized_index("/size/16k"), Some(0));
        assert_eq!(sized_index("/size/1m?x=1"), Some(1));
        assert_eq!(sized_index("/size/1m/x"), None);
        assert_eq!(sized_index("/fast"), None);
        assert_eq!(sized_index("/app"), Some(APP_INDEX));
        let app = app_response(false);
        let head = app.len() - APP_BODY.len();
        assert!(
            (400..=500).contains(&head),
            "application-like head of {head} bytes"
        );
        let r = build_response(SIZED_PATHS[1].1, false, false);
        let info = parse_response(&r, false).unwrap().unwrap();
        assert_eq!(info.body, BodyLen::Length(1024 * 1024));
    }

    #[test]
    fn stop_closes_open_and_waiting_connections() {
        use std::io::Read;
        let origin = spawn_origin(OriginOptions {
            workers: 2,
            ..Default::default()
        })
        .unwrap();
        let addr = origin.addr();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut idle = crate::support::probe::connect(addr, Duration::from_secs(1)).unwrap();
        crate::support::probe::send_get(&mut idle, "t", "/fast", false).unwrap();
        let r = crate::support::probe::read_response(&mut idle, deadline).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, DEFAULT_BODY));
        let mut waiting = crate::support::probe::connect(addr, Duration::from_secs(1)).unwrap();
        crate::support::probe::send_get(&mut waiting, "t", "/slow", false).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        origin.stop();
        for s in [&mut idle, &mut waiting] {
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut b = [0u8; 64];
            // EOF or reset, not a timeout: the connection was closed by stop().
            match s.read(&mut b) {
                Ok(n) => assert_eq!(n, 0),
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            }
        }
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still accepting after stop"
        );
    }
}
