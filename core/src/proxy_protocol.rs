//! The PROXY protocol header (haproxy's proxy-protocol.txt, versions 1 and 2), sans-IO: [`parse`] looks at
//! the bytes a connection has sent so far and answers [`Parse::Incomplete`] until a whole header is
//! there, then its length and the client address it carries (DESIGN.md "Upstream health, discovery and
//! balancing", the PROXY protocol paragraph). Strict: anything outside the spec is a [`ProxyError`] with a
//! short reason, and an input that is already wrong is refused as soon as the wrong byte is seen, with the
//! same error the whole input gets (the checks run in byte order). Lengths use checked arithmetic.
//!
//! The outbound header edge sends to upstreams is written by [`encode`].
//!
//! Depends on `std` alone: the fuzz crate (core/fuzz) compiles this file on its own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which header versions a listener accepts (`server.proxy_protocol` when not "off").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versions {
    /// Only the text header (spec section 2.1).
    V1,
    /// Only the binary header (spec section 2.2).
    V2,
    /// Either.
    Any,
}

impl Versions {
    fn v1(self) -> bool {
        self != Versions::V2
    }
    fn v2(self) -> bool {
        self != Versions::V1
    }
}

/// The client address a header gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The original client (the header's source address and port).
    Client(SocketAddr),
    /// Keep the connection's own peer address: a v2 LOCAL command (a load balancer's own health check,
    /// spec section 2.2), a v2 UNSPEC or UNIX family, or a v1 `UNKNOWN` line.
    Peer,
}

/// A complete header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header length in bytes; the connection's own data (e.g. the HTTP request) starts right after it.
    pub len: usize,
    /// The client address it gives.
    pub source: Source,
}

/// [`parse`]'s answer for a well-formed input so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parse {
    /// A valid prefix of a header: read more.
    Incomplete,
    /// A whole header.
    Done(Header),
}

/// Why the bytes are not an acceptable PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// Neither signature: the peer sent something else (e.g. a plain HTTP request).
    Missing,
    /// A v2 header where only v1 is accepted, or a v1 header where only v2 is.
    Version,
    /// v1: no CRLF within 107 bytes.
    V1TooLong,
    /// v1: a byte outside printable ASCII, or a CR or LF not forming the line's CRLF.
    V1Line,
    /// v1: not `PROXY` SP (`TCP4` | `TCP6`) and four single-space-separated fields, or `UNKNOWN`.
    V1Fields,
    /// v1: an address that is not the protocol's family, or not canonical.
    V1Address,
    /// v1: a port that is not 0-65535 in decimal without leading zeros.
    V1Port,
    /// v2: the version nibble is not 2.
    V2Version,
    /// v2: a command other than LOCAL (0) or PROXY (1).
    V2Command,
    /// v2: an address family or transport protocol edge does not take (a stream over TCP, UNIX or
    /// UNSPEC are taken).
    V2Family,
    /// v2: the length is shorter than the family's address block.
    V2Length,
    /// v2: a TLV that does not fit in the header's length.
    V2Tlv,
}

impl ProxyError {
    /// A short reason for log lines.
    pub const fn reason(self) -> &'static str {
        match self {
            ProxyError::Missing => "no PROXY header",
            ProxyError::Version => "PROXY header of a version not configured",
            ProxyError::V1TooLong => "PROXY v1 header over 107 bytes",
            ProxyError::V1Line => "PROXY v1 header with a bad byte",
            ProxyError::V1Fields => "PROXY v1 header with bad fields",
            ProxyError::V1Address => "PROXY v1 header with a bad address",
            ProxyError::V1Port => "PROXY v1 header with a bad port",
            ProxyError::V2Version => "PROXY v2 header with a bad version",
            ProxyError::V2Command => "PROXY v2 header with a bad command",
            ProxyError::V2Family => "PROXY v2 header with an unsupported family or protocol",
            ProxyError::V2Length => "PROXY v2 header too short for its address family",
            ProxyError::V2Tlv => "PROXY v2 header with a malformed TLV",
        }
    }
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

/// The v1 header's start (spec section 2.1).
const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 header, CRLF included (spec section 2.1).
pub const V1_MAX: usize = 107;
/// The v2 signature (spec section 2.2).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The v2 fixed part: signature, version/command, family/protocol, length.
const V2_FIXED: usize = 16;

/// Whether `buf`, the first bytes of a connection, starts a PROXY header of either version: `Some(true)`
/// when it begins with the v1 prefix `PROXY ` or the v2 signature, `Some(false)` when it cannot be one,
/// `None` while every byte so far is a prefix of one (an HTTP request may start with CRLF, a prefix of
/// the v2 signature, or with `PRO`).
pub fn starts_header(buf: &[u8]) -> Option<bool> {
    let mut undecided = false;
    for sig in [V1_PREFIX, &V2_SIGNATURE[..]] {
        let n = buf.len().min(sig.len());
        if buf[..n] == sig[..n] {
            if n == sig.len() {
                return Some(true);
            }
            undecided = true;
        }
    }
    match undecided {
        true => None,
        false => Some(false),
    }
}

/// Parses the PROXY header at the start of `buf` (all the bytes received so far), accepting `versions`.
///
/// # Errors
/// [`ProxyError`] as soon as `buf` cannot be the start of an acceptable header; the same error for every
/// longer input with that start.
pub fn parse(buf: &[u8], versions: Versions) -> Result<Parse, ProxyError> {
    if buf.is_empty() {
        return Ok(Parse::Incomplete);
    }
    let is_v1 = starts_like(buf, V1_PREFIX);
    let is_v2 = starts_like(buf, &V2_SIGNATURE);
    match (is_v1, is_v2) {
        (true, _) if versions.v1() => parse_v1(buf),
        (_, true) if versions.v2() => parse_v2(buf),
        // The other version: refused once its whole signature is there (a shorter start may still turn
        // out to be neither, and the answer must not change as bytes arrive).
        (true, _) if buf.len() >= V1_PREFIX.len() => Err(ProxyError::Version),
        (_, true) if buf.len() >= V2_SIGNATURE.len() => Err(ProxyError::Version),
        (true, _) | (_, true) => Ok(Parse::Incomplete),
        (false, false) => Err(ProxyError::Missing),
    }
}

/// Whether `buf` and `sig` agree on their common length.
fn starts_like(buf: &[u8], sig: &[u8]) -> bool {
    let n = buf.len().min(sig.len());
    buf[..n] == sig[..n]
}

/// Version 1 (spec section 2.1): `PROXY TCP4 src dst sport dport\r\n` (or `TCP6`), or `PROXY UNKNOWN`
/// followed by anything up to the CRLF.
fn parse_v1(buf: &[u8]) -> Result<Parse, ProxyError> {
    let Some(end) = v1_line_end(buf)? else {
        return Ok(Parse::Incomplete);
    };
    let line = &buf[V1_PREFIX.len()..end];
    let len = end + 2;
    let mut fields = line.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    if proto == b"UNKNOWN" {
        return Ok(Parse::Done(Header {
            len,
            source: Source::Peer,
        }));
    }
    let v6 = match proto {
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err(ProxyError::V1Fields),
    };
    let (Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(ProxyError::V1Fields);
    };
    let src = v1_address(src, v6)?;
    v1_address(dst, v6)?;
    let sport = v1_port(sport)?;
    v1_port(dport)?;
    Ok(Parse::Done(Header {
        len,
        source: Source::Client(SocketAddr::new(src, sport)),
    }))
}

/// The index of the line's CR once its CRLF is in `buf`; `None` while it may still come.
fn v1_line_end(buf: &[u8]) -> Result<Option<usize>, ProxyError> {
    let scan = &buf[..buf.len().min(V1_MAX)];
    for (i, &b) in scan.iter().enumerate() {
        match b {
            // The LF would be past byte 107.
            b'\r' if i + 2 > V1_MAX => return Err(ProxyError::V1TooLong),
            b'\r' => {
                return match buf.get(i + 1) {
                    Some(b'\n') => Ok(Some(i)),
                    Some(_) => Err(ProxyError::V1Line),
                    None => Ok(None),
                };
            }
            b' '..=b'~' => {}
            _ => return Err(ProxyError::V1Line),
        }
    }
    if scan.len() >= V1_MAX {
        Err(ProxyError::V1TooLong)
    } else {
        Ok(None)
    }
}

/// An address of the line's family, written canonically enough for `std`'s strict parsers (which refuse
/// leading zeros in IPv4 octets).
fn v1_address(text: &[u8], v6: bool) -> Result<IpAddr, ProxyError> {
    let text = std::str::from_utf8(text).map_err(|_| ProxyError::V1Address)?;
    if v6 {
        text.parse::<Ipv6Addr>().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().map(IpAddr::V4)
    }
    .map_err(|_| ProxyError::V1Address)
}

/// A port: 1 to 5 decimal digits, no leading zero (except "0" itself), at most 65535.
fn v1_port(text: &[u8]) -> Result<u16, ProxyError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.iter().all(u8::is_ascii_digit);
    if !digits || (text.len() > 1 && text[0] == b'0') {
        return Err(ProxyError::V1Port);
    }
    let n = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).map_err(|_| ProxyError::V1Port)
}

/// Version 2 (spec section 2.2): the signature, version and command, family and protocol, a big-endian
/// length of what follows, the address block, then TLVs (spec section 2.2.7), which are skipped.
fn parse_v2(buf: &[u8]) -> Result<Parse, ProxyError> {
    if let Some(&ver_cmd) = buf.get(12) {
        if ver_cmd >> 4 != 2 {
            return Err(ProxyError::V2Version);
        }
        if ver_cmd & 0x0f > 1 {
            return Err(ProxyError::V2Command);
        }
    }
    let local = buf.get(12).is_some_and(|&b| b & 0x0f == 0);
    // A LOCAL header's address block is discarded unread (spec section 2.2: "the receiver must ... use
    // the real connection endpoints and discard the protocol block including the family").
    let block = match buf.get(13) {
        None => None,
        Some(_) if local => Some(0),
        Some(&fam) => Some(v2_block_len(fam)?),
    };
    let (Some(block), Some(len)) = (block, buf.get(14..V2_FIXED)) else {
        return Ok(Parse::Incomplete);
    };
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    if len < block {
        return Err(ProxyError::V2Length);
    }
    let total = V2_FIXED.checked_add(len).ok_or(ProxyError::V2Length)?;
    let Some(rest) = buf.get(V2_FIXED..total) else {
        return Ok(Parse::Incomplete);
    };
    if local {
        return Ok(Parse::Done(Header {
            len: total,
            source: Source::Peer,
        }));
    }
    let (addresses, tlvs) = rest.split_at(block);
    check_tlvs(tlvs)?;
    Ok(Parse::Done(Header {
        len: total,
        source: v2_source(buf[13], addresses),
    }))
}

/// The address block's length for a PROXY command's family/protocol byte (spec section 2.2).
fn v2_block_len(fam: u8) -> Result<usize, ProxyError> {
    match fam {
        0x00 => Ok(0),   // UNSPEC
        0x11 => Ok(12),  // TCP over IPv4
        0x21 => Ok(36),  // TCP over IPv6
        0x31 => Ok(216), // UNIX stream
        _ => Err(ProxyError::V2Family),
    }
}

/// The source address of a block of a family [`v2_block_len`] accepted, `block` at least that long.
fn v2_source(fam: u8, block: &[u8]) -> Source {
    match fam {
        0x11 => {
            let ip = Ipv4Addr::from(<[u8; 4]>::try_from(&block[..4]).unwrap_or_default());
            Source::Client(SocketAddr::new(
                IpAddr::V4(ip),
                u16::from_be_bytes([block[8], block[9]]),
            ))
        }
        0x21 => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&block[..16]).unwrap_or_default());
            Source::Client(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be_bytes([block[32], block[33]]),
            ))
        }
        _ => Source::Peer,
    }
}

/// Walks the TLVs (type, 16-bit big-endian length, value): each must fit exactly.
fn check_tlvs(mut tlvs: &[u8]) -> Result<(), ProxyError> {
    while !tlvs.is_empty() {
        let Some(head) = tlvs.get(..3) else {
            return Err(ProxyError::V2Tlv);
        };
        let len = usize::from(u16::from_be_bytes([head[1], head[2]]));
        let end = len.checked_add(3).ok_or(ProxyError::V2Tlv)?;
        tlvs = tlvs.get(end..).ok_or(ProxyError::V2Tlv)?;
    }
    Ok(())
}

#[path = "proxy_protocol/encode.rs"] // as for the tests below
pub mod encode;

#[cfg(test)]
#[path = "proxy_protocol/tests.rs"] // the same file when core/fuzz compiles this one by path
mod tests;
