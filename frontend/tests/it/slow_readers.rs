//! Slow readers (DESIGN.md "Memory under slow readers and large bodies", "Inbound deadlines"): many
//! clients with small receive buffers read a large response slowly but steadily, each pause far shorter
//! than `send` and the whole transfer far longer. Every body arrives whole and byte-exact: `send`
//! counts time without progress, not the time one relay chunk takes to reach a slow client.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use crate::harness::{Cfg, Edge, Origin, Reply};

/// Concurrent clients.
const CLIENTS: usize = 64;
/// Response body, bytes: several relay chunks (256 KiB) beyond what the socket buffers hold.
const BODY: usize = 2 << 20;
/// Each client's receive buffer and most bytes per read.
const STEP: usize = 16 * 1024;
/// Between two reads: a pace of 160 KiB/s, so one relay chunk takes 1.6 s to reach the client.
const PAUSE: Duration = Duration::from_millis(100);
/// The `send` deadline: ten pauses, and well under the time one relay chunk takes at that pace.
const SEND: &str = "1s";
/// The segment size the clients announce: an Ethernet path's, not loopback's 64 KiB, so edge's socket
/// buffers for them are sized as for real clients (the kernel sizes a socket's first send buffer by
/// its segment size) and a relay chunk cannot vanish into them.
const MSS: u32 = 1400;

/// A client socket connected to `addr` with [`STEP`] of receive buffer and [`MSS`].
fn slow_socket(addr: SocketAddr) -> Result<TcpStream, String> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // Set before connecting: the window the client offers stays small from the start, and the
    // segment size is announced in the SYN.
    s.set_recv_buffer_size(STEP).unwrap();
    s.set_tcp_mss(MSS).unwrap();
    s.connect(&addr.into())
        .map_err(|e| format!("connect: {e}"))?;
    Ok(s.into())
}

fn byte_at(i: usize) -> u8 {
    (i % 251) as u8
}

/// Checks `bytes` against the pattern at body offset `*got`, then counts them.
fn check(bytes: &[u8], got: &mut usize) -> Result<(), String> {
    if let Some(k) = (0..bytes.len()).find(|&k| bytes[k] != byte_at(*got + k)) {
        return Err(format!("body byte {} differs", *got + k));
    }
    *got += bytes.len();
    Ok(())
}

/// One slow client: asks for the body, reads its head, then at most [`STEP`] bytes every [`PAUSE`],
/// checking each against the pattern. `Err` says how far it got.
fn slow_read(addr: SocketAddr) -> Result<Duration, String> {
    let mut s = slow_socket(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let t = Instant::now();
    let mut buf = vec![0u8; STEP];
    let mut head = Vec::new();
    let end = loop {
        let n = s.read(&mut buf).map_err(|e| format!("head: {e}"))?;
        if n == 0 {
            return Err("closed before the head".into());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    if !text.starts_with("http/1.1 200") || !text.contains(&format!("content-length: {BODY}\r\n")) {
        return Err(format!("unexpected head: {text:?}"));
    }
    let mut got = 0;
    check(&head[end..], &mut got)?;
    while got < BODY {
        thread::sleep(PAUSE);
        let want = STEP.min(BODY - got);
        match s.read(&mut buf[..want]) {
            Ok(0) => return Err(format!("closed after {got} of {BODY} body bytes")),
            Ok(n) => check(&buf[..n], &mut got)?,
            Err(e) => return Err(format!("read after {got} of {BODY} body bytes: {e}")),
        }
    }
    Ok(t.elapsed())
}

both_drivers!(slow_steady_readers_get_whole_bodies_past_send, |d| {
    let body: Arc<Vec<u8>> = Arc::new((0..BODY).map(byte_at).collect());
    let origin = Origin::start(move |_| Reply::ok(&body));
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("send", SEND));
    let readers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = edge.addr;
            thread::spawn(move || slow_read(addr))
        })
        .collect();
    let results: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    // Each transfer lasted several `send` periods: the deadline was not simply longer than it.
    assert_all_whole(&edge, &results, "slow readers", Duration::from_secs(5));
});

/// Concurrent HTTP/2 clients, one stream each.
const H2_CLIENTS: usize = 16;
/// The HTTP/2 body: four relay chunks.
const H2_BODY: usize = 1 << 20;
/// Between two window updates of an HTTP/2 client: about 107 KiB/s, so the 192 KiB that h2 must send
/// of a 256 KiB chunk before the stream has capacity again take 1.8 s.
const H2_PAUSE: Duration = Duration::from_millis(150);

/// An h2c client (prior knowledge) on `tcp` with these initial stream and connection windows, bytes;
/// its connection task runs on this thread's runtime. Resolves once it may open a stream.
async fn h2c_client(
    tcp: monoio::net::TcpStream,
    stream_window: u32,
    conn_window: u32,
) -> Result<h2::client::SendRequest<bytes::Bytes>, String> {
    let io = edge_core::io::PollIo::new(tcp, &[], Duration::from_secs(30));
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(stream_window)
        .initial_connection_window_size(conn_window)
        .handshake::<_, bytes::Bytes>(io)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    monoio::spawn(async move {
        let _ = conn.await;
    });
    send.ready().await.map_err(|e| e.to_string())
}

/// One slow HTTP/2 client (h2c): a stream window of [`STEP`], given back [`H2_PAUSE`] after each DATA
/// frame's bytes arrive, so edge's stream moves at about [`STEP`] per [`H2_PAUSE`].
async fn slow_h2_read(addr: SocketAddr) -> Result<Duration, String> {
    let tcp = slow_socket(addr)?;
    tcp.set_nonblocking(true).unwrap();
    let tcp = monoio::net::TcpStream::from_std(tcp).map_err(|e| format!("register: {e}"))?;
    let mut send = h2c_client(tcp, STEP as u32, 4 << 20).await?;
    let req = http::Request::get(format!("http://{addr}/big"))
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let resp = resp.await.map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()));
    }
    let mut recv = resp.into_body();
    let mut got = 0;
    while let Some(d) = recv.data().await {
        let d = d.map_err(|e| format!("stream after {got} of {H2_BODY} body bytes: {e}"))?;
        check(&d, &mut got)?;
        monoio::time::sleep(H2_PAUSE).await;
        let _ = recv.flow_control().release_capacity(d.len());
    }
    match got {
        H2_BODY => Ok(t.elapsed()),
        _ => Err(format!("stream ended after {got} of {H2_BODY} body bytes")),
    }
}

both_drivers!(slow_steady_h2_streams_get_whole_bodies_past_send, |d| {
    let body: Arc<Vec<u8>> = Arc::new((0..H2_BODY).map(byte_at).collect());
    let origin = Origin::start(move |_| Reply::ok(&body));
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .timeout("send", SEND),
    );
    let readers: Vec<_> = (0..H2_CLIENTS)
        .map(|_| {
            let addr = edge.addr;
            thread::spawn(move || crate::harness::block_on(slow_h2_read(addr)))
        })
        .collect();
    let results: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_all_whole(
        &edge,
        &results,
        "slow HTTP/2 readers",
        Duration::from_secs(3),
    );
});

/// Every reader got the whole body, the shortest transfer took over `longer_than` (several `send`
/// periods), and edge counted and logged no truncation and no `send` timeout.
fn assert_all_whole<E: std::fmt::Debug>(
    edge: &Edge,
    results: &[Result<Duration, E>],
    who: &str,
    longer_than: Duration,
) {
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} {who} did not get the whole body: {:?}",
        failed.len(),
        results.len(),
        &failed[..failed.len().min(5)]
    );
    let shortest = results.iter().flatten().min().unwrap();
    assert!(*shortest > longer_than, "a transfer took only {shortest:?}");
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
    assert_eq!(
        edge.metric("edge_inbound_timeouts_total", &["phase=\"send\""]),
        0.0
    );
    assert_eq!(edge.count_log("response.truncated"), 0);
}

/// Clients that stop reading right after the response head.
const PAUSED: usize = 8;

/// Asks for the body on a [`slow_socket`] and reads until the end of the response head; returns the
/// socket and the body bytes that came with the head.
fn read_head_then_pause(addr: SocketAddr) -> (TcpStream, Vec<u8>) {
    let mut s = slow_socket(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut buf = vec![0u8; STEP];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head");
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            return (s, head.split_off(i + 4));
        }
    }
}

// A relay whose client stopped reading holds no relay buffer (DESIGN.md "Memory under slow readers
// and large bodies"): it gives its buffer and its budget share back and waits for the socket; the
// bodies still arrive whole once the clients read again.
both_drivers!(paused_readers_hold_no_relay_buffer, |d| {
    let body: Arc<Vec<u8>> = Arc::new((0..BODY).map(byte_at).collect());
    let origin = Origin::start(move |_| Reply::ok(&body));
    let edge = Edge::start(&Cfg::new(d, origin.addr).timeout("send", "30s"));
    let paused: Vec<_> = (0..PAUSED)
        .map(|_| read_head_then_pause(edge.addr))
        .collect();
    // Every relay has started (its head is out). The gauge is published every 250 ms: zero on
    // readings 600 ms apart is zero after the relays started.
    let zero = || {
        edge.wait_metric_where(
            "edge_relay_buffer_bytes",
            &[],
            Duration::from_secs(10),
            |v| v == 0.0,
        )
    };
    assert_eq!(zero(), 0.0, "paused relays still hold buffers");
    thread::sleep(Duration::from_millis(600));
    assert_eq!(zero(), 0.0, "paused relays still hold buffers");
    assert_eq!(edge.metric("edge_requests_in_flight", &[]), PAUSED as f64);
    for (mut s, first) in paused {
        let mut got = 0;
        check(&first, &mut got).unwrap();
        let mut buf = vec![0u8; STEP];
        while got < BODY {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {got} of {BODY} body bytes");
            check(&buf[..n], &mut got).unwrap();
        }
    }
    assert_eq!(edge.metric("edge_responses_truncated_total", &[]), 0.0);
});

/// The body of the streams sharing one HTTP/2 connection: sixteen relay chunks at full pace.
const SHARED_BODY: usize = 4 << 20;

/// Sends `GET /big` on `send` and returns the response's body stream once the head is in.
async fn get_big(
    send: &mut h2::client::SendRequest<bytes::Bytes>,
    addr: SocketAddr,
) -> Result<h2::RecvStream, String> {
    let req = http::Request::get(format!("http://{addr}/big"))
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
    let resp = resp.await.map_err(|e| e.to_string())?;
    match resp.status() {
        http::StatusCode::OK => Ok(resp.into_body()),
        s => Err(format!("status {s}")),
    }
}

/// On one h2c connection: a stream whose client never reads its body (its window stays shut after
/// the first 64 KiB), then a second stream read at full speed. Returns how long the second took and
/// whether the first was still open then.
async fn beside_a_stalled_stream(addr: SocketAddr) -> Result<(Duration, bool), String> {
    let tcp = monoio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut send = h2c_client(tcp, 64 * 1024, 64 << 20).await?;
    let mut stalled = get_big(&mut send, addr).await?;
    // The stalled stream's first bytes are in: its relay runs and holds its turn.
    let first = stalled
        .data()
        .await
        .ok_or("no body on the stalled stream")?;
    first.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut recv = get_big(&mut send, addr).await?;
    let mut got = 0;
    while let Some(d) = recv.data().await {
        let d = d.map_err(|e| format!("stream after {got} of {SHARED_BODY} body bytes: {e}"))?;
        check(&d, &mut got)?;
        let _ = recv.flow_control().release_capacity(d.len());
    }
    if got != SHARED_BODY {
        return Err(format!(
            "stream ended after {got} of {SHARED_BODY} body bytes"
        ));
    }
    let took = t.elapsed();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Open: bytes within its window wait unread, or nothing yet; not reset, not ended.
    let open = match stalled.poll_data(&mut cx) {
        std::task::Poll::Pending | std::task::Poll::Ready(Some(Ok(_))) => true,
        std::task::Poll::Ready(Some(Err(_)) | None) => false,
    };
    Ok((took, open))
}

// The streams of one HTTP/2 connection take turns within the connection's relay share (DESIGN.md
// "Memory under slow readers and large bodies"): a stream whose client stopped reading it gives its
// turn up instead of holding its siblings back until its `send` deadline (no head-of-line blocking
// across streams).
both_drivers!(a_stalled_h2_stream_does_not_hold_back_its_siblings, |d| {
    let body: Arc<Vec<u8>> = Arc::new((0..SHARED_BODY).map(byte_at).collect());
    let origin = Origin::start(move |_| Reply::ok(&body));
    let edge = Edge::start(
        &Cfg::new(d, origin.addr)
            .server("h2c", true)
            .timeout("send", "20s"),
    );
    let addr = edge.addr;
    let (took, open) = crate::harness::block_on(beside_a_stalled_stream(addr)).unwrap();
    assert!(
        took < Duration::from_secs(10),
        "the stream beside a stalled one took {took:?}: held back until the `send` deadline"
    );
    assert!(open, "the stalled stream was ended early");
});
