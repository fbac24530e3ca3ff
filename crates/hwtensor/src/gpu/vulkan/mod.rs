//! The Vulkan backend of the process device (Linux): one Vulkan device and one timeline
//! semaphore for every copy of this library in the process.
//!
//! `device()` makes it on the first call, in this order: adopt what another copy published in
//! the rendezvous record; else take the host's device given to [`use_external_device`]; else
//! select an adapter and create one. Then it publishes what it got, so later copies adopt it.
//! libvulkan is loaded at run time, so a machine without Vulkan gets an error, not a link
//! failure.

mod adapter;
mod conv;
mod copy;
mod create;
mod extensions;
mod fence;
mod memory;
mod peer;
mod record;
mod submit;
mod sync_fd;

pub(crate) use copy::{reaches_host, run_copy};
pub(crate) use memory::{image_row_pitch, GpuCpuAccess, GpuMemory, HostImport};
pub(crate) use submit::Queue;

use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ash::vk;

pub use adapter::{format_uuid, AdapterChoice, AdapterInfo, AdapterKind, PciAddress, ADAPTER_ENV};
pub(crate) use conv::{failed, vk_kind, FEATURE_NAMES};
pub use create::new_device::{validation_errors, DEBUG_ENV};
pub use create::{adapters, device, use_external_device};
pub(crate) use fence::count_cpu_wait;
pub use fence::{cpu_waits, WAIT_SPIN};
pub(crate) use peer::PeerTimeline;

use crate::os::own_cloexec;
use fence::Timeline;
use record::Record;

use crate::Result;

pub use ash;

/// Where the shared semaphore handle sits in the rendezvous record,
/// for tests that simulate a copy that cannot open the shared semaphore.
#[doc(hidden)]
pub const RECORD_SEMAPHORE_OFFSET: usize = std::mem::offset_of!(Record, semaphore);

/// The path of process `pid`'s rendezvous record (`/dev/shm/hwtensor-gpu-<pid namespace>-<pid>`),
/// for tests that look at or tamper with it.
#[doc(hidden)]
pub fn record_path(pid: u32) -> String {
    format!("/dev/shm/{}", record::record_name(pid))
}

use crate::gpu::{Features, GpuCompletion, Origin};

/// A host application's Vulkan device, for [`use_external_device`].
#[derive(Clone, Copy, Debug)]
pub struct ExternalDevice {
    /// The host's `VkInstance`.
    pub instance: vk::Instance,
    /// The physical device the device was made on.
    pub physical_device: vk::PhysicalDevice,
    /// Created with the `timelineSemaphore` feature enabled.
    pub device: vk::Device,
    /// The queue family hwtensor submits to.
    pub queue_family: u32,
    /// The queue's index in that family.
    pub queue_index: u32,
    /// The `vkGetInstanceProcAddr` the instance was created through.
    pub get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
}

/// The process GPU device.
pub struct GpuDevice {
    _entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    queue_family: u32,
    queue_index: u32,
    info: AdapterInfo,
    features: Features,
    origin: Origin,
    timeline: Timeline,
    work: submit::Work,
    /// The transfer-only queue, where the device has one: copies run there.
    transfer: Option<submit::Lane>,
    memory_properties: vk::PhysicalDeviceMemoryProperties,
    /// Extension function tables, loaded once.
    ext: extensions::Extensions,
    /// The timeline's fd, exported once for hand-offs (`None` where it cannot be).
    fence_fd: OnceLock<Option<OwnedFd>>,
    /// Fences of other processes this copy has imported, newest last (see `peer`).
    timelines: Mutex<Vec<std::sync::Arc<peer::PeerTimeline>>>,
    /// The kinds of fd this device exports memory and its fence as, learnt once: an import of
    /// any other kind is refused before the driver sees it.
    export_kinds: peer::ExportKinds,
    /// What the driver does with sync_files, and the binary semaphores still in use.
    sync_fds: sync_fd::SyncFds,
    /// The validation layer's messenger (`HWTENSOR_GPU_DEBUG=1`) of a device this copy created.
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

/// What a user printing the device wants to see: which adapter, how it was made, and what it
/// can do (never the driver handles, which mean nothing outside this process).
impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("adapter", &self.adapter_label())
            .field("origin", &self.origin)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

// SAFETY: Vulkan handles are usable from any thread; the one object that needs external
// synchronisation, the queue, is only used under the shared queue lock.
unsafe impl Sync for GpuDevice {}
// SAFETY: as above.
unsafe impl Send for GpuDevice {}

impl GpuDevice {
    /// The Vulkan instance, for a host's own calls.
    pub fn instance(&self) -> &ash::Instance {
        &self.instance
    }
    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical
    }
    /// The Vulkan device, for a host's own calls (submit to the shared queue only through hwtensor's lock).
    pub fn device(&self) -> &ash::Device {
        &self.device
    }
    /// The family of the main queue.
    pub fn queue_family(&self) -> u32 {
        self.queue_family
    }
    /// The index of the main queue in its family.
    pub fn queue_index(&self) -> u32 {
        self.queue_index
    }
    /// The main queue, for a host's own calls: submit to it only inside [`Self::with_queue`].
    pub fn queue(&self) -> vk::Queue {
        self.queue
    }
    /// Runs `f` with the main queue while holding the queue lock that every copy of hwtensor
    /// in the process takes around its own submits: a host's `vkQueueSubmit` or
    /// `vkQueuePresentKHR` on this queue must go inside it, since Vulkan forbids two threads
    /// submitting to one queue at once. To order hwtensor's work behind the host's, call
    /// [`Self::signal`] after `f` and record the value on the tensors the work touched
    /// ([`Tensor::gpu_record`](crate::Tensor::gpu_record)). Do not call hwtensor from `f`: the
    /// lock does not nest.
    pub fn with_queue<R>(&self, f: impl FnOnce(vk::Queue) -> R) -> Result<R> {
        let _held = self.timeline.shared.lock()?;
        Ok(f(self.queue))
    }
    /// The transfer-only queue family copies run on, where the device has one.
    pub fn transfer_queue_family(&self) -> Option<u32> {
        self.transfer.as_ref().map(|l| l.family)
    }
    /// The families GPU buffers are shared between.
    pub(crate) fn queue_families(&self) -> Vec<u32> {
        std::iter::once(self.queue_family)
            .chain(self.transfer_queue_family())
            .collect()
    }
    /// The timeline semaphore every copy signals.
    pub fn semaphore(&self) -> vk::Semaphore {
        self.timeline.semaphore
    }
    /// How this copy got the device (created, adopted from another copy, or the host's).
    pub fn origin(&self) -> Origin {
        self.origin
    }
    /// What the adapter is.
    pub fn adapter(&self) -> &AdapterInfo {
        &self.info
    }
    /// The adapter's name and kind, for messages.
    pub fn adapter_label(&self) -> String {
        self.info.label()
    }
    /// Whether the device is a CPU implementation (lavapipe).
    pub fn is_software(&self) -> bool {
        self.info.is_software()
    }
    /// The Vulkan `deviceUUID` (equal to CUDA's device UUID).
    pub fn device_uuid(&self) -> [u8; 16] {
        self.info.device_uuid
    }
    /// The Vulkan `driverUUID`.
    pub fn driver_uuid(&self) -> [u8; 16] {
        self.info.driver_uuid
    }
    /// The optional features the device has.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Allocates the next timeline value and submits its signal; an error (typically a lost
    /// device) if the submission failed. The value covers all work queued before it.
    pub fn signal(&self) -> Result<u64> {
        self.timeline.signal(&self.device, self.queue)
    }

    /// Allocates the next value now; its signal is submitted by [`flush`](Self::flush) (or
    /// by the next `signal` of any copy). Submit the work it covers first. An error only when
    /// the shared queue lock stays held past its bound.
    pub fn signal_deferred(&self) -> Result<u64> {
        self.timeline.signal_deferred()
    }

    /// Submits every deferred signal in one submission.
    pub fn flush(&self) -> Result<()> {
        self.timeline.flush(&self.device, self.queue)
    }

    /// The newest value allocated by any copy.
    pub fn last_signalled(&self) -> u64 {
        self.timeline.last_signalled()
    }

    /// The value the GPU has reached.
    pub fn completed_value(&self) -> Result<u64> {
        self.timeline.completed_value(&self.device)
    }

    /// Waits for `value`, at most `timeout`: spins briefly, then polls the counter (never a
    /// blocked driver wait: see `fence::wait_semaphore`).
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<()> {
        self.timeline.wait(&self.device, value, timeout, WAIT_SPIN)
    }

    /// [`Self::wait`] for work expected to take about `expected` (a copy of a known size):
    /// the counter is watched closely that long before the polls grow sparser.
    pub(crate) fn wait_expecting(
        &self,
        value: u64,
        timeout: Duration,
        expected: Duration,
    ) -> Result<()> {
        self.timeline.wait(&self.device, value, timeout, expected)
    }

    /// A pollable fd that becomes readable when `value` completes.
    pub fn completion_fd(&'static self, value: u64) -> Result<OwnedFd> {
        self.timeline.completion_fd(&self.device, value)
    }

    /// Runs `then` once `value` completes: at once if it has, else on the completion waiter's
    /// thread, so the caller never waits (a frame's hand-back after the GPU work on it).
    pub(crate) fn when_complete(
        &'static self,
        value: u64,
        then: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        let then = fence::OnDone::Call(Box::new(then));
        self.timeline.when_complete(&self.device, value, then)
    }

    /// A new fd of the timeline semaphore for another API or process; `None` where the driver
    /// cannot export one (lavapipe) or this copy signals a private timeline.
    pub fn export_fence(&self) -> Option<OwnedFd> {
        if !self.timeline.exportable {
            return None;
        }
        let ext = self.ext.semaphore_fd.as_ref()?;
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.timeline.semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the semaphore was created exportable as OPAQUE_FD on this device.
        let raw = unsafe { ext.get_semaphore_fd(&info) }.ok()?;
        own_cloexec(raw)
    }

    /// Allocates the next timeline value and has another signaller queue its signal (see
    /// `Timeline::signal_by`): how CUDA work joins the process timeline.
    pub(crate) fn signal_by(&self, enqueue: impl FnOnce(u64, u64) -> Result<()>) -> Result<u64> {
        self.timeline.signal_by(&self.device, self.queue, enqueue)
    }

    /// The timeline's fd for hand-offs, exported once and borrowed from then on.
    pub(crate) fn fence_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.fence_fd
            .get_or_init(|| self.export_fence())
            .as_ref()
            .map(|f| f.as_fd())
    }

    /// What a peer process waits for before it reads memory last written at `value`: this
    /// timeline's fence and the value, or `None` where the device cannot export its fence, after
    /// waiting here (bounded) so the peer reads finished bytes. One rule for GPU memory, CUDA
    /// memory and the pooled channel.
    pub(crate) fn peer_completion(
        &self,
        value: u64,
    ) -> Result<Option<(std::os::fd::BorrowedFd<'_>, u64)>> {
        match self.fence_fd() {
            Some(fence) => Ok(Some((fence, value))),
            None => {
                self.wait(value, crate::gpu::GPU_WAIT)?;
                Ok(None)
            }
        }
    }

    /// The blob's GPU section of memory of this device: its UUIDs, the allocation's size and
    /// who allocated it.
    pub(crate) fn reference(
        &self,
        allocation_size: u64,
        producer: crate::gpu::GpuOrigin,
    ) -> crate::gpu::GpuReference {
        crate::gpu::GpuReference {
            device_uuid: self.device_uuid(),
            driver_uuid: self.driver_uuid(),
            allocation_size,
            producer,
        }
    }

    /// The point `value` on the timeline, with the fence where one can be exported.
    pub fn completion(&self, value: u64) -> GpuCompletion {
        GpuCompletion {
            fence: self.export_fence(),
            value,
        }
    }
}

impl_process_device!(GpuDevice, OwnedFd);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuErrorKind;

    #[test]
    fn vulkan_results_map_to_the_kinds_callers_handle_apart() {
        assert_eq!(vk_kind(vk::Result::ERROR_DEVICE_LOST), GpuErrorKind::Lost);
        assert_eq!(
            vk_kind(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY),
            GpuErrorKind::OutOfMemory
        );
        assert_eq!(
            vk_kind(vk::Result::ERROR_FEATURE_NOT_PRESENT),
            GpuErrorKind::Unsupported
        );
        assert_eq!(vk_kind(vk::Result::TIMEOUT), GpuErrorKind::Timeout);
        assert_eq!(
            vk_kind(vk::Result::ERROR_INVALID_EXTERNAL_HANDLE),
            GpuErrorKind::Driver
        );
    }
}
