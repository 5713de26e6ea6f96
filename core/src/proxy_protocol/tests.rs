//! Every valid and invalid header form of haproxy's proxy-protocol.txt that edge distinguishes, each also
//! fed split at every byte boundary.

use super::*;

const ALL: [Versions; 3] = [Versions::V1, Versions::V2, Versions::Any];

fn client(s: &str) -> Source {
    Source::Client(s.parse().unwrap())
}

fn done(len: usize, source: Source) -> Result<Parse, ProxyError> {
    Ok(Parse::Done(Header { len, source }))
}

/// A v2 header: signature, `ver_cmd`, `fam`, the length of `rest`, `rest`.
fn v2(ver_cmd: u8, fam: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend_from_slice(&[ver_cmd, fam]);
    out.extend_from_slice(&u16::try_from(rest.len()).unwrap().to_be_bytes());
    out.extend_from_slice(rest);
    out
}

fn tcp4_block() -> Vec<u8> {
    let mut b = vec![192, 0, 2, 7, 10, 0, 0, 1];
    b.extend_from_slice(&40000u16.to_be_bytes());
    b.extend_from_slice(&443u16.to_be_bytes());
    b
}

fn tcp6_block() -> Vec<u8> {
    let mut b = "2001:db8::7".parse::<Ipv6Addr>().unwrap().octets().to_vec();
    b.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
    b.extend_from_slice(&40001u16.to_be_bytes());
    b.extend_from_slice(&443u16.to_be_bytes());
    b
}

/// Feeds `input` as two writes split at every boundary and as every prefix: a prefix is `Incomplete` or
/// already the whole input's answer, and the split feed ends with the whole input's answer.
fn check_splits(input: &[u8], versions: Versions) {
    let whole = parse(input, versions);
    for i in 0..=input.len() {
        let prefix = parse(&input[..i], versions);
        let ok = match (&prefix, &whole) {
            (Ok(Parse::Incomplete), _) => !matches!(&whole, Ok(Parse::Done(h)) if i >= h.len),
            (p, w) => p == w,
        };
        assert!(
            ok,
            "{input:?} cut at {i} ({versions:?}): {prefix:?}, whole {whole:?}"
        );
    }
    assert_ne!(whole, Ok(Parse::Incomplete), "{input:?} never completes");
}

fn check(input: &[u8], versions: Versions, want: Result<Parse, ProxyError>) {
    assert_eq!(parse(input, versions), want, "{input:?} ({versions:?})");
    check_splits(input, versions);
    // The request behind the header stays unparsed: the same answer with bytes after it.
    if let Ok(Parse::Done(_)) = want {
        let mut more = input.to_vec();
        more.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(parse(&more, versions), want, "{more:?}");
        check_splits(&more, versions);
    }
}

#[test]
fn v1_tcp4_tcp6_and_unknown() {
    for v in [Versions::V1, Versions::Any] {
        let h = b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 443\r\n";
        check(h, v, done(h.len(), client("192.0.2.7:40000")));
        let h = b"PROXY TCP6 2001:db8::7 2001:db8::1 40001 443\r\n";
        check(h, v, done(h.len(), client("[2001:db8::7]:40001")));
        let h = b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n";
        check(h, v, done(h.len(), client("0.0.0.0:0")));
        check(b"PROXY UNKNOWN\r\n", v, done(15, Source::Peer));
        let h = b"PROXY UNKNOWN 192.0.2.7 10.0.0.1 40000 443\r\n";
        check(h, v, done(h.len(), Source::Peer));
    }
}

#[test]
fn v1_is_at_most_107_bytes() {
    let long = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let max = format!("PROXY UNKNOWN {long} {long} 65535 65535\r\n");
    assert_eq!(max.len(), V1_MAX);
    check(max.as_bytes(), Versions::V1, done(V1_MAX, Source::Peer));
    let over = format!("PROXY UNKNOWN {long} {long} 65535 655350\r\n");
    check(over.as_bytes(), Versions::V1, Err(ProxyError::V1TooLong));
    let no_end = format!("PROXY UNKNOWN {}", "x".repeat(200));
    check(no_end.as_bytes(), Versions::V1, Err(ProxyError::V1TooLong));
}

#[test]
fn malformed_v1_headers_are_refused() {
    use ProxyError::*;
    let cases: &[(&[u8], ProxyError)] = &[
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 443\n", V1Line),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 443\rX\n", V1Line),
        (b"PROXY TCP4 192.0.2.7\t10.0.0.1 40000 443\r\n", V1Line),
        (b"PROXY TCP4 192.0.2.\xc37 10.0.0.1 40000 443\r\n", V1Line),
        (b"PROXY TCP4  192.0.2.7 10.0.0.1 40000 443\r\n", V1Fields),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 443 \r\n", V1Fields),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 40000\r\n", V1Fields),
        (b"PROXY TCP5 192.0.2.7 10.0.0.1 40000 443\r\n", V1Fields),
        (b"PROXY tcp4 192.0.2.7 10.0.0.1 40000 443\r\n", V1Fields),
        (b"PROXY UNKNOWNX\r\n", V1Fields),
        (b"PROXY \r\n", V1Fields),
        (b"PROXY TCP4 2001:db8::7 10.0.0.1 40000 443\r\n", V1Address),
        (b"PROXY TCP6 192.0.2.7 2001:db8::1 40000 443\r\n", V1Address),
        (b"PROXY TCP4 192.0.2.07 10.0.0.1 40000 443\r\n", V1Address),
        (b"PROXY TCP4 192.0.2.7 10.0.0.256 40000 443\r\n", V1Address),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 443\r\n", V1Port),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 040000 443\r\n", V1Port),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 4000 0443\r\n", V1Port),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 -1 443\r\n", V1Port),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 +1 443\r\n", V1Port),
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 99999 443\r\n", V1Port),
    ];
    for (input, e) in cases {
        check(input, Versions::Any, Err(*e));
    }
}

#[test]
fn v2_proxy_tcp4_tcp6_with_and_without_tlvs() {
    for v in [Versions::V2, Versions::Any] {
        let h = v2(0x21, 0x11, &tcp4_block());
        check(&h, v, done(28, client("192.0.2.7:40000")));
        let h = v2(0x21, 0x21, &tcp6_block());
        check(&h, v, done(52, client("[2001:db8::7]:40001")));
        // An AWS NLB's VPC endpoint TLV (type 0xEA) and a NOOP with an empty value.
        let mut block = tcp4_block();
        block.extend_from_slice(&[0xea, 0x00, 0x04, 0x01, b'v', b'p', b'c', 0x04, 0x00, 0x00]);
        let h = v2(0x21, 0x11, &block);
        check(&h, v, done(h.len(), client("192.0.2.7:40000")));
    }
}

#[test]
fn v2_local_unspec_and_unix_keep_the_peer() {
    check(&v2(0x20, 0x00, &[]), Versions::V2, done(16, Source::Peer));
    // LOCAL discards whatever block it carries, family included.
    let h = v2(0x20, 0x11, &tcp4_block());
    check(&h, Versions::V2, done(28, Source::Peer));
    check(
        &v2(0x20, 0x77, &[1, 2, 3]),
        Versions::V2,
        done(19, Source::Peer),
    );
    check(&v2(0x21, 0x00, &[]), Versions::Any, done(16, Source::Peer));
    let h = v2(0x21, 0x31, &[0; 216]);
    check(&h, Versions::V2, done(232, Source::Peer));
}

#[test]
fn malformed_v2_headers_are_refused() {
    use ProxyError::*;
    let mut bad_tlv = tcp4_block();
    bad_tlv.extend_from_slice(&[0x04, 0x00]);
    let mut over_tlv = tcp4_block();
    over_tlv.extend_from_slice(&[0x04, 0x00, 0x05, 1, 2]);
    let cases: Vec<(Vec<u8>, ProxyError)> = vec![
        (v2(0x11, 0x11, &tcp4_block()), V2Version),
        (v2(0x31, 0x11, &tcp4_block()), V2Version),
        (v2(0x22, 0x11, &tcp4_block()), V2Command),
        (v2(0x2f, 0x11, &tcp4_block()), V2Command),
        (v2(0x21, 0x12, &tcp4_block()), V2Family),
        (v2(0x21, 0x10, &tcp4_block()), V2Family),
        (v2(0x21, 0x41, &tcp4_block()), V2Family),
        (v2(0x21, 0x11, &tcp4_block()[..11]), V2Length),
        (v2(0x21, 0x21, &tcp4_block()), V2Length),
        (v2(0x21, 0x31, &[0; 215]), V2Length),
        (v2(0x21, 0x11, &bad_tlv), V2Tlv),
        (v2(0x21, 0x11, &over_tlv), V2Tlv),
    ];
    for (input, e) in cases {
        check(&input, Versions::Any, Err(e));
    }
}

#[test]
fn a_header_that_never_comes_or_of_the_other_version_is_refused() {
    for v in ALL {
        check(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            v,
            Err(ProxyError::Missing),
        );
        check(b"\x16\x03\x01\x02\x00", v, Err(ProxyError::Missing));
        check(b"PROXX", v, Err(ProxyError::Missing));
        check(b"\r\n\r\n\0\r\nQUIX\n", v, Err(ProxyError::Missing));
        check(b"proxy TCP4", v, Err(ProxyError::Missing));
        assert_eq!(parse(b"", v), Ok(Parse::Incomplete));
    }
    let v1 = b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 443\r\n";
    check(v1, Versions::V2, Err(ProxyError::Version));
    check(
        &v2(0x21, 0x11, &tcp4_block()),
        Versions::V1,
        Err(ProxyError::Version),
    );
}

#[test]
fn a_v2_length_up_to_u16_max_waits_for_its_bytes() {
    let mut h = v2(0x21, 0x11, &tcp4_block());
    h[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(parse(&h, Versions::V2), Ok(Parse::Incomplete));
    h.resize(16 + usize::from(u16::MAX), 0);
    // The rest is zero bytes: TLVs of type 0 and length 0, three bytes each; 65523 is a multiple of 3.
    assert_eq!(
        parse(&h, Versions::V2),
        done(h.len(), client("192.0.2.7:40000"))
    );
}

#[test]
fn a_connections_first_bytes_tell_a_header_from_a_request() {
    assert_eq!(starts_header(b"PROXY TCP4 "), Some(true));
    assert_eq!(starts_header(&V2_SIGNATURE), Some(true));
    assert_eq!(starts_header(b"GET / HTTP/1.1\r\n"), Some(false));
    assert_eq!(starts_header(b"PROPFIND / HTTP/1.1\r\n"), Some(false));
    assert_eq!(
        starts_header(b"\r\nGET /"),
        Some(false),
        "leading CRLF, then a request"
    );
    for undecided in [&b""[..], b"P", b"PROX", b"\r\n", b"\r\n\r\n\0"] {
        assert_eq!(starts_header(undecided), None, "{undecided:?}");
    }
}
