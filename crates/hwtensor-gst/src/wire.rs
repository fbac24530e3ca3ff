//! What the elements put in a frame's payload ([`hwtensor::stream::FrameMeta::payload`]): the
//! kind of message, and the buffer's presentation time and duration. Any consumer of a channel
//! fed by `hwtensorsink` (Rust, C, Python) reads it with [`Marker::decode`] or by this layout:
//!
//! | byte | size | field |
//! |---|---|---|
//! | 0 | 1 | [`Kind`]: 0 a frame, 1 end of stream, 2 new caps (reconnect) |
//! | 1 | 7 | zero |
//! | 8 | 8 | PTS in ns, little-endian; `u64::MAX` when none |
//! | 16 | 8 | duration in ns, little-endian; `u64::MAX` when none |
//!
//! End of stream and new caps travel as frames of their own (the buffer's bytes mean nothing):
//! the channel has no other message, and a frame is ordered after every frame before it.
//!
//! On the way out of the channel, `hwtensorsrc` stamps each buffer with when the frame was sent
//! and when it was received ([`SENT_TIME_CAPS`], [`RECEIVED_TIME_CAPS`], [`stamp`]).

use std::sync::LazyLock;

use hwtensor::stream::FrameMeta;

/// Bytes of a marker in the payload.
pub const MARKER_BYTES: usize = 24;

// A marker always fits a frame's payload, so writing one cannot fail.
const _: () = assert!(MARKER_BYTES <= hwtensor::stream::PAYLOAD_BYTES);

/// What a frame of the channel says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A video frame.
    Frame = 0,
    /// End of stream: no frame follows.
    Eos = 1,
    /// The producer's caps change: it closes this channel and opens another on the same
    /// socket with the new pool, so the consumer connects again.
    Reconnect = 2,
}

/// A decoded payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// What the frame says.
    pub kind: Kind,
    /// Presentation time in ns.
    pub pts: Option<u64>,
    /// Duration in ns.
    pub duration: Option<u64>,
}

impl Marker {
    /// A marker of `kind` without times.
    pub fn of(kind: Kind) -> Marker {
        Marker {
            kind,
            pts: None,
            duration: None,
        }
    }

    /// The payload bytes.
    pub fn encode(&self) -> [u8; MARKER_BYTES] {
        let mut out = [0u8; MARKER_BYTES];
        out[0] = self.kind as u8;
        out[8..16].copy_from_slice(&self.pts.unwrap_or(u64::MAX).to_le_bytes());
        out[16..24].copy_from_slice(&self.duration.unwrap_or(u64::MAX).to_le_bytes());
        out
    }

    /// Reads a frame's payload. A frame without one (a producer other than `hwtensorsink`)
    /// is a plain frame; a kind this reader does not know is `None`.
    pub fn decode(payload: &[u8]) -> Option<Marker> {
        if payload.is_empty() {
            return Some(Marker::of(Kind::Frame));
        }
        let kind = match payload[0] {
            0 => Kind::Frame,
            1 => Kind::Eos,
            2 => Kind::Reconnect,
            _ => return None,
        };
        let time = |at: usize| {
            let bytes: [u8; 8] = payload.get(at..at + 8)?.try_into().ok()?;
            Some(u64::from_le_bytes(bytes)).filter(|&t| t != u64::MAX)
        };
        Some(Marker {
            kind,
            pts: time(8),
            duration: time(16),
        })
    }

    /// Frame metadata carrying this marker.
    pub fn meta(&self, seq: u64) -> FrameMeta {
        FrameMeta::new(seq, monotonic_ns())
            .with_payload(&self.encode())
            .expect("MARKER_BYTES <= PAYLOAD_BYTES, checked at compile time")
    }
}

/// The caps of the `GstReferenceTimestampMeta` that `hwtensorsrc` puts on each buffer: the
/// time the producer sent the frame, on `CLOCK_MONOTONIC` (one clock for every process of the
/// machine), so a pipeline can measure how long the frame took to reach it.
pub const SENT_TIME_CAPS: &str = "timestamp/x-hwtensor-monotonic";

/// The caps of the second `GstReferenceTimestampMeta` on each buffer of `hwtensorsrc`: when it
/// received the frame from the channel, on the same clock. Its distance from the send time is
/// the channel's part of the latency, and from there to a downstream element the pipeline's,
/// both of the same frame: a split a noisy machine skews far less than a comparison of separate
/// runs.
pub const RECEIVED_TIME_CAPS: &str = "timestamp/x-hwtensor-received";

/// The two stamp caps as caps objects. One object each for the process: a stamp this process
/// added refers to it, so [`is_stamp`] knows one by a pointer comparison.
static SENT_TIME: LazyLock<gst::Caps> =
    LazyLock::new(|| gst::Caps::new_empty_simple(SENT_TIME_CAPS));
static RECEIVED_TIME: LazyLock<gst::Caps> =
    LazyLock::new(|| gst::Caps::new_empty_simple(RECEIVED_TIME_CAPS));

/// Puts the send and receive times (ns, `CLOCK_MONOTONIC`) on `buffer` as the two
/// `GstReferenceTimestampMeta` above: the buffer's own stamps are set where it kept them
/// from its last frame (hwtensorsrc's slot buffers do, see `slots::Side::Source`), the others
/// added. Adding both anew took some 0.3 us a frame (allocating two metas, two caps refs),
/// a fifth of the source's part of a frame's latency (`elements_bench`, 2026-12-06).
#[allow(unsafe_code)] // writes the timestamp of a meta of a buffer we hold mutably
pub fn stamp(buffer: &mut gst::BufferRef, sent: u64, received: u64) {
    let [sent_caps, received_caps] = stamp_caps();
    let mut times = [(sent_caps, Some(sent)), (received_caps, Some(received))];
    for mut meta in buffer.iter_meta_mut::<gst::ReferenceTimestampMeta>() {
        let reference = meta.reference().as_ptr();
        let Some((_, at)) = times.iter_mut().find(|(c, _)| c.as_ptr() == reference) else {
            continue;
        };
        if let Some(at) = at.take() {
            // SAFETY: `meta` is a GstReferenceTimestampMeta of a buffer borrowed mutably here;
            // its timestamp is a plain field no other reference reads meanwhile.
            unsafe { (*meta.as_mut_ptr()).timestamp = at };
        }
    }
    for (caps, at) in times {
        if let Some(at) = at {
            let at = gst::ClockTime::from_nseconds(at);
            gst::ReferenceTimestampMeta::add(buffer, caps, at, gst::ClockTime::NONE);
        }
    }
}

/// Whether `meta` is one of the stamps [`stamp`] put on a buffer in this process.
pub fn is_stamp(meta: &gst::ReferenceTimestampMeta) -> bool {
    let reference = meta.reference().as_ptr();
    stamp_caps().iter().any(|c| c.as_ptr() == reference)
}

/// The send and receive stamps' caps objects.
fn stamp_caps() -> [&'static gst::Caps; 2] {
    [&SENT_TIME, &RECEIVED_TIME]
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the machine, as the channel's
/// timestamps are documented to be (the core's [`hwtensor::time::monotonic_ns`], kept here
/// under its old name for the elements' users).
pub use hwtensor::time::monotonic_ns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_through_the_payload() {
        let m = Marker {
            kind: Kind::Frame,
            pts: Some(33_333_333),
            duration: None,
        };
        assert_eq!(Marker::decode(&m.encode()), Some(m));
        assert_eq!(
            Marker::decode(&Marker::of(Kind::Eos).encode())
                .unwrap()
                .kind,
            Kind::Eos
        );
    }

    #[test]
    fn an_empty_payload_is_a_frame_and_an_unknown_kind_is_refused() {
        assert_eq!(Marker::decode(&[]).unwrap().kind, Kind::Frame);
        assert_eq!(Marker::decode(&[9]), None);
        assert_eq!(Marker::decode(&[1]).unwrap().pts, None);
    }
}
