//! [`Edge`]: the real `edge` binary as a child process: start and wait for its ready line, its log
//! (collected by a reader thread, waited on by channel), its config file, signals and exit.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, ChildStderr, Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use super::{Cfg, TempDir};

/// A running `edge` process; killed on drop.
pub struct Edge {
    child: Child,
    /// The plain traffic listener; the TLS one when the plain one is disabled (`server.listen = ""`).
    pub addr: SocketAddr,
    /// The plain traffic listener, `None` when disabled.
    pub plain: Option<SocketAddr>,
    /// The TLS listener (`[server.tls]`), `None` when disabled.
    pub tls: Option<SocketAddr>,
    pub admin: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    log_rx: Mutex<mpsc::Receiver<String>>,
    dir: TempDir,
}

impl Edge {
    /// Starts edge with `config` and waits (10 s max) for its ready line.
    pub fn start(config: &Cfg) -> Edge {
        Self::start_args(config, &[])
    }

    /// Starts edge with extra command-line arguments after `--config FILE`.
    pub fn start_args(config: &Cfg, args: &[&str]) -> Edge {
        Self::start_env(config, args, &[])
    }

    /// Starts edge with extra environment variables (e.g. `EDGE_TEST_FAULTS=1`).
    pub fn start_env(config: &Cfg, args: &[&str], envs: &[(&str, &str)]) -> Edge {
        raise_fd_limit();
        let dir = TempDir::new();
        let path = dir.0.join("edge.toml");
        std::fs::write(&path, config.render()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_edge"))
            .arg("--config")
            .arg(&path)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn edge");
        let log = Arc::new(Mutex::new(Vec::new()));
        let rx = read_log(child.stderr.take().unwrap(), log.clone());
        let Some(ready) = wait_line(&rx, Duration::from_secs(10), |l| {
            l.contains("startup.ready")
        }) else {
            let _ = child.kill();
            panic!(
                "edge did not become ready; log:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        let plain: Option<SocketAddr> = field(&ready, "traffic=").parse().ok();
        let tls: Option<SocketAddr> = field(&ready, "tls=").parse().ok();
        Edge {
            child,
            addr: plain.or(tls).expect("a traffic listener"),
            plain,
            tls,
            admin: field(&ready, "admin=").parse().unwrap(),
            log,
            log_rx: Mutex::new(rx),
            dir,
        }
    }

    /// All log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) for a log line containing `needle`; returns it.
    pub fn wait_log(&self, needle: &str, limit: Duration) -> Option<String> {
        self.wait_log_all(&[needle], limit)
    }

    /// Waits (at most `limit`) for a log line containing every one of `needles`; returns it.
    pub fn wait_log_all(&self, needles: &[&str], limit: Duration) -> Option<String> {
        let hit = |l: &String| needles.iter().all(|n| l.contains(n));
        if let Some(l) = self.log().into_iter().find(hit) {
            return Some(l);
        }
        wait_line(&self.log_rx.lock().unwrap(), limit, hit)
    }

    /// How many log lines so far contain `needle`.
    pub fn count_log(&self, needle: &str) -> usize {
        self.log().iter().filter(|l| l.contains(needle)).count()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The config file edge was started with (rewrite it, then SIGHUP, to test a reload).
    pub fn config_path(&self) -> PathBuf {
        self.dir.0.join("edge.toml")
    }

    /// Replaces the config file with `config` (atomically, by rename).
    pub fn rewrite_config(&self, config: &Cfg) {
        self.rewrite_config_text(&config.render());
    }

    /// Replaces the config file's contents with `text`, which need not parse (atomically, by rename).
    pub fn rewrite_config_text(&self, text: &str) {
        let tmp = self.dir.0.join("edge.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config_path()).unwrap();
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        self.signal(15);
        self.wait_exit(limit)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.child.id() as i32, signal) };
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

/// Lines of edge's log printed when a test fails.
const LOG_TAIL: usize = 50;

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            // The reader thread sees EOF once the process is gone; collect what it still had in flight.
            let rx = self.log_rx.lock().unwrap();
            while rx.recv_timeout(Duration::from_secs(2)).is_ok() {}
            // The last lines only, so a test that logs thousands (a rate limit's 429s) does not push
            // its panic message, printed just before, out of a CI log's tail; all of them go to a file.
            let lines = self.log();
            let path = std::env::temp_dir().join(format!("edge-it-{}.log", self.child.id()));
            let saved = match std::fs::write(&path, lines.join("\n")) {
                Ok(()) => format!(", all of them in {}", path.display()),
                Err(_) => String::new(),
            };
            let skip = lines.len().saturating_sub(LOG_TAIL);
            eprintln!(
                "--- edge log: the last {} of {} lines{saved} ---\n{}\n--- end of edge log ---",
                lines.len() - skip,
                lines.len(),
                lines[skip..].join("\n")
            );
        }
    }
}

/// Collects `stderr` line by line into `log` on a thread of its own; each line is also sent on the
/// returned channel, so waits block on arrivals instead of polling.
fn read_log(stderr: ChildStderr, log: Arc<Mutex<Vec<String>>>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            log.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    rx
}

/// The next line from `rx` (within `limit`) for which `hit` holds.
fn wait_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    hit: impl Fn(&String) -> bool,
) -> Option<String> {
    let until = Instant::now() + limit;
    loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(l) if hit(&l) => return Some(l),
            Ok(_) => {}
            Err(_) => return None,
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

/// The value after `key` in a log line (up to the next space, quotes trimmed).
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + key.len();
    let rest = &line[start..];
    rest.split_whitespace().next().unwrap().trim_matches('"')
}

/// Runs the `edge` binary with `args` to its exit: the status and both streams.
pub fn run_edge<I, S>(args: I) -> std::process::Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    std::process::Command::new(env!("CARGO_BIN_EXE_edge"))
        .args(args)
        .output()
        .unwrap()
}

/// `edge --check --config path`: the exit status and both streams (the CLI contract of DESIGN.md "CLI").
pub fn check_config(path: &std::path::Path) -> std::process::Output {
    run_edge(["--check".as_ref(), "--config".as_ref(), path.as_os_str()])
}

/// Asserts `out` exited with `code`, showing its stderr when not.
pub fn assert_exit(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
