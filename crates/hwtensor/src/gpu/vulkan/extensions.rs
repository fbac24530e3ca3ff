//! Extension function tables, loaded once with the device.
//!
//! Loading a table walks `vkGetDeviceProcAddr` for every entry point of the extension; doing it
//! in every export, import or host copy (as the code once did) put microseconds of loader work
//! on hot paths. A table is loaded only where the device has the extension (its `Features`
//! bit), so a missing one is `None`, never a table of null pointers.

use ash::vk;

use super::Features;

/// The extension tables a device of this backend calls through.
pub(crate) struct Extensions {
    /// `VK_KHR_external_memory_fd`: export and import of memory fds.
    pub memory_fd: Option<ash::khr::external_memory_fd::Device>,
    /// `VK_KHR_external_semaphore_fd`: export and import of the timeline fence.
    pub semaphore_fd: Option<ash::khr::external_semaphore_fd::Device>,
    /// `VK_EXT_external_memory_host`: host memory imported for direct copies.
    pub memory_host: Option<ash::ext::external_memory_host::Device>,
    /// `minImportedHostPointerAlignment` of the device (0 without the extension).
    pub host_import_alignment: usize,
}

impl Extensions {
    /// Loads the tables the device's `features` promise.
    pub(crate) fn load(
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        device: &ash::Device,
        features: Features,
    ) -> Extensions {
        let has = |bit| features.has(bit);
        let memory_host = has(Features::EXTERNAL_MEMORY_HOST)
            .then(|| ash::ext::external_memory_host::Device::new(instance, device));
        Extensions {
            memory_fd: has(Features::EXTERNAL_MEMORY_FD)
                .then(|| ash::khr::external_memory_fd::Device::new(instance, device)),
            semaphore_fd: has(Features::EXTERNAL_SEMAPHORE_FD)
                .then(|| ash::khr::external_semaphore_fd::Device::new(instance, device)),
            host_import_alignment: if memory_host.is_some() {
                host_import_alignment(instance, physical)
            } else {
                0
            },
            memory_host,
        }
    }
}

fn host_import_alignment(instance: &ash::Instance, physical: vk::PhysicalDevice) -> usize {
    let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut host);
    // SAFETY: a query on the device's physical device; the chain outlives the call.
    unsafe { instance.get_physical_device_properties2(physical, &mut props) };
    host.min_imported_host_pointer_alignment as usize
}
