//! What only Unix buffers do: wrap an imported fd, lend their fd, and give the Vulkan backend
//! its host-import slot and weak handles for its import cache.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use super::{Buffer, BufferInner};
use crate::backing::Storage;
use crate::gpu::memory::HostImport;
use crate::{ImportPolicy, Result};

impl Buffer {
    /// A buffer over a foreign shm or DMA-BUF fd of at least `len` bytes; `policy` says
    /// whether an fd that cannot be sealed is accepted.
    pub(crate) fn import(fd: OwnedFd, len: usize, policy: &ImportPolicy) -> Result<Buffer> {
        Buffer::new(Storage::import(fd, len, policy.unsealed_shm)?)
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.storage.fd()
    }

    pub(crate) fn writable(&self) -> bool {
        self.0.storage.writable()
    }

    /// The storage under this buffer.
    pub(crate) fn storage(&self) -> &Storage {
        &self.0.storage
    }

    /// Where the GPU backend keeps this host buffer's import into the device, made on first
    /// use (see `gpu::copy`).
    pub(crate) fn gpu_import_slot(&self) -> &OnceLock<Option<HostImport>> {
        &self.0.gpu_import
    }

    pub(crate) fn downgrade(&self) -> WeakBuffer {
        WeakBuffer(Arc::downgrade(&self.0))
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
