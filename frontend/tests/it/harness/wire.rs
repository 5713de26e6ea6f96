//! HTTP/1.1 framing shared by the scripted origin and the raw client: blocking buffered reads, chunked
//! body decoding, header lists and their lookup.

use std::io::Read;

/// Reads once from `s` onto the end of `buf`; `None` on EOF or a read error (the error is printed).
pub(super) fn fill(s: &mut impl Read, buf: &mut Vec<u8>) -> Option<()> {
    let mut tmp = [0u8; 65536];
    let n = match s.read(&mut tmp) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("read error: {e}");
            return None;
        }
    };
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&tmp[..n]);
    Some(())
}

/// Decodes a chunked body starting at `pos`; returns (data, end offset). Trailers are skipped.
pub(super) fn read_chunked(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    mut pos: usize,
) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    loop {
        let line_end = crlf_at(s, buf, pos)?;
        let line = std::str::from_utf8(&buf[pos..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            return Some((body, skip_trailers(s, buf, pos)?));
        }
        while buf.len() < pos + size + 2 {
            fill(s, buf)?;
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

/// Skips trailer lines from `pos` through the empty line that ends them; the offset after it.
fn skip_trailers(s: &mut impl Read, buf: &mut Vec<u8>, mut pos: usize) -> Option<usize> {
    loop {
        let end = crlf_at(s, buf, pos)?;
        let empty = end == pos;
        pos = end + 2;
        if empty {
            return Some(pos);
        }
    }
}

/// The offset of the first CRLF at or after `pos`, reading more until there is one.
fn crlf_at(s: &mut impl Read, buf: &mut Vec<u8>, pos: usize) -> Option<usize> {
    loop {
        if let Some(i) = buf[pos..].windows(2).position(|w| w == b"\r\n") {
            return Some(pos + i);
        }
        fill(s, buf)?;
    }
}

/// Parsed header fields as owned (name, value) pairs, values decoded lossily.
/// Reads the next response head from `s` (interim 1xx ones included) through `buf`, which keeps what
/// follows it. `None` on EOF before a head.
pub(super) fn read_any_head(s: &mut impl Read, buf: &mut Vec<u8>) -> Option<super::Response> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut res = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = res.parse(buf) {
            let r = super::Response {
                status: res.code.unwrap(),
                minor: res.version.unwrap(),
                headers: owned_headers(res.headers),
                ..super::Response::default()
            };
            buf.drain(..n);
            return Some(r);
        }
        fill(s, buf)?;
    }
}

pub(super) fn owned_headers(headers: &[httparse::Header]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// The first field named `name` (case-insensitive).
pub(super) fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Reads the body of `r` (a final response whose head was consumed from `buf`) by its framing:
/// Content-Length, chunked, or to EOF (RFC 9112 §6.3). `None` when the connection ends first.
pub(super) fn read_body(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    r: &mut super::Response,
) -> Option<()> {
    if let Some(cl) = r
        .header("content-length")
        .map(|v| v.parse::<usize>().unwrap())
    {
        while buf.len() < cl {
            fill(s, buf)?;
        }
        r.body = buf.drain(..cl).collect();
    } else if r.header("transfer-encoding").is_some() {
        r.chunked = true;
        let (body, end) = read_chunked(s, buf, 0)?;
        r.body = body;
        buf.drain(..end);
    } else {
        while fill(s, buf).is_some() {}
        r.body = std::mem::take(buf);
    }
    Some(())
}
