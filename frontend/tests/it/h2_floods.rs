//! HTTP/2 floods and wire-level refusals (DESIGN.md "HTTP/2", status table rows "h2 stream error" and
//! "h2 connection error or flood"), written frame by frame with the raw client edge-bench's matrix
//! also uses (`edge_bench::peers::h2_frames`): rapid reset, endless CONTINUATION, SETTINGS, PING, empty
//! DATA and WINDOW_UPDATE floods each end in GOAWAY ENHANCE_YOUR_CALM, counted
//! (`edge_http2_goaways_total{reason="flood"}`) and logged (`http2.goaway`), while other connections
//! are served; resets of streams edge already took up count against `max_resets_per_second`; with
//! no stream open the flood GOAWAY closes at once, and a stream open when it goes out still
//! finishes; a flood that goes on after GOAWAY closes at once; connection-specific fields reset one
//! stream only; a legitimate client under the limits is not cut.

use std::{
    io,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use edge_bench::peers::h2_frames::{
    code, flag, frame, hpack_block, is_goaway, kind, open_and_reset, request_fields, Frame,
    H2Frames,
};

use crate::harness::{Cfg, Client, Driver, Edge, Origin, Reply};

/// Bound of every wait on a frame.
const WAIT: Duration = Duration::from_secs(5);

/// An edge serving h2c, with `drain` long enough that "closed at once" and "closed at drain" differ.
fn h2c(d: Driver, origin: &Origin) -> Edge {
    let cfg = Cfg::new(d, origin.addr)
        .server("h2c", true)
        .timeout("drain", "10s");
    Edge::start(&cfg)
}

fn connect(edge: &Edge) -> H2Frames {
    H2Frames::handshake(edge.addr, &[], WAIT).expect("h2 handshake")
}

/// After a GOAWAY: answers the server's PINGs (h2's graceful shutdown waits for one round trip)
/// until the server closes; whether it did within `limit`.
fn answer_until_closed(c: &mut H2Frames, limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match c.wait_for(left, |f| f.kind == kind::PING && f.flags & flag::ACK == 0) {
            Ok(p) => {
                let payload: [u8; 8] = p.payload.as_slice().try_into().unwrap();
                if c.ping(payload, true).is_err() {
                    return c.closed_within(left);
                }
            }
            Err(e) => return e.kind() == io::ErrorKind::ConnectionAborted,
        }
    }
}

/// Health and a proxied request over HTTP/1.1 on fresh connections, in a loop on a thread of its
/// own until the returned flag is set; the thread returns (answered, failures).
fn others_meanwhile(edge: &Edge) -> (Arc<AtomicBool>, thread::JoinHandle<(usize, Vec<String>)>) {
    let stop = Arc::new(AtomicBool::new(false));
    let addr = edge.addr;
    let s = stop.clone();
    let t = thread::spawn(move || {
        let (mut ok, mut failed) = (0, Vec::new());
        while !s.load(Ordering::SeqCst) || ok == 0 {
            for path in ["/_health", "/other"] {
                let mut c = Client::connect_timeout(addr, Duration::from_secs(2));
                match c.try_get(path) {
                    Some(r) if r.status == 200 => ok += 1,
                    r => failed.push(format!("{path}: {:?}", r.map(|r| r.status))),
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        (ok, failed)
    });
    (stop, t)
}

/// Runs `flood` (which returns the GOAWAY it got) on one connection while other connections are
/// served, then checks the flood's GOAWAY, count, log line, and that the others never failed.
/// Returns edge and its origin for further checks.
fn assert_flood_answered(d: Driver, flood: impl FnOnce(&Edge) -> Option<Frame>) -> (Edge, Origin) {
    let origin = Origin::fixed(b"ok");
    let edge = h2c(d, &origin);
    let (stop, others) = others_meanwhile(&edge);
    let goaway = flood(&edge);
    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = others.join().unwrap();
    let goaway = goaway.expect("a GOAWAY");
    assert_eq!(goaway.goaway_code(), Some(code::ENHANCE_YOUR_CALM));
    assert!(failed.is_empty(), "other connections failed: {failed:?}");
    assert!(ok > 0);
    let flood = ["reason=\"flood\""];
    let n = edge.wait_metric_where("edge_http2_goaways_total", &flood, WAIT, |v| v >= 1.0);
    assert!(
        n >= 1.0,
        "edge_http2_goaways_total{{reason=\"flood\"}} is {n}"
    );
    assert!(
        edge.wait_log_all(&["http2.goaway", "flood"], WAIT)
            .is_some(),
        "no http2.goaway line"
    );
    (edge, origin)
}

both_drivers!(rapid_reset_gets_goaway_enhance_your_calm, |d| {
    let sent = std::cell::Cell::new(0);
    let (edge, origin) = assert_flood_answered(d, |edge| {
        let mut c = connect(edge);
        let authority = edge.addr.to_string();
        let block = hpack_block(&request_fields("GET", "/reset", &authority));
        let (goaway, n) = c.flood_until_goaway(
            32,
            WAIT,
            |i| i < 20_000,
            |i, out| open_and_reset(out, i, &block),
        );
        sent.set(n);
        assert!(goaway.is_some(), "no GOAWAY after {n} resets");
        assert!(
            answer_until_closed(&mut c, WAIT),
            "the flooding connection stayed open"
        );
        goaway
    });
    // A stream reset before edge took it up costs no upstream exchange (only those whose HEADERS and
    // RST_STREAM fell into different reads reach the origin).
    let forwarded = origin
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.target == "/reset")
        .count();
    assert!(
        forwarded * 10 < sent.get() as usize,
        "{forwarded} of {} reset streams were forwarded",
        sent.get()
    );
    let client = ["side=\"client\""];
    assert!(edge.metric("edge_http2_resets_total", &client) > 0.0);
});

both_drivers!(
    resets_of_accepted_streams_past_max_resets_per_second_get_goaway,
    |d| {
        // Each stream is accepted (a PING round trip after its HEADERS) before it is reset, so h2's own
        // count of streams reset before they were accepted never sees it: only edge's per-second limit.
        let origin = Origin::start(|_| Reply::ok(b"late").delayed(Duration::from_secs(3)));
        let cfg = Cfg::new(d, origin.addr)
            .server("h2c", true)
            .timeout("drain", "10s")
            .http2("max_resets_per_second", 20);
        let edge = Edge::start(&cfg);
        let mut c = connect(&edge);
        let authority = edge.addr.to_string();
        let mut goaway = None;
        for i in 0..40u32 {
            let stream = 2 * i + 1;
            let fields = request_fields("GET", "/held", &authority);
            c.headers(stream, &fields, true, true).unwrap();
            c.ping(u64::from(i).to_be_bytes(), false).unwrap();
            // After the GOAWAY edge drops non-ACK PINGs: the GOAWAY may come instead of the PONG.
            let pong = c.wait_for(WAIT, |f| {
                is_goaway(f) || (f.kind == kind::PING && f.flags & flag::ACK != 0)
            });
            match pong {
                Ok(g) if is_goaway(&g) => {
                    goaway = Some((g, i));
                    break;
                }
                Ok(_) => {}
                Err(e) => panic!("PING {i} not answered: {e}"),
            }
            c.rst(stream, code::CANCEL).unwrap();
            if let Ok(g) = c.wait_for(Duration::ZERO, is_goaway) {
                goaway = Some((g, i + 1));
                break;
            }
        }
        let (goaway, resets) = goaway
            .or_else(|| c.wait_for(WAIT, is_goaway).ok().map(|g| (g, 40)))
            .expect("a GOAWAY");
        assert_eq!(goaway.goaway_code(), Some(code::ENHANCE_YOUR_CALM));
        assert!(resets > 20, "GOAWAY after {resets} resets, the limit is 20");
        let flood = ["reason=\"flood\""];
        assert_eq!(
            edge.wait_metric("edge_http2_goaways_total", &flood, 1.0),
            1.0
        );
        assert!(edge
            .wait_log_all(&["http2.goaway", "resets"], WAIT)
            .is_some());
    }
);

both_drivers!(
    continuation_flood_gets_goaway_and_the_connection_closes,
    |d| {
        assert_flood_answered(d, |edge| {
            let mut c = connect(edge);
            let authority = edge.addr.to_string();
            c.headers(1, &request_fields("GET", "/cont", &authority), true, false)
                .unwrap();
            let more = hpack_block(&[("x-more", "continuation")]);
            let (goaway, sent) = c.flood_until_goaway(
                32,
                WAIT,
                |i| i < 100_000,
                |_, out| {
                    frame(out, kind::CONTINUATION, 0, 1, &more);
                },
            );
            assert!(
                goaway.is_some(),
                "no GOAWAY after {sent} CONTINUATION frames"
            );
            assert!(c.closed_within(WAIT), "the connection stayed open");
            goaway
        });
    }
);

/// A flood of control frames written by `unit` on a fresh connection with no stream open: GOAWAY comes
/// (checked by [`assert_flood_answered`]), and the connection closes once the client answers the PING
/// of h2's graceful shutdown. `what` names the frames in the failure message.
fn assert_control_flood(d: Driver, what: &str, unit: impl Fn(u32, &mut Vec<u8>)) {
    assert_flood_answered(d, |edge| {
        let mut c = connect(edge);
        let (goaway, sent) = c.flood_until_goaway(32, WAIT, |i| i < 100_000, unit);
        assert!(goaway.is_some(), "no GOAWAY after {sent} {what}");
        assert!(answer_until_closed(&mut c, WAIT), "stayed open");
        goaway
    });
}

both_drivers!(settings_flood_gets_goaway_enhance_your_calm, |d| {
    assert_control_flood(d, "SETTINGS", |_, out| {
        frame(out, kind::SETTINGS, 0, 0, &[])
    });
});

both_drivers!(ping_flood_gets_goaway_enhance_your_calm, |d| {
    assert_control_flood(d, "PINGs", |i, out| {
        frame(out, kind::PING, 0, 0, &u64::from(i).to_be_bytes());
    });
});

both_drivers!(empty_data_flood_gets_goaway_enhance_your_calm, |d| {
    assert_flood_answered(d, |edge| {
        let mut c = connect(edge);
        let authority = edge.addr.to_string();
        c.headers(
            1,
            &request_fields("POST", "/upload", &authority),
            false,
            true,
        )
        .unwrap();
        let (goaway, sent) = c.flood_until_goaway(
            32,
            WAIT,
            |i| i < 100_000,
            |_, out| {
                frame(out, kind::DATA, 0, 1, &[]);
            },
        );
        assert!(goaway.is_some(), "no GOAWAY after {sent} empty DATA frames");
        goaway
    });
});

both_drivers!(window_update_flood_gets_goaway_enhance_your_calm, |d| {
    assert_control_flood(d, "WINDOW_UPDATEs", |_, out| {
        frame(out, kind::WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
    });
});

// With no stream open, a flood GOAWAY closes the connection at once (nothing to finish): the
// client's bytes still in flight are never read.
both_drivers!(with_no_stream_open_a_flood_goaway_closes_at_once, |d| {
    let origin = Origin::fixed(b"ok");
    let edge = h2c(d, &origin);
    let mut c = connect(&edge);
    let (goaway, _) = c.flood_until_goaway(
        32,
        WAIT,
        |i| i < 100_000,
        |i, out| {
            frame(out, kind::PING, 0, 0, &u64::from(i).to_be_bytes());
        },
    );
    let goaway = goaway.expect("a GOAWAY");
    assert_eq!(goaway.goaway_code(), Some(code::ENHANCE_YOUR_CALM));
    assert!(goaway.goaway_last_stream() < Some(1), "{goaway:?}");
    // No PING answered: closed without h2's graceful round trip.
    assert!(c.closed_within(Duration::from_secs(2)), "still open");
});

both_drivers!(a_stream_open_at_a_flood_goaway_still_finishes, |d| {
    let origin = Origin::start(|s| match s.target.as_str() {
        "/slow" => Reply::ok(b"slow done").delayed(Duration::from_millis(800)),
        _ => Reply::ok(b"ok"),
    });
    let edge = h2c(d, &origin);
    let mut c = connect(&edge);
    let authority = edge.addr.to_string();
    c.headers(1, &request_fields("GET", "/slow", &authority), true, true)
        .unwrap();
    assert!(origin.wait_until(WAIT, |o| o.seen_count() == 1));
    let (goaway, _) = c.flood_until_goaway(
        32,
        WAIT,
        |i| i < 100_000,
        |_, out| {
            frame(out, kind::SETTINGS, 0, 0, &[]);
        },
    );
    let goaway = goaway.expect("a GOAWAY");
    assert_eq!(goaway.goaway_code(), Some(code::ENHANCE_YOUR_CALM));
    assert!(
        goaway.goaway_last_stream() >= Some(1),
        "stream 1 is kept: {goaway:?}"
    );
    let (status, body) = c.response(1, WAIT).expect("stream 1 finishes");
    assert_eq!((status, body.as_slice()), (Some(200), &b"slow done"[..]));
    assert!(answer_until_closed(&mut c, WAIT), "closed once it finished");
});

both_drivers!(a_flood_that_goes_on_after_goaway_is_closed_at_once, |d| {
    // A stream held open (its answer takes 8 s) keeps the connection in its GOAWAY phase: only the
    // flood going on can close it before that answer and before drain (10 s).
    let origin = Origin::start(|_| Reply::ok(b"late").delayed(Duration::from_secs(8)));
    let edge = h2c(d, &origin);
    let mut c = connect(&edge);
    let authority = edge.addr.to_string();
    c.headers(1, &request_fields("GET", "/held", &authority), true, true)
        .unwrap();
    assert!(origin.wait_until(WAIT, |o| o.seen_count() == 1));
    let settings = |_, out: &mut Vec<u8>| frame(out, kind::SETTINGS, 0, 0, &[]);
    let (goaway, _) = c.flood_until_goaway(32, WAIT, |i| i < 100_000, settings);
    assert_eq!(goaway.unwrap().goaway_code(), Some(code::ENHANCE_YOUR_CALM));
    let started = std::time::Instant::now();
    // Going on: the server's PINGs are not answered, so only the flood can close it before drain.
    for i in 0..100_000 {
        let mut batch = Vec::new();
        for _ in 0..32 {
            settings(i, &mut batch);
        }
        if c.send(&batch).is_err() || c.is_closed() {
            break;
        }
    }
    assert!(c.closed_within(Duration::from_secs(2)), "still open");
    // At once: after the grace second (what was in flight before the GOAWAY), not at drain (10 s).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed after {:?}, not at once",
        started.elapsed()
    );
    assert_eq!(
        edge.wait_metric("edge_http2_goaways_total", &["reason=\"flood\""], 1.0),
        1.0,
        "one GOAWAY counted"
    );
});

both_drivers!(
    connection_specific_fields_reset_one_stream_and_the_connection_goes_on,
    |d| {
        let origin = Origin::fixed(b"ok");
        let edge = h2c(d, &origin);
        let mut c = connect(&edge);
        let authority = edge.addr.to_string();
        let bad = [
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("te", "gzip"),
            ("upgrade", "h2c"),
        ];
        let mut resets = 0;
        for (i, field) in bad.iter().enumerate() {
            let stream = 2 * i as u32 + 1;
            let mut fields = request_fields("GET", "/bad", &authority);
            fields.push(*field);
            c.headers(stream, &fields, true, true).unwrap();
            let f = c
                .wait_for(WAIT, |f| {
                    f.stream == stream && matches!(f.kind, kind::RST_STREAM | kind::HEADERS)
                })
                .unwrap_or_else(|e| panic!("{field:?}: no answer ({e})"));
            match f.kind {
                kind::RST_STREAM => {
                    assert_eq!(f.rst_code(), Some(code::PROTOCOL_ERROR), "{field:?}");
                    resets += 1;
                }
                _ => assert_eq!(f.status(), Some(400), "{field:?}"),
            }
        }
        let good = request_fields("GET", "/good", &authority);
        c.headers(9, &good, true, true).unwrap();
        let (status, body) = c.response(9, WAIT).expect("the connection goes on");
        assert_eq!((status, body.as_slice()), (Some(200), &b"ok"[..]));
        assert!(!c.is_closed());
        assert_eq!(origin.seen_count(), 1, "only the good stream is forwarded");
        let edge_resets = ["side=\"edge\""];
        let want = f64::from(resets);
        assert_eq!(
            edge.wait_metric("edge_http2_resets_total", &edge_resets, want),
            want
        );
        if resets > 0 {
            assert!(edge.wait_log("h2_stream_error", WAIT).is_some());
        }
        assert_eq!(edge.metric("edge_http2_goaways_total", &[]), 0.0);
    }
);

both_drivers!(a_legitimate_client_under_the_limits_is_not_cut, |d| {
    let origin = Origin::start(|s| Reply::ok(s.target.as_bytes()));
    let edge = h2c(d, &origin);
    let mut c = connect(&edge);
    let authority = edge.addr.to_string();
    let answered = AtomicUsize::new(0);
    for i in 0..50u32 {
        let stream = 2 * i + 1;
        let path = format!("/s/{i}");
        c.headers(
            stream,
            &request_fields("GET", &path, &authority),
            true,
            true,
        )
        .unwrap();
        if i % 5 == 4 {
            // A reset after the answer started or before: either is a client's right.
            c.rst(stream, code::CANCEL).unwrap();
            continue;
        }
        if i % 10 == 0 {
            c.ping(u64::from(i).to_be_bytes(), false).unwrap();
            c.wait_for(WAIT, |f| f.kind == kind::PING && f.flags & flag::ACK != 0)
                .expect("PING answered");
        }
        let (status, body) = c.response(stream, WAIT).expect("answered");
        assert_eq!((status, body), (Some(200), path.into_bytes()));
        c.window_update(0, 64).unwrap();
        answered.fetch_add(1, Ordering::Relaxed);
    }
    c.settings(&[]).unwrap();
    c.wait_for(WAIT, |f| {
        f.kind == kind::SETTINGS && f.flags & flag::ACK != 0
    })
    .expect("SETTINGS acked");
    assert_eq!(answered.load(Ordering::Relaxed), 40);
    let goaway = c.wait_for(Duration::from_millis(200), is_goaway);
    assert!(goaway.is_err(), "cut: {goaway:?}");
    assert!(!c.is_closed());
    assert_eq!(edge.metric("edge_http2_goaways_total", &[]), 0.0);
});
