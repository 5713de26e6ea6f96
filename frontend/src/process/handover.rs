//! Zero-downtime binary upgrade (DESIGN.md "Drain and upgrade"): the running process offers its listening
//! sockets on `server.upgrade_socket`; `edge --upgrade` connects, receives every listening fd (one
//! SO_REUSEPORT traffic socket per worker, then admin) with SCM_RIGHTS, serves on them, and answers
//! `READY`; the old process then stops accepting and drains without `drain_delay`.
//!
//! Why nothing is refused or reset: the new process receives the *same* sockets, not new ones bound to the
//! port, so the accept queues are shared. Whatever is queued when the old process stops accepting is
//! accepted by the new one; the old process cancels its pending accepts and serves any connection such
//! an accept still returned. It never shuts a listening socket down (that would close it for the new
//! process too); its copies of the fds just close at exit.
//!
//! Wire format (one Unix stream connection): old → new, one message `EDGE-UPGRADE 1 traffic=N tls=M
//! admin=0|1 pid=P\n` carrying N plain traffic fds, then M TLS traffic fds (DESIGN.md "TLS"), then the
//! admin fd when there is one; new → old, `READY pid=P\n` once it serves. Anything else, EOF or a 10 s
//! silence aborts the handover and the old process goes on serving.

use std::{
    io::{self, BufRead, BufReader, Write},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::net::{UnixListener, UnixStream},
    },
    path::Path,
    time::Duration,
};

/// Most fds one handover carries (traffic listeners + admin).
const MAX_FDS: usize = 256;
/// How long either side waits for the other.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Listening sockets received from the running process.
pub struct Inherited {
    /// One SO_REUSEPORT plain traffic listener per worker of the old process (none when it had no
    /// plain listener).
    pub traffic: Vec<socket2::Socket>,
    /// One SO_REUSEPORT TLS listener per worker of the old process (none without `[server.tls]`).
    pub tls: Vec<socket2::Socket>,
    /// The admin listener, when the old process had one.
    pub admin: Option<std::net::TcpListener>,
    /// The old process's pid (for the log).
    pub old_pid: u32,
    stream: UnixStream,
}

/// Connects to the running edge at `path` and receives its listening sockets.
///
/// # Errors
/// No process listening at `path`, a malformed or short message, or no answer within 10 s; in words.
pub fn take_over(path: &str) -> Result<Inherited, String> {
    let stream = UnixStream::connect(path)
        .map_err(|e| format!("cannot connect to the running edge at {path}: {e}"))?;
    stream.set_read_timeout(Some(HANDOVER_TIMEOUT)).ok();
    stream.set_write_timeout(Some(HANDOVER_TIMEOUT)).ok();
    let mut buf = [0u8; 256];
    let (n, fds) = recv_fds(stream.as_raw_fd(), &mut buf)
        .map_err(|e| format!("{path}: receiving the listening sockets failed: {e}"))?;
    let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
    let Offered {
        traffic,
        tls,
        admin,
        pid: old_pid,
    } = parse_offer(text).ok_or_else(|| format!("{path}: unexpected handover message {text:?}"))?;
    if fds.len() != traffic + tls + usize::from(admin) || traffic + tls == 0 {
        return Err(format!(
            "{path}: handover announced {traffic} traffic + {tls} TLS + {} admin sockets but carried {} fds",
            u8::from(admin),
            fds.len()
        ));
    }
    let mut fds = fds.into_iter();
    let mut take =
        |n| -> Vec<socket2::Socket> { fds.by_ref().take(n).map(socket2::Socket::from).collect() };
    let (traffic, tls) = (take(traffic), take(tls));
    let admin = fds.next().map(std::net::TcpListener::from);
    Ok(Inherited {
        traffic,
        tls,
        admin,
        old_pid,
        stream,
    })
}

impl Inherited {
    /// Tells the old process that this one serves; it then drains and exits.
    ///
    /// # Errors
    /// When the old process is gone or does not read.
    pub fn confirm(mut self) -> io::Result<()> {
        writeln!(self.stream, "READY pid={}", std::process::id())
    }
}

/// What a handover message announces.
#[derive(Debug, PartialEq)]
struct Offered {
    traffic: usize,
    tls: usize,
    admin: bool,
    pid: u32,
}

/// Parses `EDGE-UPGRADE 1 traffic=N tls=M admin=0|1 pid=P` (`tls=` absent: 0, as an edge without TLS
/// sends it).
fn parse_offer(text: &str) -> Option<Offered> {
    let mut it = text.trim_end().split(' ').peekable();
    if it.next()? != "EDGE-UPGRADE" || it.next()? != "1" {
        return None;
    }
    let traffic = it.next()?.strip_prefix("traffic=")?.parse().ok()?;
    let tls = match it.peek()?.strip_prefix("tls=") {
        Some(n) => {
            let n = n.parse().ok()?;
            it.next();
            n
        }
        None => 0,
    };
    let admin = match it.next()?.strip_prefix("admin=")? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let pid = it.next()?.strip_prefix("pid=")?.parse().ok()?;
    Some(Offered {
        traffic,
        tls,
        admin,
        pid,
    })
}

/// The running process's side: a Unix listener at `server.upgrade_socket`, polled by the supervisor.
pub struct Offer {
    listener: UnixListener,
    path: String,
}

/// How a poll of the upgrade socket went.
pub enum Handover {
    /// Nobody asked.
    None,
    /// A new process took the sockets and serves; its pid.
    Done(u32),
}

impl Offer {
    /// Binds `path` (replacing a stale socket file; refusing when another process answers on it).
    ///
    /// # Errors
    /// Another edge serving on `path`, or the bind failing; in words.
    pub fn bind(path: &str) -> Result<Offer, String> {
        if Path::new(path).exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "another edge answers on upgrade_socket {path}; start with --upgrade to take over from it"
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove stale upgrade socket {path}: {e}"))?;
        }
        Self::bind_fresh(path)
    }

    /// Binds `path` after a handover: the old process still listens on the old file, which is replaced.
    ///
    /// # Errors
    /// The bind failing; in words.
    pub fn rebind(path: &str) -> Result<Offer, String> {
        let _ = std::fs::remove_file(path);
        Self::bind_fresh(path)
    }

    fn bind_fresh(path: &str) -> Result<Offer, String> {
        let listener = UnixListener::bind(path)
            .map_err(|e| format!("cannot listen on upgrade_socket {path}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("upgrade_socket {path}: {e}"))?;
        Ok(Offer {
            listener,
            path: path.into(),
        })
    }

    /// Accepts a waiting `edge --upgrade`, if any, and hands it the plain `traffic` listeners, the `tls`
    /// ones and `admin`; blocks (at most 10 s) until it answers. A failed handover is logged and the
    /// caller goes on serving.
    pub fn poll(
        &self,
        traffic: &[socket2::Socket],
        tls: &[socket2::Socket],
        admin: Option<RawFd>,
    ) -> Handover {
        let stream = match self.listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Handover::None,
            Err(e) => {
                tracing::warn!(event = "upgrade.failed", socket = %self.path, error = %e, "accept on the upgrade socket failed");
                return Handover::None;
            }
        };
        tracing::info!(event = "upgrade.offered", socket = %self.path, traffic = traffic.len(), tls = tls.len(), admin = admin.is_some(), "a new edge asks for the listening sockets");
        match handover(stream, traffic, tls, admin) {
            Ok(pid) => Handover::Done(pid),
            Err(e) => {
                tracing::error!(event = "upgrade.failed", socket = %self.path, error = %e, "handover aborted; this process goes on serving");
                Handover::None
            }
        }
    }
}

fn handover(
    stream: UnixStream,
    traffic: &[socket2::Socket],
    tls: &[socket2::Socket],
    admin: Option<RawFd>,
) -> io::Result<u32> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HANDOVER_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDOVER_TIMEOUT))?;
    let mut fds: Vec<RawFd> = traffic.iter().chain(tls).map(AsRawFd::as_raw_fd).collect();
    fds.extend(admin);
    let msg = format!(
        "EDGE-UPGRADE 1 traffic={} tls={} admin={} pid={}\n",
        traffic.len(),
        tls.len(),
        u8::from(admin.is_some()),
        std::process::id()
    );
    send_fds(stream.as_raw_fd(), msg.as_bytes(), &fds)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    line.trim_end()
        .strip_prefix("READY pid=")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| {
            io::Error::other(if line.is_empty() {
                "the new process closed the upgrade connection before serving".to_string()
            } else {
                format!("unexpected answer {line:?}")
            })
        })
}

/// Sends `bytes` with `fds` attached (SCM_RIGHTS).
fn send_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below points into live local buffers sized above.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives one message into `buf` with the fds it carries (close-on-exec).
fn recv_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space =
        unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: msghdr is plain data pointing into live local buffers; the kernel fills at most
    // `msg_controllen` bytes of control data, which the CMSG_* walk stays within; every received fd is
    // wrapped in an OwnedFd exactly once.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("too many fds in the handover message"));
        }
        n as usize
    };
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the running edge closed the connection",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offer_line_round_trips() {
        assert_eq!(
            parse_offer("EDGE-UPGRADE 1 traffic=2 admin=1 pid=42\n"),
            Some(Offered {
                traffic: 2,
                tls: 0,
                admin: true,
                pid: 42
            })
        );
        assert_eq!(
            parse_offer("EDGE-UPGRADE 1 traffic=0 tls=2 admin=0 pid=7\n"),
            Some(Offered {
                traffic: 0,
                tls: 2,
                admin: false,
                pid: 7
            })
        );
        assert_eq!(parse_offer("EDGE-UPGRADE 2 traffic=2 admin=1 pid=42"), None);
        assert_eq!(parse_offer("hello"), None);
    }

    #[test]
    fn fds_pass_over_a_socket_pair_and_stay_the_same_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        send_fds(
            a.as_raw_fd(),
            b"EDGE-UPGRADE 1 traffic=1 admin=0 pid=1\n",
            &[l.as_raw_fd()],
        )
        .unwrap();
        let mut buf = [0u8; 64];
        let (n, fds) = recv_fds(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(
            parse_offer(std::str::from_utf8(&buf[..n]).unwrap()),
            Some(Offered {
                traffic: 1,
                tls: 0,
                admin: false,
                pid: 1
            })
        );
        assert_eq!(fds.len(), 1);
        let got = std::net::TcpListener::from(fds.into_iter().next().unwrap());
        assert_eq!(got.local_addr().unwrap(), addr);
        // A connection queued on the original is accepted through the received fd.
        let _c = std::net::TcpStream::connect(addr).unwrap();
        drop(l);
        assert!(got.accept().is_ok());
    }
}
