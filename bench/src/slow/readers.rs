//! The slow readers of `edge-bench slow-readers` and of matrix group h (DESIGN.md "Memory under
//! slow readers and large bodies"): N clients, each with a small receive buffer set before
//! connect, send one `GET` with `Connection: close`, read nothing for a pause, then read at a
//! bounded pace (one read of at most `read_bytes` per client every `read_every`) until the body is
//! in.
//!
//! The clients are connected and their requests sent from the calling thread, then split over a
//! few reader threads, each with its own epoll set over nonblocking sockets. A client's fd is
//! armed one-shot and re-armed `read_every` after its last read, so a thread sleeps in
//! `epoll_wait` instead of polling, and a client never reads faster than its pace.
//!
//! A body is complete when the answer is a 200 framed by `Content-Length` equal to the size asked
//! for, exactly that many bytes arrive, and every byte matches the origin's pattern (checked by
//! [`Reception`], sans-IO, in [`super::body`]); the client then closes. A 200 whose body stops
//! short (EOF, reset, or the run limit) is truncated; anything else (no connection, no 200 head,
//! other framing, bytes past the length, a wrong byte) failed.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Socket, Type};

use super::body::{End, Reception};

/// Connect timeout of one client.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reasons kept per kind of end in an outcome (the first ones).
const KEPT_REASONS: usize = 3;

/// What the slow readers do.
#[derive(Debug, Clone)]
pub struct ReadersPlan {
    /// Where they connect (the proxy's listener).
    pub addr: SocketAddr,
    /// The path they ask for.
    pub path: String,
    /// How many clients.
    pub clients: usize,
    /// The body size the origin serves, bytes.
    pub size: u64,
    /// `SO_RCVBUF` set before connect, bytes (the kernel doubles it for its bookkeeping).
    pub rcvbuf: usize,
    /// How long every client reads nothing after the last request is sent.
    pub pause: Duration,
    /// Most bytes one read of one client takes.
    pub read_bytes: usize,
    /// Least time between two reads of one client.
    pub read_every: Duration,
    /// Reader threads the clients are split over.
    pub threads: usize,
    /// Longest the reading (after the pause) may take; what is unfinished then is truncated.
    pub limit: Duration,
    /// Print a line when the requests are out (off inside the matrix's one-line rows).
    pub progress: bool,
}

impl ReadersPlan {
    /// The fastest one client can read: `read_bytes` per `read_every`, bytes/s.
    pub fn pace(&self) -> f64 {
        self.read_bytes as f64 / self.read_every.as_secs_f64().max(1e-6)
    }

    /// A run limit for `size` at this pace: three times the time one body takes at the pace,
    /// plus 60 s.
    pub fn default_limit(&self) -> Duration {
        Duration::from_secs_f64(3.0 * self.size as f64 / self.pace().max(1.0))
            + Duration::from_secs(60)
    }
}

/// What the slow readers saw, summed over the clients.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReadersOutcome {
    /// Clients started.
    pub clients: usize,
    /// Bodies complete and exact.
    pub complete: usize,
    /// Bodies cut short.
    pub truncated: usize,
    /// Clients that failed otherwise.
    pub failed: usize,
    /// The first reasons of truncations and failures.
    pub reasons: Vec<String>,
    /// Body bytes received, all clients.
    pub body_bytes: u64,
    /// Connecting and sending every request, seconds.
    pub connect_s: f64,
    /// From the end of the pause to the last client's end, seconds.
    pub read_s: f64,
    /// From the first connect to the last client's end, seconds.
    pub total_s: f64,
}

impl ReadersOutcome {
    /// Counts one client's end.
    fn add(&mut self, end: End) {
        let (why, kind) = match end {
            End::Complete => {
                self.complete += 1;
                return;
            }
            End::Truncated(why) => {
                self.truncated += 1;
                (why, "truncated")
            }
            End::Failed(why) => {
                self.failed += 1;
                (why, "failed")
            }
        };
        let kept = self.reasons.iter().filter(|r| r.starts_with(kind)).count();
        if kept < KEPT_REASONS {
            self.reasons.push(format!("{kind}: {why}"));
        }
    }

    /// Whether every client got its whole body.
    pub fn all_complete(&self) -> bool {
        self.clients > 0 && self.complete == self.clients
    }
}

/// Connects every client, sends its request, waits the pause, reads every body at the pace, and
/// returns the tally. Progress lines go to stdout.
///
/// # Errors
/// Reader-thread spawn and epoll failures (client failures are counted, not returned).
pub fn run_readers(plan: &ReadersPlan) -> io::Result<ReadersOutcome> {
    let mut out = ReadersOutcome {
        clients: plan.clients,
        ..ReadersOutcome::default()
    };
    let t0 = Instant::now();
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        plan.path, plan.addr
    );
    let mut streams = Vec::with_capacity(plan.clients);
    for _ in 0..plan.clients {
        match connect_one(plan, request.as_bytes()) {
            Ok(s) => streams.push(s),
            Err(e) => out.add(End::Failed(format!("connect or send: {e}"))),
        }
    }
    out.connect_s = t0.elapsed().as_secs_f64();
    if plan.progress {
        println!(
            "  {} clients connected and sent GET {} in {:.2} s; reading nothing for {:.1} s",
            streams.len(),
            plan.path,
            out.connect_s,
            plan.pause.as_secs_f64()
        );
        let _ = io::stdout().flush();
    }
    // The pause is the scenario: every client keeps its request unread for this long.
    std::thread::sleep(plan.pause);
    let read_start = Instant::now();
    let until = read_start + plan.limit;
    let threads = plan.threads.clamp(1, streams.len().max(1));
    let per = streams.len().div_ceil(threads).max(1);
    let mut handles = Vec::with_capacity(threads);
    while !streams.is_empty() {
        let part: Vec<TcpStream> = streams.drain(..per.min(streams.len())).collect();
        let p = plan.clone();
        handles.push(
            std::thread::Builder::new()
                .name("slow-reader".into())
                .spawn(move || read_paced(part, &p, until))?,
        );
    }
    let mut last_end = read_start;
    for h in handles {
        let part = h
            .join()
            .map_err(|_| io::Error::other("a reader thread panicked"))??;
        out.body_bytes += part.body_bytes;
        last_end = last_end.max(part.last_end);
        for end in part.ends {
            out.add(end);
        }
    }
    out.read_s = (last_end - read_start).as_secs_f64();
    out.total_s = (last_end - t0).as_secs_f64();
    Ok(out)
}

/// One client: a socket with `SO_RCVBUF` set before connect, its request written, then
/// nonblocking.
fn connect_one(plan: &ReadersPlan, request: &[u8]) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(plan.addr), Type::STREAM, None)?;
    sock.set_recv_buffer_size(plan.rcvbuf)?;
    sock.connect_timeout(&plan.addr.into(), CONNECT_TIMEOUT)?;
    let mut s: TcpStream = sock.into();
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(CONNECT_TIMEOUT))?;
    s.write_all(request)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// What one reader thread saw.
struct Part {
    ends: Vec<End>,
    body_bytes: u64,
    last_end: Instant,
}

/// One client on a reader thread: its socket (closed at its end) and its bytes.
struct Client {
    stream: Option<TcpStream>,
    rx: Reception,
}

/// Reads `streams` at the plan's pace until each has ended or `until` passes.
fn read_paced(streams: Vec<TcpStream>, plan: &ReadersPlan, until: Instant) -> io::Result<Part> {
    let ep = Epoll::new()?;
    let mut clients: Vec<Client> = streams
        .into_iter()
        .map(|s| Client {
            stream: Some(s),
            rx: Reception::default(),
        })
        .collect();
    for (i, c) in clients.iter().enumerate() {
        ep.arm(raw(c), i as u64, true)?;
    }
    let mut ends: Vec<Option<End>> = vec![None; clients.len()];
    let mut open = clients.len();
    // Re-arm times in order: every entry is pushed at "now + read_every", so the queue stays sorted.
    let mut due: VecDeque<(Instant, usize)> = VecDeque::new();
    let mut buf = vec![0u8; plan.read_bytes.max(1)];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut last_end = Instant::now();
    while open > 0 {
        let now = Instant::now();
        if now >= until {
            break;
        }
        while let Some(&(at, i)) = due.front() {
            if at > now {
                break;
            }
            due.pop_front();
            ep.arm(raw(&clients[i]), i as u64, false)?;
        }
        let wake = due.front().map_or(until, |&(at, _)| at.min(until));
        let n = ep.wait(&mut events, wake.saturating_duration_since(now))?;
        for ev in &events[..n] {
            let i = ev.u64 as usize;
            let c = &mut clients[i];
            let Some(stream) = c.stream.as_mut() else {
                continue;
            };
            let end = match stream.read(&mut buf) {
                Ok(0) => Some(c.rx.cut("EOF")),
                Ok(k) => match c.rx.feed(plan.size, &buf[..k]) {
                    Ok(true) => Some(End::Complete),
                    Ok(false) => {
                        due.push_back((Instant::now() + plan.read_every, i));
                        None
                    }
                    Err(end) => Some(end),
                },
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    ep.arm(stream.as_raw_fd(), i as u64, false)?;
                    None
                }
                Err(e) => Some(c.rx.cut(&e.to_string())),
            };
            if let Some(end) = end {
                // Closing the socket also takes it out of the epoll set.
                c.stream = None;
                ends[i] = Some(end);
                open -= 1;
                last_end = Instant::now();
            }
        }
    }
    let body_bytes = clients.iter().map(|c| c.rx.body()).sum();
    let ends = ends
        .into_iter()
        .zip(&clients)
        .map(|(e, c)| e.unwrap_or_else(|| c.rx.cut("run limit")))
        .collect();
    if open > 0 {
        last_end = Instant::now();
    }
    Ok(Part {
        ends,
        body_bytes,
        last_end,
    })
}

/// The client's fd (-1 once closed: never armed then).
fn raw(c: &Client) -> RawFd {
    c.stream.as_ref().map_or(-1, AsRawFd::as_raw_fd)
}

/// A minimal epoll set: one-shot readability per fd.
struct Epoll {
    fd: RawFd,
}

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 has no memory preconditions.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll { fd })
    }

    /// Arms `fd` for one readability event carrying `token` (`add`: first time, else re-arm).
    fn arm(&self, fd: RawFd, token: u64, add: bool) -> io::Result<()> {
        if fd < 0 {
            return Ok(());
        }
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            u64: token,
        };
        let op = if add {
            libc::EPOLL_CTL_ADD
        } else {
            libc::EPOLL_CTL_MOD
        };
        // SAFETY: `ev` lives across the call; epoll_ctl copies it.
        if unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` (rounded up to whole ms) for events; how many were written.
    fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: `events` is valid for `max` entries for the duration of the call.
        let n = unsafe { libc::epoll_wait(self.fd, events.as_mut_ptr(), max, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd and close it once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_keeps_first_reasons() {
        let mut o = ReadersOutcome {
            clients: 6,
            ..ReadersOutcome::default()
        };
        o.add(End::Complete);
        for i in 0..5 {
            o.add(End::Truncated(format!("t{i}")));
        }
        assert_eq!((o.complete, o.truncated, o.failed), (1, 5, 0));
        assert_eq!(o.reasons.len(), KEPT_REASONS);
        assert!(!o.all_complete());
    }
}
