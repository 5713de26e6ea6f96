//! Protocol-neutral message views (DESIGN.md "Layout", `core/src/http`): what the downstream sessions
//! (HTTP/1.1 and HTTP/2) produce for a request and consume for a response, and what the upstream
//! HTTP/1.1 client encodes and decodes. A view is a parsed head over the bytes it was parsed from:
//! HTTP/1.1 sessions parse the wire head in place; an HTTP/2 session writes its pseudo-headers and fields
//! as an HTTP/1.1-syntax head into a buffer of its own and parses that, so routing, the forwarding rules
//! and the status table see one shape whatever the client spoke.

use super::head::{Field, RequestHead, ResponseHead};

/// The protocol version a downstream request arrived in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: no interim responses, no chunked framing, keep-alive only on request.
    Http10,
    /// HTTP/1.1.
    Http11,
    /// HTTP/2 (RFC 9113): one stream of a multiplexed connection.
    H2,
}

/// A request head: method, target (path), authority, fields and version.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// The bytes the head was parsed from.
    pub buf: &'a [u8],
    /// The parsed head (offsets into `buf`).
    pub head: &'a RequestHead,
    /// Its fields (offsets into `buf`).
    pub fields: &'a [Field],
    /// The version the client spoke.
    pub version: Version,
}

impl<'a> RequestView<'a> {
    /// The method token.
    pub fn method(&self) -> &'a [u8] {
        &self.buf[self.head.method.clone()]
    }

    /// The target as edge routes and forwards it (see [`RequestHead::path`]).
    pub fn path(&self) -> &'a [u8] {
        &self.buf[self.head.path.clone()]
    }
}

/// A response head: status and fields.
#[derive(Clone, Copy, Debug)]
pub struct ResponseView<'a> {
    /// The bytes the head was parsed from.
    pub buf: &'a [u8],
    /// The parsed head (offsets into `buf`).
    pub head: &'a ResponseHead,
    /// Its fields (offsets into `buf`).
    pub fields: &'a [Field],
}

impl ResponseView<'_> {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.head.status
    }
}
