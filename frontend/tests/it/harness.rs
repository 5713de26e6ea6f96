//! Test harness: starts the real `edge` binary on 127.0.0.1 port 0 with a generated config, a scripted
//! origin on plain std threads, and a raw HTTP/1.1 client. Every wait is bounded and event-driven (the
//! ready log line, a channel), never a fixed sleep.

#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc, Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

/// Which io driver a test case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Epoll,
    IoUring,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Epoll => "epoll",
            Driver::IoUring => "io_uring",
        }
    }

    /// `false` (with a printed reason) when the kernel refuses io_uring here.
    pub fn available(self) -> bool {
        if self == Driver::Epoll {
            return true;
        }
        // Probed once, on a thread of its own: a ring's teardown queues task work that interrupts the
        // creating thread's next blocking syscall with EINTR, which would break the test's own reads.
        static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        let probe = PROBE.get_or_init(|| {
            thread::spawn(|| {
                io_uring::IoUring::new(8)
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .join()
            .unwrap()
        });
        match probe {
            Ok(()) => true,
            Err(e) => {
                // Written straight to the process's stderr (not eprintln!, which libtest captures for
                // passing tests) so the skip and its reason show in the CI log.
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("SKIP io_uring case: the kernel refuses io_uring here ({e})\n")
                        .as_bytes(),
                );
                false
            }
        }
    }
}

/// A running `edge` process; killed on drop.
pub struct Edge {
    child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    log_rx: Mutex<mpsc::Receiver<String>>,
    _dir: TempDir,
}

/// A temp directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "edge-it-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The config used by most tests: one worker unless `extra` says otherwise, short timeouts.
pub fn config(driver: Driver, upstream: SocketAddr, extra_server: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
io_driver = "{driver}"
workers = 1
{extra_server}

[admin]
listen = "127.0.0.1:0"

[log]
level = "info"

[[upstreams]]
name = "origin"
endpoints = ["{upstream}"]
connect_timeout = "1s"
request_timeout = "10s"

[[routes]]
path_prefix = "/"
upstream = "origin"
{extra}
"#,
        driver = driver.name()
    )
}

impl Edge {
    /// Starts edge with `config` (TOML text) and waits (10 s max) for its ready line.
    pub fn start(config: &str) -> Edge {
        Self::start_args(config, &[])
    }

    pub fn start_args(config: &str, args: &[&str]) -> Edge {
        Self::start_env(config, args, &[])
    }

    /// Starts edge with extra environment variables (e.g. `EDGE_TEST_FAULTS=1`).
    pub fn start_env(config: &str, args: &[&str], envs: &[(&str, &str)]) -> Edge {
        raise_fd_limit();
        let dir = TempDir::new();
        let path = dir.0.join("edge.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_edge"))
            .arg("--config")
            .arg(&path)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn edge");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let log2 = log.clone();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                log2.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("startup.ready") => {
                    let addr = field(&line, "traffic=").parse().unwrap();
                    let admin = field(&line, "admin=").parse().unwrap();
                    return Edge {
                        child,
                        addr,
                        admin,
                        log,
                        log_rx: Mutex::new(rx),
                        _dir: dir,
                    };
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "edge did not become ready; log:\n{}",
                        log.lock().unwrap().join("\n")
                    );
                }
            }
        }
    }

    /// All log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) for a log line containing `needle`; returns it.
    pub fn wait_log(&self, needle: &str, limit: Duration) -> Option<String> {
        if let Some(l) = self.log().into_iter().find(|l| l.contains(needle)) {
            return Some(l);
        }
        let rx = self.log_rx.lock().unwrap();
        let until = Instant::now() + limit;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains(needle) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Waits (at most `limit`) for a log line containing every one of `needles`; returns it.
    pub fn wait_log_all(&self, needles: &[&str], limit: Duration) -> Option<String> {
        let hit = |l: &String| needles.iter().all(|n| l.contains(n));
        if let Some(l) = self.log().into_iter().find(hit) {
            return Some(l);
        }
        let rx = self.log_rx.lock().unwrap();
        let until = Instant::now() + limit;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(l) if hit(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// How many log lines so far contain `needle`.
    pub fn count_log(&self, needle: &str) -> usize {
        self.log().iter().filter(|l| l.contains(needle)).count()
    }

    /// Polls (every 20 ms, at most `limit`) until `pred(metric(name, labels))` holds; returns the last value.
    pub fn wait_metric_where(
        &self,
        name: &str,
        labels: &[&str],
        limit: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> f64 {
        let until = Instant::now() + limit;
        loop {
            let v = self.metric(name, labels);
            if pred(v) || Instant::now() > until {
                return v;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The admin `/metrics` text.
    pub fn metrics(&self) -> String {
        let r = Client::connect(self.admin).get("/metrics");
        assert_eq!(r.status, 200);
        String::from_utf8(r.body).unwrap()
    }

    /// Sum of a metric over all label sets matching every `labels` substring (e.g. `reason="bad_head"`).
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric_sum(&self.metrics(), name, labels)
    }

    /// Polls until `metric(name, labels) == want` (5 s max); returns the last value seen.
    pub fn wait_metric(&self, name: &str, labels: &[&str], want: f64) -> f64 {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let v = self.metric(name, labels);
            if v == want || Instant::now() > until {
                return v;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts a drop path was counted and logged (DESIGN.md "Status codes"): `metric{labels}` reaches
    /// `want` and a line with `event` appears, each waited on with a bound.
    pub fn assert_counted_and_logged(&self, metric: &str, labels: &[&str], want: f64, event: &str) {
        assert_eq!(
            self.wait_metric(metric, labels, want),
            want,
            "{metric}{labels:?}"
        );
        assert!(
            self.wait_log(event, Duration::from_secs(2)).is_some(),
            "no {event} log line"
        );
    }

    /// No upstream exchange is left active and no request in flight (fault cases end with nothing leaked).
    pub fn assert_upstream_settled(&self) {
        assert_eq!(
            self.wait_metric("edge_upstream_connections", &["state=\"active\""], 0.0),
            0.0,
            "an upstream exchange stayed active"
        );
        assert_eq!(
            self.wait_metric("edge_requests_in_flight", &[], 0.0),
            0.0,
            "a request stayed in flight"
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The config file edge was started with (rewrite it, then SIGHUP, to test a reload).
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.0.join("edge.toml")
    }

    /// Replaces the config file's contents (atomically, by rename).
    pub fn rewrite_config(&self, text: &str) {
        let tmp = self._dir.0.join("edge.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config_path()).unwrap();
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        unsafe { libc_kill(self.child.id() as i32, 15) };
        self.wait_exit(limit)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        unsafe { libc_kill(self.child.id() as i32, signal) };
    }

    /// Waits (at most `limit`) for the process to exit; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            // The reader thread sees EOF once the process is gone; collect what it still had in flight.
            let rx = self.log_rx.lock().unwrap();
            while rx.recv_timeout(Duration::from_secs(2)).is_ok() {}
            eprintln!(
                "--- edge log ---\n{}\n--- end of edge log ---",
                self.log().join("\n")
            );
        }
    }
}

/// Raises this test process's soft RLIMIT_NOFILE to the hard limit once (capacity tests hold hundreds of
/// client and origin sockets; CI machines often start with a soft limit of 1024).
pub fn raise_fd_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    });
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + key.len();
    let rest = &line[start..];
    rest.split_whitespace().next().unwrap().trim_matches('"')
}

/// Sums the samples of `name` whose label text contains every `labels` entry.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' '))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A request as the origin saw it.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub minor: u8,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub conn_id: usize,
}

/// The first field named `name` (case-insensitive).
fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// What the origin sends back: raw bytes, then whether it closes.
pub struct Reply {
    pub bytes: Vec<u8>,
    pub close: bool,
    pub delay: Duration,
}

impl Reply {
    pub fn ok(body: &[u8]) -> Reply {
        let mut b =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        b.extend_from_slice(body);
        Reply {
            bytes: b,
            close: false,
            delay: Duration::ZERO,
        }
    }
    pub fn raw(bytes: &[u8], close: bool) -> Reply {
        Reply {
            bytes: bytes.to_vec(),
            close,
            delay: Duration::ZERO,
        }
    }
    pub fn delayed(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// A scripted HTTP/1.1 origin: one thread per connection, keep-alive, counts connections.
pub struct Origin {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections whose handling thread has finished (the peer closed, or the origin did).
    pub closed: Arc<AtomicUsize>,
}

impl Origin {
    pub fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (acc, seen2, closed2) = (accepted.clone(), seen.clone(), closed.clone());
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                let id = acc.fetch_add(1, Ordering::SeqCst) + 1;
                let (h, seen, closed) = (handler.clone(), seen2.clone(), closed2.clone());
                thread::spawn(move || {
                    origin_conn(s, id, &*h, &seen);
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Origin {
            addr,
            accepted,
            seen,
            closed,
        }
    }

    /// A fully scripted origin: each accepted connection is handed to `f` (with its 1-based id) on a
    /// thread of its own; `closed` counts the calls of `f` that returned. `seen` stays empty.
    pub fn script(f: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let f: Arc<dyn Fn(TcpStream, usize) + Send + Sync> = Arc::new(f);
        let (acc, closed2) = (accepted.clone(), closed.clone());
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                let id = acc.fetch_add(1, Ordering::SeqCst) + 1;
                let (f, closed) = (f.clone(), closed2.clone());
                thread::spawn(move || {
                    f(s, id);
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Origin {
            addr,
            accepted,
            seen: Arc::new(Mutex::new(Vec::new())),
            closed,
        }
    }

    /// An origin that accepts, reads whatever arrives and never answers; it closes its side only when the
    /// peer closes (or after 60 s, so no test can leak it for longer).
    pub fn silent() -> Origin {
        Origin::script(|mut s, _| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
            let mut b = [0u8; 65536];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        })
    }

    /// Connections whose handling finished (see `closed`).
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Requests seen whole so far.
    pub fn seen_count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Polls (every 5 ms, at most `limit`) until `cond(self)` holds; returns whether it did.
    pub fn wait_until(&self, limit: Duration, cond: impl Fn(&Origin) -> bool) -> bool {
        wait_until(limit, || cond(self))
    }

    /// An origin answering 200 with the request body it received, plus `X-Method: METHOD`.
    pub fn echo() -> Origin {
        Origin::start(|req| {
            let mut b = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Method: {}\r\n\r\n",
                req.body.len(),
                req.method
            )
            .into_bytes();
            b.extend_from_slice(&req.body);
            Reply::raw(&b, false)
        })
    }

    /// An origin answering 200 with `body` to everything.
    pub fn fixed(body: &'static [u8]) -> Origin {
        Origin::start(move |_| Reply::ok(body))
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("origin saw no request")
    }
}

fn origin_conn(mut s: TcpStream, id: usize, h: &Handler, seen: &Mutex<Vec<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let Some((req, used)) = read_request(&mut s, &mut buf) else {
            return;
        };
        buf.drain(..used);
        let mut req = req;
        req.conn_id = id;
        seen.lock().unwrap().push(req.clone());
        let reply = h(&req);
        if !reply.delay.is_zero() {
            thread::sleep(reply.delay);
        }
        if s.write_all(&reply.bytes).is_err() || reply.close {
            return;
        }
    }
}

/// Reads one request (head + Content-Length or chunked body) from `s`; `None` on EOF.
pub fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Seen, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = req.parse(buf) {
            let mut seen = Seen {
                method: req.method.unwrap().into(),
                target: req.path.unwrap().into(),
                minor: req.version.unwrap(),
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
                ..Seen::default()
            };
            let cl = seen
                .header("content-length")
                .map(|v| v.parse::<usize>().unwrap());
            let chunked = seen
                .header("transfer-encoding")
                .is_some_and(|v| v.contains("chunked"));
            let mut pos = n;
            if let Some(cl) = cl {
                while buf.len() < n + cl {
                    fill(s, buf)?;
                }
                seen.body = buf[n..n + cl].to_vec();
                pos = n + cl;
            } else if chunked {
                let (body, end) = read_chunked(s, buf, n)?;
                seen.body = body;
                pos = end;
            }
            return Some((seen, pos));
        }
        fill(s, buf)?;
    }
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut tmp = [0u8; 65536];
    let n = match s.read(&mut tmp) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("read error on {:?}: {e}", s.peer_addr());
            return None;
        }
    };
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&tmp[..n]);
    Some(())
}

/// Decodes a chunked body starting at `pos`; returns (data, end offset). Trailers are skipped.
fn read_chunked(s: &mut TcpStream, buf: &mut Vec<u8>, mut pos: usize) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = buf[pos..].windows(2).position(|w| w == b"\r\n") {
                break pos + i;
            }
            fill(s, buf)?;
        };
        let line = std::str::from_utf8(&buf[pos..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            loop {
                let end = loop {
                    if let Some(i) = buf[pos..].windows(2).position(|w| w == b"\r\n") {
                        break pos + i;
                    }
                    fill(s, buf)?;
                };
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some((body, pos));
                }
            }
        }
        while buf.len() < pos + size + 2 {
            fill(s, buf)?;
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

/// A response as the client saw it.
#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub minor: u8,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub chunked: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw HTTP/1.1 client over one TCP connection.
pub struct Client {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        Client { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// Like [`Client::connect`], returning the connect error instead of panicking (load loops count it).
    pub fn try_connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(15)))?;
        Ok(Client { s, buf: Vec::new() })
    }

    /// Like [`Client::get`], with `None` for a failed write or a connection closed before a response.
    pub fn try_get(&mut self, path: &str) -> Option<Response> {
        self.s
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .ok()?;
        self.read_response(false)
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        self.read_response(false).expect("response")
    }

    /// Reads one response; `head_request` means no body follows. `None` on EOF before a head.
    pub fn read_response(&mut self, head_request: bool) -> Option<Response> {
        let mut r = self.read_head()?;
        if head_request || r.status == 204 || r.status == 304 {
            return Some(r);
        }
        if let Some(cl) = r
            .header("content-length")
            .map(|v| v.parse::<usize>().unwrap())
        {
            while self.buf.len() < cl {
                fill(&mut self.s, &mut self.buf)?;
            }
            r.body = self.buf.drain(..cl).collect();
        } else if r.header("transfer-encoding").is_some() {
            r.chunked = true;
            let (body, end) = read_chunked(&mut self.s, &mut self.buf, 0)?;
            r.body = body;
            self.buf.drain(..end);
        } else {
            while fill(&mut self.s, &mut self.buf).is_some() {}
            r.body = std::mem::take(&mut self.buf);
        }
        Some(r)
    }

    /// Connects with a custom read timeout.
    pub fn connect_timeout(addr: SocketAddr, read_timeout: Duration) -> Client {
        let c = Client::connect(addr);
        c.s.set_read_timeout(Some(read_timeout)).unwrap();
        c
    }

    /// Sets the read timeout of later reads.
    pub fn set_timeout(&mut self, d: Duration) {
        self.s.set_read_timeout(Some(d)).unwrap();
    }

    /// Bytes received but not consumed by a parsed response yet.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the bytes received but not consumed by a parsed response yet.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Reads only a response head (1xx skipped); its body stays buffered. `None` on EOF before a head.
    pub fn read_head(&mut self) -> Option<Response> {
        loop {
            let r = self.read_any_head()?;
            if !(100..200).contains(&r.status) {
                return Some(r);
            }
        }
    }

    /// Reads the next response head, interim (1xx) ones included. `None` on EOF before a head.
    pub fn read_any_head(&mut self) -> Option<Response> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut res = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = res.parse(&self.buf) {
                let r = Response {
                    status: res.code.unwrap(),
                    minor: res.version.unwrap(),
                    headers: res
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                    ..Response::default()
                };
                self.buf.drain(..n);
                return Some(r);
            }
            fill(&mut self.s, &mut self.buf)?;
        }
    }

    /// Reads (buffered bytes first) until the peer closes, at most `limit`. Returns the bytes and when the
    /// connection ended (`None`: still open at `limit`). A reset counts as closed.
    pub fn read_until_closed(&mut self, limit: Duration) -> (Vec<u8>, Option<Duration>) {
        let start = Instant::now();
        let mut out = std::mem::take(&mut self.buf);
        let mut tmp = vec![0u8; 65536];
        loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return (out, None);
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            match self.s.read(&mut tmp) {
                Ok(0) => return (out, Some(start.elapsed())),
                Ok(n) => out.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return (out, Some(start.elapsed())),
            }
        }
    }

    /// How long until the server closes the connection (reading and discarding), at most `limit`;
    /// `None` when it is still open then.
    pub fn time_until_closed(&mut self, limit: Duration) -> Option<Duration> {
        self.read_until_closed(limit).1
    }

    /// Whether the server closed the connection (EOF within the read timeout).
    pub fn closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

/// Polls `cond` every 5 ms for at most `limit`; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts `took` is within `slack` of `target` (and never below half the target: a deadline that fires
/// early is as wrong as one that fires late).
#[track_caller]
pub fn assert_about(what: &str, took: Duration, target: Duration, slack: Duration) {
    let low = target.saturating_sub(slack).max(target / 2);
    let high = target + slack;
    assert!(
        took >= low && took <= high,
        "{what}: took {took:?}, expected {target:?} (within {low:?}..={high:?})"
    );
}

/// Runs `f` for each available driver.
pub fn each_driver(f: impl Fn(Driver)) {
    for d in [Driver::Epoll, Driver::IoUring] {
        if d.available() {
            f(d);
        }
    }
}

/// Asserts the shape every error response shares (DESIGN.md "Status codes"): the status, a
/// `Content-Length` matching a non-empty text body, and `Connection: close` exactly when `close`.
#[track_caller]
pub fn assert_error_response(what: &str, r: &Response, status: u16, close: bool) {
    assert_eq!(r.status, status, "{what}: status (body {:?})", r.text());
    let cl = r
        .header("content-length")
        .unwrap_or_else(|| panic!("{what}: no Content-Length in {:?}", r.headers));
    assert_eq!(
        cl.parse::<usize>().ok(),
        Some(r.body.len()),
        "{what}: Content-Length"
    );
    assert!(!r.body.is_empty(), "{what}: empty error body");
    assert!(
        r.body
            .iter()
            .all(|b| b.is_ascii_graphic() || b" \t\r\n".contains(b)),
        "{what}: error body is not short text: {:?}",
        r.text()
    );
    let says_close = r
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    assert_eq!(
        says_close, close,
        "{what}: Connection: close expected {close}, headers {:?}",
        r.headers
    );
}

/// Writes bytes to a socket `chunk` at a time, the first at once and then one chunk every `every`, on a
/// thread of its own, until all are written, a write fails, or the drip is stopped (or dropped).
pub struct Drip {
    stop: Arc<std::sync::atomic::AtomicBool>,
    written: Arc<AtomicUsize>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drip {
    pub fn start(s: &TcpStream, bytes: Vec<u8>, chunk: usize, every: Duration) -> Drip {
        let mut w = s.try_clone().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let (stop2, written2) = (stop.clone(), written.clone());
        let handle = thread::spawn(move || {
            for (i, part) in bytes.chunks(chunk.max(1)).enumerate() {
                if i > 0 {
                    thread::sleep(every);
                }
                if stop2.load(Ordering::SeqCst) || w.write_all(part).is_err() {
                    return;
                }
                written2.fetch_add(part.len(), Ordering::SeqCst);
            }
        });
        Drip {
            stop,
            written,
            handle: Some(handle),
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Stops dripping; returns the bytes written.
    pub fn stop(mut self) -> usize {
        self.halt();
        self.written()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Drip {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A loopback address where nothing listens (bound, read back, closed): connects are refused.
pub fn refused_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// `cfg` (from [`config`] with `origin`) with the upstream's endpoints replaced by `endpoints`.
pub fn with_endpoints(cfg: &str, origin: SocketAddr, endpoints: &[SocketAddr]) -> String {
    let list: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
    cfg.replace(
        &format!("endpoints = [\"{origin}\"]"),
        &format!("endpoints = [{}]", list.join(", ")),
    )
}

/// A listener with a backlog of 0 that never accepts, its queue filled: SYNs to it are dropped and a
/// connect hangs (PLATFORM.md). Lives as long as the value.
pub struct HangingListener {
    pub addr: SocketAddr,
    _socket: socket2::Socket,
    _fillers: Vec<TcpStream>,
}

impl HangingListener {
    pub fn new() -> Self {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        s.listen(0).unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        let fillers: Vec<_> = (0..4)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok())
            .collect();
        assert!(!fillers.is_empty(), "could not fill the backlog");
        HangingListener {
            addr,
            _socket: s,
            _fillers: fillers,
        }
    }
}
