//! The frame marker from C (see `hwtensor::stream::Marker`): what a media producer's frame
//! says -- a frame, the end of the stream, a caps change -- with its PTS and duration, read
//! from and written into a frame's metadata, so a C consumer of `hwtensorsink` never decodes
//! the payload's bytes by hand.

use hwtensor::stream::{FrameKind, Marker, MARKER_BYTES};

use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::stream::{meta_of, HwtFrameMeta, HWT_FRAME_PAYLOAD_BYTES};

/// A time field's value when the frame has none.
pub const HWT_NO_TIME: u64 = u64::MAX;

/// What a frame of a media channel says (`uint32_t` fields named `kind`). Only appended.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtFrameKind {
    /// A frame: the buffer holds a picture or tensor.
    Frame = 0,
    /// End of stream: no frame follows.
    EndOfStream = 1,
    /// The producer's caps change: connect again for the new pool.
    CapsChange = 2,
}

/// A frame's marker.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HwtMarker {
    /// An `HWT_FRAME_KIND_*` value.
    pub kind: u32,
    /// Presentation time in ns, or `HWT_NO_TIME`.
    pub pts_ns: u64,
    /// Duration in ns, or `HWT_NO_TIME`.
    pub duration_ns: u64,
}

/// The library's kinds and their C values, one row each: both directions read it.
const KINDS: [(FrameKind, HwtFrameKind); 3] = [
    (FrameKind::Frame, HwtFrameKind::Frame),
    (FrameKind::EndOfStream, HwtFrameKind::EndOfStream),
    (FrameKind::CapsChange, HwtFrameKind::CapsChange),
];

impl HwtMarker {
    fn of(m: Marker) -> HwtMarker {
        let kind = KINDS
            .iter()
            .find(|(k, _)| *k == m.kind)
            .map_or(HwtFrameKind::Frame, |(_, c)| *c);
        HwtMarker {
            kind: kind as u32,
            pts_ns: m.pts_ns.unwrap_or(HWT_NO_TIME),
            duration_ns: m.duration_ns.unwrap_or(HWT_NO_TIME),
        }
    }

    fn marker(&self) -> Result<Marker, HwtStatus> {
        let kind = KINDS
            .iter()
            .find(|(_, c)| *c as u32 == self.kind)
            .map(|(k, _)| *k)
            .ok_or_else(|| invalid(format!("kind {} is no HWT_FRAME_KIND_* value", self.kind)))?;
        let time = |t: u64| (t != HWT_NO_TIME).then_some(t);
        Ok(Marker {
            kind,
            pts_ns: time(self.pts_ns),
            duration_ns: time(self.duration_ns),
        })
    }
}

/// Reads the marker in `meta`'s payload (a frame's, from `hwt_frame_meta`). An empty payload
/// is a plain frame; a kind this library does not know is `HWT_STATUS_BAD_MESSAGE`.
///
/// # Safety
/// `meta` must be null or valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_frame_meta_marker(
    meta: *const HwtFrameMeta,
    out: *mut HwtMarker,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise valid for a read (the contract).
        let meta = unsafe { meta.as_ref() }.ok_or_else(|| invalid("meta is null"))?;
        let marker = meta_of(meta)?.marker().or_status()?;
        put(out, "out", HwtMarker::of(marker))
    })
}

/// Writes `marker` into `meta`'s payload (before `hwt_producer_send`), replacing what it held.
///
/// # Safety
/// `meta` must be null or valid for a read and a write; `marker` null or valid for one read.
#[no_mangle]
pub unsafe extern "C" fn hwt_frame_meta_set_marker(
    meta: *mut HwtFrameMeta,
    marker: *const HwtMarker,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise valid for one read (the contract).
        let marker = unsafe { marker.as_ref() }.ok_or_else(|| invalid("marker is null"))?;
        let marker = marker.marker()?;
        // SAFETY: null refused; otherwise valid for a read and a write (the contract).
        let meta = unsafe { meta.as_mut() }.ok_or_else(|| invalid("meta is null"))?;
        meta.payload = [0; HWT_FRAME_PAYLOAD_BYTES];
        meta.payload[..MARKER_BYTES].copy_from_slice(&marker.encode());
        meta.payload_len = MARKER_BYTES as u32;
        Ok(())
    })
}
