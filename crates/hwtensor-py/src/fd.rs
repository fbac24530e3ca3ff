//! fds and blobs in and out of Python: tensors over an fd someone else made (a memfd, a V4L2 or
//! codec DMA-BUF, `os.memfd_create`), an image over one fd per plane, a tensor's own fd, and the
//! blob that describes a tensor for a transport of the caller's own. Every fd passed in is
//! duplicated (the caller keeps and closes its own); every fd handed out is the caller's to
//! close. A hostile fd or blob raises what Rust returns, as a Python exception.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::str::FromStr;

use hwtensor::blob::{self, Transport};
use hwtensor::{handoff, CpuAccess, DType, PixelFormat, PlaneFd, TensorDyn};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::OrPy;
use crate::tensor::PyTensor;

/// A duplicate of the caller's fd number.
fn dup_in(fd: RawFd) -> PyResult<OwnedFd> {
    // SAFETY: a number the Python caller passed as its fd, only duplicated.
    unsafe { handoff::dup_callers_fd(fd) }.or_py()
}

/// The image description shared by the fd and plane imports.
pub(crate) struct ImageArgs {
    pub width: usize,
    pub height: usize,
    pub format: PixelFormat,
    pub dtype: DType,
    pub access: CpuAccess,
}

impl ImageArgs {
    pub(crate) fn new(
        width: usize,
        height: usize,
        format: &str,
        dtype: DType,
        access: CpuAccess,
    ) -> PyResult<Self> {
        let format = PixelFormat::from_str(format).or_py()?;
        Ok(ImageArgs {
            width,
            height,
            format,
            dtype,
            access,
        })
    }
}

/// `Tensor.from_fd`: a tensor of `shape` over `fd` from byte `offset` on.
pub(crate) fn tensor_from_fd(
    py: Python<'_>,
    fd: RawFd,
    shape: &[usize],
    dtype: DType,
    offset: usize,
) -> PyResult<PyTensor> {
    let fd = dup_in(fd)?;
    py.detach(|| TensorDyn::from_fd_at(fd, offset, shape, dtype))
        .or_py()
        .map(PyTensor::wrap)
}

/// `Tensor.image_from_fd`: an image over `fd` from byte `offset` on.
pub(crate) fn image_from_fd(
    py: Python<'_>,
    fd: RawFd,
    offset: usize,
    image: ImageArgs,
    row_stride: Option<usize>,
) -> PyResult<PyTensor> {
    let fd = dup_in(fd)?;
    let ImageArgs {
        width,
        height,
        format,
        dtype,
        access,
    } = image;
    py.detach(|| {
        TensorDyn::image_from_fd_at(fd, offset, width, height, format, dtype, row_stride, access)
    })
    .or_py()
    .map(PyTensor::wrap)
}

/// `Tensor.image_from_planes`: an image over one `(fd, offset, row_stride)` per plane.
pub(crate) fn image_from_planes(
    py: Python<'_>,
    planes: Vec<(RawFd, usize, usize)>,
    image: ImageArgs,
) -> PyResult<PyTensor> {
    let planes = planes
        .into_iter()
        .map(|(fd, offset, row_stride)| Ok(PlaneFd::new(dup_in(fd)?, offset, row_stride)))
        .collect::<PyResult<Vec<_>>>()?;
    let ImageArgs {
        width,
        height,
        format,
        dtype,
        access,
    } = image;
    py.detach(|| TensorDyn::image_from_planes(planes, width, height, format, dtype, access))
        .or_py()
        .map(PyTensor::wrap)
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

/// The blob that describes `tensor` and the fds that travel with it (new ones, the caller's to
/// close; none inline). With `inline`, the bytes travel in the blob instead: for memory without
/// an fd, or a peer on another machine.
#[pyfunction]
#[pyo3(signature = (tensor, inline = false))]
pub fn export_blob<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    inline: bool,
) -> PyResult<(Bound<'py, PyBytes>, Vec<RawFd>)> {
    let mode = if inline {
        Transport::Inline
    } else {
        Transport::Reference
    };
    let (bytes, fds) = blob::export(&tensor.inner, mode).or_py()?;
    let owned = fds
        .iter()
        .map(|fd| fd.try_clone_to_owned().map(IntoRawFd::into_raw_fd))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| crate::errors::HandoffError::new_err(format!("dup of a blob's fd: {e}")))?;
    Ok((PyBytes::new(py, &bytes), owned))
}

/// The tensor a blob describes, with the fds that came with it (duplicated: the caller closes
/// its own). A hostile or short blob raises `HandoffError` naming the field; GPU memory by
/// reference is accepted only as `hwtensor.recv` accepts it (from a peer of this user), which
/// an fd list cannot prove, so here it is refused.
#[pyfunction]
#[pyo3(signature = (data, fds = Vec::new()))]
pub fn import_blob(py: Python<'_>, data: &[u8], fds: Vec<RawFd>) -> PyResult<PyTensor> {
    let fds = fds.into_iter().map(dup_in).collect::<PyResult<Vec<_>>>()?;
    let data = data.to_vec();
    py.detach(|| blob::import(&data, fds))
        .or_py()
        .map(PyTensor::wrap)
}
