//! [`Buffer`]: one backing allocation shared by a tensor and all its views and batches.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backing::dmabuf::SyncBracket;
use crate::backing::Storage;
use crate::gpu::memory::{GpuCpuAccess, GpuMemory, HostImport};
use crate::gpu::GpuDevice;
use crate::identity::{BufferIdentity, BufferLiveness};
use crate::map::Direction;
use crate::{Error, Result, TensorMemory};

/// The bit of [`BufferInner::maps`] that marks a live write map; the bits below count read maps.
const WRITER: usize = 1 << (usize::BITS - 1);

#[derive(Debug)]
pub(crate) struct BufferInner {
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

    pub(crate) fn allocate(memory: TensorMemory, len: usize) -> Result<Buffer> {
        let buffer = Buffer::new(Storage::allocate(memory, len)?)?;
        if let Some(g) = buffer.gpu() {
            // A GPU buffer handed out and back again comes home as itself, not as an import.
            g.device().remember_import(g.origin(), &buffer);
        }
        Ok(buffer)
    }

    pub(crate) fn import(fd: OwnedFd, len: usize) -> Result<Buffer> {
        Buffer::new(Storage::import(fd, len)?)
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.storage.ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.storage.len()
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        self.0.storage.memory()
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.storage.fd()
    }

    pub(crate) fn writable(&self) -> bool {
        self.0.storage.writable()
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

    /// This host buffer as a GPU buffer, imported once (`VK_EXT_external_memory_host`); `None`
    /// where it cannot be: GPU memory itself, a DMA-BUF, a heap block under a page, a device
    /// without the extension.
    pub(crate) fn host_import(&self, device: &'static GpuDevice) -> Option<&HostImport> {
        let importable = match &self.0.storage {
            Storage::Heap(h) => h.len() >= crate::backing::mem::PAGE_ALIGN_FROM,
            Storage::Fd(m) => m.memory() == TensorMemory::Shm && m.len() > 0,
            Storage::Gpu(_) => false,
        };
        if !importable {
            return None;
        }
        self.0
            .gpu_import
            .get_or_init(|| {
                // SAFETY: the storage is a page-aligned mapping of whole pages (anonymous or a
                // memfd) that lives as long as this BufferInner, which drops the import first;
                // every copy through the import is waited for before it returns.
                unsafe { HostImport::new(device, self.ptr(), self.len()) }
            })
            .as_ref()
    }

    /// Takes the aliasing claim alone (for GPU work on the buffer, which needs no CPU view).
    pub(crate) fn claim_for(&self, direction: Direction) -> Result<impl Drop + '_> {
        self.claim(direction)
    }

    pub(crate) fn downgrade(&self) -> WeakBuffer {
        WeakBuffer(Arc::downgrade(&self.0))
    }

    pub(crate) fn liveness(&self) -> BufferLiveness {
        BufferLiveness(Arc::downgrade(&self.0))
    }

    /// Registers a CPU access in `direction`: refuses one that would alias a live write map,
    /// and opens the DMA-BUF sync bracket where the buffer needs one.
    pub(crate) fn begin_access(&self, direction: Direction) -> Result<AccessGuard<'_>> {
        let claim = self.claim(direction)?;
        let gpu = match &self.0.storage {
            Storage::Gpu(g) => Some(g.begin_cpu(direction != Direction::Read)?),
            _ => None,
        };
        let bracket = match self.memory() {
            TensorMemory::DmaBuf => self
                .fd()
                .map(|fd| SyncBracket::begin(fd, direction))
                .transpose()?,
            _ => None,
        };
        Ok(AccessGuard {
            _gpu: gpu,
            _bracket: bracket,
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

/// A buffer held weakly: for caches that must not keep memory alive.
#[derive(Debug, Clone)]
pub(crate) struct WeakBuffer(std::sync::Weak<BufferInner>);

impl WeakBuffer {
    pub(crate) fn upgrade(&self) -> Option<Buffer> {
        self.0.upgrade().map(Buffer)
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// A live CPU access: the aliasing claim and, for a DMA-BUF, the sync bracket.
#[derive(Debug)]
pub(crate) struct AccessGuard<'a> {
    // Field order: the GPU write-back and the sync bracket finish while the claim still holds
    // off other maps.
    _gpu: Option<GpuCpuAccess<'a>>,
    _bracket: Option<SyncBracket<'a>>,
    _claim: Claim<'a>,
}

#[derive(Debug)]
struct Claim<'a> {
    maps: &'a AtomicUsize,
    write: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.write {
            self.maps.store(0, Ordering::Release);
        } else {
            self.maps.fetch_sub(1, Ordering::Release);
        }
    }
}
