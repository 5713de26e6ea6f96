//! The workloads of `edge-bench compare` (DESIGN.md, Benchmark method): what wrk sends, on how
//! many connections, and the Lua script that shapes the request and reports the latency percentiles.
//!
//! Every run uses a script (written to the target's scratch directory): its `done()` hook prints
//! one `edge-bench percentile P MICROS` line per entry of [`PERCENTILES`] and an
//! `edge-bench latency max MICROS` line, from wrk's own latency histogram. wrk's `--latency`
//! table stops at 99 %; these lines give p99.9 and the points of the latency CDF. For the POST
//! workload the script also sets the method and a 1 MiB body (wrk adds `Content-Length`).
//!
//! Origin paths: `/fast` (13 bytes), `/size/16k`, `/size/1m` (see [`crate::peers::origin::SIZED_PATHS`]),
//! `/app` (the application-like answer of the realistic-heads workload); the origin reads and discards
//! request bodies.
//!
//! Origins (DESIGN.md "Benchmark method", Origins and heads): every small-request workload runs against
//! edge-bench's own origin and against nginx (`return 200` with the fields a real application adds), as
//! a workload of its own named `NAME@nginx`, because the ratios move with the origin.

use std::fmt;
use std::str::FromStr;

/// Percentiles the wrk script reports (in %), for p99.9 and the latency CDF.
pub const PERCENTILES: [f64; 22] = [
    1.0, 5.0, 10.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 75.0, 80.0, 90.0, 95.0, 97.5, 99.0,
    99.5, 99.9, 99.95, 99.99, 99.995, 99.999,
];

/// Size of the POST body of [`Workload::Post1m`].
pub const POST_BODY_BYTES: usize = 1024 * 1024;

/// One kind of load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// `GET /fast` (13-byte answer), keep-alive, 64 connections.
    Get64,
    /// The same with 256 connections.
    Get256,
    /// `GET /size/16k`, keep-alive.
    Get16k,
    /// `GET /size/1m`, keep-alive.
    Get1m,
    /// `POST /fast` with a 1 MiB body, keep-alive.
    Post1m,
    /// `GET /fast` with `Connection: close`: a new connection per request.
    Close,
    /// Realistic heads: a browser-like request head (a dozen fields and a cookie, ~900 bytes) to
    /// `/app`, which answers with an application-like head (a dozen fields, ~450 bytes).
    Heads,
    /// [`Workload::Get64`] against the nginx origin.
    Get64Nginx,
    /// [`Workload::Get256`] against the nginx origin.
    Get256Nginx,
    /// [`Workload::Heads`] against the nginx origin.
    HeadsNginx,
    /// [`Workload::Close`] against the nginx origin.
    CloseNginx,
    /// `GET /fast` over TLS 1.3 (AES-128-GCM), keep-alive, 64 connections (wrk `https://`).
    TlsGet64,
    /// `GET /size/1m` over TLS 1.3, keep-alive.
    TlsGet1m,
    /// A new TLS 1.3 connection with a full handshake per request (edge-bench's handshake loader,
    /// no session cache: wrk resumes sessions on reconnect, so it cannot make full handshakes).
    TlsHandshake,
    /// A new TLS 1.3 connection per request resuming a session (the loader with a ticket cache).
    TlsResume,
    /// `GET /fast` over TLS 1.2 (ECDHE-ECDSA-AES128-GCM-SHA256), keep-alive, 64 connections.
    Tls12Get64,
    /// `GET /fast` over HTTP/2 (TLS 1.3, ALPN h2), h2load, 64 connections × 10 concurrent streams.
    H2Get,
    /// `GET /size/1m` over HTTP/2, h2load, 64 connections × 10 concurrent streams.
    H2Get1m,
    /// gRPC unary calls (one 64-byte message each way) over h2c to an h2c origin through an HTTP/2
    /// upstream, h2load, 64 connections × 10 concurrent streams ([`super::h2_upstream`]).
    GrpcUnary,
    /// Server-streaming gRPC calls (100 messages per answer) over h2c to an h2c origin; reported as
    /// messages/s too.
    GrpcStream,
    /// HTTP/1.1 small GETs (wrk) through the proxy to an h2c origin (HTTP/1.1 → h2 upstream).
    H1ToH2,
}

/// Which origin a workload's targets proxy to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OriginKind {
    /// `edge-bench origin`.
    Own,
    /// nginx, one worker, pinned with the load.
    Nginx,
    /// An h2c origin: nginx (`listen … http2`), else `edge-bench origin --h2c`.
    H2c,
}

/// A browser-like request head's fields besides Host (DESIGN.md "Benchmark method": about a dozen
/// fields with a cookie, 800–1000 bytes in all).
pub const BROWSER_FIELDS: [(&str, &str); 13] = [
    ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"),
    ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
    ("Accept-Language", "en-GB,en;q=0.9,de;q=0.8"),
    ("Accept-Encoding", "gzip, deflate, br, zstd"),
    ("Referer", "https://shop.example.com/catalog/shoes?page=2&sort=price"),
    ("Cookie", "sid=2f9c81d4a7e64b03b5c1e0d9; cart=7b1e4f0a9c; consent=analytics%3D0%26ads%3D0; _ga=GA1.2.1234567890.1733040000; theme=dark; _gid=GA1.2.987654321.1733040000; ab_test=checkout_v2; recent=sku-1001%2Csku-2002%2Csku-3003; locale=en-GB; tz=Europe%2FLondon"),
    ("Sec-Fetch-Dest", "document"),
    ("Sec-Fetch-Mode", "navigate"),
    ("Sec-Fetch-Site", "same-origin"),
    ("Sec-Ch-Ua", "\"Chromium\";v=\"131\", \"Not_A Brand\";v=\"24\""),
    ("Upgrade-Insecure-Requests", "1"),
    ("Cache-Control", "max-age=0"),
    ("Priority", "u=0, i"),
];

impl Workload {
    /// Every workload, in the default order.
    pub const ALL: [Workload; 21] = [
        Workload::Get64,
        Workload::Get256,
        Workload::Get16k,
        Workload::Get1m,
        Workload::Post1m,
        Workload::Close,
        Workload::Heads,
        Workload::Get64Nginx,
        Workload::Get256Nginx,
        Workload::HeadsNginx,
        Workload::CloseNginx,
        Workload::TlsGet64,
        Workload::TlsGet1m,
        Workload::TlsHandshake,
        Workload::TlsResume,
        Workload::Tls12Get64,
        Workload::H2Get,
        Workload::H2Get1m,
        Workload::GrpcUnary,
        Workload::GrpcStream,
        Workload::H1ToH2,
    ];

    /// The HTTP/2-upstream workloads (DESIGN.md "Benchmark method": gRPC and HTTP/2 upstreams).
    pub const H2_UPSTREAM: [Workload; 3] =
        [Workload::GrpcUnary, Workload::GrpcStream, Workload::H1ToH2];

    /// Whether its targets proxy to an h2c origin with HTTP/2 upstreams.
    pub fn is_h2_upstream(self) -> bool {
        Workload::H2_UPSTREAM.contains(&self)
    }

    /// Whether h2load sends it as gRPC calls over h2c (the gRPC workloads).
    pub fn is_grpc(self) -> bool {
        matches!(self, Workload::GrpcUnary | Workload::GrpcStream)
    }

    /// gRPC messages per answer (1 for unary calls, `None` for non-gRPC loads).
    pub fn messages_per_answer(self) -> Option<usize> {
        match self {
            Workload::GrpcUnary => Some(1),
            Workload::GrpcStream => Some(super::h2_upstream::STREAM_MESSAGES),
            _ => None,
        }
    }

    /// Whether target `kind` runs it (`direct` cannot send HTTP/1.1 to the h2c-only origin).
    pub fn runs_on(self, kind: super::target::TargetKind) -> bool {
        !(self == Workload::H1ToH2 && kind == super::target::TargetKind::Direct)
    }

    /// The HTTP/2 workloads (DESIGN.md "Benchmark method": h2load over TLS with ALPN h2).
    pub const H2: [Workload; 2] = [Workload::H2Get, Workload::H2Get1m];

    /// Whether h2load runs it over HTTP/2 (its targets get the settings of
    /// [`super::proxies::H2_SETTINGS`]).
    pub fn is_h2(self) -> bool {
        Workload::H2.contains(&self)
    }

    /// The TLS workloads (DESIGN.md "Benchmark method": TLS), in their default order.
    pub const TLS: [Workload; 5] = [
        Workload::TlsGet64,
        Workload::TlsGet1m,
        Workload::TlsHandshake,
        Workload::TlsResume,
        Workload::Tls12Get64,
    ];

    /// Whether the load goes to the targets' TLS listeners (the TLS and the HTTP/2 workloads).
    pub fn is_tls(self) -> bool {
        Workload::TLS.contains(&self) || self.is_h2()
    }

    /// Whether the client is limited to TLS 1.2.
    pub fn tls12(self) -> bool {
        self == Workload::Tls12Get64
    }

    /// For the connection-per-request TLS workloads, run by edge-bench's handshake loader rather
    /// than wrk: `Some(true)` resumes sessions, `Some(false)` makes every handshake a full one.
    pub fn handshake_loader(self) -> Option<bool> {
        match self {
            Workload::TlsHandshake => Some(false),
            Workload::TlsResume => Some(true),
            _ => None,
        }
    }

    /// The origin its targets proxy to.
    pub fn origin(self) -> OriginKind {
        match self {
            Workload::Get64Nginx
            | Workload::Get256Nginx
            | Workload::HeadsNginx
            | Workload::CloseNginx => OriginKind::Nginx,
            w if w.is_h2_upstream() => OriginKind::H2c,
            _ => OriginKind::Own,
        }
    }

    /// The same load against edge-bench's own origin (itself for those).
    pub fn load(self) -> Workload {
        match self {
            Workload::Get64Nginx => Workload::Get64,
            Workload::Get256Nginx => Workload::Get256,
            Workload::HeadsNginx => Workload::Heads,
            Workload::CloseNginx => Workload::Close,
            w => w,
        }
    }

    /// The name used on the command line, in tables, file names and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Get64 => "get-64",
            Workload::Get256 => "get-256",
            Workload::Get16k => "get-16k",
            Workload::Get1m => "get-1m",
            Workload::Post1m => "post-1m",
            Workload::Close => "close",
            Workload::Heads => "heads",
            Workload::Get64Nginx => "get-64@nginx",
            Workload::Get256Nginx => "get-256@nginx",
            Workload::HeadsNginx => "heads@nginx",
            Workload::CloseNginx => "close@nginx",
            Workload::TlsGet64 => "tls-get-64",
            Workload::TlsGet1m => "tls-get-1m",
            Workload::TlsHandshake => "tls-handshake",
            Workload::TlsResume => "tls-resume",
            Workload::Tls12Get64 => "tls12-get-64",
            Workload::H2Get => "h2-get",
            Workload::H2Get1m => "h2-get-1m",
            Workload::GrpcUnary => "grpc-unary",
            Workload::GrpcStream => "grpc-stream",
            Workload::H1ToH2 => "h1-to-h2",
        }
    }

    /// What it is, in words, for table titles.
    pub fn describe(self, connections: usize) -> String {
        let c = self.connections(connections);
        let streams = super::h2load::STREAMS;
        match self {
            Workload::GrpcUnary => {
                return format!(
                "gRPC unary calls over h2c to an h2c origin, {c} connections x {streams} streams"
            )
            }
            Workload::GrpcStream => {
                return format!(
                    "server-streaming gRPC calls ({} messages each) over h2c to an h2c origin, \
                     {c} connections x {streams} streams",
                    super::h2_upstream::STREAM_MESSAGES
                )
            }
            Workload::H1ToH2 => {
                return format!(
                "small HTTP/1.1 GETs to an h2c origin (h2 upstream), keep-alive, {c} connections"
            )
            }
            _ => {}
        }
        if self.origin() == OriginKind::Nginx {
            return format!("{}, nginx origin", self.load().describe(connections));
        }
        match self {
            Workload::Get64 | Workload::Get256 => {
                format!("small keep-alive GETs (13-byte body), {c} connections")
            }
            Workload::Get16k => format!("16 KiB responses, keep-alive, {c} connections"),
            Workload::Get1m => format!("1 MiB responses, keep-alive, {c} connections"),
            Workload::Post1m => {
                format!("1 MiB POST bodies (13-byte answer), keep-alive, {c} connections")
            }
            Workload::Close => {
                format!("new connection per request (Connection: close), {c} connections")
            }
            Workload::TlsGet64 => format!("small keep-alive GETs over TLS 1.3, {c} connections"),
            Workload::Tls12Get64 => format!("small keep-alive GETs over TLS 1.2, {c} connections"),
            Workload::TlsGet1m => format!("1 MiB responses over TLS 1.3, keep-alive, {c} connections"),
            Workload::TlsHandshake => format!(
                "new TLS 1.3 connection per request, full handshake, {c} connections"
            ),
            Workload::TlsResume => format!(
                "new TLS 1.3 connection per request, session resumed, {c} connections"
            ),
            Workload::H2Get => format!(
                "small GETs over HTTP/2 (TLS 1.3, ALPN h2), {c} connections x {} streams",
                super::h2load::STREAMS
            ),
            Workload::H2Get1m => format!(
                "1 MiB responses over HTTP/2 (TLS 1.3, ALPN h2), {c} connections x {} streams",
                super::h2load::STREAMS
            ),
            _ => format!(
                "realistic heads (browser-like request, application-like response), keep-alive, {c} connections"
            ),
        }
    }

    /// wrk connections: fixed for the small-GET pair, else `default`.
    pub fn connections(self, default: usize) -> usize {
        match self.load() {
            Workload::Get64
            | Workload::TlsGet64
            | Workload::Tls12Get64
            | Workload::H2Get
            | Workload::H2Get1m
            | Workload::GrpcUnary
            | Workload::GrpcStream
            | Workload::H1ToH2 => 64,
            Workload::Get256 => 256,
            _ => default,
        }
    }

    /// The request path on the origin.
    pub fn path(self) -> &'static str {
        match self.load() {
            Workload::Heads => crate::peers::origin::APP_PATH,
            Workload::Get16k => "/size/16k",
            Workload::Get1m | Workload::TlsGet1m | Workload::H2Get1m => "/size/1m",
            Workload::GrpcUnary => super::h2_upstream::UNARY_PATH,
            Workload::GrpcStream => super::h2_upstream::STREAM_PATH,
            _ => "/fast",
        }
    }

    /// Extra wrk `-H` headers.
    pub fn headers(self) -> &'static [&'static str] {
        match self.load() {
            Workload::Close => &["Connection: close"],
            _ => &[],
        }
    }

    /// The wrk Lua script for this workload.
    pub fn lua_script(self) -> String {
        let mut s = String::from("-- written by edge-bench compare\n");
        if self.load() == Workload::Heads {
            for (name, value) in BROWSER_FIELDS {
                let value = value.replace('\\', "\\\\").replace('"', "\\\"");
                s.push_str(&format!("wrk.headers[\"{name}\"] = \"{value}\"\n"));
            }
        }
        if self == Workload::Post1m {
            s.push_str(&format!(
                "wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", {POST_BODY_BYTES})\n\
                 wrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n"
            ));
        }
        let list: Vec<String> = PERCENTILES.iter().map(|p| p.to_string()).collect();
        s.push_str(&format!(
            "local pcts = {{ {} }}\n\
             function done(summary, latency, requests)\n\
             \x20 for _, p in ipairs(pcts) do\n\
             \x20   io.write(string.format(\"edge-bench percentile %s %d\\n\", tostring(p), latency:percentile(p)))\n\
             \x20 end\n\
             \x20 io.write(string.format(\"edge-bench latency max %d\\n\", latency.max))\n\
             end\n",
            list.join(", ")
        ));
        s
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!(
                    "unknown workload {s:?} (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        assert!("get-2m".parse::<Workload>().is_err());
    }

    #[test]
    fn paths_exist_on_the_origin() {
        for w in Workload::ALL {
            let p = w.path();
            assert!(
                p == "/fast" || crate::peers::origin::sized_index(p).is_some() || w.is_grpc(),
                "{p}"
            );
            assert!(w.origin() == OriginKind::Own || w.load() != w || w.is_h2_upstream());
        }
        assert_eq!(Workload::Get256.connections(64), 256);
        assert_eq!(Workload::Get1m.connections(32), 32);
        assert_eq!(Workload::Close.headers(), ["Connection: close"]);
    }

    #[test]
    fn tls_workloads() {
        for w in Workload::TLS {
            assert!(w.is_tls() && w.origin() == OriginKind::Own, "{w}");
        }
        assert!(!Workload::Get64.is_tls() && Workload::Tls12Get64.tls12());
        assert_eq!(Workload::TlsHandshake.handshake_loader(), Some(false));
        assert_eq!(Workload::TlsResume.handshake_loader(), Some(true));
        assert_eq!(Workload::TlsGet1m.path(), "/size/1m");
        assert_eq!(Workload::TlsGet64.connections(8), 64);
        for w in Workload::H2 {
            assert!(w.is_h2() && w.is_tls() && !w.tls12() && w.origin() == OriginKind::Own);
            assert_eq!((w.connections(8), w.handshake_loader()), (64, None));
        }
        assert_eq!(Workload::H2Get1m.path(), "/size/1m");
        assert_eq!("h2-get-1m".parse::<Workload>(), Ok(Workload::H2Get1m));
        assert!(!Workload::TlsGet64.is_h2());
    }

    #[test]
    fn h2_upstream_workloads() {
        for w in Workload::H2_UPSTREAM {
            assert!(w.is_h2_upstream() && !w.is_h2() && !w.is_tls(), "{w}");
            assert_eq!((w.origin(), w.connections(8)), (OriginKind::H2c, 64));
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        assert_eq!(Workload::GrpcStream.messages_per_answer(), Some(100));
        assert_eq!(Workload::GrpcStream.path(), "/bench.Echo/Stream100");
        assert!(!Workload::H1ToH2.is_grpc() && Workload::GrpcUnary.is_grpc());
        use super::super::target::TargetKind;
        assert!(!Workload::H1ToH2.runs_on(TargetKind::Direct));
        assert!(Workload::GrpcUnary.runs_on(TargetKind::Direct));
    }

    #[test]
    fn scripts() {
        let post = Workload::Post1m.lua_script();
        assert!(post.contains("wrk.method = \"POST\""));
        assert!(post.contains("string.rep(\"x\", 1048576)"));
        let get = Workload::Get64.lua_script();
        assert!(!get.contains("POST"));
        assert!(get.contains("latency:percentile(p)") && get.contains("99.9, 99.95"));
        assert!(get.contains("function done(summary, latency, requests)"));
        let heads = Workload::HeadsNginx.lua_script();
        assert!(
            heads.contains("wrk.headers[\"Cookie\"] = \"sid="),
            "{heads}"
        );
        assert!(heads.contains("\\\"Chromium\\\""), "{heads}");
    }

    #[test]
    fn the_browser_head_is_800_to_1000_bytes() {
        let fields: usize = BROWSER_FIELDS
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum();
        let head = "GET /app HTTP/1.1\r\nHost: 127.0.0.1:40000\r\n".len() + fields + 2;
        assert!((800..=1000).contains(&head), "{head} bytes");
        assert_eq!(Workload::HeadsNginx.origin(), OriginKind::Nginx);
        assert_eq!(Workload::HeadsNginx.path(), "/app");
        assert_eq!(Workload::Get64Nginx.connections(8), 64);
    }
}
