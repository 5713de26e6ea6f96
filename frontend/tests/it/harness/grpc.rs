//! The gRPC fixture: a real gRPC server and client (Python grpcio) around `edge.test.Echo`
//! (tests/it/grpc/echo.proto, compiled once per test process with `python3 -m grpc_tools.protoc`).
//!
//! - [`GrpcServer::start`] (h2c) / [`GrpcServer::start_tls`] (TLS, ALPN h2): `grpc/server.py` on
//!   127.0.0.1, port read back; what it saw of each call (metadata, deadline, cancellation) as
//!   [`GrpcServer::events`] / [`GrpcServer::wait_event`]. It also serves the standard health service
//!   (`grpc.health.v1.Health`, "" and "edge.test.Echo" SERVING at start), set with
//!   [`GrpcServer::set_health`].
//! - [`GrpcCall`]: one call of `grpc/client.py` against an address (h2c, or TLS with
//!   [`GrpcCall::tls`]), bounded by [`GrpcCall::limit`]; its [`GrpcResult`] is the status, details,
//!   metadata, trailers and message and byte counts the client saw.
//!
//! Without python3, grpcio or grpcio-tools the tests that use it FAIL (never skip) with the install
//! command ([`INSTALL`]).

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Mutex, OnceLock,
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

/// What to install when the fixture cannot run.
pub const INSTALL: &str = "pip install grpcio grpcio-tools grpcio-health-checking \
     (Debian's system Python: add --break-system-packages; no pip: apt-get install python3-pip)";

/// The fixture's sources: echo.proto, server.py, client.py.
fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/grpc")
}

/// Where grpcio comes from when python3 lacks it: a `pip install --target` into the target's temp dir,
/// made once and kept (so the README's test command also runs on a machine without grpcio, given
/// python3 with pip and PyPI reachable). `None`: python3 has it already.
fn pydeps() -> &'static Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let check = |path: Option<&Path>| {
            let mut c = Command::new("python3");
            c.args(["-c", "import grpc, grpc_tools, grpc_health"]);
            if let Some(p) = path {
                c.env("PYTHONPATH", p);
            }
            c.output()
        };
        match check(None) {
            Err(e) => panic!("gRPC tests need python3 ({e}); then: {INSTALL}"),
            Ok(o) if o.status.success() => return None,
            Ok(_) => {}
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpc-pydeps");
        if check(Some(&dir)).is_ok_and(|o| o.status.success()) {
            return Some(dir);
        }
        let out = Command::new("python3")
            .args(["-m", "pip", "install", "-q", "--target"])
            .arg(&dir)
            .args(["grpcio", "grpcio-tools", "grpcio-health-checking"])
            .output();
        match (out, check(Some(&dir))) {
            (Ok(_), Ok(o)) if o.status.success() => Some(dir),
            (out, _) => panic!(
                "gRPC tests need grpcio, grpcio-tools and grpcio-health-checking for python3, and \
                 installing them into {} failed: {INSTALL}\n{:?}",
                dir.display(),
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            ),
        }
    })
}

/// `PYTHONPATH` for the fixture: the generated modules, and grpcio's own directory when it was
/// installed into the target ([`pydeps`]).
fn python_path() -> std::ffi::OsString {
    let mut p = generated().as_os_str().to_owned();
    if let Some(d) = pydeps() {
        p.push(":");
        p.push(d);
    }
    p
}

/// The directory holding the generated `echo_pb2*.py` (compiled on first use, once per process, under
/// the target's temp dir); panics with [`INSTALL`] when python3 or grpcio cannot be had.
fn generated() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("grpc-echo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = sources();
        let mut protoc = Command::new("python3");
        if let Some(d) = pydeps() {
            protoc.env("PYTHONPATH", d);
        }
        let out = protoc
            .args(["-m", "grpc_tools.protoc", "-I"])
            .arg(&src)
            .arg(format!("--python_out={}", dir.display()))
            .arg(format!("--grpc_python_out={}", dir.display()))
            .arg(src.join("echo.proto"))
            .output()
            .expect("run python3 -m grpc_tools.protoc");
        assert!(
            out.status.success(),
            "protoc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// A Python command running `script` of the fixture with the generated modules importable.
fn python(script: &str) -> Command {
    let mut c = Command::new("python3");
    c.arg(sources().join(script))
        .env("PYTHONPATH", python_path())
        .env("PYTHONUNBUFFERED", "1")
        // grpcio's C core logs to stderr only when asked.
        .env_remove("GRPC_VERBOSITY");
    c
}

/// The gRPC origin (`grpc/server.py`); killed on drop.
pub struct GrpcServer {
    child: Child,
    /// Its stdin, for commands; the server ends when it closes (the test process gone).
    stdin: Mutex<ChildStdin>,
    /// The id of the last command.
    commands: AtomicU64,
    pub addr: SocketAddr,
    events: Arc<Mutex<Vec<Value>>>,
    rx: Mutex<mpsc::Receiver<Value>>,
}

impl GrpcServer {
    /// Starts the server in h2c (plain, prior knowledge) and waits (10 s max) for its port.
    pub fn start() -> GrpcServer {
        Self::spawn(&[])
    }

    /// Starts the server over TLS with `cert` and `key` (PEM; ALPN h2) and waits for its port.
    pub fn start_tls(cert: &Path, key: &Path) -> GrpcServer {
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        Self::spawn(&["--tls", cert, key])
    }

    fn spawn(args: &[&str]) -> GrpcServer {
        let mut child = python("server.py")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn grpc/server.py");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let seen = events.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    eprintln!("grpc/server.py: {line}");
                    continue;
                };
                seen.lock().unwrap().push(v.clone());
                let _ = tx.send(v);
            }
        });
        let mut server = GrpcServer {
            child,
            stdin: Mutex::new(stdin),
            commands: AtomicU64::new(0),
            addr: "127.0.0.1:0".parse().unwrap(),
            events,
            rx: Mutex::new(rx),
        };
        let Some(listening) =
            server.wait_event(Duration::from_secs(10), |e| e["event"] == "listening")
        else {
            panic!("grpc/server.py did not start listening within 10 s (see its stderr above)");
        };
        let port = listening["port"].as_u64().expect("a port") as u16;
        server.addr = SocketAddr::from(([127, 0, 0, 1], port));
        server
    }

    /// Every event so far: `{"event": "call", "method", "metadata", "time_remaining", "peer"}` when a
    /// call starts, `{"event": "done", "method", "cancelled", "messages_in", "messages_out"}` when it
    /// ends (see grpc/server.py).
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    /// Sets the health status of `service` ("" = the server) in its `grpc.health.v1.Health` service:
    /// `"SERVING"`, `"NOT_SERVING"`, `"UNKNOWN"` or `"SERVICE_UNKNOWN"`; returns once the server
    /// confirmed it (5 s max).
    pub fn set_health(&self, service: &str, status: &str) {
        let id = self.commands.fetch_add(1, Ordering::SeqCst) + 1;
        let cmd =
            serde_json::json!({"cmd": "health", "id": id, "service": service, "status": status});
        writeln!(self.stdin.lock().unwrap(), "{cmd}").expect("write to grpc/server.py");
        self.wait_event(Duration::from_secs(5), |e| {
            e["event"] == "health_set" && e["id"] == id
        })
        .unwrap_or_else(|| panic!("grpc/server.py did not confirm {cmd} within 5 s"));
    }

    /// The `grpc.health.v1.Health/Check` calls that reached the server:
    /// `{"event": "health_check", "service", "metadata"}`.
    pub fn health_checks(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == "health_check")
            .collect()
    }

    /// The calls that reached the server.
    pub fn calls(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| e["event"] == "call")
            .count()
    }

    /// Waits (at most `limit`) for an event for which `hit` holds (one seen already counts); returns it.
    pub fn wait_event(&self, limit: Duration, hit: impl Fn(&Value) -> bool) -> Option<Value> {
        let rx = self.rx.lock().unwrap();
        if let Some(e) = self.events().into_iter().find(|e| hit(e)) {
            return Some(e);
        }
        let until = Instant::now() + limit;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(e) if hit(&e) => return Some(e),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which method a [`GrpcCall`] calls.
#[derive(Clone, Copy, Debug)]
pub enum GrpcCase {
    Unary,
    ServerStream,
    ClientStream,
    Bidi,
}

impl GrpcCase {
    fn as_str(self) -> &'static str {
        match self {
            GrpcCase::Unary => "unary",
            GrpcCase::ServerStream => "server_stream",
            GrpcCase::ClientStream => "client_stream",
            GrpcCase::Bidi => "bidi",
        }
    }
}

/// One call of `grpc/client.py`, built then [`run`](GrpcCall::run).
#[derive(Clone, Debug)]
pub struct GrpcCall {
    case: GrpcCase,
    ask: Value,
    messages: usize,
    payload_bytes: usize,
    timeout: Option<Duration>,
    metadata: Vec<(String, String)>,
    tls: Option<(PathBuf, Option<String>)>,
    limit: Duration,
}

impl GrpcCall {
    /// A call of `case` with an empty Ask, one message, no deadline, h2c, run for at most 20 s.
    pub fn new(case: GrpcCase) -> GrpcCall {
        GrpcCall {
            case,
            ask: serde_json::json!({}),
            messages: 1,
            payload_bytes: 0,
            timeout: None,
            metadata: Vec::new(),
            tls: None,
            limit: Duration::from_secs(20),
        }
    }

    pub fn unary() -> GrpcCall {
        Self::new(GrpcCase::Unary)
    }

    /// The Ask's fields (echo.proto, JSON names: `sleepMs`, `statusCode`, `statusMessage`,
    /// `initialMetadata`, `trailingMetadata`, `payloadBytes`, `count`, `intervalMs`, `text`).
    pub fn ask(mut self, ask: Value) -> Self {
        self.ask = ask;
        self
    }

    /// Asks sent on a client or bidi stream.
    pub fn messages(mut self, n: usize) -> Self {
        self.messages = n;
        self
    }

    /// Payload bytes in each Ask.
    pub fn payload_bytes(mut self, n: usize) -> Self {
        self.payload_bytes = n;
        self
    }

    /// The call's deadline (the client sends it as `grpc-timeout`).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// A metadata entry (request header field) of the call.
    pub fn metadata(mut self, key: &str, value: &str) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// TLS (ALPN h2) trusting `ca_file`, verifying `server_name` (default: the target's host).
    pub fn tls(mut self, ca_file: &Path, server_name: Option<&str>) -> Self {
        self.tls = Some((ca_file.to_path_buf(), server_name.map(Into::into)));
        self
    }

    /// How long the client may run before the test fails (default 20 s).
    pub fn limit(mut self, d: Duration) -> Self {
        self.limit = d;
        self
    }

    /// Runs the call against `addr` and returns what the client saw; panics when the client fails
    /// to run or does not end within the limit.
    pub fn run(&self, addr: SocketAddr) -> GrpcResult {
        let mut c = python("client.py");
        c.arg("--target")
            .arg(addr.to_string())
            .args(["--case", self.case.as_str(), "--ask"])
            .arg(self.ask.to_string())
            .arg(format!("--messages={}", self.messages))
            .arg(format!("--payload-bytes={}", self.payload_bytes));
        if let Some(t) = self.timeout {
            c.arg(format!("--timeout={}", t.as_secs_f64()));
        }
        for (k, v) in &self.metadata {
            c.arg(format!("--metadata={k}={v}"));
        }
        if let Some((ca, name)) = &self.tls {
            c.arg("--tls-ca").arg(ca);
            if let Some(name) = name {
                c.arg("--server-name").arg(name);
            }
        }
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn grpc/client.py");
        let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let (mut out, mut err) = (String::new(), String::new());
            let _ = stdout.read_to_string(&mut out);
            let _ = stderr.read_to_string(&mut err);
            let _ = tx.send((out, err));
        });
        let Ok((out, err)) = rx.recv_timeout(self.limit) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "grpc/client.py ({self:?}) did not end within {:?}",
                self.limit
            );
        };
        let status = child.wait().expect("wait for grpc/client.py");
        let Some(v) = out
            .lines()
            .last()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
        else {
            panic!("grpc/client.py ({self:?}) printed no result ({status}):\n{out}\n{err}");
        };
        GrpcResult::of(v)
    }
}

/// What the client saw of one call.
#[derive(Clone, Debug)]
pub struct GrpcResult {
    /// The gRPC status code (0 OK, 4 DEADLINE_EXCEEDED, 12 UNIMPLEMENTED, 14 UNAVAILABLE...).
    pub code: u64,
    pub code_name: String,
    /// The status message (`grpc-message`, decoded).
    pub details: String,
    /// Initial metadata (response header fields) and trailing metadata (trailers), as received.
    pub initial_metadata: HashMap<String, String>,
    pub trailing_metadata: HashMap<String, String>,
    /// Replies received and their payload bytes.
    pub messages: u64,
    pub bytes: u64,
    /// The last Reply's `sum` and `count` (a client stream's totals as the server counted them).
    pub sum: u64,
    pub count: u64,
    /// From the call's start to its end, as the client measured.
    pub elapsed: Duration,
}

impl GrpcResult {
    fn of(v: Value) -> GrpcResult {
        let map = |v: &Value| -> HashMap<String, String> {
            v.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let num = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        GrpcResult {
            code: num("code"),
            code_name: v["code_name"].as_str().unwrap_or_default().into(),
            details: v["details"].as_str().unwrap_or_default().into(),
            initial_metadata: map(&v["initial_metadata"]),
            trailing_metadata: map(&v["trailing_metadata"]),
            messages: num("messages"),
            bytes: num("bytes"),
            sum: num("sum"),
            count: num("count"),
            elapsed: Duration::from_secs_f64(v["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0),
        }
    }
}

/// Runs every call shape (unary, server-, client- and bidirectional streaming) against `addr` (over TLS
/// with `tls`: the CA file and the server name) and checks what came back: status 0, the message and
/// byte counts, the server's initial and trailing metadata, and the server's totals of a client stream.
pub fn every_call_shape(addr: SocketAddr, tls: Option<(&Path, &str)>) {
    let ask = serde_json::json!({
        "text": "hi", "count": 3, "payloadBytes": 7,
        "initialMetadata": {"x-initial": "one"}, "trailingMetadata": {"x-trailing": "two"},
    });
    for (case, messages, bytes) in [
        (GrpcCase::Unary, 1, 7),
        (GrpcCase::ServerStream, 3, 21),
        (GrpcCase::ClientStream, 1, 7),
        (GrpcCase::Bidi, 4, 28),
    ] {
        let mut call = GrpcCall::new(case)
            .ask(ask.clone())
            .messages(4)
            .payload_bytes(10)
            .metadata("x-asked", "yes");
        if let Some((ca, name)) = tls {
            call = call.tls(ca, Some(name));
        }
        let r = call.run(addr);
        assert_eq!(
            (r.code, r.messages, r.bytes),
            (0, messages, bytes),
            "{case:?}: {r:?}"
        );
        let initial = r.initial_metadata.get("x-initial").map(String::as_str);
        assert_eq!(initial, Some("one"), "{case:?}");
        let trailing = r.trailing_metadata.get("x-trailing").map(String::as_str);
        assert_eq!(trailing, Some("two"), "{case:?}");
        if let GrpcCase::ClientStream = case {
            assert_eq!(
                (r.count, r.sum),
                (4, 40),
                "the server saw every client message"
            );
        }
    }
}
