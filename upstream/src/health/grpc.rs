//! One gRPC health probe (DESIGN.md "HTTP/2 and gRPC upstreams", `grpc_service`): the gRPC Health
//! Checking Protocol's unary `grpc.health.v1.Health/Check` over HTTP/2. The connection is opened as for
//! an HTTP probe (same TLS target, ALPN and PROXY header), then h2 runs over [`PollIo`] with its
//! connection future driven by a task of its own; the call is a POST with `:authority` = the endpoint
//! (or `tls_server_name`), `content-type: application/grpc`, `te: trailers` and `user-agent:
//! edge-health`, its body one length-prefixed `HealthCheckRequest { string service = 1 }`.
//!
//! It passes on HTTP 200, `grpc-status` 0 (in the trailers, or in a trailers-only head) and a
//! `HealthCheckResponse { ServingStatus status = 1 }` of SERVING. The two messages are encoded and
//! decoded here by hand (protobuf wire format: a tag byte, varints, length-delimited bytes); nothing else
//! of protobuf is needed. Everything, connect included, runs under the check's `timeout`; the
//! connection and its driver end with the probe.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use edge_core::{config::HealthCheck, io::PollIo};
use http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use monoio::time::Instant;

use super::tracker::{Failure, Verdict};
use crate::{
    connect::{connect, TlsTarget, UpstreamStream},
    error::UpstreamErrorKind,
};

/// The method's path (grpc/grpc doc/health-checking.md).
pub const PATH: &str = "/grpc.health.v1.Health/Check";
/// `HealthCheckResponse.ServingStatus.SERVING`.
pub const SERVING: u64 = 1;
/// A response body (length-prefixed messages) larger than this fails the probe.
const MAX_BODY: usize = 16 * 1024;

/// What a gRPC probe of one endpoint sends, built once per configuration.
#[derive(Clone, Debug)]
pub struct GrpcProbe {
    /// `:authority`: the endpoint's address text as configured, or `tls_server_name`.
    pub authority: String,
    /// The request body: one length-prefixed `HealthCheckRequest` ([`request_message`]).
    pub message: Bytes,
}

impl GrpcProbe {
    /// The probe asking about `service` (`""`: the server as a whole) with `authority`.
    pub fn new(service: &str, authority: &str) -> GrpcProbe {
        GrpcProbe {
            authority: authority.to_string(),
            message: request_message(service),
        }
    }
}

/// The gRPC length-prefixed message (1 byte compressed flag = 0, 4 bytes big-endian length) holding
/// `HealthCheckRequest { service }`: field 1, wire type 2 (tag 0x0a), a varint length, the bytes; the
/// empty message when `service` is empty (proto3 omits a default field).
pub fn request_message(service: &str) -> Bytes {
    let mut pb = BytesMut::new();
    if !service.is_empty() {
        pb.put_u8(0x0a);
        put_varint(&mut pb, service.len() as u64);
        pb.put_slice(service.as_bytes());
    }
    let mut out = BytesMut::with_capacity(5 + pb.len());
    out.put_u8(0);
    out.put_u32(pb.len() as u32);
    out.put_slice(&pb);
    out.freeze()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Reads a varint at the front of `buf`, advancing it; `None` when truncated or over 10 bytes.
fn take_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The `status` of the one uncompressed length-prefixed `HealthCheckResponse` that makes up `body`
/// (0, UNKNOWN, when the field is absent, as proto3 encodes a default); unknown fields are skipped.
///
/// # Errors
/// [`Failure::BadMessage`] when `body` is not exactly one whole message, is compressed, or its
/// protobuf does not parse.
pub fn response_status(body: &[u8]) -> Result<u64, Failure> {
    let bad = Failure::BadMessage;
    let (&[flag, a, b, c, d], mut pb) = body.split_first_chunk::<5>().ok_or(bad)?;
    if flag != 0 || u32::from_be_bytes([a, b, c, d]) as usize != pb.len() {
        return Err(bad);
    }
    let mut status = 0;
    while !pb.is_empty() {
        let tag = take_varint(&mut pb).ok_or(bad)?;
        let skip = match (tag >> 3, tag & 7) {
            (1, 0) => {
                status = take_varint(&mut pb).ok_or(bad)?;
                0
            }
            (_, 0) => take_varint(&mut pb).map(|_| 0).ok_or(bad)?,
            (_, 1) => 8,
            (_, 2) => usize::try_from(take_varint(&mut pb).ok_or(bad)?).map_err(|_| bad)?,
            (_, 5) => 4,
            _ => return Err(bad),
        };
        pb = pb.get(skip..).ok_or(bad)?;
    }
    Ok(status)
}

/// Probes `addr` (an endpoint of `upstream`) with `probe`; see the module docs. `Ok(200)` on a pass.
///
/// # Cancel safety
/// Dropping the future drops the stream and the connection; the connection's driver ends by the
/// probe's deadline at the latest.
pub async fn grpc_probe(
    upstream: &str,
    addr: SocketAddr,
    probe: &GrpcProbe,
    check: &HealthCheck,
    tls: Option<&TlsTarget>,
    proxy_header: Option<Vec<u8>>,
) -> Verdict {
    let deadline = Instant::now() + check.timeout.0;
    let call = call(upstream, addr, probe, deadline, tls, proxy_header);
    match edge_core::clock::timeout_at(deadline, call).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(f)) => Err(f),
        Ok(Ok((grpc_status, _))) if grpc_status != 0 => Err(Failure::GrpcStatus(grpc_status)),
        Ok(Ok((_, serving))) if serving != SERVING => Err(Failure::NotServing(serving)),
        Ok(Ok(_)) => Ok(200),
    }
}

/// Connect, start h2, make the call; its `grpc-status` and the response's serving status.
async fn call(
    upstream: &str,
    addr: SocketAddr,
    probe: &GrpcProbe,
    deadline: Instant,
    tls: Option<&TlsTarget>,
    proxy_header: Option<Vec<u8>>,
) -> Result<(u32, u64), Failure> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    let stream = connect(upstream, addr, timeout, tls, proxy_header)
        .await
        .map_err(|e| match e.kind {
            UpstreamErrorKind::ConnectTimeout => Failure::Timeout,
            UpstreamErrorKind::Tls => Failure::Tls,
            _ => Failure::Connect(std::io::ErrorKind::ConnectionRefused),
        })?;
    let scheme = match &stream {
        UpstreamStream::Plain(_) => "http",
        // `protocol = "auto"` offers http/1.1 too: a server that chose it cannot answer gRPC.
        UpstreamStream::Tls(t) if t.with_conn(|s| s.alpn_protocol() == Some(b"h2")) => "https",
        UpstreamStream::Tls(_) => return Err(Failure::NotH2),
    };
    let io = PollIo::new(stream, &[], timeout);
    let (send, connection) = h2::client::Builder::new()
        .enable_push(false)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| h2_failure(&e))?;
    // The driver lives until the connection ends or the probe's deadline, whichever is first: a
    // server that keeps the connection open cannot keep it.
    monoio::spawn(async move {
        let _ = edge_core::clock::timeout_at(deadline, connection).await;
    });
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("{scheme}://{}{PATH}", probe.authority))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .header(header::USER_AGENT, "edge-health")
        .body(())
        .map_err(|_| Failure::BadAuthority)?;
    let mut send = send.ready().await.map_err(|e| h2_failure(&e))?;
    let (response, mut body) = send
        .send_request(request, false)
        .map_err(|e| h2_failure(&e))?;
    body.send_data(probe.message.clone(), true)
        .map_err(|e| h2_failure(&e))?;
    let response = response.await.map_err(|e| h2_failure(&e))?;
    if response.status() != StatusCode::OK {
        return Err(Failure::Status(response.status().as_u16()));
    }
    // Trailers-only: the head carries grpc-status and ends the stream.
    if let Some(status) = grpc_status(response.headers()) {
        return Ok((status?, 0));
    }
    let mut recv = response.into_body();
    let mut message = Vec::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(|e| h2_failure(&e))?;
        let _ = recv.flow_control().release_capacity(data.len());
        message.extend_from_slice(&data);
        if message.len() > MAX_BODY {
            return Err(Failure::BadMessage);
        }
    }
    let trailers = recv.trailers().await.map_err(|e| h2_failure(&e))?;
    let status = trailers
        .as_ref()
        .and_then(grpc_status)
        .ok_or(Failure::BadMessage)??;
    if status != 0 {
        return Ok((status, 0));
    }
    Ok((0, response_status(&message)?))
}

/// The `grpc-status` field of `fields`, when present; a value that is not a number is a malformed
/// response.
fn grpc_status(fields: &HeaderMap) -> Option<Result<u32, Failure>> {
    let v: &HeaderValue = fields.get("grpc-status")?;
    Some(
        v.to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Failure::BadMessage),
    )
}

/// An h2 error as a probe failure: a reset or GOAWAY with its reason code, else the connection failed.
fn h2_failure(e: &h2::Error) -> Failure {
    match e.reason() {
        Some(r) => Failure::H2(r.into()),
        None => Failure::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_one_length_prefixed_health_check_request() {
        assert_eq!(&request_message("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &request_message("edge.test.Echo")[..],
            b"\x00\x00\x00\x00\x10\x0a\x0eedge.test.Echo"
        );
        // A name of 200 bytes has a two-byte varint length (200 = 0xc8 0x01).
        let long = "s".repeat(200);
        let m = request_message(&long);
        assert_eq!(&m[..8], &[0, 0, 0, 0, 203, 0x0a, 0xc8, 0x01]);
        assert_eq!(m.len(), 5 + 203);
    }

    #[test]
    fn the_response_status_is_read_past_unknown_fields() {
        // SERVING.
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        // NOT_SERVING (2), SERVICE_UNKNOWN (3).
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 3]), Ok(3));
        // The empty message: status absent is UNKNOWN (0).
        assert_eq!(response_status(&[0, 0, 0, 0, 0]), Ok(0));
        // Unknown fields of every wire type around it are skipped.
        let pb = [
            0x10, 0x96, 0x01, // field 2 varint 150
            0x1a, 0x02, b'h', b'i', // field 3 bytes
            0x08, 0x01, // status SERVING
            0x21, 1, 2, 3, 4, 5, 6, 7, 8, // field 4 fixed64
            0x2d, 1, 2, 3, 4, // field 5 fixed32
        ];
        let mut body = vec![0, 0, 0, 0, pb.len() as u8];
        body.extend_from_slice(&pb);
        assert_eq!(response_status(&body), Ok(1));
    }

    #[test]
    fn a_malformed_response_is_a_bad_message() {
        let bad = Err(Failure::BadMessage);
        assert_eq!(response_status(&[]), bad, "no message");
        assert_eq!(response_status(&[0, 0, 0, 0]), bad, "a short prefix");
        assert_eq!(response_status(&[0, 0, 0, 0, 3, 0x08, 1]), bad, "truncated");
        assert_eq!(
            response_status(&[0, 0, 0, 0, 1, 0x08, 1]),
            bad,
            "two messages"
        );
        assert_eq!(
            response_status(&[1, 0, 0, 0, 2, 0x08, 1]),
            bad,
            "compressed"
        );
        assert_eq!(
            response_status(&[0, 0, 0, 0, 2, 0x08, 0x81]),
            bad,
            "varint cut"
        );
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x1a, 5]), bad, "bytes cut");
        assert_eq!(
            response_status(&[0, 0, 0, 0, 1, 0x0b]),
            bad,
            "group wire type"
        );
    }
}
