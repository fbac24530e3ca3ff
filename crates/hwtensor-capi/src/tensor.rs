//! Tensor objects: reference-counted handles over a tensor of any element type.
//!
//! Every `HwtTensor*` a function hands out holds one reference, which the caller gives back
//! with `hwt_tensor_release`. A view or a batch item holds its own reference and keeps the
//! buffer alive on its own; so does a map. Handles may be used from any thread.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use hwtensor::{BufferIdentity, Region, TensorDyn};

use crate::codes::{dtype_of, format_of, memory_of};
use crate::status::{copy_out, guard, invalid, put, slice_in, HwtStatus, OrStatus, Outcome};

/// The most dimensions a shape may have: more is taken for a wrong `ndim`, not a tensor.
pub const HWT_MAX_DIMS: usize = 16;

/// A tensor (opaque): see the module's ownership rules.
pub struct HwtTensor {
    pub(crate) tensor: TensorDyn,
}

/// Which buffer a tensor's bytes live in: equal identities are the same buffer, in any process
/// and any copy of hwtensor (a cache key for imports).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HwtIdentity {
    /// 0: a kind this version of the ABI does not know; 1: an fd-backed buffer (`a` = st_dev,
    /// `b` = st_ino); 2: heap memory of this process
    /// (`a` = its base address); 3: GPU or CUDA memory (`a` = the allocating pid, `b` = its
    /// start time, `c` = the allocation's serial there); 4: Windows shared memory, a section
    /// (`a` = the pid that made it, `b` = its serial there).
    pub kind: u32,
    /// See `kind`.
    pub a: u64,
    /// See `kind`.
    pub b: u64,
    /// See `kind`.
    pub c: u64,
}

/// One plane of an image, relative to the image's first byte.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HwtPlane {
    /// Byte offset of the plane's first row.
    pub offset: usize,
    /// Bytes from one row of the plane to the next.
    pub row_stride: usize,
    /// Rows.
    pub rows: usize,
    /// Bytes the plane occupies.
    pub size: usize,
}

/// The tensor behind a handle, refusing null (named `what`).
pub(crate) fn tensor<'a>(t: *const HwtTensor, what: &str) -> Result<&'a TensorDyn, HwtStatus> {
    // SAFETY: null is refused; otherwise the ABI's contract: a live handle this library gave.
    unsafe { t.as_ref() }
        .map(|h| &h.tensor)
        .ok_or_else(|| invalid(format!("{what} is null")))
}

/// A new handle holding one reference to `tensor`, written through `out`.
pub(crate) fn hand_out(out: *mut *mut HwtTensor, tensor: TensorDyn) -> Outcome {
    if out.is_null() {
        return Err(invalid("the out-pointer for the tensor is null"));
    }
    let handle = Arc::into_raw(Arc::new(HwtTensor { tensor })).cast_mut();
    put(out, "the out-pointer for the tensor", handle)
}

/// The reference a handle holds, as an `Arc` of its own (for an object that keeps it).
#[cfg_attr(windows, allow(dead_code))] // the Linux blobs and CUDA maps keep their tensor
pub(crate) fn share(t: *const HwtTensor) -> Result<Arc<HwtTensor>, HwtStatus> {
    tensor(t, "the tensor")?;
    // SAFETY: a live handle from `hand_out` (checked non-null above): its count is at least one
    // while the caller holds it, so adding one and taking that as an Arc is sound.
    unsafe {
        Arc::increment_strong_count(t);
        Ok(Arc::from_raw(t))
    }
}

/// Creates a tensor of `shape` (`ndim` sizes) and `dtype` in `memory` (`HWT_MEMORY_AUTO`:
/// hwtensor chooses). On success `*out` holds a new reference: release it.
///
/// # Safety
/// `shape` must hold `ndim` sizes; `out` must be valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_new(
    shape: *const usize,
    ndim: usize,
    dtype: u32,
    memory: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let shape = unsafe { slice_in(shape, ndim, "the shape", HWT_MAX_DIMS) }?;
        let t = TensorDyn::new(shape, dtype_of(dtype)?, memory_of(memory)?).or_status()?;
        hand_out(out, t)
    })
}

/// The row stride (bytes) of an image's chroma planes: the one it was given, or the one its
/// format derives from its row stride; 0 for an image without chroma planes and for a plain
/// tensor.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_chroma_stride(
    t: *const HwtTensor,
    out: *mut usize,
) -> HwtStatus {
    guard(|| {
        let info = tensor(t, "the tensor")?.image_info().copied();
        let stride = info
            .filter(|i| i.format.has_chroma_planes())
            .map_or(0, |i| i.chroma_row_stride());
        put(out, "out", stride)
    })
}

/// Adds a reference to `t` (to keep it past a release elsewhere). `t` must be a live handle.
///
/// # Safety
/// `t` must be a handle this library gave and not yet released to zero.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_retain(t: *const HwtTensor) -> HwtStatus {
    guard(|| {
        tensor(t, "the tensor")?;
        // SAFETY: a live handle (the caller's contract), checked non-null.
        unsafe { Arc::increment_strong_count(t) };
        Ok(())
    })
}

/// Gives back one reference; the last one frees the tensor (its buffer goes when the last
/// tensor and view over it have). End a tensor's CPU maps before its last release: a last
/// release while a map still claims the buffer keeps the tensor (logged as a leak) rather than
/// free memory the map points at. Null is ignored. Releasing a handle more often than it was
/// handed out or retained is undefined behaviour, as for `free`.
///
/// # Safety
/// `t` must be null or a handle this library gave, with a reference the caller owns.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_release(t: *const HwtTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: the caller gives back a reference it owns.
    let handle = unsafe { Arc::from_raw(t) };
    let _ = std::panic::catch_unwind(AssertUnwindSafe(move || {
        if Arc::strong_count(&handle) == 1 && handle.tensor.drop_would_free_a_mapped_buffer() {
            log::error!(
                "hwtensor: hwt_tensor_release of a tensor whose buffer is still mapped; it is \
                 kept (leaked) so the map stays valid: end maps before the last release"
            );
            std::mem::forget(handle);
        }
    }));
}

/// The number of dimensions.
///
/// # Safety
/// `t` must be a live handle (or null, refused); `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_ndim(t: *const HwtTensor, out: *mut usize) -> HwtStatus {
    guard(|| put(out, "out", tensor(t, "the tensor")?.shape().len()))
}

/// Copies the shape into `out` (`capacity` entries; `HWT_STATUS_INVALID_ARGUMENT` when fewer
/// than `hwt_tensor_ndim`).
///
/// # Safety
/// `t` must be a live handle; `out` must hold `capacity` entries.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_shape(
    t: *const HwtTensor,
    out: *mut usize,
    capacity: usize,
) -> HwtStatus {
    guard(|| {
        copy_out(
            tensor(t, "the tensor")?.shape(),
            out,
            capacity,
            "the shape array",
        )
    })
}

/// Copies the strides in bytes into `out` (`capacity` entries, at least `ndim`).
///
/// # Safety
/// As for `hwt_tensor_shape`.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_strides(
    t: *const HwtTensor,
    out: *mut usize,
    capacity: usize,
) -> HwtStatus {
    guard(|| {
        copy_out(
            tensor(t, "the tensor")?.strides(),
            out,
            capacity,
            "the strides array",
        )
    })
}

/// The element type (an `HwtDType`).
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_dtype(t: *const HwtTensor, out: *mut u32) -> HwtStatus {
    guard(|| put(out, "out", tensor(t, "the tensor")?.dtype().code() as u32))
}

/// Where the bytes live (an `HwtMemory`, never `AUTO`).
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_memory(t: *const HwtTensor, out: *mut u32) -> HwtStatus {
    guard(|| put(out, "out", tensor(t, "the tensor")?.memory().code() as u32))
}

/// The pixel format of an image (an `HwtPixelFormat`; `HWT_PIXEL_FORMAT_NONE` for a plain
/// tensor).
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_pixel_format(t: *const HwtTensor, out: *mut u32) -> HwtStatus {
    guard(|| {
        let info = tensor(t, "the tensor")?.image_info();
        put(out, "out", info.map_or(0, |i| i.format.code() as u32))
    })
}

/// The width, height and row stride (bytes) of an image; all 0 for a plain tensor. Any
/// out-pointer may be null.
///
/// # Safety
/// `t` must be a live handle; each out-pointer null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_image_size(
    t: *const HwtTensor,
    width: *mut usize,
    height: *mut usize,
    row_stride: *mut usize,
) -> HwtStatus {
    guard(|| {
        let info = tensor(t, "the tensor")?.image_info();
        let (w, h, s) = info.map_or((0, 0, 0), |i| (i.width, i.height, i.row_stride));
        for (out, v) in [(width, w), (height, h), (row_stride, s)] {
            if !out.is_null() {
                put(out, "out", v)?;
            }
        }
        Ok(())
    })
}

/// The planes of an image (offsets relative to its first byte): `*count` receives their
/// number, and up to `capacity` are copied into `out` (`HWT_STATUS_INVALID_ARGUMENT` when
/// fewer than there are; ask with `capacity` 0 first if unsure). A plain tensor is refused.
///
/// # Safety
/// `t` must be a live handle; `out` must hold `capacity` entries; `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_plane_table(
    t: *const HwtTensor,
    out: *mut HwtPlane,
    capacity: usize,
    count: *mut usize,
) -> HwtStatus {
    guard(|| {
        let planes: Vec<HwtPlane> = tensor(t, "the tensor")?
            .plane_table()
            .or_status()?
            .into_iter()
            .map(|p| HwtPlane {
                offset: p.offset,
                row_stride: p.row_stride,
                rows: p.rows,
                size: p.size,
            })
            .collect();
        put(count, "count", planes.len())?;
        copy_out(&planes, out, capacity, "the plane array")
    })
}

/// The identity of the buffer under the tensor.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_identity(
    t: *const HwtTensor,
    out: *mut HwtIdentity,
) -> HwtStatus {
    guard(|| {
        let id = match tensor(t, "the tensor")?.identity() {
            BufferIdentity::File { dev, ino } => HwtIdentity {
                kind: 1,
                a: dev,
                b: ino,
                c: 0,
            },
            BufferIdentity::Heap { addr } => HwtIdentity {
                kind: 2,
                a: addr as u64,
                b: 0,
                c: 0,
            },
            BufferIdentity::Gpu {
                pid,
                start_time,
                serial,
            } => HwtIdentity {
                kind: 3,
                a: pid.into(),
                b: start_time,
                c: serial,
            },
            BufferIdentity::Section { pid, serial } => HwtIdentity {
                kind: 4,
                a: pid.into(),
                b: serial,
                c: 0,
            },
            // A kind of identity newer than this ABI: kind 0, "unknown".
            _ => HwtIdentity::default(),
        };
        put(out, "out", id)
    })
}

/// A view of the region `x, y, width, height`: a new tensor over the same buffer, holding its
/// own reference. For an image the region is in pixels. For a plain tensor it selects rows and
/// columns of its `[h, w]` dimensions: the two dimensions of a rank-2 tensor, and from rank 3
/// up the two before the last (`[.., h, w, c]`, channels last). For channels-first data
/// (`[n, c, h, w]`) reshape it to `[n * c, h, w, 1]` first (`hwt_tensor_reshape`).
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_view(
    t: *const HwtTensor,
    x: usize,
    y: usize,
    width: usize,
    height: usize,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        let region = Region {
            x,
            y,
            width,
            height,
        };
        let view = tensor(t, "the tensor")?.view(region).or_status()?;
        hand_out(out, view)
    })
}

/// Item `index` of the first dimension (one image of a batch), as a new tensor over the same
/// buffer.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_batch(
    t: *const HwtTensor,
    index: usize,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| hand_out(out, tensor(t, "the tensor")?.batch(index).or_status()?))
}

/// The same elements in another shape (`ndim` sizes, C order), sharing the buffer: `t` must
/// be contiguous and the element count unchanged. A new tensor holding its own reference.
///
/// # Safety
/// `t` must be a live handle; `shape` must hold `ndim` sizes; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_reshape(
    t: *const HwtTensor,
    shape: *const usize,
    ndim: usize,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { with_shape(t, shape, ndim, out, TensorDyn::reshape) }
}

/// `t` under the `ndim` sizes at `shape` as `make` lays them out, handed out as a new tensor.
///
/// # Safety
/// As for `hwt_tensor_reshape`.
unsafe fn with_shape(
    t: *const HwtTensor,
    shape: *const usize,
    ndim: usize,
    out: *mut *mut HwtTensor,
    make: fn(&TensorDyn, &[usize]) -> hwtensor::Result<TensorDyn>,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract (`ndim` sizes at `shape`), bounded by HWT_MAX_DIMS.
        let shape = unsafe { slice_in(shape, ndim, "the shape", HWT_MAX_DIMS) }?;
        hand_out(out, make(tensor(t, "the tensor")?, shape).or_status()?)
    })
}

/// The whole buffer of `t` under a new shape (`ndim` sizes, C order from its first byte): a
/// pooled buffer re-pointed at a new geometry, which must fit its capacity. A new tensor.
///
/// # Safety
/// `t` must be a live handle; `shape` must hold `ndim` sizes; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_repoint(
    t: *const HwtTensor,
    shape: *const usize,
    ndim: usize,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { with_shape(t, shape, ndim, out, TensorDyn::repoint) }
}

/// The whole buffer of `t` as a `width` x `height` image of `format` (an `HwtPixelFormat`) with
/// rows `row_stride` bytes apart (0: tight): a pooled buffer re-pointed at a new frame
/// format, which must fit its capacity. A new tensor.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_repoint_image(
    t: *const HwtTensor,
    width: usize,
    height: usize,
    format: u32,
    row_stride: usize,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        let format = format_of(format)?;
        let pitch = (row_stride != 0).then_some(row_stride);
        let t = tensor(t, "the tensor")?;
        hand_out(
            out,
            t.repoint_image(width, height, format, pitch).or_status()?,
        )
    })
}

/// An image's colorimetry as four codes, each 0 when unspecified: primaries (1 BT.709,
/// 2 BT.601, 3 BT.2020, 4 Display P3), transfer (1 BT.709, 2 sRGB, 3 PQ, 4 HLG, 5 linear),
/// matrix (1 RGB, 2 BT.709, 3 BT.601, 4 BT.2020), range (1 limited, 2 full).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HwtColorimetry {
    /// Colour primaries code.
    pub primaries: u8,
    /// Transfer function code.
    pub transfer: u8,
    /// YUV matrix code.
    pub matrix: u8,
    /// Range code.
    pub range: u8,
}

impl HwtColorimetry {
    /// The colorimetry these codes say; an unknown code is `HWT_STATUS_INVALID_ARGUMENT`.
    pub(crate) fn colorimetry(&self) -> Result<hwtensor::Colorimetry, HwtStatus> {
        let unknown = |what: &str, code: u8| invalid(format!("{code} is not a colour {what} code"));
        Ok(hwtensor::Colorimetry::new(
            hwtensor::ColorPrimaries::from_code(self.primaries)
                .ok_or_else(|| unknown("primaries", self.primaries))?,
            hwtensor::TransferFunction::from_code(self.transfer)
                .ok_or_else(|| unknown("transfer", self.transfer))?,
            hwtensor::ColorMatrix::from_code(self.matrix)
                .ok_or_else(|| unknown("matrix", self.matrix))?,
            hwtensor::ColorRange::from_code(self.range)
                .ok_or_else(|| unknown("range", self.range))?,
        ))
    }
}

/// The colorimetry of the image `t` into `*out`; `HWT_STATUS_INVALID_ARGUMENT` for a plain
/// tensor.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_colorimetry(
    t: *const HwtTensor,
    out: *mut HwtColorimetry,
) -> HwtStatus {
    guard(|| {
        let info = tensor(t, "the tensor")?
            .image_info()
            .ok_or_else(|| invalid("a plain tensor has no colorimetry"))?;
        let c = info.colorimetry;
        let codes = HwtColorimetry {
            primaries: c.primaries.code(),
            transfer: c.transfer.code(),
            matrix: c.matrix.code(),
            range: c.range.code(),
        };
        put(out, "out", codes)
    })
}

/// `DRM_FORMAT_MOD_LINEAR`: an image whose rows lie one after another (every image hwtensor
/// makes, and what CPU maps and copies read).
pub const HWT_DRM_FORMAT_MOD_LINEAR: u64 = 0;

/// The image's DRM format modifier (`DRM_FORMAT_MOD_*` of `drm_fourcc.h`;
/// `HWT_DRM_FORMAT_MOD_LINEAR` for a plain tensor and every image hwtensor makes).
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_drm_modifier(t: *const HwtTensor, out: *mut u64) -> HwtStatus {
    guard(|| put(out, "out", tensor(t, "the tensor")?.drm_modifier().0))
}

/// The image `t` with its pixels laid out by DRM format `modifier` (a tiled or compressed
/// frame a decoder or camera gave by fd): a new tensor over the same buffer that carries it
/// through blobs and hand-offs unchanged. A modifier other than LINEAR leaves it no CPU access:
/// maps, views and copies are then `HWT_STATUS_INVALID_ARGUMENT` with a message naming it. A
/// plain tensor is `HWT_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_with_drm_modifier(
    t: *const HwtTensor,
    modifier: u64,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        let t = tensor(t, "the tensor")?
            .with_drm_modifier(hwtensor::DrmModifier(modifier))
            .or_status()?;
        hand_out(out, t)
    })
}

/// The image `t` with its colorimetry said (codes as `hwt_tensor_colorimetry` gives them): a
/// new tensor over the same buffer, carrying it through views and hand-offs. An unknown code
/// or a plain tensor is `HWT_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `t` must be a live handle; `colorimetry` valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_with_colorimetry(
    t: *const HwtTensor,
    colorimetry: *const HwtColorimetry,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null is refused; otherwise the caller's contract (one readable struct).
        let c =
            unsafe { colorimetry.as_ref() }.ok_or_else(|| invalid("the colorimetry is null"))?;
        let colorimetry = c.colorimetry()?;
        let mut t = tensor(t, "the tensor")?.clone();
        t.set_colorimetry(colorimetry).or_status()?;
        hand_out(out, t)
    })
}

/// Copies `src` into `dst` (same element type and shape; strides may differ), on the GPU or
/// CUDA where a side is device memory, ordered behind both tensors' earlier work.
///
/// # Safety
/// Both must be live handles.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_copy_from(
    dst: *const HwtTensor,
    src: *const HwtTensor,
) -> HwtStatus {
    guard(|| {
        let (d, s) = (tensor(dst, "dst")?, tensor(src, "src")?);
        d.copy_from(s).or_status()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::{HwtDType, HwtMemory};

    #[test]
    fn a_view_of_a_rank_4_tensor_selects_rows_and_columns_before_the_channels() {
        let shape = [2usize, 4, 6, 3]; // [n, h, w, c]
        let mut t = std::ptr::null_mut();
        // SAFETY: `shape` holds 4 sizes; `t` is valid for one write.
        let made = unsafe {
            hwt_tensor_new(
                shape.as_ptr(),
                4,
                HwtDType::U8 as u32,
                HwtMemory::Mem as u32,
                &mut t,
            )
        };
        assert_eq!(made, HwtStatus::Ok);
        let mut v = std::ptr::null_mut();
        // SAFETY: `t` is a live handle; `v` is valid for one write.
        let viewed = unsafe { hwt_tensor_view(t, 1, 2, 3, 2, &mut v) };
        assert_eq!(viewed, HwtStatus::Ok);
        let view = tensor(v, "the view").unwrap();
        assert_eq!(view.shape(), &[2, 2, 3, 3], "[n, height, width, c]");
        // SAFETY: both are live handles this test owns.
        unsafe {
            hwt_tensor_release(v);
            hwt_tensor_release(t);
        }
    }
}
