//! Local answers over HTTP/2, the same as over HTTP/1.1 (DESIGN.md "HTTP/2": every stream goes through
//! the same local answers and status table): `Max-Forwards: 0` on OPTIONS and TRACE, `redirect_plain`
//! on h2c, and a connection accepted over `max_connections` (DESIGN.md "Capacity"), whose health
//! probe is answered and whose other stream gets 503 with `Retry-After`.

use std::{io::Write, net::TcpStream, time::Duration};

use crate::{
    h2::{curl_h2_tls, have_curl_h2},
    harness::{block_on, h2_connect, h2_request, Cfg, Driver, Edge, Origin, Reply, Site},
};

const SEC: Duration = Duration::from_secs(1);

both_drivers!(
    max_forwards_zero_is_answered_by_edge_over_h2,
    |d: Driver| {
        let origin = Origin::fixed(b"from origin");
        let edge = Edge::start(&Cfg::new(d, origin.addr).server("h2c", true));
        let authority = edge.addr.to_string();
        let mf0 = [("max-forwards", "0")];
        let (options, trace, forwarded) = block_on(async {
            let c = h2_connect(edge.addr).await;
            let options = h2_request(&c, "OPTIONS", "/x", &authority, &mf0, b"").await;
            let trace = h2_request(&c, "TRACE", "/x", &authority, &mf0, b"").await;
            let mf1 = [("max-forwards", "1")];
            let forwarded = h2_request(&c, "OPTIONS", "/x", &authority, &mf1, b"").await;
            (options, trace, forwarded)
        });
        let options = options.unwrap();
        assert_eq!(options.status, 200);
        let allow = options
            .headers
            .get("allow")
            .expect("Allow on the OPTIONS answer");
        assert!(allow.to_str().unwrap().contains("GET"), "{allow:?}");
        assert!(options.body.is_empty());
        let trace = trace.unwrap();
        assert_eq!(trace.status, 405, "edge never reflects a request");
        assert_eq!(forwarded.unwrap().body, b"from origin");
        assert_eq!(
            origin.seen_count(),
            1,
            "only Max-Forwards: 1 reached the origin"
        );
        assert_eq!(
            origin.last().header("max-forwards"),
            Some("0"),
            "decremented"
        );
    }
);

both_drivers!(
    redirect_plain_answers_h2c_with_308_but_serves_health,
    |d: Driver| {
        let origin = Origin::fixed(b"from origin");
        let site = Site::new();
        let cfg = site
            .cfg(d, origin.addr)
            .server("h2c", true)
            .tls("redirect_plain", true);
        let edge = Edge::start(&cfg);
        let port = edge.tls_addr().port();
        let plain = edge.plain.expect("a plain listener");
        let (redirect, health) = block_on(async {
            let c = h2_connect(plain).await;
            let redirect = h2_request(&c, "POST", "/a/b?c=d", "test:8080", &[], b"body").await;
            let health = h2_request(&c, "GET", "/_health", "test", &[], b"").await;
            (redirect, health)
        });
        let redirect = redirect.unwrap();
        assert_eq!(redirect.status, 308);
        assert_eq!(
            redirect.headers.get("location").unwrap(),
            format!("https://test:{port}/a/b?c=d").as_str()
        );
        let health = health.unwrap();
        assert_eq!((health.status, health.body.as_slice()), (200, &b"ok"[..]));
        assert_eq!(
            origin.seen_count(),
            0,
            "nothing is forwarded from the plain listener"
        );
    }
);

both_drivers!(
    h2_over_capacity_answers_health_and_sheds_the_rest,
    |d: Driver| {
        if !have_curl_h2() {
            return;
        }
        const MAX: usize = 16;
        let origin = Origin::start(|s| match s.target.as_str() {
            "/slow" => Reply::ok(b"slow").delayed(3 * SEC),
            _ => Reply::ok(b"fast"),
        });
        let site = Site::new();
        let cfg = site
            .cfg(d, origin.addr)
            .workers(1)
            .server("max_connections", MAX);
        let edge = Edge::start(&cfg);
        let plain = edge.plain.expect("a plain listener");
        // Every slot busy with a request in flight: nothing is evictable.
        let busy: Vec<TcpStream> = (0..MAX)
            .map(|_| {
                let mut s = TcpStream::connect(plain).unwrap();
                s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                s
            })
            .collect();
        assert!(
            origin.wait_until(5 * SEC, |o| o.seen_count() >= MAX),
            "the slow requests did not all reach the origin"
        );
        let port = edge.tls_addr().port();
        let out = curl_h2_tls(&site, port, &[], "/_health");
        assert_eq!(out, "ok\n200 2", "a health probe over capacity is answered");
        let out = curl_h2_tls(&site, port, &["-i"], "/x");
        assert!(out.ends_with("\n503 2"), "{out}");
        assert!(out.contains("retry-after: 1"), "{out}");
        let shed = edge.wait_metric_where(
            "edge_connections_shed_total",
            &["reason=\"limit\""],
            5 * SEC,
            |v| v >= 1.0,
        );
        assert_eq!(shed, 1.0, "the h2 connection is counted as shed");
        assert_eq!(
            origin.seen_count(),
            MAX,
            "the shed stream never reached the origin"
        );
        drop(busy);
    }
);
