//! Tensors over file descriptors (Unix): importing a foreign DMA-BUF or memfd, and handing a
//! buffer's fd to another process or API. Windows shares GPU memory by NT handle instead
//! (`gpu::GpuShare`), and has no fd-backed memory.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::buffer::Buffer;
use crate::geometry::{byte_strides, extent};
use crate::image::{default_row_stride, image_geometry, ImageInfo};
use crate::tensor::import_access;
use crate::{
    CpuAccess, DType, Element, Error, ImageSpec, ImportPolicy, Result, Tensor, TensorDyn,
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
    ///
    /// ```
    /// use hwtensor::{Tensor, TensorMemory};
    ///
    /// // An fd as another process (or a camera driver) would hand it over: here, a tensor's own.
    /// let theirs = Tensor::<u16>::new(&[4, 4], Some(TensorMemory::Shm))?;
    /// theirs.map_write()?.fill(300);
    /// let ours = Tensor::<u16>::from_fd(theirs.clone_fd()?, &[4, 4])?;
    /// assert_eq!(ours.identity(), theirs.identity()); // the same buffer, not a copy
    /// assert!(ours.to_vec()?.iter().all(|&v| v == 300));
    /// # Ok::<(), hwtensor::Error>(())
    /// ```
    pub fn from_fd(fd: OwnedFd, shape: &[usize]) -> Result<Self> {
        Self::from_fd_with(fd, shape, &ImportPolicy::STRICT)
    }

    /// [`Tensor::from_fd`] under an explicit [`ImportPolicy`] (for example to accept a
    /// `/dev/shm` file that cannot be sealed, from a peer you trust not to truncate it).
    pub fn from_fd_with(fd: OwnedFd, shape: &[usize], policy: &ImportPolicy) -> Result<Self> {
        let strides = byte_strides(shape, Self::elem(), None)?;
        Self::at_offset(fd, 0, shape.to_vec(), strides, None, policy)
    }

    /// The dma-heap this tensor's DMA-BUF came from (`linux,cma`, `system`, ...), as
    /// `HWTENSOR_DMA_HEAP` and the tensor's declared CPU access chose it; `None` for other
    /// memory and for imported DMA-BUFs.
    pub fn dma_heap(&self) -> Option<&str> {
        self.buffer.dma_heap()
    }

    /// The buffer's fd, borrowed (heap memory has none).
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.buffer.fd()
    }

    /// Each plane's fd and where the plane starts in it, for an image whose planes are in
    /// separate buffers ([`Tensor::image_from_planes`], a channel's NV12M frames); `None` for
    /// a tensor in one buffer, whose fd [`Tensor::as_fd`] gives.
    pub fn plane_fds(&self) -> Option<Vec<(BorrowedFd<'_>, usize)>> {
        let planes = self.buffer.plane_fds()?;
        let fds = planes.fds.iter().map(AsFd::as_fd);
        Some(fds.zip(planes.offsets.iter().copied()).collect())
    }

    /// Whether the tensor can go to another process by its fds (reference mode, what
    /// `handoff::send` takes): a buffer with an fd, or an image with an fd per plane, which has
    /// no one fd to give [`Tensor::as_fd`].
    pub fn has_fds(&self) -> bool {
        self.as_fd().is_some() || self.buffer.plane_fds().is_some()
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

    /// The image `spec` describes over a foreign fd (a DMA-BUF from a camera or decoder, a
    /// memfd), its rows tight unless `spec` gives a stride. The fd is taken; see
    /// [`Tensor::from_fd`] for what is refused. A modifier other than LINEAR (a tiled frame)
    /// is carried, and the image then declares no CPU access.
    pub fn image_from_fd(fd: OwnedFd, spec: &ImageSpec, access: CpuAccess) -> Result<Self> {
        Self::image_from_fd_at(fd, 0, spec, access)
    }

    /// [`Tensor::image_from_fd`] for an image that starts `offset` bytes into the fd: V4L2's
    /// `data_offset`, or a frame placed after a header. The whole image (`offset` + its
    /// extent) must lie within the fd, and the offset must suit the element type's alignment.
    pub fn image_from_fd_at(
        fd: OwnedFd,
        offset: usize,
        spec: &ImageSpec,
        access: CpuAccess,
    ) -> Result<Self> {
        let elem = Self::elem();
        let stride = match spec.row_stride {
            Some(s) => s,
            None => default_row_stride(spec.format, spec.width, elem, TensorMemory::Mem)?,
        };
        let info = spec.info_at(stride, elem)?;
        let access = match info.modifier.is_linear() {
            true => access,
            false => CpuAccess::None,
        };
        Self::image_at(fd, offset, info, access)
    }

    /// The image `info` describes (its row stride checked) at `offset` of `fd`.
    pub(crate) fn image_at(
        fd: OwnedFd,
        offset: usize,
        info: ImageInfo,
        access: CpuAccess,
    ) -> Result<Self> {
        let (format, w, h) = (info.format, info.width, info.height);
        let (shape, strides) = image_geometry(None, format, w, h, Self::elem(), info.row_stride)?;
        let mut t = Self::at_offset(
            fd,
            offset,
            shape,
            strides,
            Some(info),
            &ImportPolicy::STRICT,
        )?;
        t.access = access.narrowed_to(t.access);
        Ok(t)
    }

    /// [`Tensor::from_fd`] for a tensor that starts `offset` bytes into the fd.
    pub fn from_fd_at(fd: OwnedFd, offset: usize, shape: &[usize]) -> Result<Self> {
        let strides = byte_strides(shape, Self::elem(), None)?;
        Self::at_offset(
            fd,
            offset,
            shape.to_vec(),
            strides,
            None,
            &ImportPolicy::STRICT,
        )
    }

    /// A tensor of `shape` and byte `strides` over `fd` from byte `offset` on: the fd must hold
    /// `offset` plus the tensor's extent, and `offset` suit the element's alignment (a map hands
    /// out `&[T]` from there).
    fn at_offset(
        fd: OwnedFd,
        offset: usize,
        shape: Vec<usize>,
        strides: Vec<usize>,
        image: Option<ImageInfo>,
        policy: &ImportPolicy,
    ) -> Result<Self> {
        if !offset.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::InvalidArgument(format!(
                "a {} tensor cannot start at byte {offset}: its elements align to {} bytes",
                T::DTYPE,
                std::mem::align_of::<T>()
            )));
        }
        let grid = extent(&shape, &strides, Self::elem())?;
        let bytes = match &image {
            Some(info) => crate::image::image_span(grid, info, Self::elem())?,
            None => grid,
        };
        let needed = offset.checked_add(bytes).ok_or_else(|| {
            Error::InvalidArgument(format!("offset {offset} + {bytes} bytes overflows"))
        })?;
        let buffer = Buffer::import(fd, needed, policy)?;
        let access = import_access(&buffer);
        let mut t = Self::over(buffer, shape, strides, image, access);
        t.offset = offset;
        Ok(t)
    }
}

impl TensorDyn {
    /// See [`Tensor::from_fd`].
    pub fn from_fd(fd: OwnedFd, shape: &[usize], dtype: DType) -> Result<Self> {
        Self::from_fd_at(fd, 0, shape, dtype)
    }

    /// See [`Tensor::from_fd_at`].
    pub fn from_fd_at(fd: OwnedFd, offset: usize, shape: &[usize], dtype: DType) -> Result<Self> {
        for_dtype!(dtype, from_fd_at(fd, offset, shape))
    }

    /// See [`Tensor::image_from_fd_at`].
    pub fn image_from_fd_at(
        fd: OwnedFd,
        offset: usize,
        spec: &ImageSpec,
        dtype: DType,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, image_from_fd_at(fd, offset, spec, access))
    }

    /// See [`Tensor::image_from_fd`].
    pub fn image_from_fd(
        fd: OwnedFd,
        spec: &ImageSpec,
        dtype: DType,
        access: CpuAccess,
    ) -> Result<Self> {
        Self::image_from_fd_at(fd, 0, spec, dtype, access)
    }

    /// See [`Tensor::as_fd`].
    pub fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        each_tensor!(self, t => t.as_fd())
    }

    /// See [`Tensor::plane_fds`].
    pub fn plane_fds(&self) -> Option<Vec<(BorrowedFd<'_>, usize)>> {
        each_tensor!(self, t => t.plane_fds())
    }

    /// See [`Tensor::has_fds`].
    pub fn has_fds(&self) -> bool {
        each_tensor!(self, t => t.has_fds())
    }

    /// See [`Tensor::clone_fd`].
    pub fn clone_fd(&self) -> Result<OwnedFd> {
        each_tensor!(self, t => t.clone_fd())
    }
}
