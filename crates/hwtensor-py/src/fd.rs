//! fds and blobs in and out of Python: tensors over an fd someone else made (a memfd, a V4L2 or
//! codec DMA-BUF, `os.memfd_create`), an image over one fd per plane, a tensor's own fd. The
//! blobs that carry them over a transport of the caller's own are in `handoff.rs`. Every fd passed in is
//! duplicated (the caller keeps and closes its own); every fd handed out is the caller's to
//! close. A hostile fd or blob raises what Rust returns, as a Python exception.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};

use hwtensor::{handoff, CpuAccess, DType, ImageSpec, PlaneFd, TensorDyn};
use pyo3::prelude::*;

use crate::errors::OrPy;

/// A duplicate of the caller's fd number.
pub(crate) fn dup_in(fd: RawFd) -> PyResult<OwnedFd> {
    // SAFETY: a number the Python caller passed as its fd, only duplicated.
    unsafe { handoff::dup_callers_fd(fd) }.or_py()
}

/// `Tensor.from_fd`: a tensor of `shape` over `fd` from byte `offset` on.
pub(crate) fn tensor_from_fd(
    py: Python<'_>,
    fd: RawFd,
    shape: &[usize],
    dtype: DType,
    offset: usize,
) -> PyResult<TensorDyn> {
    let fd = dup_in(fd)?;
    py.detach(|| TensorDyn::from_fd_at(fd, offset, shape, dtype))
        .or_py()
}

/// `Tensor.image_from_fd`: the image `spec` describes over `fd` from byte `offset` on.
pub(crate) fn image_from_fd(
    py: Python<'_>,
    fd: RawFd,
    offset: usize,
    spec: &ImageSpec,
    dtype: DType,
    access: CpuAccess,
) -> PyResult<TensorDyn> {
    let fd = dup_in(fd)?;
    py.detach(|| TensorDyn::image_from_fd_at(fd, offset, spec, dtype, access))
        .or_py()
}

/// `Tensor.image_from_planes`: the image `spec` describes over one `(fd, offset, row_stride)`
/// per plane.
pub(crate) fn image_from_planes(
    py: Python<'_>,
    planes: Vec<(RawFd, usize, usize)>,
    spec: &ImageSpec,
    dtype: DType,
    access: CpuAccess,
) -> PyResult<TensorDyn> {
    let planes = planes
        .into_iter()
        .map(|(fd, offset, row_stride)| Ok(PlaneFd::new(dup_in(fd)?, offset, row_stride)))
        .collect::<PyResult<Vec<_>>>()?;
    py.detach(|| TensorDyn::image_from_planes(planes, spec, dtype, access))
        .or_py()
}

/// `Tensor.fd()`: the tensor's own fd number, borrowed (valid while the tensor lives).
pub(crate) fn borrowed_fd(t: &TensorDyn) -> PyResult<RawFd> {
    match t.as_fd() {
        Some(fd) => Ok(fd.as_raw_fd()),
        None => Err(crate::errors::Unavailable::new_err(format!(
            "{} memory has no fd; allocate the tensor on shm or dmabuf to share it by fd",
            t.memory()
        ))),
    }
}

/// `Tensor.clone_fd()`: a new fd of the tensor's buffer, the caller's to close.
pub(crate) fn clone_fd(t: &TensorDyn) -> PyResult<RawFd> {
    Ok(t.clone_fd().or_py()?.into_raw_fd())
}
