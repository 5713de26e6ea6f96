//! The outbound PROXY protocol header (haproxy's proxy-protocol.txt), sans-IO: what edge writes first on
//! an upstream connection with `send_proxy_protocol` (DESIGN.md "Observability"): [`proxied`] for a
//! connection that carries a client's requests (v1 `TCP4`/`TCP6` line, v2 PROXY command with the
//! `TCP over IPv4/IPv6` family), [`local`] for a connection edge makes on its own, the active health
//! checks (v1 `UNKNOWN`, v2 LOCAL command), which tells the upstream to keep the connection's own
//! addresses.
//!
//! Mixed families (an IPv4 client reaching an IPv6 listener, or the reverse) are written as `TCP6`
//! with the IPv4 address mapped (`::ffff:a.b.c.d`), as both versions need one family for both
//! addresses; an IPv4-mapped IPv6 address next to an IPv4 one is written as IPv4.

use std::net::{IpAddr, SocketAddr};

/// Which header to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The text header (spec section 2.1).
    V1,
    /// The binary header (spec section 2.2).
    V2,
}

/// The v2 signature (spec section 2.2).
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Longest header [`proxied`] and [`local`] write: a v1 `TCP6` line with the longest addresses
/// (107 bytes, spec section 2.1).
pub const MAX_LEN: usize = 107;

/// Appends the header of a connection from `source` (the client) to `destination` (the address the
/// client reached edge on) to `out`.
pub fn proxied(version: Version, source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    let (src, dst) = same_family(source.ip(), destination.ip());
    match version {
        Version::V1 => {
            let family = match src {
                IpAddr::V4(_) => "TCP4",
                IpAddr::V6(_) => "TCP6",
            };
            let line = format!(
                "PROXY {family} {src} {dst} {} {}\r\n",
                source.port(),
                destination.port()
            );
            out.extend_from_slice(line.as_bytes());
        }
        Version::V2 => {
            out.extend_from_slice(&V2_SIGNATURE);
            // Version 2, PROXY command.
            out.push(0x21);
            match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    out.push(0x11); // TCP over IPv4
                    out.extend_from_slice(&12u16.to_be_bytes());
                    out.extend_from_slice(&s.octets());
                    out.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    out.push(0x21); // TCP over IPv6
                    out.extend_from_slice(&36u16.to_be_bytes());
                    out.extend_from_slice(&v6(s).octets());
                    out.extend_from_slice(&v6(d).octets());
                }
            }
            out.extend_from_slice(&source.port().to_be_bytes());
            out.extend_from_slice(&destination.port().to_be_bytes());
        }
    }
}

/// Appends the header of a connection edge makes for itself (health checks): v1 `PROXY UNKNOWN`, v2
/// the LOCAL command with no address.
pub fn local(version: Version, out: &mut Vec<u8>) {
    match version {
        Version::V1 => out.extend_from_slice(b"PROXY UNKNOWN\r\n"),
        Version::V2 => {
            out.extend_from_slice(&V2_SIGNATURE);
            out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
        }
    }
}

/// The two addresses in one family: IPv4 when both are (or map to) IPv4, else both IPv6.
fn same_family(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    let (a, b) = (a.to_canonical(), b.to_canonical());
    match (a, b) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (a, b),
        _ => (IpAddr::V6(v6(a)), IpAddr::V6(v6(b))),
    }
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy_protocol::{parse, Parse, Source, Versions};

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// What edge's own parser reads from `bytes`: (length, source).
    fn parsed(bytes: &[u8]) -> (usize, Source) {
        match parse(bytes, Versions::Any) {
            Ok(Parse::Done(h)) => (h.len, h.source),
            other => panic!("{other:?} for {bytes:?}"),
        }
    }

    #[test]
    fn v1_lines_are_the_spec_examples() {
        let mut out = Vec::new();
        proxied(
            Version::V1,
            addr("192.168.0.1:56324"),
            addr("192.168.0.11:443"),
            &mut out,
        );
        assert_eq!(out, b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
        out.clear();
        proxied(
            Version::V1,
            addr("[2001:db8::1]:1000"),
            addr("[::1]:80"),
            &mut out,
        );
        assert_eq!(out, b"PROXY TCP6 2001:db8::1 ::1 1000 80\r\n");
        out.clear();
        local(Version::V1, &mut out);
        assert_eq!(out, b"PROXY UNKNOWN\r\n");
    }

    #[test]
    fn every_header_reads_back_with_its_source() {
        let cases = [
            ("10.1.2.3:4000", "127.0.0.1:8080", "10.1.2.3:4000"),
            ("[2001:db8::7]:4000", "[::1]:8080", "[2001:db8::7]:4000"),
            // Mixed families: the IPv4 client is carried mapped into IPv6.
            ("10.1.2.3:4000", "[::1]:8080", "[::ffff:10.1.2.3]:4000"),
            // A mapped client next to an IPv4 destination is plain IPv4.
            ("[::ffff:10.1.2.3]:4000", "127.0.0.1:8080", "10.1.2.3:4000"),
        ];
        for version in [Version::V1, Version::V2] {
            for (src, dst, want) in cases {
                let mut out = Vec::new();
                proxied(version, addr(src), addr(dst), &mut out);
                assert!(out.len() <= MAX_LEN);
                let (len, source) = parsed(&out);
                assert_eq!(len, out.len(), "{version:?} {src} {dst}");
                assert_eq!(
                    source,
                    Source::Client(addr(want)),
                    "{version:?} {src} {dst}"
                );
            }
            let mut out = Vec::new();
            local(version, &mut out);
            assert_eq!(parsed(&out), (out.len(), Source::Peer), "{version:?}");
        }
    }

    #[test]
    fn v2_layout() {
        let mut out = Vec::new();
        proxied(
            Version::V2,
            addr("1.2.3.4:258"),
            addr("5.6.7.8:80"),
            &mut out,
        );
        assert_eq!(&out[..12], &V2_SIGNATURE);
        assert_eq!(&out[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&out[16..], &[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 0, 80]);
    }

    #[test]
    fn the_longest_v1_line_fits_max_len() {
        let mut out = Vec::new();
        let long = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535";
        proxied(Version::V1, addr(long), addr(long), &mut out);
        assert!(out.len() <= MAX_LEN, "{}", out.len());
    }
}
