//! [`H1Session`]: one HTTP/1.1 request as a [`Session`]. It owns the HTTP/1.1 wire bytes toward the
//! client: interim heads (never to an HTTP/1.0 client), edge's own `100 Continue`, the response head in
//! the framing it chooses (as received, de-chunked for HTTP/1.0, re-chunked when the upstream delimits
//! by closing), and the body relay, every write under the `send` deadline. The request body is read
//! under the client's `request` deadline.

use std::time::Duration;

use edge_core::{
    buf::{RecvBuf, SendBuf, LARGE_BUF_SIZE},
    clock::{timeout, timeout_at},
    http::{
        framing::{Body, RequestInfo},
        head::{Field, Fields, RequestHead, ResponseHead},
        view::{RequestView, ResponseView, Version},
    },
    io::{
        body::{BodySource, RequestSink, SendBodyError, SinkError},
        Transport,
    },
    pace::RelayPace,
};
use monoio::time::Instant;

use super::{
    encode::{self, OutFraming},
    upload,
};
use crate::server::send::within_send;
use crate::{
    request::ResponseFields,
    respond::{Failure, SendFailure},
    server::h1::body::{RequestBody, ResponseBody},
    server::{BodyFailure, NoDuplex, RelayError, Respond, Session, Started},
};

/// One HTTP/1.1 request on a connection, borrowed from the keep-alive loop for the exchange.
pub struct H1Session<'c, T: Transport> {
    stream: &'c mut T,
    rb: &'c mut RecvBuf,
    fields: &'c mut Fields,
    head: &'c RequestHead,
    info: RequestInfo,
    body: RequestBody,
    relay: ResponseBody,
    out: SendBuf,
    send: Duration,
    deadline: Instant,
    worker: usize,
    /// Whether the request body went upstream by splice ([`upload`]).
    spliced: bool,
    /// The fields edge adds to the forwarded response's heads (phase 6 of the request pipeline).
    added: ResponseFields<'c>,
    /// Whether the connection's last relay ended at the full pace; after this response's relay,
    /// whether it did ([`Respond::relay_start`], [`Respond::relay_ended`]).
    fast_reader: bool,
}

impl<'c, T: Transport> H1Session<'c, T> {
    /// The session of the request whose `head` starts `rb`. `max_body` is `max_body_bytes` (u64::MAX
    /// for none), `send` the `send` deadline, `deadline` the client's `request` deadline.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stream: &'c mut T,
        rb: &'c mut RecvBuf,
        fields: &'c mut Fields,
        head: &'c RequestHead,
        info: RequestInfo,
        max_body: u64,
        send: Duration,
        deadline: Instant,
        worker: usize,
    ) -> Self {
        H1Session {
            stream,
            rb,
            fields,
            head,
            info,
            body: RequestBody::new(info.body, max_body),
            relay: ResponseBody::new(Body::None, OutFraming::None),
            out: SendBuf(Vec::new()),
            send,
            deadline,
            worker,
            spliced: false,
            added: ResponseFields::default(),
            fast_reader: false,
        }
    }

    /// The session of a connection whose last relay ended at the full pace (`fast_reader`): its
    /// response's relay starts at [`RelayPace::carried`].
    pub fn pacing(mut self, fast_reader: bool) -> Self {
        self.fast_reader = fast_reader;
        self
    }

    /// Whether the connection's next relay starts at [`RelayPace::carried`]: this response's relay
    /// ended at the full pace (or, with no relay, the last one did).
    pub fn fast_reader(&self) -> bool {
        self.fast_reader
    }

    /// The session with the fields edge adds to the forwarded response's heads, as admission decided
    /// them ([`crate::request::Admitted::response`]).
    pub fn adding(mut self, added: ResponseFields<'c>) -> Self {
        self.added = added;
        self
    }

    fn client_10(&self) -> bool {
        self.head.minor == 0
    }

    /// The output buffer, taken from the pool at its first use: while the upstream works on the request
    /// the session holds none (the orchestrator's buffer holds the upstream head until the response head
    /// arrives), so a request holds one pooled output buffer at a time.
    fn out(&mut self) -> &mut SendBuf {
        self.ensure_out();
        &mut self.out
    }

    /// See [`H1Session::out`].
    fn ensure_out(&mut self) {
        if self.out.0.capacity() == 0 {
            self.out = SendBuf::take();
        }
    }

    async fn flush(&mut self) -> Result<(), SendFailure> {
        // On epoll most heads fit the socket at once: sent with no io operation and no `send` timer.
        if let Some(sent) = self.out.flush_now(self.stream) {
            return sent.map_err(|_| SendFailure::Closed);
        }
        let fd = self.stream.fd();
        within_send(self.send, fd, self.out.flush(self.stream)).await
    }
}

impl<T: Transport> BodySource for H1Session<'_, T> {
    type Error = BodyFailure;

    /// Client reads under the `request` deadline, sink writes under `write_timeout`; chunked framing
    /// and `max_body_bytes` are checked before bytes go on.
    async fn forward_rest<W: RequestSink>(
        &mut self,
        sink: &mut W,
        write_timeout: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        let source = |f| SendBodyError::Source(f);
        // Splice is asked once, the first time the receive buffer runs dry: what it refuses then
        // (framing, transports, a short rest) it refuses for the rest of the body.
        let mut ask_splice = true;
        // Between two plain sockets each chunk is received and sent back to back, while it is in the
        // CPU's cache ([`upload::Direct`]).
        let direct = upload::Direct::between(&*self.stream, sink);
        let mut coop = edge_core::io::coop::Coop::default();
        while !self.body.done() {
            if self.rb.is_empty() {
                let splice = std::mem::take(&mut ask_splice)
                    .then(|| upload::Upload::start(&*self.stream, &self.body, sink))
                    .flatten();
                if let Some(splice) = splice {
                    self.spliced = true;
                    let client = upload::Client {
                        stream: &mut *self.stream,
                        deadline: self.deadline,
                        worker: self.worker,
                    };
                    return splice
                        .run(client, &mut self.body, sink, write_timeout)
                        .await;
                }
                let filled = match &direct {
                    Some(d) => d.fill(self.stream, self.rb, self.deadline).await,
                    None => timeout_at(self.deadline, self.rb.fill_relay(self.stream))
                        .await
                        .map_err(|_| upload::Stop::Deadline)
                        .and_then(|r| r.map_err(|_| upload::Stop::Gone)),
                };
                match filled {
                    Err(upload::Stop::Deadline) => {
                        return Err(source(BodyFailure::Client(Failure::RequestTimeout)))
                    }
                    Ok(0) | Err(upload::Stop::Gone) => {
                        return Err(source(upload::client_gone(self.worker)))
                    }
                    Ok(_) => {}
                }
            }
            let mut n = self
                .body
                .scan(self.rb.data())
                .map_err(|f| source(BodyFailure::Client(f)))?;
            if let Some(d) = &direct {
                let sent = d.send(&self.rb.data()[..n]);
                let sent = sent.map_err(|e| SendBodyError::Sink(SinkError::Io(e)))?;
                self.rb.consume(sent);
                n -= sent;
                coop.moved(sent).await;
                if n == 0 {
                    continue;
                }
            }
            match timeout(write_timeout, self.rb.write_prefix(sink, n)).await {
                Ok(Ok(())) => coop.moved(n).await,
                Ok(Err(e)) => return Err(SendBodyError::Sink(SinkError::Io(e))),
                Err(_) => return Err(SendBodyError::Sink(SinkError::Timeout)),
            }
        }
        Ok(())
    }
}

impl<T: Transport> Session for H1Session<'_, T> {
    type Body = NoDuplex;
    type Reply = NoDuplex;

    fn request(&self) -> RequestView<'_> {
        RequestView {
            buf: self.rb.data(),
            head: self.head,
            fields: self.fields,
            version: match self.client_10() {
                true => Version::Http10,
                false => Version::Http11,
            },
        }
    }

    fn body_prefix(&mut self, out: &mut Vec<u8>) -> Result<(), Failure> {
        self.rb.consume(self.head.len);
        self.body.take_available(self.rb, out)
    }

    fn body_done(&self) -> bool {
        self.body.done()
    }

    fn expects_continue(&self) -> bool {
        self.info.expect_continue && !self.client_10() && !self.body.done()
    }

    fn take_fields(&mut self) -> Fields {
        std::mem::take(self.fields)
    }

    fn put_fields(&mut self, fields: Fields) {
        *self.fields = fields;
    }

    fn body_bytes(&self) -> (u64, u64) {
        (self.body.payload(), self.relay.payload())
    }

    fn body_spliced(&self) -> bool {
        self.spliced
    }
}

impl<T: Transport> Respond for H1Session<'_, T> {
    async fn send_interim(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        // A server must not send a 1xx to an HTTP/1.0 client (RFC 9110 §15.2).
        if self.client_10() {
            return Ok(());
        }
        let added = self.added;
        encode::interim_head(&mut self.out().0, resp.buf, resp.head, resp.fields, &added);
        self.flush().await
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        self.out
            .0
            .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        self.flush().await
    }

    async fn send_switching(&mut self, resp: &ResponseView<'_>) -> Result<(), SendFailure> {
        let added = self.added;
        encode::switching_head(&mut self.out().0, resp.buf, resp.head, resp.fields, &added);
        self.flush().await
    }

    async fn send_head(
        &mut self,
        head: &ResponseHead,
        fields: &[Field],
        upstream: Body,
        close: bool,
        rest: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        let client_10 = self.client_10();
        let framing = match (upstream, client_10) {
            (Body::None, _) => OutFraming::None,
            (Body::Length(n), _) => OutFraming::Length(n),
            (Body::Chunked | Body::CloseDelimited, false) => OutFraming::Chunked,
            (Body::Chunked | Body::CloseDelimited, true) => OutFraming::Close,
        };
        let close = close || framing == OutFraming::Close;
        self.relay = ResponseBody::new(upstream, framing);
        let passthrough = self.relay.passthrough();
        let added = self.added;
        let out = self.out();
        out.0.clear();
        encode::response_head(
            &mut out.0,
            rest.data(),
            head,
            fields,
            &added,
            framing,
            close,
            client_10 && !close,
        );
        rest.consume(head.len);
        // Body bytes that came with the head (the head is read into a 64 KiB buffer, so a 16 KiB response
        // usually arrives whole in one read) go out in the head's write, in a pooled large buffer when
        // they do not fit the small one: one send per response. When even that would not hold them,
        // pass-through bytes are written from the receive buffer instead of copied (a second send).
        // Either way they are scanned before the head goes, so malformed framing there is still a 502.
        let inline = !passthrough || out.0.len() + rest.len() <= LARGE_BUF_SIZE;
        if inline {
            out.reserve_pooled(rest.len());
        }
        let first = match inline {
            true => self
                .relay
                .take_available(rest, &mut self.out.0)
                .map(|c| (c, 0)),
            false => self.relay.scan(rest.data()).map(|n| (self.relay.done(), n)),
        };
        let (complete, direct) = first.map_err(|_| RelayError::BadBody)?;
        if passthrough {
            // The head's receive buffer goes back to the pool while the head is written, when the
            // bytes it held went into it: a client that does not read yet holds one buffer, not two.
            rest.release();
        }
        self.flush().await.map_err(RelayError::Client)?;
        if direct > 0 {
            let fd = self.stream.fd();
            within_send(self.send, fd, rest.write_prefix(self.stream, direct))
                .await
                .map_err(RelayError::Client)?;
        }
        if passthrough && !complete {
            // The body goes out from the relay's own buffer: the output buffer goes back to the pool
            // for the rest of the relay instead of being held idle, and so does the request's receive
            // buffer once the request is in (unless it holds a pipelined request's bytes).
            self.out = SendBuf(Vec::new());
            if self.body.done() {
                self.rb.release();
            }
        }
        Ok(Started { complete, close })
    }

    fn client_socket(&self) -> Option<std::os::fd::RawFd> {
        Some(self.stream.fd())
    }

    fn passthrough(&self) -> bool {
        self.relay.passthrough()
    }

    /// The client closed (or reset) its connection: seen as the socket turning readable with EOF or
    /// an error behind it. Bytes instead (a pipelined request, or TLS records such as close_notify)
    /// cannot be told from a close without reading them: then this never resolves.
    async fn client_gone(&mut self) {
        if !self.rb.is_empty() {
            return std::future::pending().await;
        }
        loop {
            if self.stream.readable(false).await.is_err() {
                return;
            }
            match self.stream.raw_socket().map(edge_core::io::peek) {
                Some(edge_core::io::Peek::Closed) => return,
                Some(edge_core::io::Peek::Empty) => continue,
                _ => return std::future::pending().await,
            }
        }
    }

    async fn client_room(&mut self) -> Result<(), SendFailure> {
        let fd = self.stream.fd();
        within_send(self.send, fd, self.stream.writable(false)).await
    }

    fn relay_start(&self) -> Option<RelayPace> {
        self.fast_reader.then(RelayPace::carried)
    }

    fn relay_ended(&mut self, pace: RelayPace) {
        self.fast_reader = pace.is_full();
    }

    fn splice_sink(&self) -> Option<(std::os::fd::RawFd, u64)> {
        let left = self.relay.length_left()?;
        match self.out.0.is_empty() {
            true => Some((self.stream.raw_socket()?, left)),
            false => None,
        }
    }

    fn spliced(&mut self, n: u64) -> bool {
        self.relay.skip(n)
    }

    async fn send_body(&mut self, rest: &mut RecvBuf) -> Result<bool, RelayError> {
        if self.relay.passthrough() {
            let n = self
                .relay
                .scan(rest.data())
                .map_err(|_| RelayError::BadBody)?;
            let fd = self.stream.fd();
            within_send(self.send, fd, rest.write_prefix(self.stream, n))
                .await
                .map_err(RelayError::Client)?;
        } else {
            self.ensure_out();
            self.relay
                .take_available(rest, &mut self.out.0)
                .map_err(|_| RelayError::BadBody)?;
            self.flush().await.map_err(RelayError::Client)?;
        }
        Ok(self.relay.done())
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        self.ensure_out();
        self.relay.finish(&mut self.out.0);
        match self.out.0.is_empty() {
            true => Ok(()),
            false => self.flush().await,
        }
    }
}
