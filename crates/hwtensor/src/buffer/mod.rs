//! [`Buffer`]: one backing allocation shared by a tensor and all its views and batches.

use std::sync::{Arc, OnceLock, Weak};

use crate::backing::{CpuAccessGuard, Storage};
use crate::gpu::{CopySide, GpuMemory, HostBytes, HostImport, TextureRequest};
use crate::identity::BufferIdentity;
use crate::memory::{auto_candidates, force_mem_requested, Purpose};
use crate::Direction;
use crate::{Error, Result, TensorMemory};

// What only Linux buffers do: fds, the Vulkan host import, weak handles for the import cache.
#[cfg(target_os = "linux")]
mod linux;
// What only Windows buffers do: a section's handle.
mod maps;
#[cfg(windows)]
mod windows;

pub(crate) use maps::Footprint;
use maps::{Claim, Maps, Span};

#[derive(Debug)]
pub(crate) struct BufferInner {
    /// This host buffer imported into the GPU device, made on the first copy to or from GPU
    /// memory and kept: importing pins pages, which costs more than a large copy. Declared
    /// before `storage` so it is released before the memory is unmapped.
    gpu_import: OnceLock<Option<HostImport>>,
    /// This buffer as CUDA reaches it, made on the first CUDA map and kept (never, where
    /// there is no CUDA: `cuda/stub.rs`). Declared before `storage`: it waits for CUDA's last
    /// use and is undone before the memory goes.
    cuda: OnceLock<crate::cuda::BufferImport>,
    storage: Storage,
    identity: BufferIdentity,
    /// Live maps of this buffer, whole or by byte range. Keeps Rust's aliasing rules within
    /// this process across views: a `&mut [T]` from one view never coexists with a `&[T]` from
    /// another view of the same bytes.
    maps: Maps,
}

/// A shared handle to one buffer.
#[derive(Clone, Debug)]
pub(crate) struct Buffer(Arc<BufferInner>);

impl Buffer {
    pub(crate) fn new(storage: Storage) -> Result<Buffer> {
        let identity = storage.identity()?;
        Ok(Buffer::with_identity(storage, identity))
    }

    /// A buffer over `storage` whose identity the caller already read.
    pub(crate) fn with_identity(storage: Storage, identity: BufferIdentity) -> Buffer {
        Buffer(Arc::new(BufferInner {
            gpu_import: OnceLock::new(),
            cuda: OnceLock::new(),
            storage,
            identity,
            maps: Maps::default(),
        }))
    }

    /// A new zeroed buffer of `len` bytes of `memory`; `cpu_reads` says whether the CPU will
    /// read it (a DMA-BUF the CPU never reads comes from an uncached heap first).
    pub(crate) fn allocate(
        memory: TensorMemory,
        len: usize,
        texture: Option<&TextureRequest>,
        cpu_reads: bool,
    ) -> Result<Buffer> {
        let buffer = Buffer::new(Storage::allocate(memory, len, texture, cpu_reads)?)?;
        // A GPU buffer handed out and back again comes home as itself, not as an import.
        #[cfg(target_os = "linux")]
        if buffer.gpu().is_some() {
            buffer.remember_gpu();
        }
        Ok(buffer)
    }

    #[inline(always)]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.storage.ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.storage.len()
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        self.0.storage.memory()
    }

    /// Whether the CPU may write it (a foreign fd may be mapped read-only).
    pub(crate) fn writable(&self) -> bool {
        self.0.storage.writable()
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

    /// This buffer as a side of a copy the GPU device runs, or `None` where the device cannot
    /// reach it (a host buffer it cannot import, on a backend that copies through imports).
    pub(crate) fn copy_side(&self) -> Option<CopySide<'_>> {
        if let Storage::Gpu(g) = &self.0.storage {
            return Some(CopySide::Gpu(g));
        }
        let host = HostBytes {
            ptr: self.ptr(),
            import: self.host_import(),
        };
        crate::gpu::reaches_host(&host).then_some(CopySide::Host(host))
    }

    /// This host buffer imported into the GPU device, made once; `None` where it cannot be.
    // The import borrows this buffer's pages for as long as the buffer lives, which only the
    // field order of `BufferInner` can promise: one unsafe call, here.
    #[allow(unsafe_code)]
    fn host_import(&self) -> Option<&HostImport> {
        if !self.0.storage.whole_pages() {
            return None;
        }
        self.0
            .gpu_import
            .get_or_init(|| {
                // SAFETY: the storage is a page-aligned mapping of whole pages that lives as
                // long as the buffer, which drops the import first (field order); every copy
                // through the import is waited for before it returns.
                unsafe { HostImport::new(self.ptr(), self.len()) }
            })
            .as_ref()
    }

    /// Holds this buffer for device work in `direction`: the aliasing claim, plus for host
    /// memory what a CPU access opens (the device reads or writes it in place).
    pub(crate) fn hold_for_device(&self, direction: Direction) -> Result<AccessGuard<'_>> {
        if self.gpu().is_none() {
            return self.begin_access(direction);
        }
        let claim = self.claim(direction)?;
        // Device work waits on the timeline: CUDA reads marked by events need a value first,
        // made under the claim, so no read map can end between the value and the work.
        #[cfg(target_os = "linux")]
        if direction != Direction::Read {
            self.settle_cuda_reads()?;
        }
        Ok(AccessGuard {
            _storage: None,
            _claim: claim,
        })
    }

    pub(crate) fn liveness(&self) -> BufferLiveness {
        BufferLiveness(Arc::downgrade(&self.0))
    }

    /// Registers a CPU access in `direction`: refuses one that would alias a live write map,
    /// and opens what the storage needs around CPU access (a staged GPU map's write-back, the
    /// DMA-BUF sync bracket).
    #[inline]
    /// Whether this is the buffer's last owner while a CPU map still claims it (see
    /// `Tensor::drop_would_free_a_mapped_buffer`).
    pub(crate) fn is_last_owner_while_mapped(&self) -> bool {
        Arc::strong_count(&self.0) == 1 && self.0.maps.any()
    }

    pub(crate) fn begin_access(&self, direction: Direction) -> Result<AccessGuard<'_>> {
        self.begin_access_of(direction, Span::Whole)
    }

    /// [`Self::begin_access`] for the `len` bytes at `offset` (a view's, from its first element
    /// to the end of its last), claiming only the bytes `footprint` says its elements occupy:
    /// disjoint parts of heap and shm buffers (crops, strips, batch items) can be mapped at
    /// once. Other memory is claimed whole: a staged GPU map or a DMA-BUF sync bracket covers
    /// the whole buffer. `footprint` is asked only for a part (the whole map is the hot path).
    #[inline(always)]
    pub(crate) fn begin_access_at(
        &self,
        direction: Direction,
        offset: usize,
        len: usize,
        footprint: impl FnOnce() -> Footprint,
    ) -> Result<AccessGuard<'_>> {
        let whole = offset == 0 && len == self.len();
        let span = if whole || !self.0.storage.claimable_in_parts() {
            Span::Whole
        } else {
            Span::Part(footprint())
        };
        self.begin_access_of(direction, span)
    }

    #[inline(always)]
    fn begin_access_of(&self, direction: Direction, span: Span) -> Result<AccessGuard<'_>> {
        let claim = self.0.maps.claim(span, direction != Direction::Read)?;
        // Host memory CUDA may still be using: its GPU memory counterpart waits in `begin_cpu`
        // (CUDA reads marked by events, which the timeline does not know, wait here for both).
        if let Some(cuda) = self.0.cuda.get() {
            cuda.wait_idle(direction != Direction::Read)?;
        }
        // Decided here rather than in `begin_cpu`'s result: a `Result<Option<_>>` built on the
        // fast path went through the stack and stalled every map on a store-forwarding miss.
        let storage = match self.0.storage.cpu_access_is_bracketed() {
            true => self.0.storage.begin_cpu(direction)?,
            false => None,
        };
        Ok(AccessGuard {
            _storage: storage,
            _claim: claim,
        })
    }

    fn claim(&self, direction: Direction) -> Result<Claim<'_>> {
        self.0.maps.claim(Span::Whole, direction != Direction::Read)
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

impl AccessGuard<'_> {
    /// Whether the storage holds something open besides the claim.
    #[inline]
    pub(crate) fn is_bracketed(&self) -> bool {
        self._storage.is_some()
    }
}

/// A weak handle that tells whether a buffer is still alive, without keeping it alive.
///
/// A cache stores one next to each entry and drops the entry once the buffer is gone.
#[derive(Clone, Debug)]
pub struct BufferLiveness(pub(crate) Weak<BufferInner>);

impl BufferLiveness {
    /// Whether any tensor over the buffer still exists.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// Allocates a buffer of `bytes(memory)` on `memory`, or on the first automatic candidate that
/// is available and succeeds.
///
/// Automatic selection falls through on allocation failure as well as on absence: a board whose
/// CMA pool is exhausted still gets a tensor, on the next backing.
pub(crate) fn allocate_choosing(
    purpose: Purpose,
    memory: Option<TensorMemory>,
    bytes: impl Fn(TensorMemory) -> Result<usize>,
    texture: Option<&TextureRequest>,
    cpu_reads: bool,
) -> Result<(Buffer, TensorMemory)> {
    if let Some(m) = memory {
        return Ok((Buffer::allocate(m, bytes(m)?, texture, cpu_reads)?, m));
    }
    let mut last = None;
    for &m in auto_candidates(purpose, force_mem_requested()) {
        if !m.is_available() {
            continue;
        }
        match Buffer::allocate(m, bytes(m)?, texture, cpu_reads) {
            Ok(b) => return Ok((b, m)),
            Err(e) => {
                log::debug!("automatic selection: {m} failed ({e}), trying the next backing");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::Unavailable {
        memory: TensorMemory::Mem,
        reason: "no backing could be allocated".into(),
    }))
}
