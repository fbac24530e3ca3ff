//! Tensors over file descriptors (Unix): importing a foreign DMA-BUF or memfd, and handing a
//! buffer's fd to another process or API. Windows shares GPU memory by NT handle instead
//! (`gpu::GpuShare`), and has no fd-backed memory.

use std::os::fd::{BorrowedFd, OwnedFd};

use crate::buffer::Buffer;
use crate::geometry::{byte_strides, extent};
use crate::image::{check_row_stride, default_row_stride, image_geometry, ImageInfo};
use crate::tensor::import_access;
use crate::{
    CpuAccess, DType, Element, Error, ImportPolicy, PixelFormat, Result, Tensor, TensorDyn,
    TensorMemory,
};

impl<T: Element> Tensor<T> {
    /// A tensor of `shape` over the first bytes of a foreign fd: a DMA-BUF, a memfd or a shared
    /// memory file. Takes the fd; it is closed when the last tensor over it is dropped, or at
    /// once when the import fails.
    ///
    /// Refuses a file of any other kind (regular file, pipe, socket, device node), naming it,
    /// and an fd smaller than the shape.
    ///
    /// Shared memory must be sealable against shrinking (it is sealed before its size is
    /// read); [`Tensor::from_fd_with`] can accept one that cannot be.
    pub fn from_fd(fd: OwnedFd, shape: &[usize]) -> Result<Self> {
        Self::from_fd_with(fd, shape, &ImportPolicy::STRICT)
    }

    /// [`Tensor::from_fd`] under an explicit [`ImportPolicy`] (for example to accept a
    /// `/dev/shm` file that cannot be sealed, from a peer you trust not to truncate it).
    pub fn from_fd_with(fd: OwnedFd, shape: &[usize], policy: &ImportPolicy) -> Result<Self> {
        let strides = byte_strides(shape, Self::elem(), None)?;
        let bytes = extent(shape, &strides, Self::elem())?;
        let buffer = Buffer::import(fd, bytes, policy)?;
        let access = import_access(&buffer);
        Ok(Self::over(buffer, shape.to_vec(), strides, None, access))
    }

    /// The buffer's fd, borrowed (heap memory has none).
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.buffer.fd()
    }

    /// A new close-on-exec fd of the buffer, for another process or API. Heap memory has none.
    pub fn clone_fd(&self) -> Result<OwnedFd> {
        let fd = self.buffer.fd().ok_or_else(|| Error::Unavailable {
            memory: TensorMemory::Mem,
            reason: "heap memory has no fd to share; allocate on shm or dmabuf to hand it over"
                .into(),
        })?;
        fd.try_clone_to_owned().map_err(|e| Error::Os {
            op: "dup of the tensor's fd",
            source: e,
        })
    }

    /// A `w`x`h` image over a foreign fd (a DMA-BUF from a camera or decoder, a memfd), with
    /// rows `row_stride` bytes apart (tight when `None`). The fd is taken; see
    /// [`Tensor::from_fd`] for what is refused.
    pub fn image_from_fd(
        fd: OwnedFd,
        w: usize,
        h: usize,
        format: PixelFormat,
        row_stride: Option<usize>,
        access: CpuAccess,
    ) -> Result<Self> {
        let elem = Self::elem();
        let stride = match row_stride {
            Some(s) => check_row_stride(format, w, elem, s)?,
            None => default_row_stride(format, w, elem, TensorMemory::Mem)?,
        };
        let (shape, strides) = image_geometry(None, format, w, h, elem, stride)?;
        let buffer = Buffer::import(fd, extent(&shape, &strides, elem)?, &ImportPolicy::STRICT)?;
        let access = access.narrowed_to(import_access(&buffer));
        let info = ImageInfo {
            format,
            width: w,
            height: h,
            row_stride: stride,
        };
        Ok(Self::over(buffer, shape, strides, Some(info), access))
    }
}

impl TensorDyn {
    /// See [`Tensor::from_fd`].
    pub fn from_fd(fd: OwnedFd, shape: &[usize], dtype: DType) -> Result<Self> {
        for_dtype!(dtype, from_fd(fd, shape))
    }

    /// See [`Tensor::image_from_fd`].
    pub fn image_from_fd(
        fd: OwnedFd,
        w: usize,
        h: usize,
        format: PixelFormat,
        dtype: DType,
        row_stride: Option<usize>,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, image_from_fd(fd, w, h, format, row_stride, access))
    }

    /// See [`Tensor::as_fd`].
    pub fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        each_tensor!(self, t => t.as_fd())
    }

    /// See [`Tensor::clone_fd`].
    pub fn clone_fd(&self) -> Result<OwnedFd> {
        each_tensor!(self, t => t.clone_fd())
    }
}
