//! The memory under a tensor: one module per backing, all ending in a [`Storage`].
//!
//! A [`Storage`] is mapped once, when it is made, and that mapping lives as long as the buffer:
//! every map and view of every tensor over it hands out pointers into it. That is what makes a
//! map cost an atomic operation instead of an `mmap` (and what keeps it under 100 ns).

pub(crate) mod classify;
pub(crate) mod dmabuf;
pub(crate) mod mapping;
pub(crate) mod mem;
pub(crate) mod shm;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::identity::BufferIdentity;
use crate::{Error, Result, TensorMemory};

pub(crate) use mapping::FdMapping;
pub(crate) use mem::HeapBlock;

/// The bytes of one buffer, mapped for the CPU.
#[derive(Debug)]
pub(crate) enum Storage {
    Heap(HeapBlock),
    Fd(FdMapping),
    Gpu(crate::gpu::memory::GpuMemory),
}

impl Storage {
    /// Allocates `len` zeroed bytes of `memory`.
    pub(crate) fn allocate(memory: TensorMemory, len: usize) -> Result<Storage> {
        memory.ensure_available()?;
        match memory {
            TensorMemory::Mem => HeapBlock::zeroed(len).map(Storage::Heap),
            TensorMemory::Shm => FdMapping::new(shm::create(len)?, len, memory).map(Storage::Fd),
            TensorMemory::DmaBuf => {
                FdMapping::new(dmabuf::allocate(len)?, len, memory).map(Storage::Fd)
            }
            TensorMemory::Gpu => crate::gpu::memory::GpuMemory::allocate(len).map(Storage::Gpu),
            TensorMemory::Cuda => unreachable!("ensure_available refused it"),
        }
    }

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

    pub(crate) fn ptr(&self) -> *mut u8 {
        match self {
            Storage::Heap(h) => h.ptr(),
            Storage::Fd(m) => m.ptr(),
            Storage::Gpu(g) => g.ptr(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Storage::Heap(h) => h.len(),
            Storage::Fd(m) => m.len(),
            Storage::Gpu(g) => g.len(),
        }
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        match self {
            Storage::Heap(_) => TensorMemory::Mem,
            Storage::Fd(m) => m.memory(),
            Storage::Gpu(_) => TensorMemory::Gpu,
        }
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Storage::Heap(_) => None,
            Storage::Fd(m) => Some(m.fd()),
            Storage::Gpu(g) => g.fd(),
        }
    }

    pub(crate) fn writable(&self) -> bool {
        match self {
            Storage::Heap(_) => true,
            Storage::Fd(m) => m.writable(),
            Storage::Gpu(_) => true,
        }
    }

    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        match self {
            Storage::Heap(h) => Ok(BufferIdentity::heap(h.ptr() as usize)),
            Storage::Fd(m) => BufferIdentity::of_fd(m.fd()),
            Storage::Gpu(g) => {
                let o = g.origin();
                Ok(BufferIdentity::Gpu {
                    pid: o.pid,
                    start_time: o.start_time,
                    serial: o.serial,
                })
            }
        }
    }
}
