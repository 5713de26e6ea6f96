//! Scripted origins on plain std threads: [`Origin`] (a handler per request, or a whole-connection
//! script), what it saw ([`Seen`]), what it answers ([`Reply`]), and [`read_request`] for scripts.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread,
    time::Duration,
};

use super::{
    wait_until,
    wire::{fill, find_header, owned_headers, read_chunked},
};

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
    /// 200 with the body `req` carried, plus `X-Method: METHOD`.
    pub fn echo(req: &Seen) -> Reply {
        let mut b = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Method: {}\r\n\r\n",
            req.body.len(),
            req.method
        )
        .into_bytes();
        b.extend_from_slice(&req.body);
        Reply::raw(&b, false)
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
    /// An origin answering each whole request it reads with `handler`'s reply, recorded in `seen`.
    pub fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Origin {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = seen.clone();
        let mut origin = Origin::script(move |s, id| origin_conn(s, id, &*handler, &log));
        origin.seen = seen;
        origin
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

    /// An origin answering 200 with the request body it received, plus `X-Method: METHOD`.
    pub fn echo() -> Origin {
        Origin::start(Reply::echo)
    }

    /// An origin answering 200 with `body` to everything.
    pub fn fixed(body: &'static [u8]) -> Origin {
        Origin::start(move |_| Reply::ok(body))
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

/// Serves one keep-alive connection: each request is recorded, answered with `h`'s reply (after its
/// delay), until EOF, a failed write or a reply that closes.
fn origin_conn(mut s: TcpStream, id: usize, h: &Handler, seen: &Mutex<Vec<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let Some((mut req, used)) = read_request(&mut s, &mut buf) else {
            return;
        };
        buf.drain(..used);
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
pub fn read_request(s: &mut impl Read, buf: &mut Vec<u8>) -> Option<(Seen, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = req.parse(buf) {
            let seen = Seen {
                method: req.method.unwrap().into(),
                target: req.path.unwrap().into(),
                minor: req.version.unwrap(),
                headers: owned_headers(req.headers),
                ..Seen::default()
            };
            return read_request_body(s, buf, seen, n);
        }
        fill(s, buf)?;
    }
}

/// Reads the body `seen`'s head announces (Content-Length or chunked; none otherwise), starting at
/// `head_end`; returns the whole request and the offset after it.
fn read_request_body(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    mut seen: Seen,
    head_end: usize,
) -> Option<(Seen, usize)> {
    let cl = seen
        .header("content-length")
        .map(|v| v.parse::<usize>().unwrap());
    let chunked = seen
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"));
    let mut pos = head_end;
    if let Some(cl) = cl {
        while buf.len() < head_end + cl {
            fill(s, buf)?;
        }
        seen.body = buf[head_end..head_end + cl].to_vec();
        pos = head_end + cl;
    } else if chunked {
        let (body, end) = read_chunked(s, buf, head_end)?;
        seen.body = body;
        pos = end;
    }
    Some((seen, pos))
}
