//! Running the real `edge` binary as a child process: finding (or building) it, starting it with
//! its output captured, waiting until it is healthy, and stopping it (SIGTERM, then SIGKILL after
//! a grace period), including on every error path through [`Drop`].
//!
//! The child's stdout and stderr are drained by two threads into one bounded in-memory tail (the
//! last [`OUTPUT_TAIL`] bytes), so a chatty child never blocks on a full pipe and a failure can
//! print what edge said. The child gets its own process group (a terminal's Ctrl-C reaches only
//! edge-bench) and `PR_SET_PDEATHSIG = SIGKILL`, so it dies with the thread that started it even
//! when edge-bench itself is killed and no destructor runs.
//!
//! The same [`EdgeProcess`] runs the other proxies `compare` and `scale` measure, pinned with
//! `taskset` ([`start_pinned_proxy`]). [`EdgeArgs`] is the scenarios' shared command-line choice
//! of binary and io driver.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::peers::origin::LOAD_PATH;
use crate::support::probe;

/// Bytes of child output kept (the most recent ones).
pub const OUTPUT_TAIL: usize = 256 * 1024;

/// Grace between SIGTERM and SIGKILL when stopping.
pub const STOP_GRACE: Duration = Duration::from_secs(8);

/// A running (or exited) `edge` child process; stopped on drop.
#[derive(Debug)]
pub struct EdgeProcess {
    child: Child,
    exit: Option<ExitStatus>,
    output: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

/// How [`EdgeProcess::stop`] ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It had exited before we signalled it.
    AlreadyExited(ExitStatus),
    /// It exited after SIGTERM, within the grace period.
    Terminated(ExitStatus, Duration),
    /// It outlived the grace period and was killed with SIGKILL.
    Killed,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::AlreadyExited(st) => write!(f, "had already exited ({st})"),
            Stopped::Terminated(st, after) => {
                write!(
                    f,
                    "exited {:.1} s after SIGTERM ({st})",
                    after.as_secs_f64()
                )
            }
            Stopped::Killed => write!(
                f,
                "still running after SIGTERM + grace; killed with SIGKILL"
            ),
        }
    }
}

impl EdgeProcess {
    /// Starts `bin args…` with stdin closed and stdout/stderr captured.
    ///
    /// # Errors
    /// Spawn failures (missing binary, not executable) and reader-thread spawn failures.
    pub fn start(bin: &Path, args: &[String]) -> io::Result<EdgeProcess> {
        Self::start_env(bin, args, &[])
    }

    /// [`start`](Self::start) with extra environment variables (e.g. `EDGE_TEST_FAULTS=1`).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_env(
        bin: &Path,
        args: &[String],
        envs: &[(&str, &str)],
    ) -> io::Result<EdgeProcess> {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting {}: {e}", bin.display())))?;
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::with_capacity(2);
        if let Some(out) = child.stdout.take() {
            readers.push(spawn_reader("edge-stdout", out, output.clone())?);
        }
        if let Some(err) = child.stderr.take() {
            readers.push(spawn_reader("edge-stderr", err, output.clone())?);
        }
        Ok(EdgeProcess {
            child,
            exit: None,
            output,
            readers,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has exited (reaping it), else `None`.
    ///
    /// # Errors
    /// `waitpid` failures.
    pub fn exited(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait()?;
        }
        Ok(self.exit)
    }

    /// Polls `GET path` on `addr` (fresh connection each time) until it answers 200, the child
    /// exits, or `timeout` passes.
    ///
    /// # Errors
    /// `Other` when the child exited first (print [`output`](Self::output) to see why),
    /// `TimedOut` when it never answered 200 in time.
    pub fn wait_healthy(
        &mut self,
        addr: SocketAddr,
        path: &str,
        timeout: Duration,
    ) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no attempt");
        loop {
            if let Some(st) = self.exited()? {
                return Err(io::Error::other(format!(
                    "edge exited during startup ({st})"
                )));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "edge did not answer 200 on http://{addr}{path} within {:.1} s (last: {last})",
                        timeout.as_secs_f64()
                    ),
                ));
            }
            match probe::get(addr, path, left.min(Duration::from_millis(500))) {
                Ok(r) if r.status == 200 => return Ok(()),
                Ok(r) => last = format!("status {}", r.status),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50).min(left));
        }
    }

    /// Everything the child printed so far (the last [`OUTPUT_TAIL`] bytes), lossily as UTF-8.
    pub fn output(&self) -> String {
        let out = self.output.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Sends SIGTERM, waits up to `grace` for the exit, then SIGKILLs and reaps the child.
    ///
    /// # Errors
    /// Signal or `waitpid` failures.
    pub fn stop(&mut self, grace: Duration) -> io::Result<Stopped> {
        let stopped = self.terminate(grace)?;
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Ok(stopped)
    }

    fn terminate(&mut self, grace: Duration) -> io::Result<Stopped> {
        if let Some(st) = self.exited()? {
            return Ok(Stopped::AlreadyExited(st));
        }
        let pid = libc::pid_t::try_from(self.child.id()).map_err(io::Error::other)?;
        // SAFETY: kill(2) on our own, not yet reaped child: the pid cannot have been reused.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let sent = Instant::now();
        while sent.elapsed() < grace {
            if let Some(st) = self.exited()? {
                return Ok(Stopped::Terminated(st, sent.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(st) = self.exited()? {
            return Ok(Stopped::Terminated(st, sent.elapsed()));
        }
        // The whole process group (the child made its own), so no grandchild keeps our pipes open;
        // the child is not reaped yet, so its pid (the group id) cannot have been reused.
        // SAFETY: as above.
        if unsafe { libc::kill(-pid, libc::SIGKILL) } != 0 {
            self.child.kill()?;
        }
        self.exit = Some(self.child.wait()?);
        Ok(Stopped::Killed)
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.stop(STOP_GRACE);
    }
}

/// Drains one pipe of the child into the shared output tail.
fn spawn_reader(
    name: &str,
    mut pipe: impl Read + Send + 'static,
    output: Arc<Mutex<Vec<u8>>>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(n) => {
                        let mut out = output.lock().unwrap_or_else(|p| p.into_inner());
                        out.extend_from_slice(&chunk[..n]);
                        if out.len() > OUTPUT_TAIL {
                            let excess = out.len() - OUTPUT_TAIL;
                            out.drain(..excess);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        })
}

/// Finds the `edge` binary: `explicit` when given; under `cargo run` in this workspace, the result of
/// `cargo build --release -p edge-frontend --bin edge` (a no-op when up to date); else `edge` next to
/// this executable (same cargo profile); else it builds it as above.
///
/// # Errors
/// `NotFound` for a missing explicit path or when the build produced no binary; the build's own
/// failure as `Other`.
pub fn locate_edge_bin(explicit: Option<&Path>) -> io::Result<PathBuf> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("--edge-bin {}: no such file", p.display()),
            ))
        };
    }
    // Under `cargo run` (CARGO is set) in the workspace, always ask cargo: it rebuilds edge when its
    // sources changed and is a no-op otherwise, so the demo never runs a stale proxy.
    if std::env::var_os("CARGO").is_some() && workspace_root().join("Cargo.toml").is_file() {
        return build_edge();
    }
    let exe = std::env::current_exe()?;
    if let Some(sibling) = exe.parent().map(|d| d.join("edge")) {
        if sibling.is_file() {
            return Ok(sibling);
        }
    }
    build_edge()
}

/// The workspace this crate was built in (the parent of bench/).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Runs `cargo build --release -p edge-frontend --bin edge` and returns the built binary.
fn build_edge() -> io::Result<PathBuf> {
    build_edge_with(&[], None)
}

/// Builds edge with `cargo build --release -p edge-frontend --bin edge --features FEATURES` into
/// `target/<target_subdir>` (so the normal binary is not replaced) and returns the binary, e.g. the
/// `count-alloc` build of `edge-bench alloc`.
///
/// # Errors
/// As [`locate_edge_bin`].
pub fn build_edge_features(features: &str, target_subdir: &str) -> io::Result<PathBuf> {
    build_edge_with(&["--features", features], Some(target_subdir))
}

fn build_edge_with(extra: &[&str], target_subdir: Option<&str>) -> io::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace_root();
    let base_target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target_dir = match target_subdir {
        Some(sub) => base_target.join(sub),
        None => base_target,
    };
    let mut args = vec!["build", "--release", "-p", "edge-frontend", "--bin", "edge"];
    args.extend_from_slice(extra);
    let target_arg = target_dir.display().to_string();
    if target_subdir.is_some() {
        args.extend_from_slice(&["--target-dir", &target_arg]);
    }
    println!(
        "building edge (a no-op when it is up to date): cargo {} (in {})",
        args.join(" "),
        root.display()
    );
    let out = Command::new(&cargo)
        .args(&args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(&root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running cargo: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "building edge failed ({})",
            out.status
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let from_json = stdout
        .lines()
        .filter_map(artifact_executable)
        .find(|p| p.file_name().is_some_and(|n| n == "edge"));
    from_json
        .into_iter()
        .chain([target_dir.join("release").join("edge")])
        .find(|p| p.is_file())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "cargo built no edge binary"))
}

/// The `"executable"` path of one line of cargo's JSON messages, if it has one.
fn artifact_executable(line: &str) -> Option<PathBuf> {
    const KEY: &str = "\"executable\":\"";
    let start = line.find(KEY)? + KEY.len();
    let mut path = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(PathBuf::from(path)),
            '\\' => path.push(chars.next()?),
            c => path.push(c),
        }
    }
    None
}

/// The options a scenario's command line shares for the edge under test: which binary, and which
/// io driver it runs with.
#[derive(Debug, Clone, clap::Args)]
pub struct EdgeArgs {
    /// The edge binary (default: next to edge-bench, else built with cargo).
    #[arg(long)]
    pub edge_bin: Option<PathBuf>,
    /// Pass `--io-driver` to edge (auto, io_uring or epoll); edge's default when unset.
    #[arg(long)]
    pub io_driver: Option<String>,
}

impl EdgeArgs {
    /// edge arguments selecting the io driver, or none.
    pub fn driver_args(&self) -> Vec<String> {
        driver_args(self.io_driver.as_deref())
    }
}

/// edge arguments selecting io driver `io_driver`, or none.
pub fn driver_args(io_driver: Option<&str>) -> Vec<String> {
    io_driver
        .map(|d| vec!["--io-driver".to_string(), d.to_string()])
        .unwrap_or_default()
}

/// Starts the proxy `name` as `taskset -c CPUS BIN ARGS…` (printing that command line) and waits
/// until `GET /fast` on `listen` answers 200 within `timeout`. `dir` is the proxy's scratch
/// directory: an `error.log` there goes into the error message with the proxy's output.
///
/// # Errors
/// Spawn failures; the proxy exiting or not answering in time (it is stopped then).
pub fn start_pinned_proxy(
    name: &str,
    bin: &Path,
    args: Vec<String>,
    cpus: &str,
    listen: SocketAddr,
    dir: &Path,
    timeout: Duration,
) -> io::Result<EdgeProcess> {
    let mut taskset = vec![
        "-c".to_string(),
        cpus.to_string(),
        bin.display().to_string(),
    ];
    taskset.extend(args);
    println!("starting {name}: taskset {}", shell_words(&taskset));
    let mut process = EdgeProcess::start(Path::new("taskset"), &taskset)?;
    if let Err(e) = process.wait_healthy(listen, LOAD_PATH, timeout) {
        let out = process.output();
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        let _ = process.stop(Duration::from_secs(2));
        // EdgeProcess words its errors for edge; name the real program.
        let why = e.to_string().replacen("edge", name, 1);
        return Err(io::Error::new(
            e.kind(),
            format!("{name} did not come up: {why}\n--- output ---\n{out}{log}--- end ---"),
        ));
    }
    Ok(process)
}

/// Arguments joined for display, quoting empty and spaced ones.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("\"{a}\"")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_from_cargo_json() {
        let line =
            r#"{"reason":"compiler-artifact","executable":"/w/target/release/edge","fresh":true}"#;
        assert_eq!(
            artifact_executable(line),
            Some(PathBuf::from("/w/target/release/edge"))
        );
        let escaped = r#"{"executable":"/a\"b/edge"}"#;
        assert_eq!(
            artifact_executable(escaped),
            Some(PathBuf::from("/a\"b/edge"))
        );
        assert_eq!(artifact_executable(r#"{"executable":null}"#), None);
    }

    #[test]
    fn stop_terminates_and_captures_output() {
        let args = [
            "-c".to_string(),
            "echo started; echo oops >&2; exec sleep 30".to_string(),
        ];
        let mut p = EdgeProcess::start(Path::new("/bin/sh"), &args).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let stopped = p.stop(Duration::from_secs(2)).unwrap();
        assert!(matches!(stopped, Stopped::Terminated(..)), "{stopped}");
        let out = p.output();
        assert!(out.contains("started") && out.contains("oops"), "{out}");
    }

    #[test]
    fn stop_kills_a_process_ignoring_sigterm() {
        let args = ["-c".to_string(), "trap '' TERM; sleep 30".to_string()];
        let mut p = EdgeProcess::start(Path::new("/bin/sh"), &args).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(p.stop(Duration::from_millis(300)).unwrap(), Stopped::Killed);
    }

    #[test]
    fn wait_healthy_reports_early_exit() {
        let args = ["-c".to_string(), "echo bad config >&2; exit 2".to_string()];
        let mut p = EdgeProcess::start(Path::new("/bin/sh"), &args).unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], 9));
        let err = p
            .wait_healthy(addr, "/_health", Duration::from_secs(5))
            .unwrap_err();
        assert!(err.to_string().contains("exited"), "{err}");
        p.stop(Duration::from_secs(1)).unwrap();
        assert!(p.output().contains("bad config"));
    }

    #[test]
    fn words_are_quoted_when_needed() {
        let args = ["--admin-listen", "", "a b"].map(String::from);
        assert_eq!(shell_words(&args), "--admin-listen \"\" \"a b\"");
    }
}
