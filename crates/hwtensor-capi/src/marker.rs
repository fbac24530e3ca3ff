//! The frame marker from C (see `hwtensor::stream::Marker`): what a media producer's frame
//! says -- a frame, the end of the stream, a caps change -- with its PTS and duration, read
//! from and written into a frame's metadata, so a C consumer of `hwtensorsink` never decodes
//! the payload's bytes by hand.

use hwtensor::stream::{FrameKind, Marker};

use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::stream::{meta_of, HwtFrameMeta};

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

impl HwtMarker {
    fn of(m: Marker) -> HwtMarker {
        let kind = match m.kind {
            FrameKind::Frame => HwtFrameKind::Frame,
            FrameKind::EndOfStream => HwtFrameKind::EndOfStream,
            FrameKind::CapsChange => HwtFrameKind::CapsChange,
        };
        HwtMarker {
            kind: kind as u32,
            pts_ns: m.pts_ns.unwrap_or(HWT_NO_TIME),
            duration_ns: m.duration_ns.unwrap_or(HWT_NO_TIME),
        }
    }

    fn marker(&self) -> Result<Marker, HwtStatus> {
        let kind = match self.kind {
            k if k == HwtFrameKind::Frame as u32 => FrameKind::Frame,
            k if k == HwtFrameKind::EndOfStream as u32 => FrameKind::EndOfStream,
            k if k == HwtFrameKind::CapsChange as u32 => FrameKind::CapsChange,
            k => return Err(invalid(format!("kind {k} is no HWT_FRAME_KIND_* value"))),
        };
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
        let with =
            hwtensor::stream::FrameMeta::new(meta.seq, meta.timestamp_ns).with_marker(&marker);
        meta.payload = [0; crate::stream::HWT_FRAME_PAYLOAD_BYTES];
        meta.payload[..with.payload().len()].copy_from_slice(with.payload());
        meta.payload_len = with.payload().len() as u32;
        Ok(())
    })
}
