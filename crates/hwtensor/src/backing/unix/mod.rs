//! The fd-backed kinds of memory (Unix): sealed memfds and DMA-BUFs, mapped once per buffer.

pub(crate) mod classify;
pub(crate) mod dmabuf;
pub(crate) mod mapping;
pub(crate) mod shm;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub(crate) use mapping::FdMapping;

use super::Storage;
use crate::{Error, Result, TensorMemory};

/// Why `memory` cannot be allocated here, or `None` when it can.
pub(crate) fn unavailable_reason(memory: TensorMemory) -> Option<String> {
    match memory {
        TensorMemory::Shm => shm::unavailable_reason(),
        _ => dmabuf::unavailable_reason(),
    }
}

/// Allocates and maps `len` zeroed bytes of a memfd or a DMA-BUF.
pub(crate) fn allocate(memory: TensorMemory, len: usize) -> Result<FdMapping> {
    let fd = match memory {
        TensorMemory::Shm => shm::create(len)?,
        _ => dmabuf::allocate(len)?,
    };
    FdMapping::new(fd, len, memory)
}

impl Storage {
    /// Maps a foreign fd after checking what it is and that it holds at least `len` bytes.
    ///
    /// The whole fd is mapped, not just `len`: the buffer's capacity is what the fd holds, so a
    /// consumer may later widen the row stride into padding the producer allocated.
    pub(crate) fn import(fd: OwnedFd, len: usize) -> Result<Storage> {
        let info = classify::inspect(fd.as_fd())?;
        if info.size < len as u64 {
            return Err(Error::Fd(format!(
                "the {} fd holds {} bytes but the tensor needs {len}",
                info.memory, info.size
            )));
        }
        if info.memory == TensorMemory::Shm {
            shm::seal_against_truncation(fd.as_fd());
        }
        let size = usize::try_from(info.size).map_err(|_| {
            Error::Fd(format!(
                "an fd of {} bytes cannot be mapped here",
                info.size
            ))
        })?;
        FdMapping::new(fd, size, info.memory).map(Storage::Fd)
    }

    /// Whether the CPU may write it (a foreign fd may be mapped read-only).
    pub(crate) fn writable(&self) -> bool {
        match self {
            Storage::Fd(m) => m.writable(),
            Storage::Heap(_) | Storage::Gpu(_) => true,
        }
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Storage::Heap(_) => None,
            Storage::Fd(m) => Some(m.fd()),
            Storage::Gpu(g) => g.fd(),
        }
    }
}
