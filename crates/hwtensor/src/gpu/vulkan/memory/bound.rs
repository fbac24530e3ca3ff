//! Making GPU memory: a buffer and the memory bound to it owned together from the first step
//! ([`BoundBuffer`]), the memory types a tensor, an import or a staging buffer takes, and the
//! memory's exported fd.

use std::os::fd::{AsFd, IntoRawFd, OwnedFd};

use ash::vk;

use super::super::{Features, GpuDevice};
use super::STAGING_ENV;
use crate::gpu::MemorySource;
use crate::{Error, Result, TensorMemory};

pub(super) const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);

/// A buffer and the memory bound to it, owned together from the buffer's creation on: dropping
/// it destroys both, so an error at any later step (no memory type, a failed allocation, bind,
/// dup or `vkMapMemory`) frees everything made. The memory is null until bound; freeing a null
/// handle is a no-op in Vulkan. Dropping it is for owners that know the GPU is done with it.
pub(super) struct BoundBuffer {
    pub(super) device: &'static GpuDevice,
    pub(super) buffer: vk::Buffer,
    pub(super) memory: vk::DeviceMemory,
}

impl BoundBuffer {
    pub(super) fn create(
        device: &'static GpuDevice,
        size: u64,
        usage: vk::BufferUsageFlags,
        handles: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<BoundBuffer> {
        let buffer = device.create_buffer(size, usage, handles)?;
        test_hooks::count_live(1);
        Ok(BoundBuffer {
            device,
            buffer,
            memory: vk::DeviceMemory::null(),
        })
    }

    pub(super) fn requirements(&self) -> vk::MemoryRequirements {
        // SAFETY: a query on a live buffer.
        unsafe {
            self.device
                .device
                .get_buffer_memory_requirements(self.buffer)
        }
    }

    /// Allocates `size` bytes of `type_index` (exported or imported as `extra` says) and binds
    /// them to the buffer.
    pub(super) fn bind(&mut self, size: u64, type_index: u32, extra: MemoryExtra) -> Result<()> {
        self.memory = self
            .device
            .bind_memory(self.buffer, size, type_index, extra)?;
        test_hooks::count_live(1);
        Ok(())
    }

    /// Binds memory imported from `import.fd` to the buffer, which needs `needed` bytes (a
    /// `len`-byte tensor). The driver gets a dup: `import.fd` is closed when this returns.
    pub(super) fn bind_imported(
        &mut self,
        needed: u64,
        len: usize,
        type_index: u32,
        import: MemoryImport,
    ) -> Result<()> {
        let MemoryImport {
            fd,
            allocation_size,
            source,
        } = import;
        // An opaque fd's real size cannot be asked of the driver, and importing it with another
        // size is undefined: only the size the exporter must have made is accepted.
        if !import_size_fits(source, allocation_size, needed) {
            return Err(Error::Fd(format!(
                "the blob says the memory holds {allocation_size} bytes; a {len}-byte buffer on this device has {needed}"
            )));
        }
        let raw = test_hooks::dup(fd.as_fd())
            .map_err(|e| Error::Os {
                op: "dup of a memory fd",
                source: e,
            })?
            .into_raw_fd();
        let extra = MemoryExtra::ImportFd {
            fd: raw,
            dedicated: source == MemorySource::Vulkan,
        };
        self.bind(allocation_size, type_index, extra)
            .inspect_err(|_| crate::os::close_if_still_ours(raw, fd.as_fd()))
    }
}

impl Drop for BoundBuffer {
    fn drop(&mut self) {
        // SAFETY: no GPU work uses them: owners wait for it first (GpuMemory) or are promised
        // it (HostImport::new's contract), and a staging buffer goes with its GpuMemory.
        unsafe {
            self.device.device.destroy_buffer(self.buffer, None);
            self.device.device.free_memory(self.memory, None);
        }
        test_hooks::count_live(if self.memory == vk::DeviceMemory::null() {
            -1
        } else {
            -2
        });
    }
}

/// An exporter's memory fd and what the blob says of it.
pub(super) struct MemoryImport {
    pub(super) fd: OwnedFd,
    pub(super) allocation_size: u64,
    pub(super) source: MemorySource,
}

/// What unit tests hook into: a count of live Vulkan buffers and memories made on this thread,
/// and failures injected into the steps that are hard to make fail for real (a dup, a map), so
/// a test proves each error path frees what it made. Outside tests they count nothing and
/// inject nothing.
pub(super) mod test_hooks {
    use std::os::fd::{BorrowedFd, OwnedFd};

    /// A step a test makes fail.
    #[cfg(test)]
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(in crate::gpu::vulkan::memory) enum Step {
        Dup,
        Map,
    }

    #[cfg(test)]
    thread_local! {
        pub(in crate::gpu::vulkan::memory) static LIVE: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
        pub(in crate::gpu::vulkan::memory) static FAIL: std::cell::Cell<Option<Step>> = const { std::cell::Cell::new(None) };
    }

    #[inline(always)]
    pub(in crate::gpu::vulkan::memory) fn count_live(_delta: isize) {
        #[cfg(test)]
        LIVE.with(|l| l.set(l.get() + _delta));
    }

    pub(in crate::gpu::vulkan::memory) fn dup(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
        #[cfg(test)]
        if FAIL.get() == Some(Step::Dup) {
            return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
        }
        fd.try_clone_to_owned()
    }

    /// Whether a test made `vkMapMemory` fail.
    #[inline(always)]
    pub(in crate::gpu::vulkan::memory) fn map_fails() -> bool {
        #[cfg(test)]
        return FAIL.get() == Some(Step::Map);
        #[cfg(not(test))]
        false
    }
}

impl GpuDevice {
    pub(super) fn memory_type(&self, bits: u32, want: vk::MemoryPropertyFlags) -> Option<u32> {
        let p = &self.memory_properties;
        (0..p.memory_type_count).find(|&i| {
            bits & (1 << i) != 0 && p.memory_types[i as usize].property_flags.contains(want)
        })
    }

    /// The memory type of a tensor buffer, and whether the CPU may map it directly.
    pub(super) fn tensor_memory_type(&self, bits: u32) -> Option<(u32, bool)> {
        let direct = vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_CACHED;
        if !staging_forced() {
            if let Some(i) = self.memory_type(bits, direct) {
                return Some((i, true));
            }
        }
        // Device-local memory that is not host-visible first: host-visible VRAM reads crawl.
        let p = &self.memory_properties;
        (0..p.memory_type_count)
            .find(|&i| {
                let f = p.memory_types[i as usize].property_flags;
                bits & (1 << i) != 0
                    && f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                    && !f.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
            })
            .or_else(|| self.memory_type(bits, vk::MemoryPropertyFlags::DEVICE_LOCAL))
            .or_else(|| self.memory_type(bits, vk::MemoryPropertyFlags::empty()))
            .map(|i| (i, false))
    }

    pub(super) fn export_handle_types(&self) -> vk::ExternalMemoryHandleTypeFlags {
        if self.features.has(Features::EXTERNAL_MEMORY_FD) {
            vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD
        } else {
            vk::ExternalMemoryHandleTypeFlags::empty()
        }
    }

    pub(super) fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
        handles: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<vk::Buffer> {
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handles);
        // Shared between the main and the transfer queue where there are two, so neither needs
        // an ownership transfer before touching it.
        let families = self.queue_families();
        let mut info = vk::BufferCreateInfo::default()
            .size(size.max(1))
            .usage(usage);
        info = if families.len() > 1 {
            info.sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(&families)
        } else {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        };
        if !handles.is_empty() {
            info = info.push_next(&mut external);
        }
        // SAFETY: a plain creation on a live device; the chain outlives the call.
        unsafe { self.device.create_buffer(&info, None) }
            .map_err(crate::gpu::vulkan::failed("vkCreateBuffer"))
    }

    /// Allocates and binds dedicated memory of `type_index` for `buffer`, exporting or
    /// importing as `extra` says.
    pub(super) fn bind_memory(
        &self,
        buffer: vk::Buffer,
        size: u64,
        type_index: u32,
        extra: MemoryExtra,
    ) -> Result<vk::DeviceMemory> {
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut export =
            vk::ExportMemoryAllocateInfo::default().handle_types(self.export_handle_types());
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index);
        let mut import_fd;
        let mut import_host;
        match extra {
            MemoryExtra::None => {}
            MemoryExtra::Export => info = info.push_next(&mut dedicated).push_next(&mut export),
            MemoryExtra::ImportFd { fd, dedicated: one } => {
                // Dedicated where the export was, and without export info: NVIDIA treats an
                // import that also asks to be exportable as a fresh allocation (measured: the
                // importer saw zeros). Re-export uses the fd we keep instead.
                import_fd = vk::ImportMemoryFdInfoKHR::default()
                    .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD)
                    .fd(fd);
                info = info.push_next(&mut import_fd);
                if one {
                    info = info.push_next(&mut dedicated);
                }
            }
            MemoryExtra::ImportHost(ptr) => {
                import_host = vk::ImportMemoryHostPointerInfoEXT::default()
                    .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
                    .host_pointer(ptr);
                info = info.push_next(&mut import_host);
            }
        }
        // SAFETY: every struct in the chain outlives the call; the buffer belongs to this device.
        let memory = unsafe { self.device.allocate_memory(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                Error::Alloc {
                    memory: TensorMemory::Gpu,
                    bytes: size as usize,
                    source: std::io::Error::other(format!("vkAllocateMemory: {e}")),
                }
            }
            other => Error::gpu(
                crate::gpu::vulkan::vk_kind(other),
                format!("vkAllocateMemory of {size} bytes failed: {other}"),
            ),
        })?;
        // SAFETY: fresh memory of a type the buffer accepts, bound once at offset 0.
        if let Err(e) = unsafe { self.device.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: the memory was never used.
            unsafe { self.device.free_memory(memory, None) };
            return Err(Error::gpu(
                crate::gpu::vulkan::vk_kind(e),
                format!("vkBindBufferMemory failed: {e}"),
            ));
        }
        Ok(memory)
    }

    pub(super) fn map_whole(&self, memory: vk::DeviceMemory) -> Result<*mut u8> {
        if test_hooks::map_fails() {
            return Err(crate::gpu::vulkan::failed("vkMapMemory")(
                vk::Result::ERROR_MEMORY_MAP_FAILED,
            ));
        }
        // SAFETY: host-visible memory of this device, mapped once for its whole life.
        unsafe {
            self.device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
        }
        .map(|p| p.cast::<u8>())
        .map_err(crate::gpu::vulkan::failed("vkMapMemory"))
    }

    /// The memory a tensor buffer is allocated with: exportable where the device can export.
    pub(super) fn export_extra(&self) -> MemoryExtra {
        match self.export_handle_types().is_empty() {
            true => MemoryExtra::None,
            false => MemoryExtra::Export,
        }
    }

    pub(super) fn export_memory_fd(&self, memory: vk::DeviceMemory) -> Option<OwnedFd> {
        let ext = self.ext.memory_fd.as_ref()?;
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(memory)
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the memory was allocated exportable as OPAQUE_FD on this device.
        let raw = unsafe { ext.get_memory_fd(&info) }.ok()?;
        crate::os::own_cloexec(raw)
    }
}

pub(super) enum MemoryExtra {
    None,
    Export,
    /// An fd to import; `dedicated` where the exporter made it for one buffer (Vulkan).
    ImportFd {
        fd: i32,
        dedicated: bool,
    },
    ImportHost(*mut std::ffi::c_void),
}

/// What an imported fd's size must be for a `len`-byte buffer that needs `needed` bytes here.
/// Vulkan memory was made for the exporter's identical buffer, so its size is exactly ours;
/// CUDA memory is whole granules of CUDA's, so at least ours.
pub(super) fn import_size_fits(source: MemorySource, allocation_size: u64, needed: u64) -> bool {
    match source {
        MemorySource::Vulkan => allocation_size == needed,
        MemorySource::Cuda => allocation_size >= needed,
    }
}

/// Whether `HWTENSOR_GPU_STAGING=1` asks for the staged CPU path even where memory maps directly
/// (so lavapipe runs the path NVIDIA needs).
fn staging_forced() -> bool {
    std::env::var(STAGING_ENV).is_ok_and(|v| v.trim() == "1")
}
