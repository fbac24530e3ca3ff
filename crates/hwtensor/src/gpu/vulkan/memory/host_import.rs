//! Host memory imported into the device for the length of one copy (a CPU tensor copied to or
//! from GPU memory without a bounce through a staging buffer).

use ash::vk;

use super::bound::{BoundBuffer, MemoryExtra};

/// A host buffer imported into the device for the length of one copy.
/// Send + Sync: Vulkan handles are usable from any thread.
pub(crate) struct HostImport {
    bound: BoundBuffer,
}

impl HostImport {
    /// Imports `len` bytes at `ptr`, or `None` where the device cannot (no extension, an
    /// unaligned pointer).
    ///
    /// # Safety
    /// `ptr..ptr + round_up(len, alignment)` must be mapped memory that stays valid and is not
    /// freed until the import is dropped, and every GPU use of it has completed by then.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> Option<HostImport> {
        let device = crate::gpu::vulkan::device().ok()?;
        let ext = device.ext.memory_host.as_ref()?;
        if len == 0 {
            return None;
        }
        let align = device.ext.host_import_alignment;
        // The driver does not check alignment (lavapipe): we must.
        if align == 0 || !(ptr as usize).is_multiple_of(align) {
            return None;
        }
        let size = len.div_ceil(align) * align;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the caller vouches for the pointer; the out-struct outlives the call.
        let r = unsafe {
            (ext.fp().get_memory_host_pointer_properties_ext)(
                device.device.handle(),
                vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
                ptr.cast_const().cast(),
                &mut props,
            )
        };
        if r != vk::Result::SUCCESS {
            return None;
        }
        let mut bound = BoundBuffer::create(
            device,
            size as u64,
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
        )
        .ok()?;
        let req = bound.requirements();
        let type_index = device.memory_type(
            props.memory_type_bits & req.memory_type_bits,
            vk::MemoryPropertyFlags::empty(),
        )?;
        let extra = MemoryExtra::ImportHost(ptr.cast());
        bound.bind(size as u64, type_index, extra).ok()?;
        Some(HostImport { bound })
    }

    /// The buffer over the host memory.
    pub(crate) fn buffer(&self) -> vk::Buffer {
        self.bound.buffer
    }
}

impl std::fmt::Debug for HostImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostImport").finish_non_exhaustive()
    }
}
