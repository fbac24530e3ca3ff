//! The fd-backed kinds of memory (Linux): sealed memfds and DMA-BUFs, mapped once per buffer.

pub(crate) mod dmabuf;
pub(crate) mod mapping;
pub(crate) mod planes;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub(crate) use dmabuf::SyncBracket;
pub(crate) use mapping::FdMapping;
pub(crate) use planes::{Plan, PlaneFds, PlaneMapping, PlaneSource};

use super::Storage;
use crate::identity::BufferIdentity;
use crate::os::{classify, memfd};
use crate::Direction;
use crate::{Error, Result, TensorMemory};

/// Why `memory` cannot be allocated here, or `None` when it can.
pub(crate) fn unavailable_reason(memory: TensorMemory) -> Option<String> {
    match memory {
        TensorMemory::Shm => memfd::unavailable_reason(),
        _ => dmabuf::unavailable_reason(),
    }
}

/// Allocates and maps `len` zeroed bytes of a memfd or a DMA-BUF.
pub(crate) fn allocate(memory: TensorMemory, len: usize, cpu_reads: bool) -> Result<FdMapping> {
    match memory {
        TensorMemory::Shm => FdMapping::new(memfd::create(len)?, len, memory),
        _ => {
            let (fd, heap) = dmabuf::allocate(len, cpu_reads)?;
            let mut mapping = FdMapping::new(fd, len, memory)?;
            mapping.set_heap(heap);
            Ok(mapping)
        }
    }
}

impl FdMapping {
    /// The buffer's identity: the file the fd names.
    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        BufferIdentity::of_fd(self.fd())
    }

    /// Opens a DMA-BUF's CPU-access bracket (`None` for shared memory, which needs none).
    pub(crate) fn begin_cpu(&self, direction: Direction) -> Result<Option<SyncBracket<'_>>> {
        match self.memory() {
            TensorMemory::DmaBuf => SyncBracket::begin(self.fd(), direction).map(Some),
            _ => Ok(None),
        }
    }
}

impl PlaneMapping {
    /// The buffer's identity: the file of its first plane.
    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        BufferIdentity::of_fd(self.first_fd())
    }
}

impl Storage {
    /// Maps a foreign fd after checking what it is and that it holds at least `len` bytes.
    ///
    /// `st` is the caller's `fstat` of `fd`, made after it learnt whether the fd was `sealed`
    /// against shrinking: then that size is final. Shared memory not sealed yet is sealed here
    /// and its size read again (`unsealed`: the caller accepts an fd that cannot be sealed); a
    /// size read first could be undercut by a peer's `ftruncate`. The whole fd is mapped, not
    /// just `len`: the buffer's capacity is what the fd holds, so a consumer may later widen
    /// the row stride into padding the producer allocated.
    pub(crate) fn import(
        fd: OwnedFd,
        len: usize,
        unsealed: bool,
        st: &rustix::fs::Stat,
        sealed: bool,
    ) -> Result<Storage> {
        let memory = classify::inspect_with(fd.as_fd(), st)?;
        let size = if memory == TensorMemory::Shm && !sealed {
            memfd::seal_for_import(fd.as_fd(), unsealed)?;
            classify::size(fd.as_fd())?
        } else {
            classify::size_of(st)?
        };
        if size < len as u64 {
            return Err(Error::Fd(format!(
                "the {memory} fd holds {size} bytes but the tensor needs {len}"
            )));
        }
        let size = usize::try_from(size)
            .map_err(|_| Error::Fd(format!("an fd of {size} bytes cannot be mapped here")))?;
        FdMapping::new(fd, size, memory).map(Storage::Fd)
    }

    /// The dma-heap a DMA-BUF of ours came from (`None` for any other memory and for imports).
    pub(crate) fn dma_heap(&self) -> Option<&str> {
        match self {
            Storage::Fd(m) => m.heap(),
            _ => None,
        }
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            // An image in several fds has no one fd to hand on: it travels inline.
            // (A section is Windows shared memory, which has no fd.)
            Storage::Heap(_) | Storage::Foreign(_) | Storage::Planes(_) | Storage::Section(_) => {
                None
            }
            Storage::Fd(m) => Some(m.fd()),
            Storage::Gpu(g) => g.fd_to_share(),
            Storage::Cuda(c) => c.fd(),
        }
    }

    /// How an image in several fds lies (`None` for every other storage).
    pub(crate) fn plane_fds(&self) -> Option<PlaneFds<'_>> {
        match self {
            Storage::Planes(m) => Some(m.plane_fds()),
            _ => None,
        }
    }
}
