//! What the received response bytes hold. An upstream session keeps the response in HTTP/1.1 syntax
//! (heads, then body bytes in the framing the final head declares), the protocol-neutral form the
//! orchestrator and the downstream sessions read ([`crate::session::UpstreamSession::received`]); these
//! sans-IO checks classify it.

use edge_core::{
    buf::RecvBuf,
    http::head::{parse_response, Fields, ResponseHead},
};

/// Longest upstream response head edge reads, bytes.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// An interim response edge forwards (RFC 9110 §15.2): 1xx other than 101, which ends HTTP/1.1 on the
/// connection.
pub fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// Whether `buf` holds nothing but complete interim (1xx other than 101) response heads, within
/// [`MAX_RESPONSE_HEAD`] (a partial head counts as the response having started).
pub fn only_interim(buf: &RecvBuf, fields: &mut Fields) -> bool {
    let data = buf.data();
    if data.len() > MAX_RESPONSE_HEAD {
        return false;
    }
    let mut at = 0;
    while at < data.len() {
        match parse_response(&data[at..], fields) {
            Ok(Some(h)) if is_interim(h.status) => at += h.len,
            _ => return false,
        }
    }
    true
}

/// What is buffered at the start of an exchange waiting for `100 Continue`.
#[derive(Clone, Debug)]
pub enum Buffered {
    /// A complete interim head (its fields in `fields`).
    Interim(ResponseHead),
    /// Nothing yet, or part of a head within [`MAX_RESPONSE_HEAD`].
    Incomplete,
    /// The final response has begun (a final head, or something that is not an interim head).
    Final,
}

/// Classifies what `buf` holds (see [`Buffered`]).
pub fn buffered(buf: &RecvBuf, fields: &mut Fields) -> Buffered {
    match parse_response(buf.data(), fields) {
        Ok(Some(h)) if is_interim(h.status) => Buffered::Interim(h),
        Ok(None) if buf.len() < MAX_RESPONSE_HEAD => Buffered::Incomplete,
        _ => Buffered::Final,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn buf_of(bytes: &[u8]) -> RecvBuf {
        let mut buf = RecvBuf::new();
        let mut src = bytes;
        while !src.is_empty() {
            buf.fill_large(&mut src).await.unwrap();
        }
        buf
    }

    fn with_buf(bytes: &[u8], check: impl FnOnce(&RecvBuf)) {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap();
        rt.block_on(async { check(&buf_of(bytes).await) });
    }

    #[test]
    fn a_101_is_not_interim_and_other_1xx_are() {
        assert!(is_interim(100) && is_interim(103) && is_interim(199));
        assert!(!is_interim(101) && !is_interim(200) && !is_interim(99));
    }

    #[test]
    fn buffered_tells_an_interim_head_from_a_partial_or_final_one() {
        let mut f = Fields::new();
        with_buf(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", |b| {
            assert!(
                matches!(buffered(b, &mut f), Buffered::Interim(h) if h.status == 100 && h.len == 25)
            );
        });
        with_buf(b"HTTP/1.1 100 Cont", |b| {
            assert!(matches!(buffered(b, &mut f), Buffered::Incomplete));
        });
        with_buf(b"HTTP/1.1 417 Expectation Failed\r\n\r\n", |b| {
            assert!(matches!(buffered(b, &mut f), Buffered::Final));
        });
        with_buf(b"not a response\r\n\r\n", |b| {
            assert!(matches!(buffered(b, &mut f), Buffered::Final));
        });
    }

    #[test]
    fn only_interim_needs_every_buffered_byte_in_a_complete_interim_head() {
        let mut f = Fields::new();
        let two = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n";
        with_buf(two, |b| assert!(only_interim(b, &mut f)));
        with_buf(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", |b| {
            assert!(!only_interim(b, &mut f));
        });
        with_buf(b"HTTP/1.1 200 OK\r\n\r\n", |b| {
            assert!(!only_interim(b, &mut f))
        });
    }
}
