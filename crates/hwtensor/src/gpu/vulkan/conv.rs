//! Vulkan's words in the library's: result codes as error kinds, extensions as feature bits.
//! (wgpu-hal keeps each backend's conversions in a `conv.rs`; so do we.)

use ash::vk;

use crate::gpu::Features;
use crate::Error;

/// The error for a Vulkan call that failed: "`what` failed: `code`", of the code's kind.
pub(crate) fn failed(what: &str) -> impl Fn(vk::Result) -> Error + '_ {
    move |e| Error::gpu(vk_kind(e), format!("{what} failed: {e}"))
}

/// The kind of failure a Vulkan result code is, for [`Error::Gpu`].
pub(crate) fn vk_kind(r: vk::Result) -> crate::GpuErrorKind {
    use crate::GpuErrorKind as K;
    match r {
        vk::Result::ERROR_DEVICE_LOST => K::Lost,
        vk::Result::ERROR_OUT_OF_HOST_MEMORY
        | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        | vk::Result::ERROR_OUT_OF_POOL_MEMORY
        | vk::Result::ERROR_TOO_MANY_OBJECTS => K::OutOfMemory,
        vk::Result::ERROR_EXTENSION_NOT_PRESENT
        | vk::Result::ERROR_FEATURE_NOT_PRESENT
        | vk::Result::ERROR_LAYER_NOT_PRESENT
        | vk::Result::ERROR_INCOMPATIBLE_DRIVER
        | vk::Result::ERROR_FORMAT_NOT_SUPPORTED => K::Unsupported,
        vk::Result::TIMEOUT => K::Timeout,
        _ => K::Driver,
    }
}

impl Features {
    /// `VK_KHR_external_memory_fd`: memory exported and imported as fds.
    pub const EXTERNAL_MEMORY_FD: u32 = 1 << 0;
    /// `VK_KHR_external_semaphore_fd` with an exportable timeline: the fence crosses processes and APIs.
    pub const EXTERNAL_SEMAPHORE_FD: u32 = 1 << 1;
    /// `VK_EXT_external_memory_host`: host memory imported for direct copies.
    pub const EXTERNAL_MEMORY_HOST: u32 = 1 << 2;
    /// `VK_EXT_external_memory_dma_buf`: DMA-BUFs imported as GPU memory.
    pub const DMA_BUF: u32 = 1 << 3;
    /// `synchronization2` is enabled.
    pub const SYNCHRONIZATION2: u32 = 1 << 4;
}

/// The names `Features::names` gives the bits of this backend.
pub(crate) const FEATURE_NAMES: [(u32, &str); 5] = [
    (Features::EXTERNAL_MEMORY_FD, "external_memory_fd"),
    (Features::EXTERNAL_SEMAPHORE_FD, "external_semaphore_fd"),
    (Features::EXTERNAL_MEMORY_HOST, "external_memory_host"),
    (Features::DMA_BUF, "dma_buf"),
    (Features::SYNCHRONIZATION2, "synchronization2"),
];
