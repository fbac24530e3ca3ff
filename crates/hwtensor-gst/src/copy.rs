//! The copy paths, counted by the elements: a frame upstream made in memory that is not the
//! channel's, copied into a slot; a GPU frame copied into system memory for downstream.

use gst_video::prelude::*;
use gst_video::VideoFrameRef;
use hwtensor::{Direction, TensorDyn};

/// Bytes of data in each row of each plane of `t` (rows may be padded beyond it).
fn row_bytes(t: &TensorDyn) -> Result<Vec<usize>, String> {
    let info = t.image_info().ok_or("not an image")?;
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    let row = |k| {
        let elem = t.dtype().size();
        let bytes = info.format.plane_row_bytes(info.width, elem, k);
        bytes.ok_or_else(|| "row size overflows".to_string())
    };
    (0..planes.len()).map(row).collect()
}

/// Runs `f` over the tensor's bytes, mapped for writing.
#[allow(unsafe_code)] // a byte view of a map the closure cannot outlive
fn with_bytes_mut<R>(
    t: &TensorDyn,
    f: impl FnOnce(&mut [u8]) -> Result<R, String>,
) -> Result<R, String> {
    let map = t.map_bytes(Direction::Write).map_err(|e| e.to_string())?;
    // SAFETY: the write map covers `len` bytes from `as_ptr`, claimed for writing (no other map
    // of this process overlaps it) until it drops after `f` returns.
    let bytes = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
    f(bytes)
}

/// Runs `f` over the tensor's bytes, mapped for reading.
#[allow(unsafe_code)] // a byte view of a map the closure cannot outlive
fn with_bytes<R>(t: &TensorDyn, f: impl FnOnce(&[u8]) -> Result<R, String>) -> Result<R, String> {
    let map = t.map_bytes(Direction::Read).map_err(|e| e.to_string())?;
    // SAFETY: the read map covers `len` bytes from `as_ptr` until it drops after `f` returns;
    // no writer of this process is claimed over it meanwhile.
    let bytes = unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) };
    f(bytes)
}

/// Copies a video frame of `buffer` (laid out as `info` and its `GstVideoMeta` say) into the
/// image `t`, plane by plane and row by row.
pub fn into_slot(
    buffer: &gst::BufferRef,
    info: &gst_video::VideoInfo,
    t: &TensorDyn,
) -> Result<(), String> {
    let frame = VideoFrameRef::from_buffer_ref_readable(buffer, info)
        .map_err(|_| "the buffer does not hold a frame of the negotiated caps".to_string())?;
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    let rows = row_bytes(t)?;
    with_bytes_mut(t, |dst| {
        for (i, (p, &row)) in planes.iter().zip(&rows).enumerate() {
            let src = frame.plane_data(i as u32).map_err(|e| e.to_string())?;
            let src_stride = frame.plane_stride()[i] as usize;
            for r in 0..p.rows {
                let s = src
                    .get(r * src_stride..r * src_stride + row)
                    .ok_or("the frame's plane is shorter than its caps say")?;
                let at = p.offset + r * p.row_stride;
                dst.get_mut(at..at + row)
                    .ok_or("the slot is shorter than its image")?
                    .copy_from_slice(s);
            }
        }
        Ok(())
    })
}

/// A system-memory buffer holding a copy of `t`'s image, with its `GstVideoMeta` (for frames
/// the CPU cannot reach through an fd mapping: GPU memory, mapped through a staging copy).
pub fn out_of(t: &TensorDyn) -> Result<gst::Buffer, String> {
    let size = crate::caps::image_bytes(t)?;
    let mut buffer = gst::Buffer::with_size(size).map_err(|e| e.to_string())?;
    {
        let b = buffer.get_mut().unwrap();
        {
            let mut out = b.map_writable().map_err(|e| e.to_string())?;
            // The map ends with the last row's pixels; a padded image's plane table ends with
            // its padding (a 64-pixel BGRx image at 320-byte rows: the map 64 bytes short).
            // That tail is padding, left as the new buffer has it.
            with_bytes(t, |src| {
                let n = src.len().min(size);
                out[..n].copy_from_slice(&src[..n]);
                Ok(())
            })?;
        }
        crate::caps::add_video_meta(b, t)?;
    }
    Ok(buffer)
}
