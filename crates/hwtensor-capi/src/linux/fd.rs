//! Tensors over fds: imports of a DMA-BUF or memfd, and a tensor's fd for another API.

use std::os::fd::{IntoRawFd, OwnedFd, RawFd};

use hwtensor::{PlaneFd, TensorDyn};

use crate::codes::{access_of, dtype_of, memory_of};
use crate::image::{spec_in, HwtImageSpec};
use crate::status::{guard, put, slice_in, HwtStatus, OrStatus};
use crate::tensor::{hand_out, tensor, HwtTensor, HWT_MAX_DIMS};

/// A duplicate of the caller's `fd` (close-on-exec), which the caller keeps: a negative or
/// closed fd is `HWT_STATUS_BAD_FD`.
pub(crate) fn dup_callers(fd: RawFd) -> Result<OwnedFd, HwtStatus> {
    // SAFETY: the caller's fd number, only duplicated (the ABI's rule for fds passed in).
    unsafe { hwtensor::handoff::dup_callers_fd(fd) }.or_status()
}

/// A tensor of `shape` and `dtype` over `fd` (a DMA-BUF, a memfd, a shared memory file) from
/// byte `offset` on (V4L2's `data_offset`; 0 for the start). The fd is duplicated: the caller
/// keeps its own and closes it when it likes. A file of another kind, a closed fd
/// (`HWT_STATUS_BAD_FD`), one smaller than `offset` plus the shape, or an offset the element
/// type cannot start at is refused.
///
/// # Safety
/// `shape` must hold `ndim` sizes; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_from_fd(
    fd: i32,
    offset: usize,
    shape: *const usize,
    ndim: usize,
    dtype: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let shape = unsafe { slice_in(shape, ndim, "the shape", HWT_MAX_DIMS) }?;
        let dtype = dtype_of(dtype)?;
        let t = TensorDyn::from_fd_at(dup_callers(fd)?, offset, shape, dtype).or_status()?;
        hand_out(out, t)
    })
}

/// The image `spec` describes over `fd` (duplicated; the caller keeps its own) starting
/// `offset` bytes in (rows tight unless `spec` gives a stride), elements of `dtype`, with
/// `cpu_access` (an `HwtAccess`). A modifier other than LINEAR (a tiled frame) is carried, and
/// the image then declares no CPU access.
///
/// # Safety
/// `spec` must be valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_image_from_fd(
    fd: i32,
    offset: usize,
    spec: *const HwtImageSpec,
    dtype: u32,
    cpu_access: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let spec = unsafe { spec_in(spec) }?;
        let (dtype, access) = (dtype_of(dtype)?, access_of(cpu_access)?);
        let fd = dup_callers(fd)?;
        let t = TensorDyn::image_from_fd_at(fd, offset, &spec, dtype, access).or_status()?;
        hand_out(out, t)
    })
}

/// One plane of an image as its producer hands it over (`hwt_tensor_image_from_planes`): the
/// fd it is in (duplicated; the caller keeps its own), the byte its first row starts at (V4L2's
/// `data_offset`, libcamera's plane offset) and its row stride (`bytesperline`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HwtPlaneFd {
    /// The fd the plane is in.
    pub fd: i32,
    /// Where the plane's first row starts in the fd.
    pub offset: usize,
    /// Bytes from one row of the plane to the next.
    pub row_stride: usize,
}

/// Most planes an image has (planar RGBA).
pub const HWT_MAX_PLANES: usize = 4;

/// The image `spec` describes, its `count` planes listed in `planes`, one fd each (V4L2
/// MPLANE: a buffer per plane) or the same fd at several offsets (libcamera), with
/// `cpu_access` (an `HwtAccess`), without a copy. The planes say the strides (strides in
/// `spec` must be 0 or agree): the first plane's row stride is the image's;
/// the chroma planes share one of their own (kept where it differs from the format's rule), and
/// planar RGB's planes share the first plane's. Planes in separate buffers
/// must each start on a page (`HWT_STATUS_INVALID_ARGUMENT` otherwise, with the fix in
/// `hwt_last_error`: pad the stride or the height). Such an image has no single fd
/// (`hwt_tensor_clone_fd` is `HWT_STATUS_UNAVAILABLE`) and is sent inline.
///
/// # Safety
/// `planes` must hold `count` entries; `spec` valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_image_from_planes(
    planes: *const HwtPlaneFd,
    count: usize,
    spec: *const HwtImageSpec,
    dtype: u32,
    cpu_access: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let spec = unsafe { spec_in(spec) }?;
        let (dtype, access) = (dtype_of(dtype)?, access_of(cpu_access)?);
        // SAFETY: the caller's contract.
        let owned = unsafe { plane_fds(planes, count) }?;
        let t = TensorDyn::image_from_planes(owned, &spec, dtype, access).or_status()?;
        hand_out(out, t)
    })
}

/// The image `hwt_tensor_image_from_planes` describes, copied into a new image on `memory` (an
/// `HwtMemory`; `HWT_MEMORY_AUTO` to choose) with the first plane's row stride: for planes in
/// separate buffers that cannot be joined in place (a 1920x1080 NV12M frame with 1920-byte
/// rows). The fds are duplicated and read; the caller keeps its own.
///
/// # Safety
/// `planes` must hold `count` entries; `spec` valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_image_copied_from_planes(
    planes: *const HwtPlaneFd,
    count: usize,
    spec: *const HwtImageSpec,
    dtype: u32,
    memory: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let spec = unsafe { spec_in(spec) }?;
        let (dtype, memory) = (dtype_of(dtype)?, memory_of(memory)?);
        // SAFETY: the caller's contract, bounded by HWT_MAX_PLANES.
        let owned = unsafe { plane_fds(planes, count) }?;
        let t = TensorDyn::image_copied_from_planes(owned, &spec, dtype, memory).or_status()?;
        hand_out(out, t)
    })
}

/// The caller's plane list, each fd duplicated.
///
/// # Safety
/// `planes` must hold `count` entries.
unsafe fn plane_fds(planes: *const HwtPlaneFd, count: usize) -> Result<Vec<PlaneFd>, HwtStatus> {
    // SAFETY: the caller's contract, bounded by HWT_MAX_PLANES.
    let planes = unsafe { slice_in(planes, count, "the planes", HWT_MAX_PLANES) }?;
    planes
        .iter()
        .map(|p| dup_callers(p.fd).map(|fd| PlaneFd::new(fd, p.offset, p.row_stride)))
        .collect()
}

/// A new close-on-exec fd of the tensor's buffer (for V4L2, EGL, Vulkan or another process);
/// the caller closes it. Heap and CUDA memory have none (`HWT_STATUS_UNAVAILABLE`).
///
/// # Safety
/// `t` must be a live handle; `out_fd` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_clone_fd(t: *const HwtTensor, out_fd: *mut i32) -> HwtStatus {
    guard(|| {
        let t = tensor(t, "the tensor")?;
        if out_fd.is_null() {
            return Err(crate::status::invalid("out_fd is null"));
        }
        let fd = t.clone_fd().or_status()?;
        put(out_fd, "out_fd", fd.into_raw_fd())
    })
}

/// The tensor's pending GPU writes as a DMA-fence sync_file for a reader outside hwtensor
/// (V4L2, DRM/KMS, Wayland): `*out_fd` is a new close-on-exec fd the caller closes, or -1 when
/// no write is pending. A device that cannot export sync_files waits for the writes instead
/// (bounded; `HWT_STATUS_TIMEOUT` past it) and gives -1: either way the reader gets finished
/// bytes.
///
/// # Safety
/// `t` must be a live handle; `out_fd` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_export_sync_file(
    t: *const HwtTensor,
    out_fd: *mut i32,
) -> HwtStatus {
    guard(|| {
        let t = tensor(t, "the tensor")?;
        if out_fd.is_null() {
            return Err(crate::status::invalid("out_fd is null"));
        }
        let fence = t.export_sync_file().or_status()?;
        put(
            out_fd,
            "out_fd",
            fence.map_or(-1, |f| f.into_fd().into_raw_fd()),
        )
    })
}

/// The tensor `t` whose bytes are complete only once the DMA-fence sync_file `sync_fd` signals
/// (a V4L2 or GPU producer's fence; duplicated, the caller keeps its own): a new tensor over
/// the same buffer. CPU maps wait for the fence (bounded), a hand-off by reference carries it
/// and the receiver waits for it before returning. An fd that is not a sync_file is
/// `HWT_STATUS_BAD_FD`.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_with_sync_file(
    t: *const HwtTensor,
    sync_fd: i32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        let t = tensor(t, "the tensor")?;
        let fence = hwtensor::SyncFile::from_fd(dup_callers(sync_fd)?).or_status()?;
        hand_out(out, t.with_sync_file(fence))
    })
}
