//! edge's own HTTP/2 flood defences (DESIGN.md "HTTP/2", status table row "h2 connection error or
//! flood"), sans-IO: a frame-header [`Scanner`] over the bytes of one direction (frame type, flags,
//! length, stream id, and RST_STREAM's error code; no other payload byte is looked at) and the
//! per-connection [`Window`] of counts it feeds, one second long. [`super::guard`] runs both over the
//! connection's bytes; h2 (hyperium) stays the protocol.
//!
//! h2 already bounds CONTINUATION floods and header lists (ENHANCE_YOUR_CALM), streams reset before
//! they were accepted and streams it reset for local errors, as *counts*. What it does not bound per
//! unit of time, edge does here, per connection and per one-second window:
//!
//! | flood | counted | limit per second | why |
//! |---|---|---|---|
//! | `resets` | RST_STREAM from the client, and RST_STREAM edge (h2) sends to refuse a stream for an error (any code but NO_ERROR, CANCEL, INTERNAL_ERROR) | `server.http2.max_resets_per_second` | the rapid-reset attack (CVE-2023-44487): every reset stream costs a request's work |
//! | `settings` | SETTINGS without ACK | [`CONTROL_PER_SECOND`] (100) | a client sends one at the start and rarely again; each costs an ACK and a re-configuration |
//! | `ping` | PING without ACK | [`CONTROL_PER_SECOND`] (100) | keep-alive and RTT probes are a few a second; each costs a PONG |
//! | `empty_frames` | DATA with no payload and no END_STREAM, PRIORITY, and empty CONTINUATION without END_HEADERS | [`EMPTY_PER_SECOND`] (100) | frames that make edge work and carry no progress (CVE-2019-9518, CVE-2019-9513) |
//! | `window_update` | WINDOW_UPDATE | [`WINDOW_UPDATE_BASE`] (100) + [`WINDOW_UPDATES_PER_DATA`] (2) per DATA frame edge sent in this and the previous second | a reading client sends about one per DATA frame it received (stream and connection window), more is a flood |
//!
//! Legitimate clients stay well under every limit: the tests' "a legitimate client is not cut" case
//! runs 50 streams with resets and PINGs through one connection.
//!
//! Cost: the scanner walks frame headers only, skipping payloads by length; no allocation; the window
//! reads the clock once per read ([`Window::roll`]), never per frame.

use std::time::{Duration, Instant};

pub use super::filter::{keep_after_goaway, Filter};

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA (RFC 9113 §6.1).
    pub const DATA: u8 = 0x0;
    /// HEADERS (RFC 9113 §6.2).
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (RFC 9113 §6.3).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM (RFC 9113 §6.4).
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS (RFC 9113 §6.5).
    pub const SETTINGS: u8 = 0x4;
    /// PING (RFC 9113 §6.7).
    pub const PING: u8 = 0x6;
    /// GOAWAY (RFC 9113 §6.8).
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE (RFC 9113 §6.9).
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION (RFC 9113 §6.10).
    pub const CONTINUATION: u8 = 0x9;
}

/// END_STREAM on DATA and HEADERS; ACK on SETTINGS and PING (the same bit, RFC 9113 §6).
pub const END_STREAM_OR_ACK: u8 = 0x1;
/// END_HEADERS on HEADERS and CONTINUATION (RFC 9113 §6.2, §6.10).
const END_HEADERS: u8 = 0x4;

/// RST_STREAM and GOAWAY error codes (RFC 9113 §7) that do not mean "refused for an error": NO_ERROR,
/// INTERNAL_ERROR (edge cut a response short: counted as a truncation), CANCEL.
const NOT_REFUSALS: [u32; 3] = [0x0, 0x2, 0x8];

/// Non-ACK SETTINGS, and non-ACK PINGs, a client may send per second.
pub const CONTROL_PER_SECOND: u32 = 100;
/// Empty frames (see the module table) a client may send per second.
pub const EMPTY_PER_SECOND: u32 = 100;
/// WINDOW_UPDATE frames a client may send per second beyond those the DATA edge sent explains.
pub const WINDOW_UPDATE_BASE: u32 = 100;
/// WINDOW_UPDATE frames allowed per DATA frame edge sent (one for the stream, one for the
/// connection window).
pub const WINDOW_UPDATES_PER_DATA: u32 = 2;

/// The length of the client connection preface (RFC 9113 §3.4), which the inbound scanner skips.
pub const PREFACE_LEN: u8 = 24;

/// One frame's header as the scanner saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Frame type ([`kind`]).
    pub kind: u8,
    /// Flags octet.
    pub flags: u8,
    /// Payload length, bytes (24 bits).
    pub len: u32,
    /// Stream identifier (31 bits).
    pub stream: u32,
    /// RST_STREAM's error code (its payload's first 4 bytes); 0 for other frames.
    pub code: u32,
}

/// Where the scanner is in the byte stream.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Skipping the client preface: bytes left.
    Preface(u8),
    /// In a frame header: bytes of it seen.
    Head(u8),
    /// In a frame's payload: bytes of it seen.
    Payload(u32),
}

/// A frame-header scanner over one direction of a connection, carried across reads (a frame may be
/// split anywhere). Not a parser: it never rejects; h2 does that.
#[derive(Clone, Copy, Debug)]
pub struct Scanner {
    state: State,
    head: [u8; 9],
    frame: Frame,
}

/// What [`Scanner::walk`] reports.
enum Seen {
    /// A frame header (RST_STREAM: once its error code is read, or its payload ended).
    Frame(Frame),
    /// `data[at]` is byte `byte` (0..4) of a GOAWAY's error code.
    GoawayCode { at: usize, byte: usize },
}

impl Scanner {
    /// The scanner of the client's bytes: the connection preface comes first.
    pub fn inbound() -> Self {
        Self::at(State::Preface(PREFACE_LEN))
    }

    /// The scanner of the server's bytes: frames from the first byte.
    pub fn outbound() -> Self {
        Self::at(State::Head(0))
    }

    fn at(state: State) -> Self {
        Scanner {
            state,
            head: [0; 9],
            frame: Frame::default(),
        }
    }

    /// Walks `data` (the next bytes of the direction), calling `on` with each frame header. RST_STREAM
    /// is reported once its 4-byte error code is read (with `code` 0 if its payload is shorter).
    pub fn scan(&mut self, data: &[u8], mut on: impl FnMut(Frame)) {
        self.walk(data, |s| {
            if let Seen::Frame(f) = s {
                on(f)
            }
        });
    }

    /// Overwrites, in `data` (the next bytes of the direction, not yet scanned), every byte of a
    /// GOAWAY's error code with `code` (big-endian), without moving the scanner.
    pub fn patch_goaway(&self, data: &mut [u8], code: u32) {
        let code = code.to_be_bytes();
        let mut at = Vec::new();
        let mut probe = *self;
        probe.walk(data, |s| {
            if let Seen::GoawayCode { at: i, byte } = s {
                at.push((i, byte));
            }
        });
        for (i, byte) in at {
            data[i] = code[byte];
        }
    }

    fn walk(&mut self, data: &[u8], mut on: impl FnMut(Seen)) {
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            match self.state {
                State::Preface(left) => {
                    let n = rest.len().min(left as usize);
                    i += n;
                    let left = left - n as u8;
                    self.state = match left {
                        0 => State::Head(0),
                        l => State::Preface(l),
                    };
                }
                State::Head(have) => {
                    let n = rest.len().min(9 - have as usize);
                    self.head[have as usize..have as usize + n].copy_from_slice(&rest[..n]);
                    i += n;
                    let have = have + n as u8;
                    if have < 9 {
                        self.state = State::Head(have);
                        continue;
                    }
                    self.frame = parse_head(&self.head);
                    self.state = State::Payload(0);
                    // RST_STREAM waits for its error code (unless it has no payload).
                    if self.frame.kind != kind::RST_STREAM || self.frame.len == 0 {
                        on(Seen::Frame(self.frame));
                    }
                    if self.frame.len == 0 {
                        self.state = State::Head(0);
                    }
                }
                State::Payload(pos) => {
                    let f = self.frame;
                    let n = rest.len().min((f.len - pos) as usize);
                    let end = pos + n as u32;
                    if f.kind == kind::RST_STREAM && pos < 4 {
                        for (k, &b) in rest[..n.min(4 - pos as usize)].iter().enumerate() {
                            self.frame.code |= (b as u32) << (8 * (3 - (pos as usize + k)));
                        }
                        if end >= f.len.min(4) {
                            on(Seen::Frame(self.frame));
                        }
                    }
                    if f.kind == kind::GOAWAY && f.len >= 8 {
                        for p in pos.max(4)..end.min(8) {
                            let at = i + (p - pos) as usize;
                            on(Seen::GoawayCode {
                                at,
                                byte: (p - 4) as usize,
                            });
                        }
                    }
                    i += n;
                    self.state = match end == f.len {
                        true => State::Head(0),
                        false => State::Payload(end),
                    };
                }
            }
        }
    }
}

impl Scanner {
    /// The [`Filter`] that starts where this scanner is: a frame already partly scanned (and handed
    /// on) is kept whole.
    pub fn filter(&self) -> Filter {
        match self.state {
            State::Preface(_) | State::Head(0) => Filter::at_head(0, self.head),
            State::Head(have) => Filter::at_head(have, self.head),
            State::Payload(pos) => Filter::in_payload(self.frame.len - pos),
        }
    }
}

/// The frame header in `h` (RFC 9113 §4.1).
pub fn parse_head(h: &[u8; 9]) -> Frame {
    Frame {
        len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        code: 0,
    }
}

/// Which flood a connection committed (the `flood` field of the `http2.goaway` log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flood {
    /// Streams reset by the client or refused by edge, over `max_resets_per_second`.
    Resets,
    /// SETTINGS frames.
    Settings,
    /// PING frames.
    Ping,
    /// Empty DATA, PRIORITY, empty CONTINUATION.
    EmptyFrames,
    /// WINDOW_UPDATE frames beyond the DATA edge sent.
    WindowUpdate,
}

impl Flood {
    /// The log field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Flood::Resets => "resets",
            Flood::Settings => "settings",
            Flood::Ping => "ping",
            Flood::EmptyFrames => "empty_frames",
            Flood::WindowUpdate => "window_update",
        }
    }
}

/// Whether an RST_STREAM code edge sent means "this stream was refused for an error" (counted with
/// the client's resets, and as `edge_http2_resets_total{side="edge"}`).
pub fn is_refusal(code: u32) -> bool {
    !NOT_REFUSALS.contains(&code)
}

/// One second's counts of one connection, against its limits (see the module table).
#[derive(Clone, Debug)]
pub struct Window {
    start: Instant,
    max_resets: u32,
    resets: u32,
    settings: u32,
    pings: u32,
    empty: u32,
    window_updates: u32,
    /// DATA frames edge sent in this window, and in the one before it.
    data: u32,
    data_before: u32,
}

impl Window {
    /// A window starting at `now`; `max_resets` is `server.http2.max_resets_per_second`.
    pub fn new(now: Instant, max_resets: u32) -> Self {
        Window {
            start: now,
            max_resets,
            resets: 0,
            settings: 0,
            pings: 0,
            empty: 0,
            window_updates: 0,
            data: 0,
            data_before: 0,
        }
    }

    /// Starts a new window when `now` is a second or more past this one's start; whether it did.
    pub fn roll(&mut self, now: Instant) -> bool {
        let age = now.saturating_duration_since(self.start);
        if age < Duration::from_secs(1) {
            return false;
        }
        let data_before = match age < Duration::from_secs(2) {
            true => self.data,
            false => 0,
        };
        *self = Window {
            data_before,
            ..Window::new(now, self.max_resets)
        };
        true
    }

    /// Starts a new window at `now` whatever this one's age (the counts start over; the DATA edge
    /// sent still grows the WINDOW_UPDATE budget).
    pub fn restart(&mut self, now: Instant) {
        *self = Window {
            data_before: self.data.saturating_add(self.data_before),
            ..Window::new(now, self.max_resets)
        };
    }

    /// Counts a frame from the client; the flood it makes, if it goes over a limit.
    pub fn inbound(&mut self, f: &Frame) -> Option<Flood> {
        let ack = f.flags & END_STREAM_OR_ACK != 0;
        let (count, limit, flood) = match f.kind {
            kind::RST_STREAM => (&mut self.resets, self.max_resets, Flood::Resets),
            kind::SETTINGS if !ack => (&mut self.settings, CONTROL_PER_SECOND, Flood::Settings),
            kind::PING if !ack => (&mut self.pings, CONTROL_PER_SECOND, Flood::Ping),
            kind::PRIORITY => (&mut self.empty, EMPTY_PER_SECOND, Flood::EmptyFrames),
            kind::DATA if f.len == 0 && !ack => {
                (&mut self.empty, EMPTY_PER_SECOND, Flood::EmptyFrames)
            }
            kind::CONTINUATION if f.len == 0 && f.flags & END_HEADERS == 0 => {
                (&mut self.empty, EMPTY_PER_SECOND, Flood::EmptyFrames)
            }
            kind::WINDOW_UPDATE => {
                let sent = self.data.saturating_add(self.data_before);
                let limit =
                    WINDOW_UPDATE_BASE.saturating_add(sent.saturating_mul(WINDOW_UPDATES_PER_DATA));
                (&mut self.window_updates, limit, Flood::WindowUpdate)
            }
            _ => return None,
        };
        *count = count.saturating_add(1);
        (*count > limit).then_some(flood)
    }

    /// Counts a frame edge sent: DATA grows the WINDOW_UPDATE budget, a refusing RST_STREAM counts as
    /// a reset. The flood it makes, if it goes over `max_resets_per_second`.
    pub fn outbound(&mut self, f: &Frame) -> Option<Flood> {
        match f.kind {
            kind::DATA => self.data = self.data.saturating_add(1),
            kind::RST_STREAM if is_refusal(f.code) => {
                self.resets = self.resets.saturating_add(1);
                return (self.resets > self.max_resets).then_some(Flood::Resets);
            }
            _ => {}
        }
        None
    }
}

/// A frame's bytes (9-byte header, RFC 9113 §4.1, then `payload`), for this module's and
/// [`super::filter`]'s tests.
#[cfg(test)]
pub(super) fn test_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_frame as frame;

    fn sample() -> Vec<u8> {
        let mut b = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        b.extend(frame(kind::SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
        b.extend(frame(kind::HEADERS, 0x5, 1, b"\x82\x84"));
        b.extend(frame(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes()));
        b.extend(frame(kind::DATA, 0, 3, b""));
        b.extend(frame(kind::GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0, b'x']));
        b.extend(frame(kind::PING, 1, 0, &[7; 8]));
        b
    }

    fn scan_split(bytes: &[u8], cut: &[usize]) -> Vec<Frame> {
        let mut s = Scanner::inbound();
        let mut out = Vec::new();
        let mut from = 0;
        for &c in cut.iter().chain(std::iter::once(&bytes.len())) {
            s.scan(&bytes[from..c], |f| out.push(f));
            from = c;
        }
        out
    }

    #[test]
    fn frames_are_seen_whole_wherever_the_reads_split_them() {
        let b = sample();
        let whole = scan_split(&b, &[]);
        let kinds: Vec<u8> = whole.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                kind::SETTINGS,
                kind::HEADERS,
                kind::RST_STREAM,
                kind::DATA,
                kind::GOAWAY,
                kind::PING
            ]
        );
        assert_eq!((whole[1].stream, whole[1].flags, whole[1].len), (1, 5, 2));
        assert_eq!(whole[2].code, 8, "RST_STREAM's error code");
        for a in 0..=b.len() {
            for c in [a, (a + 5).min(b.len()), (a + 13).min(b.len())] {
                assert_eq!(scan_split(&b, &[a, c]), whole, "split at {a} and {c}");
            }
        }
    }

    #[test]
    fn goaway_codes_are_patched_without_moving_the_scanner() {
        let mut out = frame(kind::SETTINGS, 1, 0, b"");
        out.extend(frame(
            kind::GOAWAY,
            0,
            0,
            &[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        ));
        let at = out.len() - 4;
        for cut in 0..=out.len() {
            let mut s = Scanner::outbound();
            let mut b = out.clone();
            let (head, tail) = b.split_at_mut(cut);
            s.patch_goaway(head, 0xb);
            s.scan(head, |_| {});
            s.patch_goaway(tail, 0xb);
            assert_eq!(&b[at..], &[0, 0, 0, 0xb], "cut at {cut}");
            assert_eq!(&b[..at], &out[..at], "cut at {cut}");
        }
    }

    #[test]
    fn each_flood_trips_past_its_limit_and_a_new_second_starts_over() {
        let t0 = Instant::now();
        let cases = [
            (kind::RST_STREAM, 0, 10, 10, Flood::Resets),
            (kind::SETTINGS, 0, 0, CONTROL_PER_SECOND, Flood::Settings),
            (kind::PING, 0, 8, CONTROL_PER_SECOND, Flood::Ping),
            (kind::DATA, 0, 0, EMPTY_PER_SECOND, Flood::EmptyFrames),
            (kind::PRIORITY, 0, 5, EMPTY_PER_SECOND, Flood::EmptyFrames),
            (
                kind::CONTINUATION,
                0,
                0,
                EMPTY_PER_SECOND,
                Flood::EmptyFrames,
            ),
            (
                kind::WINDOW_UPDATE,
                0,
                4,
                WINDOW_UPDATE_BASE,
                Flood::WindowUpdate,
            ),
        ];
        for (k, flags, len, limit, flood) in cases {
            let f = Frame {
                kind: k,
                flags,
                len,
                stream: 1,
                code: 0,
            };
            let mut w = Window::new(t0, 10);
            for i in 0..limit {
                assert_eq!(w.inbound(&f), None, "{flood:?} frame {i}");
            }
            assert_eq!(w.inbound(&f), Some(flood));
            w.roll(t0 + Duration::from_millis(999));
            assert_eq!(w.inbound(&f), Some(flood), "same second");
            w.roll(t0 + Duration::from_secs(1));
            assert_eq!(w.inbound(&f), None, "{flood:?}: a new second");
        }
    }

    #[test]
    fn acks_data_with_payload_and_end_stream_are_not_floods() {
        let mut w = Window::new(Instant::now(), 1);
        for (k, flags, len) in [
            (kind::SETTINGS, 1, 0),
            (kind::PING, 1, 8),
            (kind::DATA, 0, 1),
            (kind::DATA, 1, 0),
            (kind::CONTINUATION, END_HEADERS, 0),
            (kind::HEADERS, 0, 0),
        ] {
            for _ in 0..1000 {
                let f = Frame {
                    kind: k,
                    flags,
                    len,
                    stream: 1,
                    code: 0,
                };
                assert_eq!(w.inbound(&f), None, "type {k} flags {flags}");
            }
        }
    }

    #[test]
    fn window_updates_grow_with_the_data_edge_sent_and_refusals_count_as_resets() {
        let t0 = Instant::now();
        let mut w = Window::new(t0, 3);
        let data = Frame {
            kind: kind::DATA,
            len: 100,
            ..Frame::default()
        };
        for _ in 0..500 {
            assert_eq!(w.outbound(&data), None);
        }
        // The next second still allows the updates for the DATA of the one before.
        w.roll(t0 + Duration::from_millis(1500));
        let wu = Frame {
            kind: kind::WINDOW_UPDATE,
            len: 4,
            ..Frame::default()
        };
        for _ in 0..WINDOW_UPDATE_BASE + 1000 {
            assert_eq!(w.inbound(&wu), None);
        }
        assert_eq!(w.inbound(&wu), Some(Flood::WindowUpdate));
        let rst = |code| Frame {
            kind: kind::RST_STREAM,
            len: 4,
            code,
            ..Frame::default()
        };
        for code in [0, 2, 8] {
            assert!(!is_refusal(code));
            assert_eq!(w.outbound(&rst(code)), None);
        }
        assert_eq!(w.outbound(&rst(1)), None);
        assert_eq!(w.outbound(&rst(7)), None);
        assert_eq!(w.inbound(&rst(8)), None, "the client's, third");
        assert_eq!(w.outbound(&rst(1)), Some(Flood::Resets));
    }
}
