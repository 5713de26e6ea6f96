//! [`Filter`]: drops whole frames from the client's bytes after a flood GOAWAY (DESIGN.md "HTTP/2"),
//! in place and sans-IO, so what a flooding client still has in flight costs a scan, not work in h2;
//! [`keep_after_goaway`] says which frames still go to h2.

use super::flood::{kind, parse_head, Frame, END_STREAM_OR_ACK};

/// Where a [`Filter`] is in the byte stream.
#[derive(Clone, Copy, Debug)]
enum FilterState {
    /// At a frame header, `have` bytes of it already handed on (then the frame is kept).
    Head(u8),
    /// In a payload: bytes left, and whether the frame is kept.
    Payload { left: u32, keep: bool },
}

/// Drops whole frames from a byte stream, in place: after a flood GOAWAY, the frames that would only
/// make more work (see [`keep_after_goaway`]) are never handed to h2. A frame whose header is split
/// across reads is kept (the part already handed on cannot be taken back): at most one frame per
/// read gets through.
#[derive(Clone, Copy, Debug)]
pub struct Filter {
    state: FilterState,
    head: [u8; 9],
}

impl Filter {
    /// A filter at a frame header of which `have` bytes (in `head`) were already handed on.
    pub fn at_head(have: u8, head: [u8; 9]) -> Self {
        Filter {
            state: FilterState::Head(have),
            head,
        }
    }

    /// A filter inside a payload already partly handed on (kept), `left` bytes of it to come.
    pub fn in_payload(left: u32) -> Self {
        Filter {
            state: FilterState::Payload { left, keep: true },
            head: [0; 9],
        }
    }

    /// Compacts `data` (the next bytes of the direction) to the frames `keep` accepts; the new length.
    pub fn apply(&mut self, data: &mut [u8], mut keep: impl FnMut(&Frame) -> bool) -> usize {
        let (mut r, mut w) = (0, 0);
        while r < data.len() {
            match self.state {
                FilterState::Head(0) if data.len() - r >= 9 => {
                    let h: [u8; 9] = data[r..r + 9].try_into().expect("9 bytes");
                    let f = parse_head(&h);
                    let kept = keep(&f);
                    if kept {
                        data.copy_within(r..r + 9, w);
                        w += 9;
                    }
                    r += 9;
                    self.state = FilterState::Payload {
                        left: f.len,
                        keep: kept,
                    };
                }
                FilterState::Head(have) => {
                    let n = (9 - have as usize).min(data.len() - r);
                    self.head[have as usize..have as usize + n].copy_from_slice(&data[r..r + n]);
                    data.copy_within(r..r + n, w);
                    (r, w) = (r + n, w + n);
                    let have = have + n as u8;
                    self.state = match have {
                        9 => FilterState::Payload {
                            left: parse_head(&self.head).len,
                            keep: true,
                        },
                        h => FilterState::Head(h),
                    };
                }
                FilterState::Payload { left, keep } => {
                    let n = (left as usize).min(data.len() - r);
                    if keep {
                        data.copy_within(r..r + n, w);
                        w += n;
                    }
                    r += n;
                    self.state = FilterState::Payload {
                        left: left - n as u32,
                        keep,
                    };
                }
            }
            if let FilterState::Payload { left: 0, .. } = self.state {
                self.state = FilterState::Head(0);
            }
        }
        w
    }
}

/// Whether a client frame still goes to h2 after a flood GOAWAY, `last` being the highest stream the
/// client had opened before it: frames of streams opened later (refused anyway, RFC 9113 §6.8),
/// non-ACK SETTINGS and PING, PRIORITY and empty DATA are dropped; what the open streams need to
/// finish (their DATA, trailers, WINDOW_UPDATE, RST_STREAM, the ACKs, GOAWAY) goes on.
pub fn keep_after_goaway(f: &Frame, last: u32) -> bool {
    let ack = f.flags & END_STREAM_OR_ACK != 0;
    match f.kind {
        _ if f.stream > last => false,
        kind::SETTINGS | kind::PING => ack,
        kind::PRIORITY => false,
        kind::DATA => f.len > 0 || ack,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::flood::test_frame as frame;

    #[test]
    fn the_filter_drops_whole_frames_wherever_the_reads_split_them() {
        let mut b = frame(kind::DATA, 0, 1, b"abc");
        b.extend(frame(kind::HEADERS, 0x5, 9, b"\x82\x84"));
        b.extend(frame(kind::PING, 0, 0, &[1; 8]));
        b.extend(frame(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
        b.extend(frame(kind::PING, 1, 0, &[2; 8]));
        b.extend(frame(kind::DATA, 0, 3, b""));
        b.extend(frame(kind::DATA, 1, 3, b"z"));
        let mut want = frame(kind::DATA, 0, 1, b"abc");
        want.extend(frame(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
        want.extend(frame(kind::PING, 1, 0, &[2; 8]));
        want.extend(frame(kind::DATA, 1, 3, b"z"));
        let keep = |f: &Frame| keep_after_goaway(f, 7);
        let mut whole = b.clone();
        let n = Filter::at_head(0, [0; 9]).apply(&mut whole, keep);
        assert_eq!(&whole[..n], &want[..]);
        for cut in 0..=b.len() {
            let mut f = Filter::at_head(0, [0; 9]);
            let (mut x, mut y) = (b[..cut].to_vec(), b[cut..].to_vec());
            let (n, m) = (f.apply(&mut x, keep), f.apply(&mut y, keep));
            let got = [&x[..n], &y[..m]].concat();
            // A header split by the cut is kept whole: the frame it starts may go through.
            assert!(
                got.len() >= want.len() && got.len() <= want.len() + 17,
                "cut {cut}"
            );
            let mut at = 0;
            let mut frames = 0;
            while at < got.len() {
                let h: [u8; 9] = got[at..at + 9].try_into().unwrap();
                at += 9 + parse_head(&h).len as usize;
                frames += 1;
            }
            assert_eq!(at, got.len(), "cut {cut}: whole frames");
            assert!(frames >= 4, "cut {cut}");
        }
    }
}
