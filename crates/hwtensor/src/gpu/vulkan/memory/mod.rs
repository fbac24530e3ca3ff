//! GPU memory on the process device: exportable buffers, their CPU view, and host imports.
//!
//! Where the driver offers memory that is device-local, host-visible and cached (lavapipe), a
//! buffer is mapped once and maps hand out that pointer. Where exportable memory can only be
//! device-local (NVIDIA: the host-visible VRAM type cannot be exported, and CPU reads of it run
//! at 0.03 GB/s), the CPU sees a persistent HOST_CACHED staging buffer instead: a read map
//! copies device -> staging on the GPU and waits; a write map copies back when it drops.
//! `HWTENSOR_GPU_STAGING=1` forces the staged path, so it is exercised on lavapipe too.

use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use ash::vk;
use ash::vk::Handle;

use super::submit::Queue;
use super::{Features, GpuDevice};
use crate::gpu::{DeviceUse, GpuOrigin, GpuReference, MemorySource, TextureRequest, GPU_WAIT};
use crate::{Error, GpuErrorKind, Result, TensorMemory};

mod bound;
mod host_import;
mod staging;

use bound::{BoundBuffer, MemoryImport, BUFFER_USAGE};
pub(crate) use host_import::HostImport;
pub(crate) use staging::GpuCpuAccess;
use staging::{CpuView, NEVER_STAGED};

/// Forces CPU access through a staging buffer even where memory could be mapped directly.
pub const STAGING_ENV: &str = "HWTENSOR_GPU_STAGING";

/// A buffer in GPU memory and what orders access to it.
pub(crate) struct GpuMemory {
    /// The buffer, its memory and their device. Freed by `drop` only once the GPU is done with
    /// it (leaked otherwise).
    bound: ManuallyDrop<BoundBuffer>,
    allocation_size: u64,
    len: usize,
    cpu: CpuView,
    /// The memory's exported fd (made once), for hand-off and identity; `None` where the device
    /// cannot export memory.
    fd: Option<OwnedFd>,
    /// Timeline value of the last GPU write, and of the last GPU read (Vulkan's or CUDA's).
    uses: DeviceUse,
    /// The `last_write` the staging copy reflects.
    staged_at: AtomicU64,
    /// Whether another process may write the memory (an import, or memory whose fd was handed
    /// out): its writes never reach `last_write` here, so the staging copy cannot be trusted
    /// and every CPU map downloads. (A consumer that acknowledged frames through CPU maps read
    /// its own stale staging copy of the producer's next frame on NVIDIA.)
    shared: AtomicBool,
    /// Who allocated the memory: this process, or the exporter an import came from.
    origin: GpuOrigin,
}

/// Serials of this copy's allocations. The memory handle is mixed in, so two copies of the
/// library in one process (each with its own counter) do not hand out the same key at once.
static SERIAL: AtomicU64 = AtomicU64::new(0);

impl GpuOrigin {
    fn local(memory: vk::DeviceMemory) -> GpuOrigin {
        let me = super::record::ProcessKey::current();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed) + 1;
        GpuOrigin {
            pid: me.map_or(0, |k| k.pid),
            start_time: me.map_or(0, |k| k.start_time),
            serial: n ^ memory.as_raw().rotate_left(32),
        }
    }
}

// SAFETY: the raw pointers are into mappings owned by this value; access through them is
// coordinated by the buffer's map claims, and Vulkan handles are usable from any thread.
unsafe impl Send for GpuMemory {}
// SAFETY: as above.
unsafe impl Sync for GpuMemory {}

impl GpuMemory {
    /// A zeroed buffer of `len` bytes on the process device.
    /// Vulkan GPU memory is a buffer: the texture request (for images) is not needed.
    pub(crate) fn allocate(len: usize, _texture: Option<&TextureRequest>) -> Result<GpuMemory> {
        let device = super::device()?;
        let mut mem = GpuMemory::bind(device, len, None)?;
        mem.fd = device.export_memory_fd(mem.bound.memory);
        mem.origin = GpuOrigin::local(mem.bound.memory);
        mem.zero()?;
        Ok(mem)
    }

    /// Imports an exported memory fd of `allocation_size` bytes holding a `len`-byte buffer,
    /// made by `source`. Takes the fd: the driver keeps it on success, it is closed on failure.
    pub(crate) fn import(
        fd: OwnedFd,
        allocation_size: u64,
        len: usize,
        origin: GpuOrigin,
        source: MemorySource,
    ) -> Result<GpuMemory> {
        let device = super::device()?;
        if !device.features.has(Features::EXTERNAL_MEMORY_FD) {
            return Err(Error::Unavailable {
                memory: TensorMemory::Gpu,
                reason: format!("{} cannot import memory fds", device.adapter_label()),
            });
        }
        device.check_memory_fd(fd.as_fd(), allocation_size)?;
        let keep = fd.try_clone().ok(); // the driver takes `fd`; keep one for identity and re-export
        let import = MemoryImport {
            fd,
            allocation_size,
            source,
        };
        let mut mem = GpuMemory::bind(device, len, Some(import))?;
        mem.fd = keep;
        mem.origin = origin;
        Ok(mem)
    }

    /// A `len`-byte tensor buffer with memory (new, or imported from `import`) and the CPU's
    /// view of it. Ownership comes first: the buffer is owned from its creation and the
    /// `GpuMemory` from the next line, so an error at any step frees everything made.
    fn bind(
        device: &'static GpuDevice,
        len: usize,
        import: Option<MemoryImport>,
    ) -> Result<GpuMemory> {
        let handles = device.export_handle_types();
        let bound = BoundBuffer::create(device, len as u64, BUFFER_USAGE, handles)?;
        let req = bound.requirements();
        let imported = import.is_some();
        let mut mem = GpuMemory {
            bound: ManuallyDrop::new(bound),
            allocation_size: req.size,
            len,
            cpu: CpuView::Staged(OnceLock::new()),
            fd: None,
            uses: DeviceUse::default(),
            staged_at: AtomicU64::new(if imported { NEVER_STAGED } else { 0 }),
            shared: AtomicBool::new(imported),
            origin: GpuOrigin {
                pid: 0,
                start_time: 0,
                serial: 0,
            },
        };
        let (type_index, direct) =
            device
                .tensor_memory_type(req.memory_type_bits)
                .ok_or_else(|| {
                    Error::gpu(GpuErrorKind::Driver, "no memory type fits a tensor buffer")
                })?;
        match import {
            None => mem
                .bound
                .bind(req.size, type_index, device.export_extra())?,
            Some(import) => {
                mem.allocation_size = import.allocation_size;
                mem.bound.bind_imported(req.size, len, type_index, import)?;
            }
        }
        if direct {
            mem.cpu = CpuView::Direct(device.map_whole(mem.bound.memory)?);
        }
        Ok(mem)
    }

    /// Fills the buffer with zeros on the GPU (Vulkan memory starts undefined).
    fn zero(&self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let buffer = self.bound.buffer;
        let v = self
            .device()
            .submit_commands(Queue::Transfer, 0, &[], |d, cmd| {
                // SAFETY: recording a fill of this buffer's whole range.
                unsafe { d.cmd_fill_buffer(cmd, buffer, 0, vk::WHOLE_SIZE, 0) }
            })?;
        self.uses.record(v, true);
        self.staged_at.store(NEVER_STAGED, Ordering::Release);
        Ok(())
    }

    pub(crate) fn device(&self) -> &'static GpuDevice {
        self.bound.device
    }
    pub(crate) fn buffer(&self) -> vk::Buffer {
        self.bound.buffer
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn allocation_size(&self) -> u64 {
        self.allocation_size
    }
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }
    /// The exported fd, for another process or API: from now on the memory may change behind
    /// this process's back (see `shared`).
    pub(crate) fn fd_to_share(&self) -> Option<BorrowedFd<'_>> {
        self.shared.store(true, Ordering::Release);
        self.fd()
    }
    pub(crate) fn origin(&self) -> GpuOrigin {
        self.origin
    }

    /// The blob's GPU section for this memory sent by reference, and the fence fd to send with
    /// the value of its last GPU write. Where the device cannot export its fence, waits for
    /// that write first, so the receiver reads finished bytes: a value is never paired with
    /// the wrong fence.
    pub(crate) fn describe(&self) -> Result<(GpuReference, Option<(BorrowedFd<'_>, u64)>)> {
        let completion = self.device().peer_completion(self.last_write())?;
        let reference = self.device().reference(self.allocation_size, self.origin);
        Ok((reference, completion))
    }

    /// The CPU pointer: the mapping itself or the staging buffer (made by `begin_cpu`, which
    /// every map goes through before it reads this).
    pub(crate) fn ptr(&self) -> *mut u8 {
        match &self.cpu {
            CpuView::Direct(p) => *p,
            CpuView::Staged(s) => s
                .get()
                .map_or(std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), |s| {
                    s.ptr
                }),
        }
    }

    pub(crate) fn last_write(&self) -> u64 {
        self.uses.last_write()
    }

    /// What a GPU operation that reads (or, with `write`, writes) this buffer must wait for.
    pub(crate) fn after(&self, write: bool) -> u64 {
        self.uses.after(write)
    }

    /// Records that GPU work (Vulkan's or CUDA's) completing at `value` read (or wrote) this
    /// buffer.
    pub(crate) fn record(&self, value: u64, write: bool) {
        self.uses.record(value, write);
    }
}

/// Records a buffer-to-buffer copy.
pub(crate) fn copy(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    src_offset: u64,
    dst_offset: u64,
    size: u64,
) {
    copy_regions(
        d,
        cmd,
        src,
        dst,
        &[vk::BufferCopy {
            src_offset,
            dst_offset,
            size,
        }],
    );
}

/// Records a buffer-to-buffer copy of several regions.
pub(crate) fn copy_regions(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: &[vk::BufferCopy],
) {
    if regions.iter().all(|r| r.size == 0) {
        return;
    }
    // SAFETY: recording into a command buffer being recorded; both buffers live until the
    // work completes (their owners wait for it before freeing them).
    unsafe { d.cmd_copy_buffer(cmd, src, dst, regions) }
}

impl Drop for GpuMemory {
    fn drop(&mut self) {
        // Freeing memory the GPU still uses is undefined: wait for it, or leak it.
        if let Err(e) = self.device().wait(self.after(true), GPU_WAIT) {
            log::error!("hwtensor: GPU memory still in use at drop ({e}); leaking it rather than freeing it under the GPU");
            if let CpuView::Staged(cell) = &mut self.cpu {
                std::mem::forget(cell.take());
            }
            return;
        }
        self.device().retire_finished();
        // SAFETY: dropped once, here; no GPU work uses it any more (waited above) and no map
        // outlives the tensor that owns this memory.
        unsafe { ManuallyDrop::drop(&mut self.bound) };
    }
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory")
            .field("len", &self.len)
            .field("staged", &matches!(self.cpu, CpuView::Staged(_)))
            .finish()
    }
}

/// Vulkan images are buffers with the 64-byte pitch every importer accepts: no pitch of the
/// driver's own.
pub(crate) fn image_row_pitch(_texture: &TextureRequest) -> Result<Option<usize>> {
    Ok(None)
}

#[cfg(test)]
mod tests;
