//! Where access lines go (DESIGN.md "Observability", `log.access_path`): each worker formats its lines
//! into a buffer of its own ([`AccessBuffer`]), and one process-wide writer thread ([`AccessWriter`])
//! writes whole buffers to the file or to stderr. No lock is shared between workers and a worker never
//! waits for the disk:
//!
//! - **Buffers.** A worker has at most [`BUFFERS_PER_WORKER`] buffers of [`BUFFER_BYTES`] each, made
//!   when it logs its first line: one it fills, the others on their way through the writer. A full
//!   buffer is handed to the writer (a channel send, at most once per buffer, never per line) and an
//!   empty one taken back. When none is back (the writer is behind: a slow disk, a blocked stderr pipe)
//!   the line is dropped and counted in `edge_access_log_dropped_total{worker}` instead of stalling the
//!   worker. No allocation per line in steady state.
//! - **Flush.** A buffer that is not full is handed over by the worker's heartbeat, every 250 ms
//!   (`edge_core::runtime::HEARTBEAT_EVERY`): a line reaches its file at most about a quarter of a
//!   second after its request ended, sooner under load.
//! - **Writes.** The writer appends each buffer with `write(2)` on a file opened with `O_APPEND` (whole
//!   lines, so nothing else appending to the file splits one); to stderr in pieces of at most
//!   `PIPE_BUF` (4 KiB) ending at a line's end, so a line never interleaves with the log lines other
//!   threads write to the same pipe.
//! - **Write errors.** The buffer's lines are counted as dropped (in its worker's counter),
//!   `access_log.write_failed` is logged at most every 10 s, and the next buffer is tried on the same
//!   file (a SIGUSR1 reopen may cure a removed directory or a full disk).
//! - **Reopen (SIGUSR1, logrotate's rename-then-signal).** The supervisor asks the writer to open the
//!   path again ([`AccessWriter::open`]); there is one file descriptor for the whole process, so every
//!   worker's lines go to the new file from the next buffer on. Buffers handed over before the signal
//!   land in the renamed file; lines still in workers' buffers (at most 250 ms of them) in the new one.
//!   A path that cannot be opened keeps the old descriptor (`access_log.open_failed`, error). A reload
//!   that changes `log.access_path` opens the new path the same way.
//! - **Exit.** A worker hands over its buffer as it ends; the supervisor then waits (briefly) for the
//!   writer to write everything handed over ([`AccessWriter::sync`]).

use std::{
    fs::File,
    io::Write,
    sync::{
        mpsc::{channel, Receiver, Sender},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use metrics::Counter;

/// Size of one worker buffer, bytes (a line is typically 300 to 600 bytes: about 150 lines).
pub const BUFFER_BYTES: usize = 64 << 10;
/// Buffers a worker may have: one being filled, the rest queued at or being written by the writer.
pub const BUFFERS_PER_WORKER: usize = 4;
/// Largest write to stderr at once: lines written to a pipe in pieces up to this size are not
/// interleaved with other writers' (pipe(7)).
const PIPE_BUF: usize = 4096;
/// Least time between two `access_log.write_failed` lines.
const WRITE_FAILED_EVERY: Duration = Duration::from_secs(10);

/// What the writer thread is asked to do.
enum Msg {
    /// Open this path (`""`: stderr) and write there from now on.
    Open(String),
    /// Write these lines, then give the buffer back to its worker.
    Lines(Vec<u8>, Arc<Return>),
    /// Everything sent before was written: say so.
    Sync(Sender<()>),
}

/// A worker's way back from the writer: its empty buffers and its dropped-line counter.
struct Return {
    buffers: Sender<Vec<u8>>,
    dropped: Counter,
}

/// The process-wide writer of access lines: one thread, one output (a file or stderr). Made with
/// [`Shared`](crate::runtime::Shared); the thread starts at [`AccessWriter::start`] (a writer never
/// started, as in unit tests, keeps what it is sent).
pub struct AccessWriter {
    tx: Mutex<Sender<Msg>>,
    rx: Mutex<Option<Receiver<Msg>>>,
}

impl Default for AccessWriter {
    fn default() -> Self {
        let (tx, rx) = channel();
        AccessWriter {
            tx: Mutex::new(tx),
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl AccessWriter {
    /// Starts the writer thread, writing to `path` (`""`: stderr). Once; later calls do nothing.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(&self, path: &str) -> std::io::Result<()> {
        let Some(rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return Ok(());
        };
        self.open(path);
        std::thread::Builder::new()
            .name("edge-access".into())
            .spawn(move || write_loop(rx))
            .map(|_| ())
    }

    /// Asks the writer to (re)open `path` (`""`: stderr): at start, at SIGUSR1, and when a reload
    /// changes `log.access_path`. Called by the supervisor only.
    pub fn open(&self, path: &str) {
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(Msg::Open(path.to_string()));
        }
    }

    /// Waits (at most `limit`) until everything handed to the writer so far is written: at exit, after
    /// the workers ended (each flushes its buffer as it ends), so the last requests' lines are not lost.
    pub fn sync(&self, limit: Duration) {
        let (tx, rx) = channel();
        if let Ok(w) = self.tx.lock() {
            if w.send(Msg::Sync(tx)).is_err() {
                return;
            }
        }
        let _ = rx.recv_timeout(limit);
    }

    /// The buffer of one worker, counting its dropped lines in `dropped`
    /// (`edge_access_log_dropped_total{worker}`). Allocates nothing until the first line.
    pub fn worker_buffer(&self, dropped: Counter) -> AccessBuffer {
        let tx = match self.tx.lock() {
            Ok(tx) => tx.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let (back_tx, back) = channel();
        AccessBuffer {
            tx,
            back,
            ret: Arc::new(Return {
                buffers: back_tx,
                dropped,
            }),
            active: Vec::new(),
            made: 0,
        }
    }
}

/// One worker's access-line buffer (see the module documentation). Single-threaded.
pub struct AccessBuffer {
    tx: Sender<Msg>,
    back: Receiver<Vec<u8>>,
    ret: Arc<Return>,
    active: Vec<u8>,
    /// Buffers made so far (at most [`BUFFERS_PER_WORKER`]).
    made: usize,
}

impl AccessBuffer {
    /// Appends one whole line (with its `\n`); drops and counts it when no buffer can take it.
    pub fn push(&mut self, line: &[u8]) {
        if self.active.capacity() == 0 && !self.take_empty() {
            return self.ret.dropped.increment(1);
        }
        if self.active.len() + line.len() > self.active.capacity() {
            self.flush();
            if !self.take_empty() {
                return self.ret.dropped.increment(1);
            }
        }
        if line.len() > self.active.capacity() {
            // Longer than a whole buffer (cannot happen with the access line's bounded fields).
            return self.ret.dropped.increment(1);
        }
        self.active.extend_from_slice(line);
    }

    /// Hands the lines buffered so far to the writer (the heartbeat calls it every 250 ms).
    pub fn flush(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let full = std::mem::take(&mut self.active);
        if let Err(e) = self.tx.send(Msg::Lines(full, self.ret.clone())) {
            // No writer (it was never started): the lines are lost, the buffer is reused.
            if let Msg::Lines(mut buf, _) = e.0 {
                self.ret.dropped.increment(count_lines(&buf));
                buf.clear();
                self.active = buf;
            }
        }
    }

    /// Makes `active` an empty buffer: one given back by the writer, or a new one while fewer than
    /// [`BUFFERS_PER_WORKER`] exist. `false` when none is available (the writer is behind).
    fn take_empty(&mut self) -> bool {
        if self.active.capacity() > 0 && self.active.is_empty() {
            return true;
        }
        if let Ok(buf) = self.back.try_recv() {
            self.active = buf;
            return true;
        }
        if self.made < BUFFERS_PER_WORKER {
            self.made += 1;
            self.active = Vec::with_capacity(BUFFER_BYTES);
            return true;
        }
        false
    }
}

impl Drop for AccessBuffer {
    /// A worker that ends (drained, or restarted after a panic) hands over what it buffered.
    fn drop(&mut self) {
        self.flush();
    }
}

/// Lines in `buf`.
fn count_lines(buf: &[u8]) -> u64 {
    buf.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Where the writer writes.
enum Output {
    Stderr,
    File(File, String),
}

/// The writer thread: runs until every sender is gone.
fn write_loop(rx: Receiver<Msg>) {
    let mut out = Output::Stderr;
    let mut last_failure: Option<Instant> = None;
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Open(path) => out = reopen(out, &path),
            Msg::Sync(done) => {
                let _ = done.send(());
            }
            Msg::Lines(mut buf, ret) => {
                let written = match &mut out {
                    Output::Stderr => write_stderr(&buf),
                    Output::File(f, _) => f.write_all(&buf),
                };
                if let Err(e) = written {
                    ret.dropped.increment(count_lines(&buf));
                    if last_failure.is_none_or(|t| t.elapsed() >= WRITE_FAILED_EVERY) {
                        last_failure = Some(Instant::now());
                        let path = match &out {
                            Output::Stderr => "",
                            Output::File(_, p) => p,
                        };
                        tracing::warn!(event = "access_log.write_failed", path, error = %e, "access lines lost (counted in edge_access_log_dropped_total)");
                    }
                }
                buf.clear();
                let _ = ret.buffers.send(buf);
            }
        }
    }
}

/// Opens `path` for appending (`""`: stderr); on failure keeps `old` and logs why.
fn reopen(old: Output, path: &str) -> Output {
    if path.is_empty() {
        return Output::Stderr;
    }
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        Ok(f) => {
            tracing::info!(event = "access_log.opened", path);
            Output::File(f, path.to_string())
        }
        Err(e) => {
            tracing::error!(event = "access_log.open_failed", path, error = %e, "access lines keep going where they went before");
            old
        }
    }
}

/// Writes `buf` to stderr in pieces of at most [`PIPE_BUF`] bytes, each ending at a line's end (a
/// longer line goes whole). The process's stderr lock is taken per piece, not for the whole buffer,
/// so the log lines of other threads wait for at most one piece.
fn write_stderr(buf: &[u8]) -> std::io::Result<()> {
    let mut err = std::io::stderr();
    let mut rest = buf;
    while !rest.is_empty() {
        let window = &rest[..rest.len().min(PIPE_BUF)];
        let cut = match window.iter().rposition(|&b| b == b'\n') {
            Some(i) if rest.len() > PIPE_BUF => i + 1,
            _ if rest.len() <= PIPE_BUF => rest.len(),
            _ => rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |i| i + 1),
        };
        err.write_all(&rest[..cut])?;
        rest = &rest[cut..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> Counter {
        Counter::noop()
    }

    #[test]
    fn a_writer_that_is_behind_drops_lines_instead_of_growing() {
        // Never started: no buffer ever comes back.
        let w = AccessWriter::default();
        let mut b = w.worker_buffer(counter());
        let line = [b'x'; 1000];
        for _ in 0..(BUFFERS_PER_WORKER * BUFFER_BYTES / 1000 + 200) {
            b.push(&line);
        }
        assert_eq!(b.made, BUFFERS_PER_WORKER);
        assert!(b.active.capacity() <= BUFFER_BYTES);
    }

    #[test]
    fn flushed_buffers_come_back_empty_from_the_writer() {
        let w = AccessWriter::default();
        let dir = std::env::temp_dir().join(format!("edge-access-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("a.log");
        let _ = std::fs::remove_file(&path);
        w.start(path.to_str().unwrap()).unwrap();
        let mut b = w.worker_buffer(counter());
        b.push(b"one\n");
        b.flush();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read(&path).unwrap_or_default() != b"one\n" {
            assert!(Instant::now() < deadline, "the line never reached the file");
            std::thread::sleep(Duration::from_millis(5));
        }
        let back = b.back.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(back.is_empty() && back.capacity() >= BUFFER_BYTES);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
