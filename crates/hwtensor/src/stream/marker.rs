//! The frame marker: what a frame's payload says when a media producer (GStreamer's
//! `hwtensorsink`, a replayer) fills it -- a plain frame, the end of the stream, or a change of
//! caps after which the consumer connects again -- and the frame's presentation time and
//! duration. Defined here, not in the GStreamer crate, so every consumer (Rust, C through
//! `hwt_frame_marker`, Python through `Frame.marker()`) reads it by one definition.
//!
//! | byte | size | field |
//! |---|---|---|
//! | 0 | 1 | [`FrameKind`]: 0 a frame, 1 end of stream, 2 caps change |
//! | 1 | 7 | zero |
//! | 8 | 8 | PTS in ns, little-endian; `u64::MAX` when none |
//! | 16 | 8 | duration in ns, little-endian; `u64::MAX` when none |
//!
//! End of stream and caps changes travel as frames of their own (the buffer's bytes mean
//! nothing): the channel has no other message, and a frame is ordered after every frame before
//! it. A frame with an empty payload (a producer that writes none) is a plain frame.

use super::FrameMeta;
use crate::{Error, Result};

/// Bytes of a marker in a frame's payload.
pub const MARKER_BYTES: usize = 24;
/// Where the PTS sits in the marker.
const PTS_AT: usize = 8;
/// Where the duration sits in the marker.
const DURATION_AT: usize = 16;
/// A time field's value when the frame has no such time.
const NO_TIME: u64 = u64::MAX;

// A marker always fits a frame's payload, so writing one cannot fail.
const _: () = assert!(MARKER_BYTES <= super::PAYLOAD_BYTES);

/// What a frame of a media channel says. Codes are only ever appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A frame: the buffer holds a picture or tensor.
    Frame = 0,
    /// End of stream: no frame follows.
    EndOfStream = 1,
    /// The producer's caps change: it closes this channel and opens another on the same
    /// address with the new pool, so the consumer connects again.
    CapsChange = 2,
}

impl FrameKind {
    /// The kind a marker's first byte names, if this reader knows it.
    fn from_code(code: u8) -> Option<FrameKind> {
        [Self::Frame, Self::EndOfStream, Self::CapsChange]
            .into_iter()
            .find(|k| *k as u8 == code)
    }
}

/// A frame's marker, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// What the frame says.
    pub kind: FrameKind,
    /// Presentation time in ns.
    pub pts_ns: Option<u64>,
    /// Duration in ns.
    pub duration_ns: Option<u64>,
}

impl Marker {
    /// A marker of `kind` without times.
    pub fn of(kind: FrameKind) -> Marker {
        Marker {
            kind,
            pts_ns: None,
            duration_ns: None,
        }
    }

    /// The payload bytes.
    pub fn encode(&self) -> [u8; MARKER_BYTES] {
        let mut out = [0u8; MARKER_BYTES];
        out[0] = self.kind as u8;
        let pts = self.pts_ns.unwrap_or(NO_TIME).to_le_bytes();
        out[PTS_AT..PTS_AT + 8].copy_from_slice(&pts);
        let duration = self.duration_ns.unwrap_or(NO_TIME).to_le_bytes();
        out[DURATION_AT..DURATION_AT + 8].copy_from_slice(&duration);
        out
    }

    /// Reads a frame's payload. An empty payload is a plain frame (a producer that writes no
    /// marker); a kind this reader does not know is an [`Error::Protocol`] naming it, so a
    /// consumer never takes a newer producer's message for a picture. Times missing from a
    /// short payload are `None`.
    pub fn decode(payload: &[u8]) -> Result<Marker> {
        let Some(&code) = payload.first() else {
            return Ok(Marker::of(FrameKind::Frame));
        };
        let kind = FrameKind::from_code(code).ok_or_else(|| {
            Error::Protocol(format!(
                "the frame's marker names kind {code}, which this reader does not know \
                 (0 frame, 1 end of stream, 2 caps change)"
            ))
        })?;
        let time = |at: usize| {
            let bytes: [u8; 8] = payload.get(at..at + 8)?.try_into().ok()?;
            Some(u64::from_le_bytes(bytes)).filter(|&t| t != NO_TIME)
        };
        Ok(Marker {
            kind,
            pts_ns: time(PTS_AT),
            duration_ns: time(DURATION_AT),
        })
    }

    /// Frame metadata carrying this marker, with sequence number `seq`, stamped now
    /// (`CLOCK_MONOTONIC`).
    pub fn meta(&self, seq: u64) -> FrameMeta {
        FrameMeta::new(seq, crate::time::monotonic_ns()).with_marker(self)
    }
}

impl FrameMeta {
    /// The same with `marker` as its payload.
    pub fn with_marker(mut self, marker: &Marker) -> FrameMeta {
        let bytes = marker.encode();
        self.payload[..MARKER_BYTES].copy_from_slice(&bytes);
        self.payload_len = MARKER_BYTES as u8;
        self
    }

    /// The marker the payload holds (see [`Marker::decode`]).
    pub fn marker(&self) -> Result<Marker> {
        Marker::decode(self.payload())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_through_the_payload() {
        let m = Marker {
            kind: FrameKind::Frame,
            pts_ns: Some(33_333_333),
            duration_ns: None,
        };
        assert_eq!(Marker::decode(&m.encode()).unwrap(), m);
        let eos = FrameMeta::new(1, 2).with_marker(&Marker::of(FrameKind::EndOfStream));
        assert_eq!(eos.marker().unwrap().kind, FrameKind::EndOfStream);
        assert_eq!(eos.payload().len(), MARKER_BYTES);
    }

    #[test]
    fn an_empty_payload_is_a_frame_and_an_unknown_kind_is_a_protocol_error() {
        assert_eq!(Marker::decode(&[]).unwrap().kind, FrameKind::Frame);
        let err = Marker::decode(&[9]).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)), "{err}");
        assert!(err.to_string().contains("kind 9"), "{err}");
        assert_eq!(Marker::decode(&[1]).unwrap().pts_ns, None);
    }

    #[test]
    fn encode_writes_the_kind_then_zeros_then_the_two_times_little_endian() {
        let m = Marker {
            kind: FrameKind::CapsChange,
            pts_ns: Some(7),
            duration_ns: Some(9),
        };
        let b = m.encode();
        assert_eq!(b[0], 2);
        assert_eq!(b[1..8], [0; 7]);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 7);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 9);
    }
}
