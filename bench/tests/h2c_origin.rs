//! The h2c origin (`edge-bench origin --h2c`) driven by the h2 test client: its paths, its gRPC
//! answers and its fault knobs, each checked on what the client sees and what the origin recorded.

use std::time::{Duration, Instant};

use edge_bench::peers::grpc;
use edge_bench::peers::h2_client::{
    block_on, connect, echo_session, get, grpc_call, open, ping_acked, read_response, request,
    within, H2Request,
};
use edge_bench::peers::origin::h2c::{fnv1a32, H2cOptions, TRAILERS_BODY};
use edge_bench::peers::origin::{spawn_origin, OriginHandle, OriginOptions, DEFAULT_BODY};

const LIMIT: Duration = Duration::from_secs(5);

fn h2c_origin(h2c: H2cOptions, delay: Option<Duration>) -> OriginHandle {
    spawn_origin(OriginOptions {
        h2c: Some(h2c),
        delay,
        ..Default::default()
    })
    .expect("h2c origin")
}

#[test]
fn serves_the_http1_paths_trailers_and_echo() {
    let origin = h2c_origin(H2cOptions::default(), None);
    let addr = origin.addr();
    block_on(async move {
        let c = connect(addr).await.unwrap();
        let fast = request(&c.send, get("/fast")).await.unwrap();
        assert_eq!((fast.status, fast.body.as_slice()), (200, DEFAULT_BODY));
        assert_eq!(fast.field("content-length"), Some("13"));
        let big = request(&c.send, get("/size/1m")).await.unwrap();
        assert_eq!(big.body.len(), 1 << 20);
        assert_eq!(
            request(&c.send, get("/size/16k")).await.unwrap().body.len(),
            16 << 10
        );
        let app = request(&c.send, get("/app")).await.unwrap();
        assert_eq!(app.field("x-frame-options"), Some("DENY"));
        assert!(app
            .field("content-type")
            .unwrap()
            .starts_with("application/json"));

        let t = request(&c.send, get("/trailers")).await.unwrap();
        assert_eq!(t.body, TRAILERS_BODY);
        let sum = format!("{:08x}", fnv1a32(TRAILERS_BODY));
        let trailers = t.trailers.as_ref().expect("trailers");
        assert_eq!(trailers.get("x-checksum").unwrap(), sum.as_str());
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");

        // /echo: a body over the 1 MiB stream window, byte-exact, and the trailers back.
        let body: Vec<u8> = (0..(3 << 20) + 7).map(|i| (i % 251) as u8).collect();
        let mut sent_trailers = http::HeaderMap::new();
        sent_trailers.insert("x-sum", "abc".parse().unwrap());
        let e = request(
            &c.send,
            H2Request {
                method: "POST",
                path: "/echo",
                body: &body,
                trailers: Some(sent_trailers),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(e.status, 200);
        assert!(e.body == body, "echo differs: {} bytes back", e.body.len());
        assert_eq!(e.trailers.unwrap().get("x-sum").unwrap(), "abc");
    });
    let s = origin.h2c_records().snapshot();
    assert_eq!(
        (s.connections, s.streams, s.resets, s.completed),
        (1, 6, 0, 6)
    );
}

#[test]
fn grpc_unary_and_server_streaming() {
    let origin = h2c_origin(H2cOptions::default(), None);
    let addr = origin.addr();
    block_on(async move {
        let c = connect(addr).await.unwrap();
        let r = grpc_call(&c.send, "/bench.Echo/Unary", b"ping")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.field("content-type"), Some(grpc::CONTENT_TYPE));
        assert_eq!(r.body, grpc::frame(b"ping"));
        assert_eq!(r.trailers.unwrap().get("grpc-status").unwrap(), "0");
        let s = grpc_call(&c.send, "/bench.Echo/Stream7", b"m")
            .await
            .unwrap();
        let (msgs, rest) = grpc::messages(&s.body);
        assert_eq!((msgs.len(), rest), (7, 0));
        assert!(msgs.iter().all(|m| *m == b"m"));
        let d = grpc_call(&c.send, "/bench.Echo/Stream", b"").await.unwrap();
        assert_eq!(grpc::messages(&d.body).0.len(), 100);
    });
}

#[test]
fn goaway_after_n_streams_lets_them_finish_then_closes() {
    let origin = h2c_origin(
        H2cOptions {
            goaway_after: Some(3),
            ..Default::default()
        },
        Some(Duration::from_millis(300)),
    );
    let addr = origin.addr();
    block_on(async move {
        let c = connect(addr).await.unwrap();
        // Three slow streams: the third triggers GOAWAY while all three are in flight.
        let mut pending = Vec::new();
        for _ in 0..3 {
            pending.push(open(&c.send, &get("/slow")).unwrap().await.unwrap().0);
        }
        for p in pending {
            let r = within(LIMIT, read_response(p)).await.unwrap();
            assert_eq!(r.status, 200, "an in-flight stream failed after GOAWAY");
        }
        // The connection is gone afterwards: a new stream cannot open on it.
        let later = within(LIMIT, async {
            match open(&c.send, &get("/fast"))?.await {
                Ok((r, _)) => read_response(r).await.map(|r| r.status),
                Err(e) => Err(e),
            }
        })
        .await;
        assert!(later.is_err(), "a stream after GOAWAY succeeded: {later:?}");
    });
    let (s, ok) = origin
        .h2c_records()
        .wait_until(LIMIT, |s| s.open_connections == 0);
    assert!(ok, "connection still open: {s:?}");
    assert_eq!((s.goaways, s.completed, s.resets), (1, 3, 0));
}

#[test]
fn refuses_every_nth_stream() {
    let origin = h2c_origin(
        H2cOptions {
            refuse_every: Some(2),
            ..Default::default()
        },
        None,
    );
    let addr = origin.addr();
    let results = block_on(async move {
        let c = connect(addr).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(request(&c.send, get("/fast")).await.map(|r| r.status));
        }
        out
    });
    assert_eq!(results[0], Ok(200));
    assert!(
        results[1].as_ref().is_err_and(|e| e.contains("refused")),
        "{results:?}"
    );
    assert_eq!(results[2], Ok(200));
    assert!(results[3].is_err(), "{results:?}");
    assert_eq!(origin.h2c_records().snapshot().refused, 2);
}

#[test]
fn freeze_leaves_pings_unanswered_while_a_slow_answer_acks_them() {
    let origin = h2c_origin(H2cOptions::default(), Some(Duration::from_millis(800)));
    let addr = origin.addr();
    let records = origin.h2c_records().clone();
    block_on(async move {
        let mut frozen = connect(addr).await.unwrap();
        assert!(
            ping_acked(&mut frozen.ping, LIMIT).await,
            "no ACK before the freeze"
        );
        let (stuck, _) = open(&frozen.send, &get("/freeze")).unwrap().await.unwrap();
        let (records, ok) = records.until(LIMIT, |s| s.frozen == 1).await;
        assert!(ok, "no frozen connection recorded: {records:?}");
        assert!(!ping_acked(&mut frozen.ping, Duration::from_millis(500)).await);
        drop(stuck);

        let mut live = connect(addr).await.unwrap();
        let (slow, _) = open(&live.send, &get("/slowping")).unwrap().await.unwrap();
        let t = Instant::now();
        assert!(ping_acked(&mut live.ping, Duration::from_millis(500)).await);
        assert!(
            t.elapsed() < Duration::from_millis(700),
            "ACK only after the answer"
        );
        let r = within(LIMIT, read_response(slow)).await.unwrap();
        assert_eq!(r.status, 200);
    });
}

#[test]
fn a_cancelled_stream_is_recorded_as_reset_by_the_peer() {
    let origin = h2c_origin(H2cOptions::default(), Some(Duration::from_secs(30)));
    let addr = origin.addr();
    let records = origin.h2c_records().clone();
    block_on(async move {
        let c = connect(addr).await.unwrap();
        let req = H2Request {
            method: "POST",
            path: "/slow.Echo/Unary",
            headers: &[("content-type", "application/grpc"), ("te", "trailers")],
            body: &grpc::frame(b"x"),
            trailers: None,
        };
        let (resp, mut body) = open(&c.send, &req).unwrap().await.unwrap();
        body.send_data(grpc::frame(b"x").into(), true).unwrap();
        // Let the origin take the stream, then cancel it (RST_STREAM CANCEL).
        let (s, ok) = records.until(LIMIT, |s| s.streams == 1).await;
        assert!(ok, "{s:?}");
        body.send_reset(h2::Reason::CANCEL);
        drop(resp);
        let (s, ok) = records.until(LIMIT, |s| s.cancels == 1).await;
        assert!(ok, "no CANCEL recorded: {s:?}");
        assert_eq!(s.reset_streams[0].path, "/slow.Echo/Unary");
        assert_eq!(s.reset_streams[0].reason, 0x8);
    });
}

#[test]
fn hundred_concurrent_streams_on_one_connection_are_recorded() {
    let origin = h2c_origin(H2cOptions::default(), Some(Duration::from_millis(500)));
    let addr = origin.addr();
    block_on(async move {
        let c = connect(addr).await.unwrap();
        let mut pending = Vec::new();
        for _ in 0..100 {
            pending.push(open(&c.send, &get("/slow")).unwrap().await.unwrap().0);
        }
        for p in pending {
            assert_eq!(within(LIMIT, read_response(p)).await.unwrap().status, 200);
        }
    });
    let s = origin.h2c_records().snapshot();
    assert_eq!((s.max_streams_per_connection, s.max_connections), (100, 1));
}

#[test]
fn bidirectional_echo_streams_chunks_back_as_they_arrive() {
    let origin = h2c_origin(H2cOptions::default(), None);
    let addr = origin.addr();
    let got = block_on(async move {
        let c = connect(addr).await.unwrap();
        echo_session(
            &c.send,
            "/echo",
            &[("content-type", "application/grpc")],
            (5, 1000, Duration::from_millis(20)),
            LIMIT,
        )
        .await
    })
    .unwrap();
    assert_eq!((got.status, got.echoed, got.ended), (200, 5, true));
    assert_eq!(got.trailers.unwrap().get("grpc-status").unwrap(), "0");
}
