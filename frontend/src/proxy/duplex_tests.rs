//! The full-duplex phase ([`super::duplex`]) against both seams in memory: a client whose session
//! splits ([`DuplexClient`], as an HTTP/2 stream does) and a duplex scripted upstream
//! ([`Script::duplex`]). Both sides record into one [`Trace`] and wait on the other's events, so a test
//! sees the two directions in one order and a half-duplex orchestrator deadlocks on the ping-pong
//! (each test runs under a deadline, so a deadlock fails it).
//!
//! End to end, once the HTTP/2 upstream session exists, the real binary needs (h2 client → edge → h2
//! origin, both drivers): a gRPC bidirectional ping-pong (message k answered before k+1 is sent); a
//! client-streaming call longer than `request_timeout` and than `server.timeouts.request` whose
//! messages keep flowing (no 408, no 504); a client silent mid-stream for `request` (stream reset); the
//! origin answering with trailers before the client ends (client stream reset NO_ERROR, origin stream
//! cancelled); a client RST_STREAM mid-stream (origin sees RST_STREAM CANCEL); the origin resetting
//! mid-stream (client gets RST_STREAM, `edge_responses_truncated_total`); and an HTTP/1.1 client on an
//! h2 origin staying half duplex.

use std::{collections::VecDeque, rc::Rc, time::Duration};

use edge_core::{
    buf::RecvBuf,
    http::{
        framing::Body,
        head::{parse_request, Field, Fields, RequestHead, ResponseHead},
        view::{RequestView, ResponseView, Version},
    },
    io::body::{BodySource, RequestSink, SendBodyError, SinkError},
};
use edge_upstream::UpstreamErrorKind;
use monoio::io::AsyncWriteRentExt;

use super::{
    exchange, failed,
    mem_upstream::{MemTunnel, MemUpstream, Reply, Script, Trace},
    start,
    tests::{admitted, on_epoll, worker, MemSession, Rest},
    Outcome,
};
use crate::{
    respond::{Failure, SendFailure},
    server::h1::{body::ResponseBody, encode::OutFraming},
    server::{BodyFailure, RelayError, Respond, Session, Started},
};

/// What the client does next with its request body.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Sends these body bytes (one write upstream).
    Send(&'static str),
    /// Waits until this [`Trace`] event happened (e.g. `client got r1;`).
    Await(&'static str),
    /// Takes this long before its next step (a slow stream).
    Pause(Duration),
    /// Resets its stream.
    Reset,
}

/// The request body half: follows its steps, then the body is complete.
struct ClientBody {
    steps: VecDeque<Step>,
    trace: Rc<Trace>,
    done: bool,
}

impl BodySource for ClientBody {
    type Error = BodyFailure;

    async fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        _: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        while let Some(step) = self.steps.pop_front() {
            match step {
                Step::Send(text) => {
                    self.trace.push(format!("client sent {text}"));
                    let (r, _) = sink.write_all(text.as_bytes().to_vec()).await;
                    r.map_err(|e| SendBodyError::Sink(SinkError::Io(e)))?;
                }
                Step::Await(event) => self.trace.until(event).await,
                Step::Pause(d) => monoio::time::sleep(d).await,
                Step::Reset => {
                    self.trace.push("client reset".into());
                    return Err(SendBodyError::Source(BodyFailure::ClientGone));
                }
            }
        }
        self.done = true;
        Ok(())
    }
}

/// The response half: the head's status and each body write (de-chunked) as [`Trace`] events.
struct ClientReply {
    trace: Rc<Trace>,
    relay: ResponseBody,
}

impl Respond for ClientReply {
    async fn send_interim(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        self.trace.push(format!("client interim {}", resp.status()));
        Ok(())
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        Ok(())
    }

    async fn send_switching(&mut self, _: &ResponseView<'_>) -> Result<(), SendFailure> {
        Err(SendFailure::Closed)
    }

    async fn send_head(
        &mut self,
        head: &ResponseHead,
        _: &[Field],
        upstream: Body,
        _: bool,
        rest: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        rest.consume(head.len);
        self.trace.push(format!("client head {}", head.status));
        // DATA frames delimit the body, as for an HTTP/2 client: a chunked body is de-chunked.
        self.relay = ResponseBody::new(upstream, OutFraming::Close);
        let complete = self.send_body(rest).await?;
        Ok(Started {
            complete,
            close: false,
        })
    }

    fn passthrough(&self) -> bool {
        false
    }

    async fn send_body(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        let mut out = Vec::new();
        let done = self
            .relay
            .take_available(rest, &mut out)
            .map_err(|_| RelayError::BadBody)?;
        if !out.is_empty() {
            let text = String::from_utf8_lossy(&out).into_owned();
            self.trace.push(format!("client got {text}"));
        }
        if done {
            self.trace.push("client end".into());
        }
        Ok(done)
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        self.trace.push("client end".into());
        Ok(())
    }
}

/// A client whose session splits into [`ClientBody`] and [`ClientReply`] (as an HTTP/2 stream).
struct DuplexClient {
    buf: Vec<u8>,
    head: RequestHead,
    fields: Fields,
    body: ClientBody,
    reply: ClientReply,
}

/// A streaming request of three 3-byte messages (`m1;m2;m3;`).
const STREAMING: &str = "POST /g HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n";

impl DuplexClient {
    fn new(steps: &[Step], trace: &Rc<Trace>) -> Self {
        let buf = STREAMING.as_bytes().to_vec();
        let mut fields = Fields::new();
        let head = parse_request(&buf, 100, &mut fields).unwrap().unwrap();
        DuplexClient {
            buf,
            head,
            fields,
            body: ClientBody {
                steps: steps.iter().copied().collect(),
                trace: trace.clone(),
                done: false,
            },
            reply: ClientReply {
                trace: trace.clone(),
                relay: ResponseBody::new(Body::None, OutFraming::None),
            },
        }
    }
}

impl BodySource for DuplexClient {
    type Error = BodyFailure;

    async fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        self.body.forward_rest(sink, write_timeout).await
    }
}

impl Session for DuplexClient {
    type Body = ClientBody;
    type Reply = ClientReply;

    fn request(&self) -> RequestView<'_> {
        RequestView {
            buf: &self.buf,
            head: &self.head,
            fields: &self.fields,
            version: Version::H2,
        }
    }

    fn body_prefix(&mut self, _: &mut Vec<u8>) -> Result<(), Failure> {
        Ok(())
    }

    fn body_done(&self) -> bool {
        self.body.done
    }

    fn expects_continue(&self) -> bool {
        false
    }

    fn take_fields(&mut self) -> Fields {
        Fields::new()
    }

    fn put_fields(&mut self, _: Fields) {}

    fn body_bytes(&self) -> (u64, u64) {
        (0, 0)
    }

    fn split(&mut self, _: Duration) -> Option<(&mut ClientBody, &mut ClientReply)> {
        Some((&mut self.body, &mut self.reply))
    }
}

impl Respond for DuplexClient {
    async fn send_interim(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        self.reply.send_interim(resp).await
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        self.reply.send_continue().await
    }

    async fn send_switching(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        self.reply.send_switching(resp).await
    }

    async fn send_head(
        &mut self,
        head: &ResponseHead,
        fields: &[Field],
        upstream: Body,
        close: bool,
        rest: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        self.reply
            .send_head(head, fields, upstream, close, rest)
            .await
    }

    fn passthrough(&self) -> bool {
        false
    }

    async fn send_body(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        self.reply.send_body(rest).await
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        self.reply.end_body().await
    }
}

/// Runs one exchange of `s` against `up` (`request_timeout` as given) under a 5 s deadline: a
/// deadlock (a half-duplex orchestrator on a ping-pong) fails the test instead of hanging it.
fn run_on<S: Session>(
    s: &mut S,
    up: &MemUpstream,
    request_timeout: Option<Duration>,
) -> Outcome<MemTunnel> {
    let w = worker("127.0.0.1:1".parse().unwrap());
    let live = w.live();
    // The request view of a `MemSession` is what `admitted` needs; rebuild one from `s`'s head.
    let view = s.request();
    let text = String::from_utf8_lossy(view.buf).into_owned();
    let probe = MemSession::new(&text, "", Rest::Sent);
    let req = admitted(&live, &probe, false, request_timeout);
    let run = async {
        let (out, wait_continue, _) = match start(s, &req) {
            Ok(started) => started,
            Err(f) => return failed(f, false),
        };
        let mut fields = s.take_fields();
        let o = exchange(&w, s, &req, up, out, &mut fields, wait_continue).await;
        s.put_fields(fields);
        o
    };
    let bounded = async { monoio::time::timeout(Duration::from_secs(5), run).await };
    on_epoll(bounded).expect("the exchange deadlocked (not full duplex?)")
}

const HEAD: Reply = Reply::Bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
const R1: Reply = Reply::Bytes("3\r\nr1;\r\n");
const R2: Reply = Reply::Bytes("3\r\nr2;\r\n");
const R3: Reply = Reply::Bytes("3\r\nr3;\r\n");
const LAST: Reply = Reply::Bytes("0\r\n\r\n");

/// The upstream's events that start with `prefix`.
fn starting(events: &[String], prefix: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.starts_with(prefix))
        .cloned()
        .collect()
}

#[test]
fn ping_pong_each_answer_arrives_before_the_next_message_is_sent() {
    let trace = Rc::new(Trace::default());
    // The upstream answers message k only once it got it; the client sends k+1 only once it got
    // answer k: only both directions going on together gets through.
    let replies = [
        Reply::AfterBody("m1;"),
        HEAD,
        R1,
        Reply::AfterBody("m2;"),
        R2,
        Reply::AfterBody("m3;"),
        R3,
        LAST,
    ];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    let steps = [
        Step::Send("m1;"),
        Step::Await("client got r1;"),
        Step::Send("m2;"),
        Step::Await("client got r2;"),
        Step::Send("m3;"),
    ];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(
        matches!(
            out,
            Outcome::Done {
                status: 200,
                unread_body: false,
                ..
            }
        ),
        "{:?}",
        trace.events()
    );
    assert_eq!(
        trace.events(),
        [
            "client sent m1;",
            "upstream got m1;",
            "client head 200",
            "client got r1;",
            "client sent m2;",
            "upstream got m2;",
            "client got r2;",
            "client sent m3;",
            "upstream got m3;",
            "client got r3;",
            "client end",
        ]
    );
    let events = up.events();
    assert_eq!(starting(&events, "sink taken").len(), 1);
    // Both sides ended: the session ends as the response says.
    assert_eq!(
        starting(&events, "finish"),
        ["finish Reuse { keep_alive_secs: None }"]
    );
}

#[test]
fn the_client_ending_first_leaves_the_response_streaming_to_its_end() {
    let trace = Rc::new(Trace::default());
    let replies = [HEAD, Reply::AfterBody("m3;"), R1, R2, LAST];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    let steps = [
        Step::Await("client head 200"),
        Step::Send("m1;"),
        Step::Send("m2;"),
        Step::Send("m3;"),
    ];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(matches!(
        out,
        Outcome::Done {
            status: 200,
            unread_body: false,
            ..
        }
    ));
    let events = trace.events();
    let at = |e: &str| events.iter().position(|x| x == e).unwrap();
    // The head reached the client before its body was sent, and the body ended before the answer.
    assert!(at("client head 200") < at("client sent m1;"));
    assert!(at("upstream got m3;") < at("client got r1;"));
    assert_eq!(at("client end"), events.len() - 1);
    assert_eq!(
        starting(&up.events(), "finish"),
        ["finish Reuse { keep_alive_secs: None }"]
    );
}

#[test]
fn the_upstream_ending_first_stops_the_body_and_cancels_the_upstream_stream() {
    let trace = Rc::new(Trace::default());
    let replies = [Reply::AfterBody("m1;"), HEAD, R1, LAST];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    // The client would send more once the answer ended: it must not reach the upstream.
    let steps = [
        Step::Send("m1;"),
        Step::Await("client end"),
        Step::Send("m2;"),
    ];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(matches!(
        out,
        Outcome::Done {
            status: 200,
            unread_body: true,
            ..
        }
    ));
    assert!(!trace.events().iter().any(|e| e.contains("m2;")));
    assert_eq!(starting(&up.events(), "finish"), ["finish Close"]);
}

#[test]
fn a_client_reset_mid_stream_cancels_the_upstream() {
    let trace = Rc::new(Trace::default());
    let replies = [HEAD, Reply::AfterBody("m1;"), R1, Reply::Silent];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    let steps = [
        Step::Send("m1;"),
        Step::Await("client got r1;"),
        Step::Reset,
    ];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(matches!(
        out,
        Outcome::ClientGone {
            status: Some(200),
            closed: true
        }
    ));
    assert_eq!(starting(&up.events(), "finish"), ["finish Close"]);
}

#[test]
fn an_upstream_failure_mid_stream_truncates_the_response_while_the_client_still_sends() {
    let trace = Rc::new(Trace::default());
    let replies = [HEAD, Reply::AfterBody("m1;"), R1, Reply::Reset];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    // The client keeps its stream open (it waits for an answer that never comes).
    let steps = [Step::Send("m1;"), Step::Await("client got r2;")];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(matches!(out, Outcome::Truncated { status: 200 }));
    assert_eq!(starting(&up.events(), "finish"), ["finish Close"]);
}

#[test]
fn an_upstream_that_takes_no_body_before_its_head_is_a_502() {
    let trace = Rc::new(Trace::default());
    let script = Script {
        sink_fails: true,
        ..Script::duplex(&[Reply::Silent])
    };
    let up = MemUpstream::traced(vec![script], trace.clone());
    let mut s = DuplexClient::new(&[Step::Send("m1;")], &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    let Outcome::Failed {
        failure: Failure::Upstream(e),
        body_done: false,
    } = out
    else {
        panic!("expected an upstream failure")
    };
    assert_eq!(e.kind, UpstreamErrorKind::Reset);
    assert_eq!(starting(&up.events(), "finish"), ["finish Close"]);
}

#[test]
fn request_timeout_runs_from_the_end_of_the_body_not_from_the_head() {
    // The client streams for longer than `request_timeout` before it ends its body; the upstream
    // answers once it has the whole body.
    let trace = Rc::new(Trace::default());
    let replies = [Reply::AfterBody("m3;"), HEAD, R1, LAST];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    let steps = [
        Step::Send("m1;"),
        Step::Pause(Duration::from_millis(400)),
        Step::Send("m2;"),
        Step::Send("m3;"),
    ];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_millis(200)));
    assert!(
        matches!(out, Outcome::Done { status: 200, .. }),
        "{:?}",
        trace.events()
    );

    // Silence after the whole body: 504 `request_timeout`, the body counted as read.
    let trace = Rc::new(Trace::default());
    let replies = [Reply::AfterBody("m3;"), Reply::Silent];
    let up = MemUpstream::traced(vec![Script::duplex(&replies)], trace.clone());
    let steps = [Step::Send("m1;"), Step::Send("m2;"), Step::Send("m3;")];
    let mut s = DuplexClient::new(&steps, &trace);
    let out = run_on(&mut s, &up, Some(Duration::from_millis(200)));
    let Outcome::Failed {
        failure: Failure::Upstream(e),
        body_done: true,
    } = out
    else {
        panic!("expected request_timeout")
    };
    assert_eq!(e.kind, UpstreamErrorKind::RequestTimeout);
    assert_eq!(starting(&up.events(), "finish"), ["finish Close"]);
}

#[test]
fn a_client_that_cannot_split_stays_half_duplex_with_a_duplex_upstream() {
    // An HTTP/1.1 client (no split): an early answer ends the body phase as today.
    let post = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc";
    let mut s = MemSession::new(post, "", Rest::Stalls);
    let early = Script {
        answers_early: true,
        ..Script::duplex(&[Reply::Bytes(
            "HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nbig!",
        )])
    };
    let up = MemUpstream::new(vec![early]);
    let out = run_on(&mut s, &up, Some(Duration::from_secs(5)));
    assert!(matches!(
        out,
        Outcome::Done {
            status: 413,
            keep: false,
            unread_body: true
        }
    ));
    assert_eq!(s.events, ["head 413", "body big!"]);
    assert!(starting(&up.events(), "sink taken").is_empty());
}
