//! Message heads parsed with httparse into byte offsets, so the parsed head borrows nothing and the
//! buffer it came from can move through monoio operations. One pass over the fields also collects what
//! framing, hop-by-hop removal and forwarding need (RFC 9112 §2–§7, RFC 9110 §7.6).
//!
//! Parsing allocates nothing once the caller's [`Fields`] vector has grown to its working size.

use std::{mem::MaybeUninit, ops::Range};

/// Offsets of one header field inside the head buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    /// Start of the name.
    pub name_start: u32,
    /// Length of the name.
    pub name_len: u32,
    /// Start of the value (leading/trailing whitespace already trimmed by httparse).
    pub value_start: u32,
    /// Length of the value.
    pub value_len: u32,
    /// What edge knows about this field name.
    pub kind: FieldKind,
}

impl Field {
    /// The field name's bytes in `buf`.
    pub fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.name_start as usize..self.name_start as usize + self.name_len as usize]
    }
    /// The field value's bytes in `buf`.
    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value_start as usize..self.value_start as usize + self.value_len as usize]
    }
}

/// Field names that edge treats specially; everything else is [`FieldKind::Other`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldKind {
    /// An end-to-end field edge forwards as is (unless `Connection` names it).
    #[default]
    Other,
    /// `Host`
    Host,
    /// `Content-Length`
    ContentLength,
    /// `Transfer-Encoding`
    TransferEncoding,
    /// `Connection`
    Connection,
    /// Other hop-by-hop fields: Proxy-Connection, TE, Trailer (RFC 9110 §7.6.1).
    HopByHop,
    /// `Upgrade` (RFC 9110 §7.8): hop-by-hop, forwarded only for a real upgrade.
    Upgrade,
    /// `Max-Forwards` (RFC 9110 §7.6.2): decremented on OPTIONS and TRACE.
    MaxForwards,
    /// `X-Forwarded-For`
    XForwardedFor,
    /// `X-Forwarded-Proto`
    XForwardedProto,
    /// `Forwarded` and `X-Real-IP`: dropped from untrusted peers.
    ForwardedOther,
    /// `X-Request-Id`
    RequestId,
    /// `Expect`
    Expect,
    /// `Via`
    Via,
    /// `Keep-Alive` on a response (parsed for the upstream's idle timeout, then removed).
    KeepAlive,
}

fn classify(name: &[u8]) -> FieldKind {
    macro_rules! is {
        ($lit:literal) => {
            name.eq_ignore_ascii_case($lit)
        };
    }
    match name.len() {
        4 if is!(b"host") => FieldKind::Host,
        14 if is!(b"content-length") => FieldKind::ContentLength,
        17 if is!(b"transfer-encoding") => FieldKind::TransferEncoding,
        10 if is!(b"connection") => FieldKind::Connection,
        10 if is!(b"keep-alive") => FieldKind::KeepAlive,
        16 if is!(b"proxy-connection") => FieldKind::HopByHop,
        2 if is!(b"te") => FieldKind::HopByHop,
        7 if is!(b"trailer") => FieldKind::HopByHop,
        7 if is!(b"upgrade") => FieldKind::Upgrade,
        15 if is!(b"x-forwarded-for") => FieldKind::XForwardedFor,
        17 if is!(b"x-forwarded-proto") => FieldKind::XForwardedProto,
        9 if is!(b"forwarded") => FieldKind::ForwardedOther,
        9 if is!(b"x-real-ip") => FieldKind::ForwardedOther,
        12 if is!(b"x-request-id") => FieldKind::RequestId,
        12 if is!(b"max-forwards") => FieldKind::MaxForwards,
        6 if is!(b"expect") => FieldKind::Expect,
        3 if is!(b"via") => FieldKind::Via,
        _ => FieldKind::Other,
    }
}

/// The fields of one head, reused across requests on a connection.
pub type Fields = Vec<Field>;

/// A parsed request head: offsets into the buffer it was parsed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
    /// Method token.
    pub method: Range<usize>,
    /// Request target as sent.
    pub target: Range<usize>,
    /// The target as edge routes and forwards it (RFC 9112 §3.2): the whole target in origin-form and
    /// asterisk-form; in absolute-form the part after the authority, which may be empty or start with
    /// `?` (the forwarder then writes `/` before it).
    pub path: Range<usize>,
    /// The authority of an absolute-form target. It replaces the Host field for routing and is sent
    /// upstream as Host (RFC 9112 §3.2.2); its syntax is checked with Host's in the framing decision.
    pub authority: Option<Range<usize>>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
}

/// A parsed response head.
#[derive(Clone, Debug, Default)]
pub struct ResponseHead {
    /// Bytes of the head including the final CRLF CRLF.
    pub len: usize,
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
}

/// Why a head could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// Not valid HTTP/1.x syntax (RFC 9112 §2–§5); 400 `bad_head`.
    Invalid,
    /// More fields than the limit, or a head of 4 GiB or more (its offsets are u32; `max_head_bytes`
    /// stops a request long before); 431 `head_too_large`.
    TooManyFields,
}

/// Most fields edge will parse in one head; `server.limits.max_headers` is capped to this.
pub const MAX_FIELDS: usize = 256;

fn offset(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

/// Records the fields of a complete head of `len` bytes at the start of `buf`.
///
/// # Errors
/// [`HeadError::TooManyFields`] when `len` does not fit the u32 offsets (every offset is below `len`,
/// so none is truncated).
fn collect(
    buf: &[u8],
    len: usize,
    headers: &[httparse::Header<'_>],
    fields: &mut Fields,
) -> Result<(), HeadError> {
    let at = |part: &[u8]| offset(buf, part) as u32;
    u32::try_from(len).map_err(|_| HeadError::TooManyFields)?;
    fields.clear();
    for h in headers {
        let name = h.name.as_bytes();
        fields.push(Field {
            name_start: at(name),
            name_len: name.len() as u32,
            value_start: at(h.value),
            value_len: h.value.len() as u32,
            kind: classify(name),
        });
    }
    Ok(())
}

/// Whether every LF in `head` ends a CRLF.
///
/// RFC 9112 §2.2 lets a recipient accept a bare LF as a line terminator; edge does not. A proxy that
/// accepts bare LF while the origin behind it does not (or the reverse) sees different field lines in the
/// same bytes, which is one way to smuggle a request. httparse accepts bare LF, so edge checks after it.
fn crlf_only(head: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in head {
        if b == b'\n' && prev != b'\r' {
            return false;
        }
        prev = b;
    }
    true
}

/// The target forms of RFC 9112 §3.2 that a reverse proxy serves, as (path, authority); `None` when the
/// target is invalid: a `#` anywhere (a fragment is never sent, RFC 9112 §3.2), authority-form (CONNECT
/// only, answered 405 by the caller), asterisk-form on any method but OPTIONS, an absolute-form scheme
/// other than http or https, or anything else that does not start with `/`.
fn target_form(
    method: &[u8],
    target: Range<usize>,
    buf: &[u8],
) -> Option<(Range<usize>, Option<Range<usize>>)> {
    let t = &buf[target.clone()];
    if t.contains(&b'#') {
        return None;
    }
    if t.first() == Some(&b'/') || (t == b"*" && method == b"OPTIONS") {
        return Some((target, None));
    }
    let scheme = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
        7
    } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
        8
    } else {
        return None;
    };
    let rest = &t[scheme..];
    let auth_len = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let auth_start = target.start + scheme;
    Some((
        auth_start + auth_len..target.end,
        Some(auth_start..auth_start + auth_len),
    ))
}

/// Parses a request head from the start of `buf`.
///
/// Returns `Ok(None)` when the head is not complete yet. `max_fields` (at most [`MAX_FIELDS`]) bounds the
/// field count. Strict where RFC 9112 allows leniency:
/// - every line ends in CRLF: a bare LF is [`HeadError::Invalid`] (RFC 9112 §2.2; see `crlf_only`);
/// - methods and field names are tokens, there is no whitespace between a field name and its colon, no
///   obs-fold, and field values hold no NUL, CR, LF or other control character but HTAB (RFC 9112 §3,
///   §5.1, §5.2; httparse checks these);
/// - the target has no `#` and is in origin-form, absolute-form (http or https) or, for OPTIONS,
///   asterisk-form (RFC 9112 §3.2). CONNECT's target is not checked: the caller answers 405.
///
/// # Errors
/// [`HeadError`] as above.
pub fn parse_request(
    buf: &[u8],
    max_fields: usize,
    fields: &mut Fields,
) -> Result<Option<RequestHead>, HeadError> {
    // Uninitialised field storage: initialising 256 headers per parse would cost more than parsing.
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let config = httparse::ParserConfig::default();
    match config.parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut storage[..max_fields.min(MAX_FIELDS)],
    ) {
        Ok(httparse::Status::Complete(len)) => {
            if !crlf_only(&buf[..len]) {
                return Err(HeadError::Invalid);
            }
            let method = req.method.unwrap_or("").as_bytes();
            let target = req.path.unwrap_or("").as_bytes();
            let target = offset(buf, target)..offset(buf, target) + target.len();
            let (path, authority) = if method == b"CONNECT" {
                (target.clone(), None)
            } else {
                target_form(method, target.clone(), buf).ok_or(HeadError::Invalid)?
            };
            let head = RequestHead {
                len,
                method: offset(buf, method)..offset(buf, method) + method.len(),
                target,
                path,
                authority,
                minor: req.version.unwrap_or(1),
            };
            collect(buf, len, req.headers, fields)?;
            Ok(Some(head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(_) => Err(HeadError::Invalid),
    }
}

/// Parses a response head from the start of `buf`; `Ok(None)` when incomplete.
///
/// As strict as [`parse_request`]: CRLF line endings only, token field names, no whitespace before a
/// colon, no obs-fold, no control characters in values (RFC 9112 §2.2, §4, §5); and a status code of
/// 100 to 999 (RFC 9110 §15).
///
/// # Errors
/// [`HeadError`]; callers answer 502 `bad_response` for either.
pub fn parse_response(buf: &[u8], fields: &mut Fields) -> Result<Option<ResponseHead>, HeadError> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut res = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    match config.parse_response_with_uninit_headers(&mut res, buf, &mut storage) {
        Ok(httparse::Status::Complete(len)) => {
            if !crlf_only(&buf[..len]) || res.code.unwrap_or(0) < 100 {
                return Err(HeadError::Invalid);
            }
            let reason = res.reason.unwrap_or("").as_bytes();
            let start = if reason.is_empty() {
                0
            } else {
                offset(buf, reason)
            };
            let head = ResponseHead {
                len,
                status: res.code.unwrap_or(0),
                reason: start..start + reason.len(),
                minor: res.version.unwrap_or(1),
            };
            collect(buf, len, res.headers, fields)?;
            Ok(Some(head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(_) => Err(HeadError::Invalid),
    }
}

/// Whether the request line (up to its CRLF) is complete within `buf`; used to tell 414 from 431 when the
/// head limit is hit.
pub fn request_line_complete(buf: &[u8]) -> bool {
    // Leading empty lines are allowed before the request line (RFC 9112 §2.2).
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    buf[start..].contains(&b'\n')
}

/// Iterates the comma-separated elements of a field value (RFC 9110 §5.6.1), trimmed, empty ones skipped.
pub fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|e| !e.is_empty())
}

/// Trims optional whitespace (SP / HTAB) from both ends.
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_fields_are_classified_by_offset() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\nX-Custom: v\r\n\r\nhello";
        let mut f = Fields::new();
        let h = parse_request(buf, 100, &mut f).unwrap().unwrap();
        assert_eq!(&buf[h.target.clone()], b"/a?b");
        assert_eq!(&buf[h.method.clone()], b"GET");
        assert_eq!(h.minor, 1);
        assert_eq!(h.len, buf.len() - 5);
        assert_eq!(f[0].kind, FieldKind::Host);
        assert_eq!(f[1].kind, FieldKind::ContentLength);
        assert_eq!(f[1].value(buf), b"5");
        assert_eq!(f[2].name(buf), b"X-Custom");
    }

    #[test]
    fn long_field_names_keep_their_length() {
        let name = format!("X-{}", "n".repeat(70_000));
        let buf = format!("GET / HTTP/1.1\r\nHost: x\r\n{name}: v\r\n\r\n");
        let mut f = Fields::new();
        parse_request(buf.as_bytes(), 100, &mut f).unwrap().unwrap();
        assert_eq!(f[1].name(buf.as_bytes()), name.as_bytes());
        assert_eq!(f[1].value(buf.as_bytes()), b"v");
    }

    #[test]
    fn partial_and_invalid_heads() {
        let mut f = Fields::new();
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n", 100, &mut f),
            Ok(None)
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", 1, &mut f).unwrap_err(),
            HeadError::TooManyFields
        );
        // The field over the limit is refused as soon as its line ends, before the head does.
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n", 1, &mut f),
            Err(HeadError::TooManyFields)
        );
    }

    /// Feeds every proper prefix of `text` (all must be incomplete, never an error), then the whole.
    fn parse_at_every_split(text: &[u8]) -> (RequestHead, Fields) {
        let mut f = Fields::new();
        for split in 0..text.len() {
            assert_eq!(
                parse_request(&text[..split], 100, &mut f),
                Ok(None),
                "prefix {split} of {:?}",
                String::from_utf8_lossy(text)
            );
        }
        let h = parse_request(text, 100, &mut f).unwrap().unwrap();
        (h, f)
    }

    #[test]
    fn accepted_heads_at_every_split() {
        for ok in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"\r\nGET /a?b=c HTTP/1.0\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET http://a.example:8080/p?q HTTP/1.1\r\nHost: b\r\n\r\n",
            b"PATCH /x HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\nX-Tab: a\tb\r\nX-Empty:\r\n\r\n",
            b"M-SEARCH~ /x HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            let (h, _) = parse_at_every_split(ok);
            assert_eq!(h.len, ok.len());
        }
    }

    #[test]
    fn absolute_form_takes_its_authority() {
        let text = b"GET HTTP://a.example:8080/p?q HTTP/1.1\r\nHost: b\r\n\r\n";
        let (h, _) = parse_at_every_split(text);
        assert_eq!(&text[h.authority.clone().unwrap()], b"a.example:8080");
        assert_eq!(&text[h.path.clone()], b"/p?q");
        let text = b"GET https://a?q HTTP/1.1\r\nHost: b\r\n\r\n";
        let (h, _) = parse_at_every_split(text);
        assert_eq!(&text[h.authority.clone().unwrap()], b"a");
        assert_eq!(&text[h.path.clone()], b"?q");
        let text = b"GET /p HTTP/1.1\r\nHost: b\r\n\r\n";
        let (h, _) = parse_at_every_split(text);
        assert_eq!(h.authority, None);
        assert_eq!(h.path, h.target);
    }

    /// One row per head rule of DESIGN.md "HTTP/1.1 rules"; every row is `Invalid`.
    #[test]
    fn rejects_malformed_heads() {
        for (rule, bad) in [
            (
                "bare LF after request line",
                &b"GET / HTTP/1.1\nHost: a\r\n\r\n"[..],
            ),
            ("bare LF after a field", b"GET / HTTP/1.1\r\nHost: a\n\r\n"),
            ("bare LF at the end", b"GET / HTTP/1.1\r\nHost: a\r\n\n"),
            ("bare LF only", b"GET / HTTP/1.1\nHost: a\n\n"),
            (
                "bare LF empty line first",
                b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            ("bare CR in a value", b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"),
            (
                "whitespace before colon",
                b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            ),
            ("tab before colon", b"GET / HTTP/1.1\r\nHost\t: x\r\n\r\n"),
            ("obs-fold", b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"),
            (
                "obs-fold with tab",
                b"GET / HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n",
            ),
            (
                "leading whitespace on the first field",
                b"GET / HTTP/1.1\r\n A: b\r\n\r\n",
            ),
            ("NUL in a value", b"GET / HTTP/1.1\r\nA: b\x00c\r\n\r\n"),
            (
                "control char in a value",
                b"GET / HTTP/1.1\r\nA: b\x1bc\r\n\r\n",
            ),
            ("DEL in a value", b"GET / HTTP/1.1\r\nA: b\x7fc\r\n\r\n"),
            ("non-token field name", b"GET / HTTP/1.1\r\nA(b): c\r\n\r\n"),
            (
                "non-ASCII field name",
                b"GET / HTTP/1.1\r\nX\xc3\xa9: c\r\n\r\n",
            ),
            ("empty field name", b"GET / HTTP/1.1\r\n: c\r\n\r\n"),
            ("non-token method", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n"),
            ("empty method", b" / HTTP/1.1\r\nHost: a\r\n\r\n"),
            (
                "fragment in the target",
                b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            (
                "fragment in an absolute target",
                b"GET http://a/#b HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            ("relative target", b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n"),
            (
                "authority-form without CONNECT",
                b"GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            (
                "asterisk-form without OPTIONS",
                b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            (
                "unknown scheme",
                b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            (
                "space in the target",
                b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
            ),
            ("two spaces", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
            ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"),
            ("lowercase version", b"GET / http/1.1\r\nHost: a\r\n\r\n"),
            ("HTTP/0.9 style", b"GET /\r\n\r\n"),
        ] {
            let mut f = Fields::new();
            assert_eq!(
                parse_request(bad, 100, &mut f),
                Err(HeadError::Invalid),
                "{rule}: {:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn rejects_malformed_response_heads() {
        for (rule, bad) in [
            (
                "bare LF",
                &b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"[..],
            ),
            (
                "bare LF at the end",
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n",
            ),
            (
                "whitespace before colon",
                b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",
            ),
            ("obs-fold", b"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"),
            ("NUL in a value", b"HTTP/1.1 200 OK\r\nA: \x00\r\n\r\n"),
            ("status below 100", b"HTTP/1.1 099 Low\r\n\r\n"),
            ("two-digit status", b"HTTP/1.1 99 Low\r\n\r\n"),
        ] {
            let mut f = Fields::new();
            assert_eq!(
                parse_response(bad, &mut f).map(|h| h.map(|h| h.status)),
                Err(HeadError::Invalid),
                "{rule}"
            );
        }
    }

    /// Characters a generated field value may hold (VCHAR, SP, HTAB inside, obs-text).
    fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![0x21u8..=0x7e, Just(b' '), Just(b'\t'), 0x80u8..=0xff],
            0..24,
        )
        .prop_map(|v| trim(&v).to_vec())
    }

    fn token_strategy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop::sample::select(
                &b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"[..],
            ),
            1..12,
        )
    }

    fn target_strategy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop::sample::select(&b"abcXYZ019/?=&%-._~!$'()*+,;:@"[..]),
            0..24,
        )
        .prop_map(|mut t| {
            t.insert(0, b'/');
            t
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Arbitrary bytes never panic the request or response parser.
        #[test]
        fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut f = Fields::new();
            if let Ok(Some(h)) = parse_request(&input, MAX_FIELDS, &mut f) {
                prop_assert!(h.len <= input.len());
                prop_assert!(crlf_only(&input[..h.len]));
                let _ = crate::http::framing::request_info(&input, &h, &f);
            }
            if let Ok(Some(h)) = parse_response(&input, &mut f) {
                let _ = crate::http::framing::response_body(&input, &h, &f, false);
            }
        }

        /// A request prefix then arbitrary bytes: exercises field parsing more than random bytes do.
        #[test]
        fn arbitrary_fields_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut input = b"POST / HTTP/1.1\r\nHost: a\r\n".to_vec();
            input.extend_from_slice(&tail);
            input.extend_from_slice(b"\r\n\r\n");
            let mut f = Fields::new();
            if let Ok(Some(h)) = parse_request(&input, MAX_FIELDS, &mut f) {
                let _ = crate::http::framing::request_info(&input, &h, &f);
            }
        }

        /// A head serialised from valid parts parses back to the same method, target and fields.
        #[test]
        fn serialised_head_parses_back(
            method in token_strategy(),
            target in target_strategy(),
            minor in 0u8..=1,
            fields in proptest::collection::vec((token_strategy(), value_strategy()), 0..8),
        ) {
            let mut wire = Vec::new();
            wire.extend_from_slice(&method);
            wire.push(b' ');
            wire.extend_from_slice(&target);
            wire.extend_from_slice(if minor == 0 { b" HTTP/1.0\r\n" } else { b" HTTP/1.1\r\n" });
            for (n, v) in &fields {
                wire.extend_from_slice(n);
                wire.extend_from_slice(b": ");
                wire.extend_from_slice(v);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"\r\n");
            let mut f = Fields::new();
            let h = parse_request(&wire, MAX_FIELDS, &mut f).unwrap().unwrap();
            prop_assert_eq!(h.len, wire.len());
            prop_assert_eq!(&wire[h.method.clone()], &method[..]);
            prop_assert_eq!(&wire[h.target.clone()], &target[..]);
            prop_assert_eq!(h.minor, minor);
            prop_assert_eq!(f.len(), fields.len());
            for (got, (n, v)) in f.iter().zip(&fields) {
                prop_assert_eq!(got.name(&wire), &n[..]);
                prop_assert_eq!(got.value(&wire), &v[..]);
            }
        }
    }

    #[test]
    fn list_elements_skip_empty() {
        let v: Vec<&[u8]> = list_elements(b" gzip ,, chunked,").collect();
        assert_eq!(v, vec![&b"gzip"[..], b"chunked"]);
    }

    #[test]
    fn response_head() {
        let buf = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let mut f = Fields::new();
        let h = parse_response(buf, &mut f).unwrap().unwrap();
        assert_eq!(h.status, 404);
        assert_eq!(&buf[h.reason.clone()], b"Not Found");
    }
}
