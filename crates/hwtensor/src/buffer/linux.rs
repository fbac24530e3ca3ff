//! What only Linux buffers do: wrap an imported fd, lend their fd, and be held weakly by the
//! cache of GPU imports.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::{Buffer, BufferInner};
use crate::backing::Storage;
use crate::cuda::Offer;
use crate::gpu::GpuOrigin;
use crate::os::{classify, memfd};
use crate::{BufferIdentity, ImportPolicy, Result};

/// GPU buffers alive in this copy of the library, by origin (weakly: the cache never keeps
/// memory alive). A GPU buffer handed out and back comes home as itself, and a pooled buffer
/// sent again reuses its import (once the fd is proven the same file, see `blob`).
static GPU_BUFFERS: Mutex<Option<HashMap<GpuOrigin, WeakBuffer>>> = Mutex::new(None);

/// Imported fd-backed buffers alive in this copy, by file (device and inode), weakly: a
/// receiver handed a buffer it already holds (a pooled frame sent again) reuses its mapping
/// instead of mapping it again and faulting its pages in anew. Sound because a live entry's
/// own fd keeps its file open, so the inode cannot name another file; a dead entry is never
/// used (the producer dropped the buffer and so did we).
static FD_BUFFERS: Mutex<Option<HashMap<BufferIdentity, WeakBuffer>>> = Mutex::new(None);

impl Buffer {
    /// A buffer over a foreign shm or DMA-BUF fd of at least `len` bytes; `policy` says
    /// whether an fd that cannot be sealed is accepted. A file this copy already maps, live,
    /// comes back as that buffer (the fd given is closed).
    ///
    /// One `fstat` serves the identity, the kind and the size (the seals are asked first, so
    /// a sealed file's size is final when it is read).
    pub(crate) fn import(fd: OwnedFd, len: usize, policy: &ImportPolicy) -> Result<Buffer> {
        let sealed = memfd::is_sealed(fd.as_fd());
        let st = classify::stat(fd.as_fd())?;
        let identity = BufferIdentity::File {
            dev: st.st_dev,
            ino: st.st_ino,
        };
        if let Some(held) = Buffer::find_file(&identity).filter(|b| b.len() >= len) {
            return Ok(held);
        }
        let storage = Storage::import(fd, len, policy.unsealed_shm, &st, sealed)?;
        let buffer = Buffer::with_identity(storage, identity);
        if let Ok(mut files) = FD_BUFFERS.lock() {
            let files = files.get_or_insert_with(HashMap::new);
            files.retain(|_, weak| weak.is_alive());
            files.insert(identity, buffer.downgrade());
        }
        Ok(buffer)
    }

    /// The live imported buffer over the file `identity` names, if this copy holds one.
    fn find_file(identity: &BufferIdentity) -> Option<Buffer> {
        FD_BUFFERS.lock().ok()?.as_ref()?.get(identity)?.upgrade()
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.storage.fd()
    }

    /// See `Storage::plane_fds`.
    pub(crate) fn plane_fds(&self) -> Option<crate::backing::linux::PlaneFds<'_>> {
        self.0.storage.plane_fds()
    }

    pub(crate) fn dma_heap(&self) -> Option<&str> {
        self.0.storage.dma_heap()
    }

    pub(crate) fn downgrade(&self) -> WeakBuffer {
        WeakBuffer(Arc::downgrade(&self.0))
    }

    /// Holds this buffer for CUDA work in `direction`: the aliasing claim alone (CUDA's work is
    /// ordered on its stream by the timeline, not by a CPU wait).
    pub(crate) fn hold_for_cuda(
        &self,
        direction: crate::Direction,
    ) -> Result<super::AccessGuard<'_>> {
        Ok(super::AccessGuard {
            _storage: None,
            _claim: self.claim(direction)?,
        })
    }

    /// Whether CUDA already reaches this buffer (its [`cuda_import`](Self::cuda_import) is made).
    pub(crate) fn cuda_imported(&self) -> bool {
        self.0.cuda.get().is_some()
    }

    /// This buffer as CUDA reaches it, made on the first call and kept (what CUDA can reach
    /// is CUDA's to say: `cuda::BufferImport::of`).
    // The registration borrows this buffer's pages for as long as it lives, which only the
    // field order of `BufferInner` can promise: one unsafe call, here.
    #[allow(unsafe_code)]
    pub(crate) fn cuda_import(&self) -> Result<&crate::cuda::BufferImport> {
        if let Some(import) = self.0.cuda.get() {
            return Ok(import);
        }
        let offer = match &self.0.storage {
            Storage::Cuda(c) => Offer::Cuda(c.device_ptr()),
            Storage::Gpu(g) => Offer::Gpu {
                fd: g.fd(),
                allocation_size: g.allocation_size(),
                len: g.len(),
            },
            storage => Offer::Host {
                ptr: self.ptr(),
                len: self.len(),
                writable: self.writable(),
                whole_pages: storage.whole_pages(),
                memory: storage.memory(),
            },
        };
        // SAFETY: host pages stay mapped for as long as the buffer lives, and the import is
        // dropped first (field order of BufferInner).
        let made = unsafe { crate::cuda::BufferImport::of(offer) }?;
        Ok(self.0.cuda.get_or_init(|| made))
    }

    /// Turns the CUDA reads of this buffer marked by events (see `cuda/event.rs`) into a
    /// timeline value recorded as a device read: before device work that writes the buffer
    /// and orders by the timeline. Nothing where CUDA has not read it.
    pub(crate) fn settle_cuda_reads(&self) -> Result<()> {
        let Some(import) = self.0.cuda.get() else {
            return Ok(());
        };
        if let Some(value) = import.settle_reads()? {
            self.record_device_use(value, false);
        }
        Ok(())
    }

    /// The marks of CUDA reads of this buffer that may still run (a channel frame's hand-back
    /// waits for them).
    pub(crate) fn cuda_reads(&self) -> Vec<Arc<crate::cuda::ReadMark>> {
        self.0
            .cuda
            .get()
            .map_or_else(Vec::new, |import| import.pending_reads())
    }

    /// What device work on this buffer must wait for (`write`: work that writes it): the
    /// last GPU or CUDA use its memory recorded, 0 for host memory (which the CUDA import
    /// tracks itself). CUDA reads marked by events are not in it: see
    /// [`Self::settle_cuda_reads`].
    pub(crate) fn device_after(&self, write: bool) -> u64 {
        match &self.0.storage {
            Storage::Gpu(g) => g.after(write),
            Storage::Cuda(c) => c.after(write),
            _ => 0,
        }
    }

    /// Records that device work completing at `value` read (or wrote) this buffer's device
    /// memory.
    pub(crate) fn record_device_use(&self, value: u64, write: bool) {
        match &self.0.storage {
            Storage::Gpu(g) => g.record(value, write),
            Storage::Cuda(c) => c.record(value, write),
            _ => {}
        }
    }

    /// The blob's GPU section of this buffer's device memory sent by reference, with the fence
    /// fd and value a receiver waits for; `None` for host memory.
    #[allow(clippy::type_complexity)]
    pub(crate) fn describe_device(
        &self,
    ) -> Option<Result<(crate::gpu::GpuReference, Option<(BorrowedFd<'_>, u64)>)>> {
        match &self.0.storage {
            Storage::Gpu(g) => Some(g.describe()),
            Storage::Cuda(c) => Some(c.describe()),
            _ => None,
        }
    }

    /// The live GPU buffer `origin` names in this copy, if there is one.
    pub(crate) fn find_gpu(origin: &GpuOrigin) -> Option<Buffer> {
        GPU_BUFFERS.lock().ok()?.as_ref()?.get(origin)?.upgrade()
    }

    /// Remembers this GPU buffer by its origin, forgetting dead ones.
    pub(crate) fn remember_gpu(&self) {
        let Some(origin) = self.gpu().map(|g| g.origin()) else {
            return;
        };
        if let Ok(mut buffers) = GPU_BUFFERS.lock() {
            let buffers = buffers.get_or_insert_with(HashMap::new);
            buffers.retain(|_, weak| weak.is_alive());
            buffers.insert(origin, self.downgrade());
        }
    }
}

/// A buffer held weakly: for caches that must not keep memory alive (the Vulkan import cache).
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
