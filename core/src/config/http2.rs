//! The HTTP/2 part of the schema (DESIGN.md "Configuration (TOML)" `[server.http2]` and "HTTP/2"): the
//! per-connection limits handed to the h2 server handshake, with their defaults and checks. Whether a
//! listener speaks HTTP/2 at all is decided elsewhere: ALPN `h2` in `server.tls.alpn` on the TLS listener,
//! `server.h2c` on the plain one.

use serde::{Deserialize, Serialize};

use super::Bytes;

/// The largest frame size an HTTP/2 endpoint may advertise (RFC 9113 §6.5.2, `2^24 - 1`).
pub const MAX_FRAME_SIZE_LIMIT: u64 = (1 << 24) - 1;
/// The smallest (and initial) frame size (RFC 9113 §6.5.2).
pub const MIN_FRAME_SIZE: u64 = 1 << 14;
/// The largest flow-control window (RFC 9113 §6.9.1, `2^31 - 1`).
pub const MAX_WINDOW: u64 = (1 << 31) - 1;
/// The cap on the connection window (DESIGN.md `initial_window`), bytes.
pub const CONNECTION_WINDOW_CAP: u64 = 16 << 20;

/// `[server.http2]`: the limits of one HTTP/2 connection from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2 {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may have open at once.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: the per-stream receive window, bytes; the connection window is
    /// `max_concurrent_streams` times it, capped at 16 MiB ([`Http2::connection_window`]).
    pub initial_window: Bytes,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame payload edge accepts, bytes (16 KiB to 16 MiB - 1).
    pub max_frame_size: Bytes,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded header list, HEADERS plus CONTINUATION, bytes; it
    /// replaces `server.limits.max_head_bytes` for HTTP/2.
    pub max_header_list: Bytes,
    /// Client resets (and streams edge refuses for errors) per connection per second before GOAWAY
    /// ENHANCE_YOUR_CALM (the "rapid reset" attack, CVE-2023-44487).
    pub max_resets_per_second: u32,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            max_concurrent_streams: 128,
            initial_window: Bytes(1 << 20),
            max_frame_size: Bytes(16 << 10),
            max_header_list: Bytes(16 << 10),
            max_resets_per_second: 100,
        }
    }
}

impl Http2 {
    /// The connection-level receive window, bytes: `max_concurrent_streams × initial_window`, capped at
    /// 16 MiB and never below one stream's window (DESIGN.md `initial_window`).
    pub fn connection_window(&self) -> u32 {
        let w = (self.max_concurrent_streams as u64)
            .saturating_mul(self.initial_window.0)
            .min(CONNECTION_WINDOW_CAP)
            .max(self.initial_window.0)
            .min(MAX_WINDOW);
        w as u32
    }
}

/// The problems of `[server.http2]`, each `(key, reason)`: at least one stream, windows within RFC 9113
/// §6.9.1, the frame size within §6.5.2, a header list that holds a small request, at least one reset
/// per second.
pub(super) fn check(h: &Http2) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |k: &str, r: String| out.push((format!("server.http2.{k}"), r));
    if h.max_concurrent_streams == 0 {
        add("max_concurrent_streams", "must be at least 1".into());
    }
    if h.initial_window.0 == 0 || h.initial_window.0 > MAX_WINDOW {
        add(
            "initial_window",
            format!("must be between 1 and {MAX_WINDOW} bytes (RFC 9113 §6.9.1)"),
        );
    }
    if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE_LIMIT).contains(&h.max_frame_size.0) {
        add(
            "max_frame_size",
            format!(
                "must be between {MIN_FRAME_SIZE} and {MAX_FRAME_SIZE_LIMIT} bytes (RFC 9113 §6.5.2)"
            ),
        );
    }
    if h.max_header_list.0 < 256 || h.max_header_list.0 > u32::MAX as u64 {
        add(
            "max_header_list",
            "must be at least 256 bytes and below 4GiB".into(),
        );
    }
    if h.max_resets_per_second == 0 {
        add("max_resets_per_second", "must be at least 1".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_the_connection_window_is_capped() {
        let h = Http2::default();
        assert!(check(&h).is_empty());
        assert_eq!(h.connection_window(), 16 << 20);
        let small = Http2 {
            max_concurrent_streams: 2,
            initial_window: Bytes(65_535),
            ..Http2::default()
        };
        assert_eq!(small.connection_window(), 131_070);
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        let h = Http2 {
            max_concurrent_streams: 0,
            initial_window: Bytes(1 << 31),
            max_frame_size: Bytes(1 << 24),
            max_header_list: Bytes(10),
            max_resets_per_second: 0,
        };
        let keys: Vec<String> = check(&h).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "server.http2.max_concurrent_streams",
                "server.http2.initial_window",
                "server.http2.max_frame_size",
                "server.http2.max_header_list",
                "server.http2.max_resets_per_second",
            ]
        );
    }
}
