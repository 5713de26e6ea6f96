//! The orchestrator's failure paths, against an in-memory downstream session ([`MemSession`]: the request
//! is a byte string, every send is recorded as an event) and a scripted origin on a real loopback socket
//! (a real socket works, so none is mocked). Each test checks what the client side was sent and how the
//! exchange ended.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    rc::Rc,
    sync::{mpsc, Arc},
    thread,
    time::Duration,
};

use edge_core::{
    buf::RecvBuf,
    config::Config,
    http::{
        framing::{request_info, Body},
        head::{parse_request, Field, Fields, RequestHead, ResponseHead},
        view::{RequestView, ResponseView, Version},
    },
    io::body::{BodySource, RequestSink, SendBodyError, SinkError},
    pace::RelayPace,
    runtime::{block_on, IoDriver, Shared},
};
use edge_upstream::UpstreamErrorKind;
use monoio::io::AsyncWriteRentExt;

use super::{run, Admitted, Outcome};
use crate::{context::Live, log::RequestLog};
use crate::{
    context::Worker,
    respond::{Failure, SendFailure},
    server::h1::body::{RequestBody, ResponseBody},
    server::h1::encode::OutFraming,
    server::{BodyFailure, RelayError, Respond, Session, Started},
};

/// How the in-memory client's request body behaves after the bytes that came with the head.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Rest {
    /// The rest of the body is sent at once.
    Sent,
    /// The client never sends the rest (a slow upload).
    Stalls,
    /// The client closes mid-body.
    Closes,
}

/// A downstream session in memory.
pub(super) struct MemSession {
    pub(super) buf: Vec<u8>,
    pub(super) head: RequestHead,
    pub(super) fields: Fields,
    prefix: usize,
    body: RequestBody,
    rest: Vec<u8>,
    rest_mode: Rest,
    relay: ResponseBody,
    /// What the client was sent, one line per send.
    pub(super) events: Vec<String>,
    /// Every send fails as if the client had closed.
    pub(super) client_gone: bool,
    /// The client sent `Expect: 100-continue` and waits for the go-ahead.
    pub(super) expects_continue: bool,
    /// Where the relay starts ([`Respond::relay_start`]), and where it ended.
    pub(super) pace: (Option<RelayPace>, Option<RelayPace>),
}

impl MemSession {
    /// `request` is a whole head plus the body bytes that come with it; `rest` the body sent later.
    pub(super) fn new(request: &str, rest: &str, rest_mode: Rest) -> Self {
        let buf = request.as_bytes().to_vec();
        let mut fields = Fields::new();
        let head = parse_request(&buf, 100, &mut fields).unwrap().unwrap();
        let info = request_info(&buf, &head, &fields).unwrap();
        MemSession {
            prefix: head.len,
            body: RequestBody::new(info.body, u64::MAX),
            rest: rest.as_bytes().to_vec(),
            rest_mode,
            relay: ResponseBody::new(Body::None, OutFraming::None),
            events: Vec::new(),
            client_gone: false,
            expects_continue: false,
            pace: (None, None),
            buf,
            head,
            fields,
        }
    }

    fn sent(&mut self, event: String) -> Result<(), SendFailure> {
        match self.client_gone {
            true => Err(SendFailure::Closed),
            false => {
                self.events.push(event);
                Ok(())
            }
        }
    }
}

impl BodySource for MemSession {
    type Error = BodyFailure;

    async fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        _write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        match self.rest_mode {
            Rest::Sent => {}
            Rest::Stalls => std::future::pending::<()>().await,
            Rest::Closes => return Err(SendBodyError::Source(BodyFailure::ClientGone)),
        }
        let rest = std::mem::take(&mut self.rest);
        self.body.scan(&rest).unwrap();
        let (r, _) = sink.write_all(rest).await;
        r.map(drop)
            .map_err(|e| SendBodyError::Sink(SinkError::Io(e)))
    }
}

impl Session for MemSession {
    type Body = crate::server::NoDuplex;
    type Reply = crate::server::NoDuplex;

    fn request(&self) -> RequestView<'_> {
        RequestView {
            buf: &self.buf,
            head: &self.head,
            fields: &self.fields,
            version: Version::Http11,
        }
    }

    fn body_prefix(&mut self, out: &mut Vec<u8>) -> Result<(), Failure> {
        let n = self.body.scan(&self.buf[self.prefix..])?;
        out.extend_from_slice(&self.buf[self.prefix..self.prefix + n]);
        Ok(())
    }

    fn body_done(&self) -> bool {
        self.body.done()
    }

    fn expects_continue(&self) -> bool {
        self.expects_continue && !self.body.done()
    }

    fn take_fields(&mut self) -> Fields {
        Fields::new()
    }

    fn put_fields(&mut self, _fields: Fields) {}

    fn body_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}

impl Respond for MemSession {
    async fn send_interim(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        self.sent(format!("interim {}", resp.status()))
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        self.sent("continue".into())
    }

    async fn send_switching(&mut self, _resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        self.sent("switching".into())
    }

    async fn send_head(
        &mut self,
        head: &ResponseHead,
        _fields: &[Field],
        upstream: Body,
        close: bool,
        rest: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        rest.consume(head.len);
        self.sent(format!("head {}", head.status))
            .map_err(RelayError::Client)?;
        self.relay = ResponseBody::new(upstream, OutFraming::Chunked);
        let complete = self.send_body(rest).await?;
        Ok(Started { complete, close })
    }

    fn passthrough(&self) -> bool {
        true
    }

    fn relay_start(&self) -> Option<RelayPace> {
        self.pace.0
    }

    fn relay_ended(&mut self, pace: RelayPace) {
        self.pace.1 = Some(pace);
    }

    async fn send_body(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        let mut out = Vec::new();
        let done = self
            .relay
            .take_available(rest, &mut out)
            .map_err(|_| RelayError::BadBody)?;
        if !out.is_empty() {
            let text = String::from_utf8_lossy(&out).into_owned();
            self.sent(format!("body {text}"))
                .map_err(RelayError::Client)?;
        }
        Ok(done)
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        self.sent("end".into())
    }
}

/// What the origin's connection `i` does: it gets the socket, its index and the channel for heads read.
type Step = fn(TcpStream, usize, &mpsc::Sender<(usize, String)>);

/// A scripted origin: connection `i` is handed to `script[i]`; the channel reports every request head it
/// read, as (connection index, head text).
fn origin(script: Vec<Step>) -> (SocketAddr, mpsc::Receiver<(usize, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for (i, step) in script.into_iter().enumerate() {
            let Ok((s, _)) = listener.accept() else {
                return;
            };
            let tx = tx.clone();
            thread::spawn(move || step(s, i, &tx));
        }
    });
    (addr, rx)
}

/// Reads one request head (up to CRLF CRLF) and reports it.
fn read_head(s: &mut TcpStream, i: usize, tx: &mpsc::Sender<(usize, String)>) -> bool {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return false,
        }
    }
    let _ = tx.send((i, String::from_utf8_lossy(&head).into_owned()));
    true
}

/// One worker on a configuration whose only upstream is `origin`.
pub(super) fn worker(origin: SocketAddr) -> Rc<Worker> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n\
         [[upstreams]]\nname = \"o\"\nendpoints = [\"{origin}\"]\nmax_inactive = \"2s\"\nmax_inactive_cap = \"2s\"\n\
         [[routes]]\npath_prefix = \"/\"\nupstream = \"o\"\n"
    );
    let cfg = Config::parse(&text, "test")
        .unwrap()
        .resolve("test")
        .unwrap();
    Rc::new(Worker::new(
        0,
        Arc::new(Shared::new(1, 16, IoDriver::Epoll, cfg)),
    ))
}

/// The admitted request of `s` on `live`'s first route and upstream.
pub(super) fn admitted<'a>(
    live: &'a Live,
    s: &MemSession,
    idempotent: bool,
    request_timeout: Option<Duration>,
) -> Admitted<'a> {
    Admitted {
        info: request_info(&s.buf, &s.head, &s.fields).unwrap(),
        is_head: false,
        idempotent,
        cfg: &live.cfg,
        route: live.cfg.routes.get(0).unwrap().1,
        upstream: &live.upstreams[0],
        upstream_index: 0,
        hash_key: None,
        request_timeout,
        client_deadline: monoio::time::Instant::now() + Duration::from_secs(30),
        close: false,
        peer: "127.0.0.1:1".parse().unwrap(),
        local: None,
        https: false,
        log: RequestLog::new(b"GET /", b"test-1"),
        rewrite: Default::default(),
        response: Default::default(),
        // Leaked: a test's few requests each keep theirs to the end of the process.
        facts: Box::leak(Box::default()),
    }
}

/// Runs one exchange of `s` on `w`.
async fn exchange(w: &Worker, s: &mut MemSession, idempotent: bool) -> Outcome {
    let live = w.live();
    let req = admitted(&live, s, idempotent, Some(Duration::from_secs(5)));
    run(w, s, req).await
}

pub(super) fn on_epoll<F: std::future::Future>(f: F) -> F::Output {
    block_on(IoDriver::Epoll, f).unwrap()
}

pub(super) const GET: &str = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn upstream_closing_before_the_head_is_502_closed_early_and_nothing_reaches_the_client() {
    let (addr, heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
    }]);
    let w = worker(addr);
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let out = on_epoll(exchange(&w, &mut s, true));
    let Outcome::Failed { failure, body_done } = out else {
        panic!("expected Failed")
    };
    assert_eq!(failure.status(), 502);
    assert!(matches!(failure, Failure::Upstream(e) if e.kind == UpstreamErrorKind::ClosedEarly));
    assert!(
        body_done,
        "a bodyless request was read whole: the connection may be kept"
    );
    assert!(
        s.events.is_empty(),
        "nothing was sent to the client: {:?}",
        s.events
    );
    assert!(heads.recv().unwrap().1.starts_with("GET /a HTTP/1.1\r\n"));
}

#[test]
fn upstream_closing_after_the_head_truncates_the_response() {
    let (addr, _heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    }]);
    let w = worker(addr);
    let mut s = MemSession::new(GET, "", Rest::Sent);
    let out = on_epoll(exchange(&w, &mut s, true));
    assert!(matches!(out, Outcome::Truncated { status: 200 }));
    assert_eq!(s.events, ["head 200", "body abc"]);
}

#[test]
fn client_gone_when_the_head_is_sent_ends_the_exchange_without_a_response() {
    let (addr, _heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        let _ = s.read(&mut [0u8; 1]);
    }]);
    let w = worker(addr);
    let mut s = MemSession::new(GET, "", Rest::Sent);
    s.client_gone = true;
    let out = on_epoll(exchange(&w, &mut s, true));
    // Edge had its answer: the access line carries 200, and the close counts in phase "response".
    assert!(matches!(
        out,
        Outcome::ClientGone {
            status: Some(200),
            closed: true
        }
    ));
}

#[test]
fn client_closing_mid_body_ends_the_exchange_and_the_upstream_saw_only_the_prefix() {
    let (addr, heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
        let _ = s.read(&mut [0u8; 64]);
    }]);
    let w = worker(addr);
    let post = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";
    let mut s = MemSession::new(post, "defghij", Rest::Closes);
    let out = on_epoll(exchange(&w, &mut s, false));
    // The client left before edge had an answer: logged and counted as 499.
    assert!(matches!(
        out,
        Outcome::ClientGone {
            status: None,
            closed: true
        }
    ));
    assert!(heads.recv().unwrap().1.starts_with("POST /up HTTP/1.1\r\n"));
    assert!(s.events.is_empty());
}

#[test]
fn an_early_answer_is_relayed_and_the_client_connection_closes_with_its_body_unread() {
    let (addr, _heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
        let _ = s.write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nbig!");
        let _ = s.read(&mut [0u8; 64]);
        let _ = s.read(&mut [0u8; 64]);
    }]);
    let w = worker(addr);
    let post = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc";
    let mut s = MemSession::new(post, "", Rest::Stalls);
    let out = on_epoll(exchange(&w, &mut s, false));
    let Outcome::Done {
        status,
        keep,
        unread_body,
    } = out
    else {
        panic!("expected Done")
    };
    assert_eq!((status, keep, unread_body), (413, false, true));
    assert_eq!(s.events, ["head 413", "body big!"]);
}

#[test]
fn a_reused_connection_closed_by_the_upstream_is_retried_once_on_a_fresh_one() {
    let (addr, heads) = origin(vec![
        // Answers one request keep-alive, then reads the next and closes without a byte.
        |mut s, i, tx| {
            read_head(&mut s, i, tx);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            read_head(&mut s, i, tx);
        },
        |mut s, i, tx| {
            read_head(&mut s, i, tx);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh");
            let _ = s.read(&mut [0u8; 1]);
        },
    ]);
    let w = worker(addr);
    on_epoll(async {
        let mut first = MemSession::new(GET, "", Rest::Sent);
        assert!(matches!(
            exchange(&w, &mut first, true).await,
            Outcome::Done { status: 200, .. }
        ));
        let mut second = MemSession::new(GET, "", Rest::Sent);
        let out = exchange(&w, &mut second, true).await;
        assert!(matches!(
            out,
            Outcome::Done {
                status: 200,
                keep: true,
                ..
            }
        ));
        assert_eq!(second.events, ["head 200", "body fresh"]);
    });
    let seen: Vec<usize> = heads.try_iter().map(|(i, _)| i).collect();
    assert_eq!(
        seen,
        [0, 0, 1],
        "second request on the pooled connection, then again on a fresh one"
    );
}

#[test]
fn a_non_idempotent_request_is_not_retried_after_a_reused_connection_fails() {
    let (addr, heads) = origin(vec![|mut s, i, tx| {
        read_head(&mut s, i, tx);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        read_head(&mut s, i, tx);
    }]);
    let w = worker(addr);
    on_epoll(async {
        let mut first = MemSession::new(GET, "", Rest::Sent);
        assert!(matches!(
            exchange(&w, &mut first, true).await,
            Outcome::Done { .. }
        ));
        let post = "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
        let mut second = MemSession::new(post, "", Rest::Sent);
        let out = exchange(&w, &mut second, false).await;
        assert!(matches!(out, Outcome::Failed { failure, .. } if failure.status() == 502));
    });
    assert_eq!(
        heads.try_iter().count(),
        2,
        "sent once on the pooled connection, never again"
    );
}
