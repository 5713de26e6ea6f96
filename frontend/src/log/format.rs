//! The three forms of an access line (DESIGN.md "Observability", `log.access_format`), written into a
//! reused buffer without allocating: `json` (one object per line), `text` (logfmt `key=value`) and
//! `combined` (nginx/Apache combined, then the duration in seconds and the request id). A gRPC call's
//! lines in `json` and `text` end with its `grpc_status`. Client-sent
//! bytes (path, host, user agent, referer, ids) are escaped for the form: JSON string escapes (bytes that
//! are not UTF-8 become U+FFFD), logfmt quoting, and nginx's `\xNN` inside combined's quotes.
//!
//! Examples (one request each):
//!
//! ```text
//! {"time":"2026-12-04T21:22:31.123Z","event":"access","worker":0,"protocol":"http1","client":"10.0.0.7:51234","method":"GET","host":"api.example.com","path":"/v1/users","query_len":5,"status":200,"request_bytes":0,"response_bytes":512,"duration_ms":1.834,"upstream_ttfb_ms":1.502,"route":"api","upstream":"origin","endpoint":"10.0.1.2:8080","attempts":1,"request_id":"1f3a9c2e-0-2a","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","user_agent":"curl/8.5.0"}
//! time=2026-12-04T21:22:31.123Z event=access worker=0 protocol=http1 client=10.0.0.7:51234 method=GET host=api.example.com path=/v1/users query_len=5 status=200 request_bytes=0 response_bytes=512 duration_ms=1.834 upstream_ttfb_ms=1.502 route=api upstream=origin endpoint=10.0.1.2:8080 attempts=1 request_id=1f3a9c2e-0-2a trace_id=4bf92f3577b34da6a3ce929d0e0e4736 user_agent=curl/8.5.0
//! 10.0.0.7 - - [04/Dec/2026:21:22:31 +0000] "GET /v1/users?a=b HTTP/1.1" 200 512 "-" "curl/8.5.0" 0.002 1f3a9c2e-0-2a
//! ```

use std::{
    io::Write,
    net::SocketAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use edge_core::{config::AccessFormat, metrics::Protocol};

/// Everything one access line says, borrowed from the request's state.
#[derive(Clone, Copy, Debug)]
pub struct AccessLine<'a> {
    /// When the request ended.
    pub time: SystemTime,
    /// Worker index.
    pub worker: usize,
    /// The downstream protocol.
    pub protocol: Protocol,
    /// The client's address (the PROXY header's source when there was one).
    pub client: SocketAddr,
    /// The method, as received.
    pub method: &'a [u8],
    /// The target as received, before any rewrite (path and query; possibly cut at 256 bytes).
    pub target: &'a [u8],
    /// Bytes of the query (after `?`) of the whole target.
    pub query_len: usize,
    /// Host or `:authority` (empty: none).
    pub host: &'a [u8],
    /// The status sent.
    pub status: u16,
    /// Request body payload bytes taken from the client.
    pub request_bytes: u64,
    /// Response body payload bytes sent to the client.
    pub response_bytes: u64,
    /// From the request's first byte to its end.
    pub duration: Duration,
    /// From the request head written upstream to the response head (the attempt that answered).
    pub ttfb: Option<Duration>,
    /// The route's label (name or index); `-` before routing.
    pub route: &'a str,
    /// The upstream's name (empty: none).
    pub upstream: &'a str,
    /// The endpoint of the last attempt.
    pub endpoint: Option<SocketAddr>,
    /// Upstream attempts (0: not forwarded).
    pub attempts: u32,
    /// The request id (empty: none yet).
    pub request_id: &'a [u8],
    /// The W3C trace id (empty: none).
    pub trace_id: &'a [u8],
    /// User-Agent, at most 256 bytes (empty: none).
    pub user_agent: &'a [u8],
    /// Referer, at most 256 bytes (empty: none), for the combined form.
    pub referer: &'a [u8],
    /// The `grpc-status` the client got (`None`: not a gRPC call, or none seen); written by `json` and
    /// `text` only when there is one, so lines of other requests keep their form.
    pub grpc_status: Option<u16>,
}

impl AccessLine<'_> {
    /// The path part of the target.
    fn path(&self) -> &[u8] {
        self.target
            .split(|&b| b == b'?')
            .next()
            .unwrap_or(self.target)
    }
}

/// Appends `l` in `format`, ending with `\n`.
pub fn write(out: &mut Vec<u8>, format: AccessFormat, l: &AccessLine<'_>) {
    match format {
        AccessFormat::Json => json(out, l),
        AccessFormat::Text => text(out, l),
        AccessFormat::Combined => combined(out, l),
    }
    out.push(b'\n');
}

fn json(out: &mut Vec<u8>, l: &AccessLine<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    rfc3339(out, l.time);
    out.extend_from_slice(b"\",\"event\":\"access\",\"worker\":");
    dec(out, l.worker as u64);
    out.extend_from_slice(b",\"protocol\":\"");
    out.extend_from_slice(l.protocol.as_str().as_bytes());
    let _ = write!(out, "\",\"client\":\"{}\"", l.client);
    let key = |out: &mut Vec<u8>, k: &str| {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b"\":");
    };
    let string = |out: &mut Vec<u8>, k: &str, v: &[u8]| {
        key(out, k);
        if v.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            json_string(out, v);
        }
    };
    string(out, "method", l.method);
    string(out, "host", l.host);
    string(out, "path", l.path());
    key(out, "query_len");
    dec(out, l.query_len as u64);
    key(out, "status");
    dec(out, u64::from(l.status));
    key(out, "request_bytes");
    dec(out, l.request_bytes);
    key(out, "response_bytes");
    dec(out, l.response_bytes);
    key(out, "duration_ms");
    millis(out, l.duration);
    key(out, "upstream_ttfb_ms");
    match l.ttfb {
        Some(t) => millis(out, t),
        None => out.extend_from_slice(b"null"),
    }
    string(out, "route", l.route.as_bytes());
    string(out, "upstream", l.upstream.as_bytes());
    key(out, "endpoint");
    match l.endpoint {
        Some(e) => drop(write!(out, "\"{e}\"")),
        None => out.extend_from_slice(b"null"),
    }
    key(out, "attempts");
    dec(out, u64::from(l.attempts));
    string(out, "request_id", l.request_id);
    string(out, "trace_id", l.trace_id);
    string(out, "user_agent", l.user_agent);
    if let Some(g) = l.grpc_status {
        key(out, "grpc_status");
        dec(out, u64::from(g));
    }
    out.push(b'}');
}

fn text(out: &mut Vec<u8>, l: &AccessLine<'_>) {
    out.extend_from_slice(b"time=");
    rfc3339(out, l.time);
    out.extend_from_slice(b" event=access worker=");
    dec(out, l.worker as u64);
    out.extend_from_slice(b" protocol=");
    out.extend_from_slice(l.protocol.as_str().as_bytes());
    let _ = write!(out, " client={}", l.client);
    let pair = |out: &mut Vec<u8>, k: &str, v: &[u8]| {
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        logfmt_value(out, v);
    };
    let num = |out: &mut Vec<u8>, k: &str, v: u64| {
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        dec(out, v);
    };
    pair(out, "method", l.method);
    pair(out, "host", l.host);
    pair(out, "path", l.path());
    num(out, "query_len", l.query_len as u64);
    num(out, "status", u64::from(l.status));
    num(out, "request_bytes", l.request_bytes);
    num(out, "response_bytes", l.response_bytes);
    out.extend_from_slice(b" duration_ms=");
    millis(out, l.duration);
    out.extend_from_slice(b" upstream_ttfb_ms=");
    match l.ttfb {
        Some(t) => millis(out, t),
        None => out.push(b'-'),
    }
    pair(out, "route", l.route.as_bytes());
    pair(out, "upstream", l.upstream.as_bytes());
    match l.endpoint {
        Some(e) => drop(write!(out, " endpoint={e}")),
        None => out.extend_from_slice(b" endpoint=-"),
    }
    num(out, "attempts", u64::from(l.attempts));
    pair(out, "request_id", l.request_id);
    pair(out, "trace_id", l.trace_id);
    pair(out, "user_agent", l.user_agent);
    if let Some(g) = l.grpc_status {
        num(out, "grpc_status", u64::from(g));
    }
}

fn combined(out: &mut Vec<u8>, l: &AccessLine<'_>) {
    let _ = write!(out, "{} - - [", l.client.ip());
    clf_time(out, l.time);
    out.extend_from_slice(b"] \"");
    quoted_clf(out, l.method);
    out.push(b' ');
    quoted_clf(out, l.target);
    out.extend_from_slice(match l.protocol {
        Protocol::Http1 => b" HTTP/1.1\" ",
        Protocol::H2 => b" HTTP/2.0\" ",
    });
    dec(out, u64::from(l.status));
    out.push(b' ');
    dec(out, l.response_bytes);
    out.extend_from_slice(b" \"");
    clf_or_dash(out, l.referer);
    out.extend_from_slice(b"\" \"");
    clf_or_dash(out, l.user_agent);
    out.extend_from_slice(b"\" ");
    // Seconds with millisecond resolution, as nginx's $request_time.
    let ms = l.duration.as_millis() as u64;
    dec(out, ms / 1000);
    out.push(b'.');
    let frac = ms % 1000;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
    out.push(b' ');
    if l.request_id.is_empty() {
        out.push(b'-');
    } else {
        quoted_clf(out, l.request_id);
    }
}

fn dec(out: &mut Vec<u8>, n: u64) {
    edge_core::http::write::push_dec(out, n);
}

/// Milliseconds with three decimals (microsecond resolution).
fn millis(out: &mut Vec<u8>, d: Duration) {
    let us = d.as_micros() as u64;
    dec(out, us / 1000);
    out.push(b'.');
    let frac = us % 1000;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// A JSON string of `v`: `"`, `\` and control bytes escaped; bytes that are not UTF-8 become U+FFFD.
fn json_string(out: &mut Vec<u8>, v: &[u8]) {
    out.push(b'"');
    for chunk in v.utf8_chunks() {
        for &b in chunk.valid().as_bytes() {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0..=0x1f | 0x7f => {
                    out.extend_from_slice(b"\\u00");
                    out.extend_from_slice(&hex2(b));
                }
                _ => out.push(b),
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
    out.push(b'"');
}

/// A logfmt value: bare when it is plain, else quoted with `"` and `\` escaped and control bytes as
/// `\xNN`; `-` when empty.
fn logfmt_value(out: &mut Vec<u8>, v: &[u8]) {
    if v.is_empty() {
        return out.push(b'-');
    }
    let plain = v
        .iter()
        .all(|&b| b > b' ' && b < 0x7f && b != b'"' && b != b'=' && b != b'\\');
    if plain {
        return out.extend_from_slice(v);
    }
    out.push(b'"');
    escape_bytes(out, v);
    out.push(b'"');
}

/// `"` and `\` escaped with `\`; control and non-ASCII bytes as `\xNN`, as nginx writes them.
fn escape_bytes(out: &mut Vec<u8>, v: &[u8]) {
    for &b in v {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b' '..=0x7e => out.push(b),
            _ => {
                out.extend_from_slice(b"\\x");
                out.extend_from_slice(&hex2(b));
            }
        }
    }
}

/// Inside combined's quotes.
fn quoted_clf(out: &mut Vec<u8>, v: &[u8]) {
    escape_bytes(out, v);
}

fn clf_or_dash(out: &mut Vec<u8>, v: &[u8]) {
    match v.is_empty() {
        true => out.push(b'-'),
        false => quoted_clf(out, v),
    }
}

fn hex2(b: u8) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]
}

/// (year, month 1-12, day 1-31, hour, minute, second, millisecond) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    // Days to civil date (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis(),
    )
}

fn two(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&[b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8]);
}

/// `2026-12-04T21:22:31.123Z`
fn rfc3339(out: &mut Vec<u8>, t: SystemTime) {
    let (y, mo, d, h, mi, s, ms) = civil(t);
    dec(out, y.max(0) as u64);
    out.push(b'-');
    two(out, mo);
    out.push(b'-');
    two(out, d);
    out.push(b'T');
    two(out, h);
    out.push(b':');
    two(out, mi);
    out.push(b':');
    two(out, s);
    out.push(b'.');
    out.extend_from_slice(&[
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
    ]);
    out.push(b'Z');
}

/// `04/Dec/2026:21:22:31 +0000` (Common Log Format, UTC).
fn clf_time(out: &mut Vec<u8>, t: SystemTime) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let (y, mo, d, h, mi, s, _) = civil(t);
    two(out, d);
    out.push(b'/');
    out.extend_from_slice(MONTHS[(mo - 1) as usize]);
    out.push(b'/');
    dec(out, y.max(0) as u64);
    out.push(b':');
    two(out, h);
    out.push(b':');
    two(out, mi);
    out.push(b':');
    two(out, s);
    out.extend_from_slice(b" +0000");
}

#[cfg(test)]
mod tests;
