//! The origin's prebuilt responses: the fixed 200 (Content-Length or chunked, keep-alive or
//! close) and the application-like answer of [`APP_PATH`](super::APP_PATH).

use super::{APP_BODY, APP_FIELDS, DEFAULT_BODY};

/// The complete [`APP_PATH`](super::APP_PATH) response.
pub fn app_response(close: bool) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
    for (name, value) in APP_FIELDS {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", APP_BODY.len()).as_bytes());
    out.extend_from_slice(APP_BODY);
    out
}

/// The complete response, head and body, as written on the wire.
pub fn build_response(body_bytes: usize, chunked: bool, close: bool) -> Vec<u8> {
    let body: Vec<u8> = DEFAULT_BODY
        .iter()
        .copied()
        .cycle()
        .take(body_bytes)
        .collect();
    let mut out = Vec::with_capacity(body_bytes + 128);
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n");
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    if chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        if !body.is_empty() {
            out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            out.extend_from_slice(&body);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
    } else {
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(&body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::http::{parse_response, BodyLen};

    #[test]
    fn default_response_is_hello_world() {
        let r = build_response(DEFAULT_BODY.len(), false, false);
        let info = parse_response(&r, false).unwrap().unwrap();
        assert_eq!(info.body, BodyLen::Length(13));
        assert_eq!(&r[info.head_len..], DEFAULT_BODY);
    }

    #[test]
    fn chunked_response_frames_the_body() {
        let r = build_response(30, true, true);
        let info = parse_response(&r, false).unwrap().unwrap();
        assert_eq!(info.body, BodyLen::Chunked);
        assert!(!info.keep_alive);
        let mut d = crate::peers::chunked::ChunkedSkipper::new();
        assert_eq!(d.feed(&r[info.head_len..]), Ok(r.len() - info.head_len));
        assert!(d.is_done());
        assert_eq!(d.payload_bytes(), 30);
    }
}
