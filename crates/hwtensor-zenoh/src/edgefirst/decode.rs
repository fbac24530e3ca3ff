//! An EdgeFirst message as a tensor: `CameraFrame` or `TensorStamped` (one layout), or a bare
//! `Tensor`. Parsed as hostile input: every refusal names the field that was wrong.
//!
//! Planes by reference are taken from the publisher by `pidfd_getfd` (see `fetch`) and then
//! imported as any fd is (kind, seals, size against the planes, offsets and strides against
//! the format); inline planes are copied into heap memory after their lengths are checked.

use std::os::fd::OwnedFd;
use std::time::Duration;

use edgefirst_schemas::edgefirst_msgs::CameraFrame;
use edgefirst_schemas::tensor::{Tensor as EfTensor, TensorPlaneView};
use hwtensor::{
    CpuAccess, DType, Direction, DrmModifier, ImageSpec, Layout, PixelFormat, PlaneFd,
    Quantization, SyncFile, TensorDyn, TensorMemory,
};

use super::codes::{colorimetry_of, dtype_of, format_of, STORAGE_DMA_BUF, STORAGE_SHM};
use super::fetch::Publisher;

/// A decoded EdgeFirst message.
#[derive(Debug)]
#[non_exhaustive]
pub struct Decoded {
    /// The tensor (an image for a message with a format), its colorimetry, quantization and
    /// DRM modifier kept.
    pub tensor: TensorDyn,
    /// The wrapper's sequence number (`None` for a bare `Tensor`, which has none).
    pub seq: Option<u64>,
    /// The wrapper's stamp in nanoseconds (0 for a bare `Tensor`).
    pub time_ns: u64,
    /// The wrapper's `frame_id` (empty for a bare `Tensor`).
    pub frame_id: String,
}

/// The alignment the schema crate reads its `float32[]` and `int32[]` fields at in place: it
/// panics on a buffer that starts off it, and a Zenoh payload may start anywhere.
const CDR_ALIGN: usize = 8;

/// Message bytes at an address the schema crate can read in place: the caller's own where
/// they are aligned, else a copy placed at an aligned offset of a new buffer.
struct Aligned<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    start: usize,
    len: usize,
}

impl<'a> Aligned<'a> {
    fn of(bytes: &'a [u8]) -> Aligned<'a> {
        let len = bytes.len();
        if (bytes.as_ptr() as usize).is_multiple_of(CDR_ALIGN) {
            return Aligned {
                bytes: bytes.into(),
                start: 0,
                len,
            };
        }
        let mut copy = vec![0u8; len + CDR_ALIGN];
        let start = copy.as_ptr().align_offset(CDR_ALIGN);
        copy[start..start + len].copy_from_slice(bytes);
        Aligned {
            bytes: copy.into(),
            start,
            len,
        }
    }

    fn get(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

/// Decodes `bytes`: a stamped message first (CameraFrame and TensorStamped share one layout),
/// then a bare Tensor. A frame's `fence_fd` is waited for at most `fence_wait` (a receive's
/// time left: a fence that never signals costs the receive its timeout, not more).
pub(crate) fn decode(bytes: &[u8], fence_wait: Duration) -> Result<Decoded, String> {
    let aligned = Aligned::of(bytes);
    parse(aligned.get(), fence_wait)
}

/// `decode` of bytes the schema crate can read in place.
fn parse(bytes: &[u8], fence_wait: Duration) -> Result<Decoded, String> {
    if let Ok(frame) = CameraFrame::from_cdr(bytes) {
        let stamp = frame.stamp();
        return Ok(Decoded {
            tensor: import(&frame.tensor(), fence_wait)?,
            seq: Some(frame.seq()),
            time_ns: u64::try_from(stamp.sec).unwrap_or(0) * 1_000_000_000
                + u64::from(stamp.nanosec),
            frame_id: frame.frame_id().to_string(),
        });
    }
    let tensor = EfTensor::from_cdr(bytes).map_err(|e| {
        format!("not an EdgeFirst CameraFrame, TensorStamped or Tensor message ({e:?})")
    })?;
    Ok(Decoded {
        tensor: import(&tensor, fence_wait)?,
        seq: None,
        time_ns: 0,
        frame_id: String::new(),
    })
}

/// The tensor a message describes, with its quantization, colorimetry and modifier.
fn import(t: &EfTensor<&[u8]>, fence_wait: Duration) -> Result<TensorDyn, String> {
    let dtype = dtype_of(t.dtype()).ok_or_else(|| format!("dtype: unknown code {}", t.dtype()))?;
    let planes: Vec<TensorPlaneView<'_>> = t.planes().collect();
    let first = planes
        .first()
        .ok_or("planes: none (a metadata-only message carries no tensor)")?;
    let modifier = one_modifier(&planes)?;
    let shape: Vec<usize> = t
        .shape()
        .map(usize::try_from)
        .collect::<Result<_, _>>()
        .map_err(|_| "shape: a dimension past this machine's address space")?;
    let mut tensor = match first.is_inline() {
        true => {
            if t.fence_fd() != -1 {
                return Err(format!(
                    "fence_fd: {} on a frame whose planes are inline",
                    t.fence_fd()
                ));
            }
            inline(t, dtype, &shape, &planes)?
        }
        false => by_reference(t, dtype, &shape, &planes, fence_wait)?,
    };
    if let Some(format) = tensor.image_info().map(|i| i.format) {
        tensor
            .set_colorimetry(colorimetry_of(format, colors(t)))
            .map_err(|e| e.to_string())?;
    }
    if !modifier.is_linear() {
        tensor = tensor
            .with_drm_modifier(modifier)
            .map_err(|e| e.to_string())?;
    }
    match quantization(t)? {
        Some(q) => tensor
            .with_quantization(Some(q))
            .map_err(|e| format!("quant_scales: {e}")),
        None => Ok(tensor),
    }
}

/// What the message's format and shape say of an image: its format and size; `None` for a
/// plain tensor (empty format).
fn image_of(
    t: &EfTensor<&[u8]>,
    shape: &[usize],
) -> Result<Option<(PixelFormat, usize, usize)>, String> {
    let name = t.format();
    if name.is_empty() {
        return Ok(None);
    }
    let format = format_of(name)
        .ok_or_else(|| format!("format: {name:?} is not a raw image format hwtensor lays out"))?;
    let (h, w) = match (format.layout(), shape) {
        (Layout::Planar, [_, h, w]) | (_, [h, w, ..]) => (*h, *w),
        _ => {
            return Err(format!(
                "shape: {shape:?} is not the grid of a {name} image"
            ))
        }
    };
    if format.addressing_shape(w, h) != shape {
        return Err(format!(
            "shape: {shape:?} is not the grid of a {w}x{h} {name} image ({:?})",
            format.addressing_shape(w, h)
        ));
    }
    Ok(Some((format, w, h)))
}

/// The one DRM modifier of every plane (an image has one); a vendor `drm_fourcc.h` does not
/// list is refused, as the schema asks of a modifier a consumer does not recognise.
fn one_modifier(planes: &[TensorPlaneView<'_>]) -> Result<DrmModifier, String> {
    let modifier = DrmModifier(planes[0].modifier);
    if let Some(k) = planes.iter().position(|p| p.modifier != modifier.0) {
        return Err(format!(
            "planes[{k}].modifier: {:#x} differs from plane 0's {modifier} (an image has one layout)",
            planes[k].modifier
        ));
    }
    let known =
        modifier.is_linear() || modifier == DrmModifier::INVALID || modifier.vendor().is_some();
    match known {
        true => Ok(modifier),
        false => Err(format!(
            "planes[0].modifier: unknown DRM format modifier {modifier}"
        )),
    }
}

/// The message's quantization, if any.
fn quantization(t: &EfTensor<&[u8]>) -> Result<Option<Quantization>, String> {
    let scales = t.quant_scales();
    let zeros = t.quant_zero_points();
    let zero_points = match zeros.is_empty() {
        true => vec![0; scales.len()],
        false => zeros.to_vec(),
    };
    match t.quant_axis() {
        -2 => Ok(None),
        -1 => Ok(Some(Quantization::per_tensor(scales[0], zero_points[0]))),
        axis if !t.format().is_empty() => Err(format!(
            "quant_axis: per-channel quantization (axis {axis}) of an image is not supported"
        )),
        axis => Quantization::per_channel(axis as usize, scales.to_vec(), zero_points)
            .map(Some)
            .map_err(|e| format!("quant_scales: {e}")),
    }
}

/// Inline planes copied into a new heap tensor, each checked to hold its plane.
fn inline(
    t: &EfTensor<&[u8]>,
    dtype: DType,
    shape: &[usize],
    planes: &[TensorPlaneView<'_>],
) -> Result<TensorDyn, String> {
    let Some((format, w, h)) = image_of(t, shape)? else {
        check_contiguous(t, shape, dtype)?;
        let tensor = TensorDyn::new(shape, dtype, Some(TensorMemory::Mem))
            .map_err(|e| format!("shape: {e}"))?;
        let mut map = tensor
            .map_bytes(Direction::Write)
            .map_err(|e| e.to_string())?;
        let bytes = map
            .as_bytes_mut()
            .ok_or("a write map that cannot be written")?;
        one_plane(planes)?;
        if planes[0].data.len() != bytes.len() {
            return Err(format!(
                "planes[0].data: {} bytes for a tensor of {}",
                planes[0].data.len(),
                bytes.len()
            ));
        }
        bytes.copy_from_slice(planes[0].data);
        drop(map);
        return Ok(tensor);
    };
    let stride = planes[0].stride as usize;
    let mem = Some(TensorMemory::Mem);
    let image = match planes.get(1).filter(|_| format.has_chroma_planes()) {
        // The chroma planes' stride is theirs (a producer that pads each plane on its own).
        Some(chroma) => TensorDyn::image(
            &ImageSpec::new(format, w, h)
                .with_row_stride(stride)
                .with_chroma_stride(chroma.stride as usize),
            dtype,
            mem,
            CpuAccess::ReadWrite,
        )
        .map_err(|e| format!("planes[1].stride: {e}"))?,
        None => TensorDyn::image(
            &ImageSpec::new(format, w, h).with_row_stride(stride),
            dtype,
            mem,
            CpuAccess::ReadWrite,
        )
        .map_err(|e| format!("planes[0].stride: {e}"))?,
    };
    let table = image.plane_table().map_err(|e| e.to_string())?;
    count_planes(planes, table.len(), format)?;
    {
        let mut map = image
            .map_bytes(Direction::Write)
            .map_err(|e| e.to_string())?;
        let bytes = map
            .as_bytes_mut()
            .ok_or("a write map that cannot be written")?;
        for (k, (plane, view)) in table.iter().zip(planes).enumerate() {
            if view.stride as usize != plane.row_stride {
                return Err(format!(
                    "planes[{k}].stride: {} bytes where a {format} image with {stride}-byte rows has {}",
                    view.stride, plane.row_stride
                ));
            }
            let row = format
                .plane_row_bytes(w, dtype.size(), k)
                .unwrap_or(plane.row_stride);
            // The last row needs its data, not its padding.
            let needed = match plane.rows {
                0 => 0,
                rows => (rows - 1)
                    .saturating_mul(plane.row_stride)
                    .saturating_add(row),
            };
            if view.data.len() < needed {
                return Err(format!(
                    "planes[{k}].data: {} bytes, the plane needs {needed}",
                    view.data.len()
                ));
            }
            let room = bytes.len().saturating_sub(plane.offset);
            let n = view.data.len().min(plane.size).min(room);
            let (Some(to), Some(from)) = (
                bytes.get_mut(plane.offset..plane.offset + n),
                view.data.get(..n),
            ) else {
                return Err(format!("planes[{k}]: past the image's bytes"));
            };
            to.copy_from_slice(from);
        }
    }
    Ok(image)
}

/// Planes by reference, taken from the publisher and imported without a copy after waiting
/// for the frame's fence.
fn by_reference(
    t: &EfTensor<&[u8]>,
    dtype: DType,
    shape: &[usize],
    planes: &[TensorPlaneView<'_>],
    fence_wait: Duration,
) -> Result<TensorDyn, String> {
    let expected = match t.storage_kind() {
        STORAGE_SHM => TensorMemory::Shm,
        STORAGE_DMA_BUF => TensorMemory::DmaBuf,
        k => {
            return Err(format!(
                "storage_kind: {k} is not shared memory (1) or a DMA-BUF (2), the kinds an fd \
                 brings to this process"
            ))
        }
    };
    let mut publisher = Publisher::open(t.pid())?;
    if t.fence_fd() >= 0 {
        let fence = publisher.take_once(i64::from(t.fence_fd()), "fence_fd")?;
        wait_for(fence, fence_wait)?;
    } else if t.fence_fd() != -1 {
        return Err(format!(
            "fence_fd: {} is neither an fd nor -1",
            t.fence_fd()
        ));
    }
    let tensor = match image_of(t, shape)? {
        None => {
            check_contiguous(t, shape, dtype)?;
            one_plane(planes)?;
            let fd = publisher.take_once(planes[0].handle, "planes[0].handle")?;
            let offset =
                usize::try_from(planes[0].offset).map_err(|_| "planes[0].offset: too large")?;
            TensorDyn::from_fd_at(fd, offset, shape, dtype)
                .map_err(|e| format!("planes[0]: {e}"))?
        }
        // One plane (packed RGB, grey, YUYV): the plain image import, with no plane plan.
        Some((format, w, h)) if format.layout() == Layout::Packed && planes.len() == 1 => {
            let fd = publisher.take_once(planes[0].handle, "planes[0].handle")?;
            let offset =
                usize::try_from(planes[0].offset).map_err(|_| "planes[0].offset: too large")?;
            let spec = ImageSpec::new(format, w, h).with_row_stride(planes[0].stride as usize);
            TensorDyn::image_from_fd_at(fd, offset, &spec, dtype, CpuAccess::Read)
                .map_err(|e| format!("planes: {e}"))?
        }
        Some((format, w, h)) => {
            let mut fds = Vec::with_capacity(planes.len());
            for (k, p) in planes.iter().enumerate() {
                let fd = publisher.take(p.handle, &format!("planes[{k}].handle"))?;
                let offset = usize::try_from(p.offset)
                    .map_err(|_| format!("planes[{k}].offset: too large"))?;
                fds.push(PlaneFd::new(fd, offset, p.stride as usize));
            }
            TensorDyn::image_from_planes(fds, &ImageSpec::new(format, w, h), dtype, CpuAccess::Read)
                .map_err(|e| format!("planes: {e}"))?
        }
    };
    if tensor.memory() != expected {
        return Err(format!(
            "storage_kind: says {expected}, but the fd holds {} memory",
            tensor.memory()
        ));
    }
    Ok(tensor)
}

/// Waits at most `bound` for a frame's sync_file fence: the producer may still be writing.
fn wait_for(fence: OwnedFd, bound: Duration) -> Result<(), String> {
    SyncFile::from_fd(fence)
        .and_then(|f| f.wait(bound))
        .map_err(|e| format!("fence_fd: {e}"))
}

/// A plain tensor is one plane.
fn one_plane(planes: &[TensorPlaneView<'_>]) -> Result<(), String> {
    match planes.len() {
        1 => Ok(()),
        n => Err(format!("planes: {n} for a plain tensor, which is one")),
    }
}

/// An image has as many planes as its format.
fn count_planes(
    planes: &[TensorPlaneView<'_>],
    n: usize,
    format: PixelFormat,
) -> Result<(), String> {
    match planes.len() == n {
        true => Ok(()),
        false => Err(format!(
            "planes: {} for a {format} image, which has {n}",
            planes.len()
        )),
    }
}

/// A plain tensor's strides must be empty (C order) or C order's own.
fn check_contiguous(t: &EfTensor<&[u8]>, shape: &[usize], dtype: DType) -> Result<(), String> {
    let strides: Vec<i64> = t.strides().collect();
    if strides.is_empty() {
        return Ok(());
    }
    let mut expected = vec![0i64; shape.len()];
    let mut step = dtype.size() as i64;
    for (e, d) in expected.iter_mut().zip(shape).rev() {
        *e = step;
        step = step.saturating_mul(*d as i64);
    }
    match strides == expected {
        true => Ok(()),
        false => Err(format!(
            "strides: {strides:?} are not C order for shape {shape:?} ({expected:?}); only \
             contiguous plain tensors are imported"
        )),
    }
}

/// The four colorimetry strings.
fn colors<'a>(t: &'a EfTensor<&[u8]>) -> [&'a str; 4] {
    [
        t.color_space(),
        t.color_transfer(),
        t.color_encoding(),
        t.color_range(),
    ]
}
