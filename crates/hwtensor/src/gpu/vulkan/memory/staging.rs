//! The CPU's view of GPU memory: the memory itself where it maps, else a host-visible staging
//! buffer made on the first map, downloaded before a read and uploaded after a write.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use ash::vk;

use super::bound::{BoundBuffer, MemoryExtra};
use super::{copy, GpuMemory};
use crate::gpu::vulkan::submit::Queue;
use crate::gpu::vulkan::GpuDevice;
use crate::gpu::GPU_WAIT;
use crate::{Error, GpuErrorKind, Result};

/// How the CPU reaches the bytes.
pub(super) enum CpuView {
    /// The memory itself, mapped once.
    Direct(*mut u8),
    /// A staging buffer, made on the first CPU map (an import that only GPU work touches never
    /// pays for one: pinning a 4K frame's staging memory costs milliseconds on NVIDIA).
    Staged(OnceLock<Staging>),
}

/// A host-visible buffer the CPU reads and writes in place of device-local memory.
pub(super) struct Staging {
    bound: BoundBuffer,
    pub(super) ptr: *mut u8,
    coherent: bool,
}

// SAFETY: the pointer is into a mapping this value owns; access is coordinated by map claims.
unsafe impl Send for Staging {}
// SAFETY: as above.
unsafe impl Sync for Staging {}

/// `staged_at` of a staging copy that reflects no write (none made yet, or an import's).
pub(super) const NEVER_STAGED: u64 = u64::MAX;

impl GpuDevice {
    pub(super) fn staging(&'static self, size: u64) -> Result<Staging> {
        // Owned from the first line: an error below drops it, which frees what was made.
        let mut bound = BoundBuffer::create(
            self,
            size,
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk::ExternalMemoryHandleTypeFlags::empty(),
        )?;
        let req = bound.requirements();
        let cached = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_CACHED;
        let coherent =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_index = self
            .memory_type(req.memory_type_bits, cached)
            .or_else(|| self.memory_type(req.memory_type_bits, coherent))
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Driver,
                    "no host-visible memory for a staging buffer",
                )
            })?;
        let is_coherent = self.memory_properties.memory_types[type_index as usize]
            .property_flags
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        bound.bind(req.size, type_index, MemoryExtra::None)?;
        let ptr = self.map_whole(bound.memory)?;
        Ok(Staging {
            bound,
            ptr,
            coherent: is_coherent,
        })
    }
}

impl GpuMemory {
    pub(super) fn staging(&self) -> Result<&Staging> {
        let CpuView::Staged(cell) = &self.cpu else {
            return Err(Error::gpu(GpuErrorKind::Driver, "not a staged buffer"));
        };
        if cell.get().is_none() {
            // A racing creator's extra staging is dropped (freed) by `set` failing.
            let _ = cell.set(self.device().staging(self.len as u64)?);
        }
        Ok(cell.get().expect("set above"))
    }

    /// Gets the CPU view current for an access (`write`: one that may modify it): waits for
    /// the GPU work it must follow and, when staged, downloads.
    pub(crate) fn begin_cpu(&self, write: bool) -> Result<GpuCpuAccess<'_>> {
        let last = self.last_write();
        if let CpuView::Staged(_) = self.cpu {
            let staging = self.staging()?;
            let stale = self.staged_at.load(Ordering::Acquire) != last;
            if stale || self.shared.load(Ordering::Acquire) {
                let (src, dst, len) = (self.bound.buffer, staging.bound.buffer, self.len as u64);
                let v = self
                    .device()
                    .submit_commands(Queue::Transfer, last, &[], |d, cmd| {
                        copy(d, cmd, src, dst, 0, 0, len)
                    })?;
                self.device().wait(v, GPU_WAIT)?;
                self.record(v, false);
                if !staging.coherent {
                    self.invalidate(staging.bound.memory)?;
                }
                self.staged_at.store(last, Ordering::Release);
            }
        }
        self.device().wait(self.after(write), GPU_WAIT)?;
        Ok(GpuCpuAccess { mem: self, write })
    }

    pub(super) fn invalidate(&self, memory: vk::DeviceMemory) -> Result<()> {
        let range = vk::MappedMemoryRange::default()
            .memory(memory)
            .size(vk::WHOLE_SIZE);
        // SAFETY: the memory is mapped, and the GPU work that wrote it has completed.
        unsafe {
            self.device()
                .device
                .invalidate_mapped_memory_ranges(&[range])
        }
        .map_err(crate::gpu::vulkan::failed("vkInvalidateMappedMemoryRanges"))
    }

    /// Sends the staging copy back to the device after a CPU write.
    pub(super) fn upload_after_cpu_write(&self) -> Result<()> {
        let CpuView::Staged(_) = self.cpu else {
            return Ok(());
        };
        let staging = self.staging()?;
        if !staging.coherent {
            let range = vk::MappedMemoryRange::default()
                .memory(staging.bound.memory)
                .size(vk::WHOLE_SIZE);
            // SAFETY: the staging memory is mapped and the CPU writes are done.
            unsafe { self.device().device.flush_mapped_memory_ranges(&[range]) }
                .map_err(crate::gpu::vulkan::failed("vkFlushMappedMemoryRanges"))?;
        }
        let (src, dst, len) = (staging.bound.buffer, self.bound.buffer, self.len as u64);
        let v =
            self.device()
                .submit_commands(Queue::Transfer, self.after(true), &[], |d, cmd| {
                    copy(d, cmd, src, dst, 0, 0, len)
                })?;
        self.record(v, true);
        self.staged_at.store(v, Ordering::Release);
        Ok(())
    }
}

/// An open CPU access of GPU memory: on drop after a write, the staged bytes go back.
pub(crate) struct GpuCpuAccess<'a> {
    mem: &'a GpuMemory,
    write: bool,
}

impl Drop for GpuCpuAccess<'_> {
    fn drop(&mut self) {
        if self.write {
            if let Err(e) = self.mem.upload_after_cpu_write() {
                log::error!("hwtensor: writing a CPU map back to GPU memory failed: {e}");
            }
        }
    }
}

impl std::fmt::Debug for GpuCpuAccess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCpuAccess")
            .field("write", &self.write)
            .finish()
    }
}
