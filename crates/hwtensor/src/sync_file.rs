//! A tensor's sync_files: the DMA fence its bytes are complete at (a V4L2 or GPU producer's,
//! waited for before the bytes are read), and its pending GPU writes given out as one. The fence
//! itself is an OS object ([`SyncFile`], `os/linux/sync_file.rs`).
//!
//! A received one is only ever waited for, on the CPU by `poll` with a bound, or GPU-side by
//! a copy that needs the bytes: it is never merged into hwtensor's timeline, so a producer
//! whose fence never signals costs its consumer a timeout, not a device that waits for ever.

use std::sync::Arc;

use crate::{Element, Result, SyncFile, Tensor, TensorDyn};

impl<T: Element> Tensor<T> {
    /// The same tensor over the same buffer, its bytes complete only once `fence` signals: a
    /// frame a V4L2 driver or a GPU is still writing. A CPU map waits for the fence (at most
    /// [`GPU_WAIT`](crate::gpu::GPU_WAIT)); a blob by reference carries it to the receiver
    /// (which waits for it, bounded, before it returns the tensor); an EdgeFirst message by
    /// reference names it as `fence_fd`. The pooled channel's frames are its own pool's
    /// tensors and carry no fence: wait for one ([`SyncFile::wait`]) before `send`.
    pub fn with_sync_file(&self, fence: SyncFile) -> Tensor<T> {
        let mut t = self.clone();
        t.acquire = Some(Arc::new(fence));
        t
    }

    /// The sync_file the bytes are complete at, if any.
    pub fn sync_file(&self) -> Option<&SyncFile> {
        self.acquire.as_deref()
    }

    /// The tensor's pending device writes (GPU copies, CUDA maps) as a sync_file, for a reader
    /// outside hwtensor that speaks DMA fences (V4L2, DRM/KMS, Wayland, EdgeFirst's
    /// `fence_fd`): it signals once the bytes are complete. `None` when no write is pending.
    /// A device that cannot export sync_files (lavapipe: no external semaphores) waits for
    /// the writes here instead, at most [`GPU_WAIT`](crate::gpu::GPU_WAIT), and also returns
    /// `None`: either way the reader gets finished bytes. A sync_file set with
    /// [`Self::with_sync_file`] is not part of it (hand that one on as it is).
    pub fn export_sync_file(&self) -> Result<Option<SyncFile>> {
        let last = self.buffer.device_after(false);
        if last == 0 {
            return Ok(None);
        }
        let device = crate::gpu::device()?;
        if device.completed_value()? >= last {
            return Ok(None);
        }
        match device.export_sync_file(last)? {
            Some(fd) => SyncFile::from_fd(fd).map(Some),
            None => device.wait(last, crate::gpu::GPU_WAIT).map(|()| None),
        }
    }
}

impl TensorDyn {
    /// See [`Tensor::with_sync_file`].
    pub fn with_sync_file(&self, fence: SyncFile) -> TensorDyn {
        each_tensor!(self, t => TensorDyn::from(t.with_sync_file(fence)))
    }

    /// See [`Tensor::sync_file`].
    pub fn sync_file(&self) -> Option<&SyncFile> {
        each_tensor!(self, t => t.sync_file())
    }

    /// See [`Tensor::export_sync_file`].
    pub fn export_sync_file(&self) -> Result<Option<SyncFile>> {
        each_tensor!(self, t => t.export_sync_file())
    }
}
