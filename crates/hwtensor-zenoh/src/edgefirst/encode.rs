//! A tensor as an EdgeFirst message: `CameraFrame` for an image, `TensorStamped` for a plain
//! tensor, its planes by reference (this process's pid and fd numbers) or inline.

use std::borrow::Cow;
use std::os::fd::{AsFd, AsRawFd};

use edgefirst_schemas::builtin_interfaces::Time;
use edgefirst_schemas::edgefirst_msgs::{CameraFrame, TensorStamped};
use edgefirst_schemas::tensor::{TensorFields, TensorPlaneView};
use hwtensor::{Direction, ImageInfo, TensorDyn, TensorMemory};

use super::codes::{
    color_names, dtype_code, format_name, STORAGE_DMA_BUF, STORAGE_MEM, STORAGE_SHM,
};
use super::Schema;

/// EdgeFirst's "no fence": the frame is complete (hwtensor's CPU memory is, unless it carries
/// a sync_file, and GPU memory is read after its completion to go inline).
const NO_FENCE: i32 = -1;
/// `quant_axis` of a tensor without quantization.
const NO_QUANT: i32 = -2;
/// `quant_axis` of per-tensor quantization.
const PER_TENSOR: i32 = -1;

/// The wrapper's fields besides the tensor.
pub(crate) struct Stamp<'a> {
    /// The publisher's sequence number.
    pub seq: u64,
    /// `CLOCK_REALTIME` nanoseconds.
    pub time_ns: u64,
    /// The coordinate frame the image or tensor belongs to.
    pub frame_id: &'a str,
}

/// The plane records of a message and the bytes their `data` borrows.
struct Planes {
    storage: u32,
    pid: u32,
    handle: i64,
    /// The sync_file the bytes are complete at, by its fd number (by reference only).
    fence: i32,
    /// (offset in the tensor's span, row stride, size) per plane.
    spans: Vec<(usize, usize, usize)>,
    base: usize,
}

/// `tensor` as a message into `out`: by reference when `by_reference` and its memory has an
/// fd another process can take (shm, DMA-BUF), inline otherwise. Returns the schema written.
pub(crate) fn encode(
    tensor: &TensorDyn,
    by_reference: bool,
    stamp: &Stamp<'_>,
    out: &mut Vec<u8>,
) -> Result<Schema, String> {
    let shareable = matches!(tensor.memory(), TensorMemory::Shm | TensorMemory::DmaBuf);
    let fd = tensor.as_fd().filter(|_| by_reference && shareable);
    let image = tensor.image_info().copied();
    let spans = match &image {
        Some(_) => image_spans(tensor)?,
        None => vec![(0, plain_row_stride(tensor), span_len(tensor))],
    };
    let planes = Planes {
        storage: match (fd.is_some(), tensor.memory()) {
            (true, TensorMemory::DmaBuf) => STORAGE_DMA_BUF,
            (true, _) => STORAGE_SHM,
            (false, _) => STORAGE_MEM,
        },
        pid: fd.map_or(0, |_| std::process::id()),
        handle: fd.map_or(-1, |fd| i64::from(fd.as_raw_fd())),
        fence: match (fd, tensor.sync_file()) {
            (Some(_), Some(f)) => f.as_fd().as_raw_fd(),
            _ => NO_FENCE,
        },
        spans,
        base: tensor.byte_offset(),
    };
    match fd {
        Some(_) => write(tensor, &image, &planes, &[], stamp, out),
        None => {
            let map = tensor
                .map_bytes(Direction::Read)
                .map_err(|e| e.to_string())?;
            let bytes = map.as_bytes().ok_or("a read map that cannot be read")?;
            write(tensor, &image, &planes, bytes, stamp, out)
        }
    }
}

/// Encodes the message, each plane's `data` cut from `bytes` (empty: by reference).
fn write(
    tensor: &TensorDyn,
    image: &Option<ImageInfo>,
    planes: &Planes,
    bytes: &[u8],
    stamp: &Stamp<'_>,
    out: &mut Vec<u8>,
) -> Result<Schema, String> {
    let inline = planes.handle < 0;
    let modifier = image.map_or(0, |i| i.modifier.0);
    let views: Vec<TensorPlaneView<'_>> = planes
        .spans
        .iter()
        .map(|&(offset, stride, size)| {
            // The map ends at the last element: a last row's padding is not in it.
            let data = match inline {
                true => &bytes[offset.min(bytes.len())..(offset + size).min(bytes.len())],
                false => &[][..],
            };
            let size = if inline { data.len() } else { size };
            TensorPlaneView {
                handle: planes.handle,
                offset: (planes.base + offset) as u64,
                stride: stride as u64,
                size: size as u64,
                used: size as u64,
                modifier: if inline { 0 } else { modifier },
                handle_bytes: &[],
                data,
            }
        })
        .collect();
    let (shape, strides) = grid(tensor, image)?;
    let quant = tensor.quantization();
    let (axis, scales, zero_points) = match &quant {
        None => (NO_QUANT, vec![], vec![]),
        Some(q) => match &q.channels {
            None => (PER_TENSOR, vec![q.scale], vec![q.zero_point]),
            Some(_) if image.is_some() => {
                return Err("per-channel quantization of an image has no EdgeFirst form".into())
            }
            Some(c) => (c.axis as i32, c.scales.clone(), c.zero_points.clone()),
        },
    };
    let [space, transfer, encoding, range] = image.map_or([""; 4], |i| color_names(i.colorimetry));
    let fields = TensorFields {
        storage_kind: planes.storage,
        pid: planes.pid,
        fence_fd: planes.fence,
        dtype: dtype_code(tensor.dtype()),
        quant_axis: axis,
        shape: &shape,
        strides: &strides,
        quant_scales: &scales,
        quant_zero_points: &zero_points,
        format: Cow::Borrowed(image.map_or("", |i| format_name(i.format))),
        color_space: Cow::Borrowed(space),
        color_transfer: Cow::Borrowed(transfer),
        color_encoding: Cow::Borrowed(encoding),
        color_range: Cow::Borrowed(range),
        planes: &views,
    };
    let time = Time {
        sec: (stamp.time_ns / 1_000_000_000) as i32,
        nanosec: (stamp.time_ns % 1_000_000_000) as u32,
    };
    let encoded = match image {
        Some(_) => CameraFrame::builder()
            .stamp(time)
            .frame_id(stamp.frame_id)
            .seq(stamp.seq)
            .tensor(&fields)
            .encode_into_vec(out)
            .map(|()| Schema::CameraFrame),
        None => TensorStamped::builder()
            .stamp(time)
            .frame_id(stamp.frame_id)
            .seq(stamp.seq)
            .tensor(&fields)
            .encode_into_vec(out)
            .map(|()| Schema::TensorStamped),
    };
    encoded.map_err(|e| format!("EdgeFirst encoding refused the frame: {e:?}"))
}

/// Each plane of an image as (offset from the image's start, row stride, size).
fn image_spans(tensor: &TensorDyn) -> Result<Vec<(usize, usize, usize)>, String> {
    let table = tensor.plane_table().map_err(|e| e.to_string())?;
    Ok(table
        .iter()
        .map(|p| (p.offset, p.row_stride, p.size))
        .collect())
}

/// The message's addressing grid and byte strides: for an image, the format's grid (`[h, w]`
/// for YUV, `[h, w, c]` packed, `[c, h, w]` planar) with the image's row stride; for a plain
/// tensor, its own shape and strides.
fn grid(tensor: &TensorDyn, image: &Option<ImageInfo>) -> Result<(Vec<u64>, Vec<i64>), String> {
    let Some(info) = image else {
        let shape = tensor.shape().iter().map(|&d| d as u64).collect();
        let strides = tensor.strides().iter().map(|&s| s as i64).collect();
        return Ok((shape, strides));
    };
    let shape = info.format.addressing_shape(info.width, info.height);
    let elem = tensor.dtype().size();
    let px = info
        .format
        .min_row_bytes(1, elem)
        .ok_or("a pixel size that overflows")?;
    let rows = info.row_stride as i64;
    let strides = match shape.len() {
        3 if info.format.layout() == hwtensor::Layout::Planar => {
            vec![(info.row_stride * info.height) as i64, rows, elem as i64]
        }
        3 => vec![rows, px as i64, elem as i64],
        _ => vec![rows, px as i64],
    };
    Ok((shape.iter().map(|&d| d as u64).collect(), strides))
}

/// A plain tensor's bytes per row: its first dimension's stride (0 for a scalar or a vector,
/// which have no rows).
fn plain_row_stride(tensor: &TensorDyn) -> usize {
    match tensor.strides() {
        [first, _, ..] => *first,
        _ => 0,
    }
}

/// Bytes from a tensor's first element to the end of its last.
fn span_len(tensor: &TensorDyn) -> usize {
    if tensor.is_empty() {
        return 0;
    }
    let last: usize = tensor
        .shape()
        .iter()
        .zip(tensor.strides())
        .map(|(d, s)| (d - 1) * s)
        .sum();
    last + tensor.dtype().size()
}
