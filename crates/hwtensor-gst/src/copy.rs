//! The copy paths, counted by the elements: a frame upstream made in memory that is not the
//! channel's, copied into a slot; a GPU frame copied into system memory for downstream.

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
fn with_bytes_mut<R>(
    t: &TensorDyn,
    f: impl FnOnce(&mut [u8]) -> Result<R, String>,
) -> Result<R, String> {
    let mut map = t.map_bytes(Direction::Write).map_err(|e| e.to_string())?;
    f(map
        .as_bytes_mut()
        .ok_or("a write map that cannot be written")?)
}

/// Runs `f` over the tensor's bytes, mapped for reading.
fn with_bytes<R>(t: &TensorDyn, f: impl FnOnce(&[u8]) -> Result<R, String>) -> Result<R, String> {
    let map = t.map_bytes(Direction::Read).map_err(|e| e.to_string())?;
    f(map.as_bytes().ok_or("a read map that cannot be read")?)
}

/// Where each plane of `buffer` starts and how far apart its rows are: its `GstVideoMeta`'s
/// geometry where it carries one, else the caps' default layout. Upstream controls both, so
/// nothing here is trusted until [`plane_in`] checks it against the bytes the buffer holds.
fn source_layout(
    buffer: &gst::BufferRef,
    info: &gst_video::VideoInfo,
) -> Result<Vec<(usize, i32)>, String> {
    let planes = info.n_planes() as usize;
    match buffer.meta::<gst_video::VideoMeta>() {
        Some(meta) if meta.n_planes() as usize != planes => Err(format!(
            "the buffer's video meta has {} planes, its caps {planes}",
            meta.n_planes()
        )),
        Some(meta) => Ok((0..planes)
            .map(|i| (meta.offset()[i], meta.stride()[i]))
            .collect()),
        None => Ok((0..planes)
            .map(|i| (info.offset()[i], info.stride()[i]))
            .collect()),
    }
}

/// Plane `i` of `src`: `rows` rows of `row` bytes, `stride` apart from `offset`, refused
/// unless every row lies inside `src` (a meta that reaches past its memory, a negative or
/// short stride).
fn plane_in(
    src: &[u8],
    i: usize,
    (offset, stride): (usize, i32),
    rows: usize,
    row: usize,
) -> Result<impl Iterator<Item = &[u8]>, String> {
    let stride = usize::try_from(stride)
        .ok()
        .filter(|&s| s >= row || rows <= 1)
        .ok_or_else(|| {
            format!("plane {i}'s stride {stride} is shorter than its {row}-byte rows")
        })?;
    let end = rows
        .checked_sub(1)
        .and_then(|last| last.checked_mul(stride))
        .and_then(|b| b.checked_add(offset)?.checked_add(row));
    match end {
        Some(end) if end <= src.len() => Ok((0..rows).map(move |r| {
            let at = offset + r * stride;
            &src[at..at + row]
        })),
        _ => Err(format!(
            "plane {i} of the buffer (offset {offset}, stride {stride}, {rows} rows of {row} \
             bytes) reaches past the {} bytes the buffer holds",
            src.len()
        )),
    }
}

/// Copies a video frame of `buffer` (laid out as `info` and its `GstVideoMeta` say) into the
/// image `t`, plane by plane and row by row. Every plane's extent is checked against the
/// bytes the buffer holds before one is read: a meta upstream got wrong is an error, never a
/// read past the memory.
pub fn into_slot(
    buffer: &gst::BufferRef,
    info: &gst_video::VideoInfo,
    t: &TensorDyn,
) -> Result<(), String> {
    let layout = source_layout(buffer, info)?;
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    if planes.len() != layout.len() {
        return Err(format!(
            "the slot's image has {} planes, the frame {}",
            planes.len(),
            layout.len()
        ));
    }
    let rows = row_bytes(t)?;
    let map = buffer
        .map_readable()
        .map_err(|_| "the buffer cannot be mapped for reading".to_string())?;
    let src = map.as_slice();
    // Checked whole before the slot is written: a bad plane leaves the slot as it was.
    let sources = planes
        .iter()
        .zip(&rows)
        .enumerate()
        .map(|(i, (p, &row))| plane_in(src, i, layout[i], p.rows, row))
        .collect::<Result<Vec<_>, _>>()?;
    with_bytes_mut(t, |dst| {
        for ((p, &row), source) in planes.iter().zip(&rows).zip(sources) {
            for (r, s) in source.enumerate() {
                let at = p.offset + r * p.row_stride;
                dst.get_mut(at..at + row)
                    .ok_or("the slot is shorter than its image")?
                    .copy_from_slice(s);
            }
        }
        Ok(())
    })
}

/// A system-memory buffer holding a copy of `t`'s image laid out as `info` says (the caps'
/// default layout: for a downstream that reads buffers without `GstVideoMeta`, which a buffer
/// at another layout would send past its end).
pub fn out_of_in_layout(t: &TensorDyn, info: &gst_video::VideoInfo) -> Result<gst::Buffer, String> {
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    if planes.len() != info.n_planes() as usize {
        return Err(format!(
            "the frame has {} planes, its caps {}",
            planes.len(),
            info.n_planes()
        ));
    }
    let rows = row_bytes(t)?;
    let mut buffer = gst::Buffer::with_size(info.size()).map_err(|e| e.to_string())?;
    {
        let b = buffer.get_mut().ok_or("a new buffer is not writable")?;
        let mut out = b.map_writable().map_err(|e| e.to_string())?;
        with_bytes(t, |src| {
            for (i, (p, &row)) in planes.iter().zip(&rows).enumerate() {
                let stride = usize::try_from(info.stride()[i]).map_err(|_| "a negative stride")?;
                for r in 0..p.rows {
                    let from = p.offset + r * p.row_stride;
                    let to = info.offset()[i] + r * stride;
                    let s = src
                        .get(from..from + row)
                        .ok_or("the frame is shorter than its image")?;
                    out.get_mut(to..to + row)
                        .ok_or("the caps' layout is shorter than the frame")?
                        .copy_from_slice(s);
                }
            }
            Ok(())
        })?;
    }
    Ok(buffer)
}

/// Whether `t`'s image lies as `info` (the caps' default layout) says: every plane at the same
/// offset and stride, so a downstream without `GstVideoMeta` reads it right.
pub fn in_default_layout(t: &TensorDyn, info: &gst_video::VideoInfo) -> bool {
    let Ok((offsets, strides)) = crate::caps::layout(t) else {
        return false;
    };
    offsets.as_slice() == info.offset() && strides.as_slice() == info.stride()
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

#[cfg(test)]
mod tests {
    use super::plane_in;

    #[test]
    fn a_plane_that_reaches_past_the_buffer_is_refused_before_any_row_is_read() {
        let src = [0u8; 100];
        let ok: Vec<&[u8]> = plane_in(&src, 0, (10, 20), 4, 16).unwrap().collect();
        assert_eq!(ok.len(), 4);
        for (layout, rows, row, why) in [
            ((10, 30), 4, 16, "reaches past the 100 bytes"),
            ((usize::MAX - 4, 8), 2, 8, "reaches past"),
            ((0, -16), 2, 16, "stride -16"),
            ((0, 8), 2, 16, "stride 8 is shorter"),
            ((0, i32::MAX), 3, 16, "reaches past"),
        ] {
            let err = plane_in(&src, 1, layout, rows, row).err().unwrap();
            assert!(err.contains(why), "{layout:?}: {err}");
        }
    }
}
