//! [`Buffer`]: one backing allocation shared by a tensor and all its views and batches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backing::{CpuAccessGuard, Storage};
use crate::gpu::memory::{GpuMemory, HostImport};
use crate::identity::{BufferIdentity, BufferLiveness};
use crate::image::TextureRequest;
use crate::map::Direction;
use crate::{Error, Result, TensorMemory};

// What only Unix buffers do: fds, the Vulkan host import, weak handles for the import cache.
#[cfg(target_os = "linux")]
mod unix;
#[cfg(target_os = "linux")]
pub(crate) use unix::WeakBuffer;

/// The bit of [`BufferInner::maps`] that marks a live write map; the bits below count read maps.
const WRITER: usize = 1 << (usize::BITS - 1);

#[derive(Debug)]
pub(crate) struct BufferInner {
    #[cfg_attr(windows, allow(dead_code))]
    /// This host buffer imported into the GPU device, made on the first copy to or from GPU
    /// memory and kept: importing pins pages, which costs more than a large copy. Declared
    /// before `storage` so it is released before the memory is unmapped.
    gpu_import: OnceLock<Option<HostImport>>,
    storage: Storage,
    identity: BufferIdentity,
    /// Live maps of this buffer: `WRITER`, or the number of read maps. Keeps Rust's aliasing
    /// rules within this process across views: a `&mut [T]` from one view never coexists with a
    /// `&[T]` from another view of the same bytes.
    maps: AtomicUsize,
}

/// A shared handle to one buffer.
#[derive(Clone, Debug)]
pub(crate) struct Buffer(Arc<BufferInner>);

impl Buffer {
    pub(crate) fn new(storage: Storage) -> Result<Buffer> {
        let identity = storage.identity()?;
        Ok(Buffer(Arc::new(BufferInner {
            gpu_import: OnceLock::new(),
            storage,
            identity,
            maps: AtomicUsize::new(0),
        })))
    }

    pub(crate) fn allocate(
        memory: TensorMemory,
        len: usize,
        texture: Option<&TextureRequest>,
    ) -> Result<Buffer> {
        let buffer = Buffer::new(Storage::allocate(memory, len, texture)?)?;
        if let Some(g) = buffer.gpu() {
            g.allocated_as(&buffer);
        }
        Ok(buffer)
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.storage.ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.storage.len()
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        self.0.storage.memory()
    }

    /// Whether both handles are the same buffer.
    pub(crate) fn same_as(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub(crate) fn identity(&self) -> BufferIdentity {
        self.0.identity
    }

    /// The GPU memory under this buffer, if it is GPU memory.
    pub(crate) fn gpu(&self) -> Option<&GpuMemory> {
        match &self.0.storage {
            Storage::Gpu(g) => Some(g),
            _ => None,
        }
    }

    /// Takes the aliasing claim alone (for GPU work on the buffer, which needs no CPU view).
    pub(crate) fn claim_for(&self, direction: Direction) -> Result<impl Drop + '_> {
        self.claim(direction)
    }

    pub(crate) fn liveness(&self) -> BufferLiveness {
        BufferLiveness(Arc::downgrade(&self.0))
    }

    /// Registers a CPU access in `direction`: refuses one that would alias a live write map,
    /// and opens what the storage needs around CPU access (a staged GPU map's write-back, the
    /// DMA-BUF sync bracket).
    #[inline]
    pub(crate) fn begin_access(&self, direction: Direction) -> Result<AccessGuard<'_>> {
        let claim = self.claim(direction)?;
        let storage = self.0.storage.begin_cpu(direction)?;
        Ok(AccessGuard {
            _storage: storage,
            _claim: claim,
        })
    }

    fn claim(&self, direction: Direction) -> Result<Claim<'_>> {
        let maps = &self.0.maps;
        let write = direction != Direction::Read;
        let swapped = if write {
            maps.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
        } else {
            maps.fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n & WRITER == 0 && n + 1 < WRITER).then_some(n + 1)
            })
        };
        match swapped {
            Ok(_) => Ok(Claim { maps, write }),
            Err(held) if held & WRITER != 0 => Err(Error::MapBusy {
                held: "for writing",
            }),
            Err(_) => Err(Error::MapBusy {
                held: "for reading",
            }),
        }
    }
}

/// A live CPU access: the aliasing claim and what the storage holds open.
#[derive(Debug)]
pub(crate) struct AccessGuard<'a> {
    // Field order: the GPU write-back and the sync bracket finish while the claim still holds
    // off other maps.
    _storage: Option<CpuAccessGuard<'a>>,
    _claim: Claim<'a>,
}

#[derive(Debug)]
struct Claim<'a> {
    maps: &'a AtomicUsize,
    write: bool,
}

impl Drop for Claim<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.write {
            self.maps.store(0, Ordering::Release);
        } else {
            self.maps.fetch_sub(1, Ordering::Release);
        }
    }
}
