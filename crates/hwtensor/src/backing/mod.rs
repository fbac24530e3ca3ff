//! The memory under a tensor: one module per backing, all ending in a [`Storage`].
//!
//! A [`Storage`] is mapped once, when it is made, and that mapping lives as long as the buffer:
//! every map and view of every tensor over it hands out pointers into it. That is what makes a
//! map cost an atomic operation instead of an `mmap` (and what keeps it under 100 ns).
//!
//! This is the one list of backings: [`TensorMemory::unavailable_reason`] asks each, and a new
//! backing (CUDA next) is a variant here and a folder of its own.
//!
//! Heap and GPU memory exist everywhere; the fd-backed kinds (memfd, DMA-BUF) and CUDA memory
//! are Linux only. Elsewhere their types are uninhabited stubs (`stub.rs`), so the platform
//! split shows in one switch at the top of this file and in none of `Storage`'s matches.

pub(crate) mod foreign;
#[cfg(target_os = "linux")]
pub(crate) mod linux;
#[cfg(not(windows))]
mod no_section;
#[cfg(not(target_os = "linux"))]
mod stub;
#[cfg(windows)]
mod windows;

// The platform switches of this file: the Linux-only backings or their uninhabited stubs, and
// the Windows section or its stub.
#[cfg(not(windows))]
use no_section::SectionMapping;
#[cfg(windows)]
pub(crate) use windows::SectionMapping;
#[cfg(target_os = "linux")]
use {crate::cuda, linux as fd_backed};
#[cfg(not(target_os = "linux"))]
use {stub as fd_backed, stub::cuda};

/// Whether shared memory here is a section (Windows) rather than a memfd.
const SHM_IS_SECTION: bool = cfg!(windows);

use crate::gpu::{self, GpuCpuAccess, GpuMemory, TextureRequest};
use crate::identity::BufferIdentity;
use crate::os::heap::{HeapBlock, PAGE_ALIGN_FROM};
use crate::Direction;
use crate::{Error, Result, TensorMemory};
use cuda::{CudaCpuAccess, CudaMemory};
use fd_backed::{FdMapping, PlaneMapping, SyncBracket};

pub(crate) use foreign::ForeignHost;

/// The bytes of one buffer, mapped for the CPU.
#[derive(Debug)]
pub(crate) enum Storage {
    Heap(HeapBlock),
    /// Host memory someone else owns, lent without a copy.
    Foreign(ForeignHost),
    /// A memfd or a DMA-BUF (Linux).
    Fd(FdMapping),
    /// An image whose planes are in several fds, mapped as one (Linux: made only by the
    /// per-plane import, which other platforms do not compile).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Planes(PlaneMapping),
    Gpu(GpuMemory),
    /// CUDA device memory (Linux).
    Cuda(CudaMemory),
    /// Shared memory on Windows: a pagefile-backed section and its view.
    Section(SectionMapping),
}

/// What a CPU access of a storage holds open: the GPU write-back of a staged map, or the
/// DMA-BUF cache bracket.
#[derive(Debug)]
pub(crate) enum CpuAccessGuard<'a> {
    Gpu(#[allow(dead_code)] GpuCpuAccess<'a>),
    Cuda(#[allow(dead_code)] CudaCpuAccess<'a>),
    Bracket(#[allow(dead_code)] SyncBracket<'a>),
    /// The brackets of the DMA-BUFs among an image's planes.
    Brackets(#[allow(dead_code)] Vec<SyncBracket<'a>>),
}

impl TensorMemory {
    /// Whether this process can allocate this backing now.
    pub fn is_available(self) -> bool {
        self.unavailable_reason().is_none()
    }

    /// Why this backing cannot be allocated here, or `None` when it can. Each backing answers
    /// for itself; this is the one list of them.
    pub fn unavailable_reason(self) -> Option<String> {
        match self {
            TensorMemory::Mem => None,
            TensorMemory::Shm if SHM_IS_SECTION => None,
            TensorMemory::Shm | TensorMemory::DmaBuf => fd_backed::unavailable_reason(self),
            TensorMemory::Gpu => gpu::device().err().map(|e| e.to_string()),
            TensorMemory::Cuda => cuda::unavailable_reason(),
        }
    }

    /// Checks availability, as an error that says why not.
    pub(crate) fn ensure_available(self) -> Result<()> {
        match self.unavailable_reason() {
            None => Ok(()),
            Some(reason) => Err(Error::Unavailable {
                memory: self,
                reason,
            }),
        }
    }
}

/// The identity of device memory: its allocator and the allocation's serial there, in every
/// process it reaches.
fn device_identity(o: crate::gpu::GpuOrigin) -> BufferIdentity {
    BufferIdentity::Gpu {
        pid: o.pid,
        start_time: o.start_time,
        serial: o.serial,
    }
}

impl Storage {
    /// Allocates `len` zeroed bytes of `memory`; `cpu_reads` says whether the CPU will read
    /// them (only the DMA-BUF heap choice asks, on Linux).
    pub(crate) fn allocate(
        memory: TensorMemory,
        len: usize,
        texture: Option<&TextureRequest>,
        cpu_reads: bool,
    ) -> Result<Storage> {
        memory.ensure_available()?;
        match memory {
            TensorMemory::Mem => HeapBlock::zeroed(len).map(Storage::Heap),
            TensorMemory::Gpu => GpuMemory::allocate(len, texture).map(Storage::Gpu),
            TensorMemory::Cuda => CudaMemory::allocate(len).map(Storage::Cuda),
            TensorMemory::Shm if SHM_IS_SECTION => {
                SectionMapping::allocate(len).map(Storage::Section)
            }
            TensorMemory::Shm | TensorMemory::DmaBuf => {
                fd_backed::allocate(memory, len, cpu_reads).map(Storage::Fd)
            }
        }
    }

    #[inline(always)] // on every map's path; a call cost a C map 2 ns
    pub(crate) fn ptr(&self) -> *mut u8 {
        match self {
            Storage::Heap(h) => h.ptr(),
            Storage::Foreign(f) => f.ptr(),
            Storage::Fd(m) => m.ptr(),
            Storage::Planes(m) => m.ptr(),
            Storage::Gpu(g) => g.ptr(),
            Storage::Cuda(c) => c.ptr(),
            Storage::Section(s) => s.ptr(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Storage::Heap(h) => h.len(),
            Storage::Foreign(f) => f.len(),
            Storage::Fd(m) => m.len(),
            Storage::Planes(m) => m.len(),
            Storage::Gpu(g) => g.len(),
            Storage::Cuda(c) => c.len(),
            Storage::Section(s) => s.len(),
        }
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        match self {
            Storage::Heap(_) | Storage::Foreign(_) => TensorMemory::Mem,
            Storage::Fd(m) => m.memory(),
            Storage::Planes(m) => m.memory(),
            Storage::Gpu(_) => TensorMemory::Gpu,
            Storage::Cuda(_) => TensorMemory::Cuda,
            Storage::Section(s) => s.memory(),
        }
    }

    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        match self {
            Storage::Heap(h) => Ok(BufferIdentity::heap(h.ptr() as usize)),
            Storage::Foreign(f) => Ok(BufferIdentity::heap(f.ptr() as usize)),
            Storage::Fd(m) => m.identity(),
            Storage::Planes(m) => m.identity(),
            Storage::Gpu(g) => Ok(device_identity(g.origin())),
            Storage::Cuda(c) => Ok(device_identity(c.origin())),
            Storage::Section(s) => s.identity(),
        }
    }

    /// Whether the CPU may write it (a foreign fd may be mapped read-only).
    pub(crate) fn writable(&self) -> bool {
        match self {
            Storage::Fd(m) => m.writable(),
            Storage::Planes(m) => m.writable(),
            Storage::Heap(_) | Storage::Gpu(_) => true,
            Storage::Foreign(f) => f.writable(),
            Storage::Cuda(_) => true,
            Storage::Section(s) => s.writable(),
        }
    }

    /// Whether this is a page-aligned mapping of whole pages that lives as long as the buffer:
    /// what a device may import in place (`VK_EXT_external_memory_host`). A DMA-BUF is not:
    /// its pages are the exporter's.
    pub(crate) fn whole_pages(&self) -> bool {
        match self {
            Storage::Heap(h) => h.len() >= PAGE_ALIGN_FROM,
            // Not ours to pin: a device import would outlive no promise the owner made.
            Storage::Foreign(_) => false,
            Storage::Fd(m) => m.memory() == TensorMemory::Shm && m.len() > 0,
            // Several files' pages: a device import of the range is not promised to work.
            Storage::Planes(_) => false,
            Storage::Gpu(_) => false,
            Storage::Cuda(_) => false,
            // A view is page aligned and lives as long as the buffer.
            Storage::Section(s) => s.len() > 0,
        }
    }

    /// Whether maps of parts of it can be live at once: memory a CPU map reads in place, with
    /// nothing opened around the whole buffer (a staged GPU map and a DMA-BUF bracket are).
    pub(crate) fn claimable_in_parts(&self) -> bool {
        !self.cpu_access_is_bracketed()
    }

    /// Whether a CPU access opens and closes something (a staging copy, a DMA-BUF sync): not
    /// for heap, foreign and shm memory, most maps, which then skip the call to `begin_cpu`.
    #[inline(always)]
    pub(crate) fn cpu_access_is_bracketed(&self) -> bool {
        match self {
            Storage::Heap(_) | Storage::Foreign(_) | Storage::Section(_) => false,
            Storage::Fd(m) => m.memory() == TensorMemory::DmaBuf,
            Storage::Planes(m) => m.memory() == TensorMemory::DmaBuf,
            _ => true,
        }
    }

    /// Opens what a CPU access in `direction` needs besides the pointer, for the memory whose
    /// access [is bracketed](Self::cpu_access_is_bracketed) (`None` for the rest).
    pub(crate) fn begin_cpu(&self, direction: Direction) -> Result<Option<CpuAccessGuard<'_>>> {
        match self {
            Storage::Heap(_) | Storage::Foreign(_) | Storage::Section(_) => Ok(None),
            Storage::Gpu(g) => g
                .begin_cpu(direction != Direction::Read)
                .map(|a| Some(CpuAccessGuard::Gpu(a))),
            Storage::Cuda(c) => c
                .begin_cpu(direction != Direction::Read)
                .map(|a| Some(CpuAccessGuard::Cuda(a))),
            Storage::Fd(m) => Ok(m.begin_cpu(direction)?.map(CpuAccessGuard::Bracket)),
            Storage::Planes(m) => m
                .begin_cpu(direction)
                .map(|b| Some(CpuAccessGuard::Brackets(b))),
        }
    }
}
