//! The Vulkan backend of the process device (Linux): one Vulkan device and one timeline
//! semaphore for every copy of this library in the process.
//!
//! `device()` makes it on the first call, in this order: adopt what another copy published in
//! the rendezvous record; else take the host's device given to [`use_external_device`]; else
//! select an adapter and create one. Then it publishes what it got, so later copies adopt it.
//! libvulkan is loaded at run time, so a machine without Vulkan gets an error, not a link
//! failure.

mod adapter;
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
use ash::vk::Handle;

pub use adapter::{format_uuid, AdapterChoice, AdapterInfo, AdapterKind, PciAddress, ADAPTER_ENV};
pub use create::{validation_errors, DEBUG_ENV};
pub(crate) use fence::{count_cpu_wait, Backoff, Next, Requests};
pub use fence::{cpu_waits, WAIT_SPIN};
pub(crate) use peer::PeerTimeline;

use crate::gpu::timeline::TimelineWords;
use crate::os::own_cloexec;
use fence::{words_in_record, Timeline};
pub(crate) use record::ProcessKey;
use record::{Found, Published, Record};

use crate::gpu::process_device::DeviceCell;
use crate::{Error, Result};

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

static DEVICE: DeviceCell<GpuDevice> = DeviceCell::new();
static EXTERNAL: Mutex<Option<ExternalDevice>> = Mutex::new(None);

/// The process device, made on the first call. A failure is kept, and every later call gets
/// the same text at once.
pub fn device() -> Result<&'static GpuDevice> {
    DEVICE.get_or_init(init)
}

/// Every adapter this machine's Vulkan sees.
pub fn adapters() -> Result<Vec<AdapterInfo>> {
    let entry = create::load_entry()?;
    let instance = create::create_instance(&entry, false)?.instance;
    let list = create::enumerate(&instance).map(|v| v.into_iter().map(|(_, i)| i).collect());
    // SAFETY: the instance has no children and nothing else holds it.
    unsafe { instance.destroy_instance(None) };
    list
}

/// Installs the host's device as the process device. Call it before anything calls
/// [`device`].
///
/// # Safety
/// The handles must be live, belong together, and stay alive for the rest of the process; the
/// device must have the `timelineSemaphore` feature enabled.
pub unsafe fn use_external_device(ext: ExternalDevice) -> Result<()> {
    DEVICE.refuse_late_host_device()?;
    if ext.instance == vk::Instance::null()
        || ext.physical_device == vk::PhysicalDevice::null()
        || ext.device == vk::Device::null()
    {
        return Err(Error::InvalidArgument(
            "use_external_device needs non-null instance, physical device and device handles"
                .into(),
        ));
    }
    let key = ProcessKey::current();
    if let Some((key, Ok(record))) = key.map(|k| (k, record::open_record(k.pid))) {
        if let Found::Ours(_) = record.read_as(key) {
            return Err(crate::gpu::process_device::already_published());
        }
    }
    // SAFETY: the caller vouches for the handles; loading function pointers calls the loader.
    let (instance, _) =
        unsafe { load_handles(ext.get_instance_proc_addr, ext.instance, ext.device) };
    check_device_answers(&instance, ext.device)?;
    *EXTERNAL
        .lock()
        .map_err(|_| Error::InvalidOperation("a previous installer panicked".into()))? = Some(ext);
    Ok(())
}

/// Loads instance and device function tables through a given `vkGetInstanceProcAddr`.
///
/// # Safety
/// `instance` and `device` must be live handles created through `gipa`.
unsafe fn load_handles(
    gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: vk::Instance,
    device: vk::Device,
) -> (ash::Instance, ash::Device) {
    // SAFETY: the caller's contract.
    unsafe {
        let entry = ash::Entry::from_static_fn(ash::StaticFn {
            get_instance_proc_addr: gipa,
        });
        let instance = ash::Instance::load(entry.static_fn(), instance);
        let device = ash::Device::load(instance.fp_v1_0(), device);
        (instance, device)
    }
}

/// Refuses a device that does not give us the functions we call.
fn check_device_answers(instance: &ash::Instance, device: vk::Device) -> Result<()> {
    for name in [
        c"vkQueueSubmit",
        c"vkCreateSemaphore",
        c"vkWaitSemaphores",
        c"vkGetSemaphoreCounterValue",
        c"vkGetDeviceQueue",
    ] {
        // SAFETY: vkGetDeviceProcAddr takes any device handle of this instance and a C string.
        let f = unsafe { (instance.fp_v1_0().get_device_proc_addr)(device, name.as_ptr()) };
        if f.is_none() {
            return Err(Error::InvalidArgument(format!(
                "the device does not answer {name:?}; is it a live device with Vulkan 1.2?"
            )));
        }
    }
    Ok(())
}

fn init() -> Result<GpuDevice> {
    record::sweep_dead_records();
    let key = ProcessKey::current();
    let record = match key.map(|k| record::open_record(k.pid)) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            log::warn!("hwtensor: no GPU rendezvous ({e}); other copies of hwtensor in this process will make their own device");
            None
        }
        None => {
            log::warn!("hwtensor: no GPU rendezvous (cannot read this process's start time)");
            None
        }
    };
    let Some(record) = record else {
        return own_device(None);
    };
    crate::gpu::rendezvous::adopt_or_publish::<Vulkan>(record)
}

/// The Vulkan backend as the rendezvous state machine sees it.
struct Vulkan;

impl crate::gpu::rendezvous::DeviceMaker for Vulkan {
    type Record = Record;
    type Device = GpuDevice;

    fn own(record: Option<&'static Record>) -> Result<GpuDevice> {
        own_device(record)
    }

    fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
        // SAFETY: the state machine passes only what `Record::read_as` returned as `Ours`, after
        // checking the record names this process by pid and start time.
        unsafe { adopt(record, p) }
    }

    fn published(device: &GpuDevice) -> Published {
        device.published()
    }

    fn discard(device: GpuDevice) {
        device.discard();
    }
}

/// A device's handles and what it is, however this copy came by them (made, the host's, or
/// adopted from another copy): what [`GpuDevice::assemble`] builds a device from.
struct DeviceParts {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    /// The main queue, its family and its index there.
    queue: (vk::Queue, u32, u32),
    /// The transfer queue and its family, where the device has one of its own.
    transfer: Option<(vk::Queue, u32)>,
    info: AdapterInfo,
    features: Features,
    origin: Origin,
}

impl DeviceParts {
    /// The parts of a device the host made and installed with `use_external_device`.
    fn external(ext: ExternalDevice) -> DeviceParts {
        // SAFETY: use_external_device's caller vouched for these handles.
        let (instance, device) =
            unsafe { load_handles(ext.get_instance_proc_addr, ext.instance, ext.device) };
        // SAFETY: as above.
        let entry = unsafe {
            ash::Entry::from_static_fn(ash::StaticFn {
                get_instance_proc_addr: ext.get_instance_proc_addr,
            })
        };
        // SAFETY: the host made its device with this queue.
        let queue = unsafe { device.get_device_queue(ext.queue_family, ext.queue_index) };
        DeviceParts {
            info: AdapterInfo::query(&instance, ext.physical_device),
            entry,
            instance,
            physical: ext.physical_device,
            device,
            queue: (queue, ext.queue_family, ext.queue_index),
            transfer: None,
            features: Features(0),
            origin: Origin::External,
        }
    }

    /// The parts of a device this copy made.
    fn created(c: create::Created) -> DeviceParts {
        // SAFETY: the device was created with queue 0 of each of these families.
        let queue = unsafe { c.device.get_device_queue(c.families.main, 0) };
        let transfer = c.families.transfer.map(|f| {
            // SAFETY: as above.
            (unsafe { c.device.get_device_queue(f, 0) }, f)
        });
        DeviceParts {
            entry: c.entry,
            instance: c.instance,
            physical: c.physical,
            device: c.device,
            queue: (queue, c.families.main, 0),
            transfer,
            info: c.info,
            features: c.features,
            origin: Origin::Created,
        }
    }
}

/// A device of this copy: the host's, if installed, else a new one. Its timeline uses the
/// record's counter and lock when there is a record to share.
fn own_device(record: Option<&'static Record>) -> Result<GpuDevice> {
    let shared = record.map_or_else(TimelineWords::private, words_in_record);
    let external = EXTERNAL.lock().ok().and_then(|mut e| e.take());
    let (parts, messenger) = match external {
        Some(ext) => (DeviceParts::external(ext), None),
        None => {
            let mut c = create::create()?;
            let messenger = c.messenger.take();
            (DeviceParts::created(c), messenger)
        }
    };
    let (device, info) = (&parts.device, &parts.info);
    let exportable = parts.features.has(Features::EXTERNAL_SEMAPHORE_FD)
        && timeline_exportable(&parts.instance, parts.physical);
    let semaphore = create_semaphore(device, shared.last(), exportable).map_err(|e| {
        Error::gpu(
            vk_kind(e),
            format!(
                "creating the timeline semaphore on {} failed: {e}",
                info.label()
            ),
        )
    })?;
    let tracked = tracked(device, exportable)?;
    let timeline = Timeline::new(semaphore, tracked, shared, exportable);
    let mut dev = GpuDevice::assemble(parts, timeline)?;
    // The debug messenger lives as long as the device: only a discarded device destroys it.
    dev.messenger = messenger;
    Ok(dev)
}

/// Adopts the device another copy published.
///
/// # Safety
/// `p` must come from a record that names this process.
unsafe fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
    if p.get_instance_proc_addr == 0 || p.device == 0 {
        return Err(Error::gpu(
            crate::GpuErrorKind::Driver,
            "the published GPU device record is incomplete",
        ));
    }
    // SAFETY: a non-zero function pointer published by a copy in this process.
    let gipa: vk::PFN_vkGetInstanceProcAddr = unsafe {
        std::mem::transmute::<usize, vk::PFN_vkGetInstanceProcAddr>(
            p.get_instance_proc_addr as usize,
        )
    };
    let instance_h = vk::Instance::from_raw(p.instance);
    let device_h = vk::Device::from_raw(p.device);
    // SAFETY: live handles of this process, created through `gipa`.
    let (instance, device) = unsafe { load_handles(gipa, instance_h, device_h) };
    // SAFETY: as above.
    let entry = unsafe {
        ash::Entry::from_static_fn(ash::StaticFn {
            get_instance_proc_addr: gipa,
        })
    };
    let physical = vk::PhysicalDevice::from_raw(p.physical_device);
    let info = AdapterInfo::query(&instance, physical);
    let features = Features(p.features);
    let timeline = if p.semaphore != 0 {
        Timeline::new(
            vk::Semaphore::from_raw(p.semaphore),
            tracked(&device, true)?,
            words_in_record(record),
            true,
        )
    } else {
        // No shared semaphore to open: signal a private one, and never export it.
        let s = create_semaphore(&device, 0, false).map_err(|e| {
            Error::gpu(
                vk_kind(e),
                format!("creating a private timeline failed: {e}"),
            )
        })?;
        Timeline::new(s, None, TimelineWords::private(), false)
    };
    let queue = (vk::Queue::from_raw(p.queue), p.queue_family, p.queue_index);
    let transfer = (p.transfer_family != u32::MAX)
        .then(|| (vk::Queue::from_raw(p.transfer_queue), p.transfer_family));
    let parts = DeviceParts {
        entry,
        instance,
        physical,
        device,
        queue,
        transfer,
        info,
        features,
        origin: Origin::Adopted,
    };
    GpuDevice::assemble(parts, timeline)
}

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

fn timeline_exportable(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    let mut type_info =
        vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
        .push_next(&mut type_info);
    let mut props = vk::ExternalSemaphoreProperties::default();
    // SAFETY: a query on an enumerated device; the chain outlives the call.
    unsafe {
        instance.get_physical_device_external_semaphore_properties(physical, &info, &mut props)
    };
    props
        .external_semaphore_features
        .contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE)
}

/// This copy's tracked timeline where the process timeline is exported (see
/// `Timeline::tracked`), else none.
fn tracked(device: &ash::Device, exported: bool) -> Result<Option<vk::Semaphore>> {
    if !exported {
        return Ok(None);
    }
    create_semaphore(device, 0, false)
        .map(Some)
        .map_err(failed("creating a timeline"))
}

fn create_semaphore(
    device: &ash::Device,
    initial: u64,
    exportable: bool,
) -> std::result::Result<vk::Semaphore, vk::Result> {
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(initial);
    let mut export = vk::ExportSemaphoreCreateInfo::default()
        .handle_types(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
    let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    if exportable {
        info = info.push_next(&mut export);
    }
    // SAFETY: a plain creation on a live device; the chain outlives the call.
    unsafe { device.create_semaphore(&info, None) }
}

impl GpuDevice {
    /// The device from its parts and its timeline: the command pools, the memory
    /// properties and the extensions' function tables are made here, once for every origin.
    fn assemble(parts: DeviceParts, mut timeline: Timeline) -> Result<GpuDevice> {
        let DeviceParts {
            entry,
            instance,
            physical,
            device,
            queue: (queue, queue_family, queue_index),
            transfer,
            info,
            features,
            origin,
        } = parts;
        let pool_err = failed("creating a command pool");
        let work = submit::Work::new(&device, queue_family).map_err(&pool_err)?;
        let transfer = match transfer {
            Some((q, family)) => Some(submit::Lane {
                queue: q,
                family,
                work: submit::Work::new(&device, family).map_err(pool_err)?,
            }),
            None => None,
        };
        *timeline.chained.get_mut() = transfer.is_some();
        // SAFETY: a query on the device's own physical device.
        let memory_properties = unsafe { instance.get_physical_device_memory_properties(physical) };
        let ext = extensions::Extensions::load(&instance, physical, &device, features);
        Ok(GpuDevice {
            ext,
            _entry: entry,
            instance,
            physical,
            device,
            queue,
            queue_family,
            queue_index,
            transfer,
            info,
            features,
            origin,
            timeline,
            work,
            memory_properties,
            fence_fd: OnceLock::new(),
            messenger: None,
            timelines: Mutex::new(Vec::new()),
            export_kinds: peer::ExportKinds::default(),
            sync_fds: sync_fd::SyncFds::default(),
        })
    }

    fn published(&self) -> Published {
        Published {
            instance: self.instance.handle().as_raw(),
            physical_device: self.physical.as_raw(),
            device: self.device.handle().as_raw(),
            queue: self.queue.as_raw(),
            queue_family: self.queue_family,
            queue_index: self.queue_index,
            semaphore: if self.timeline.exportable || self.origin != Origin::Adopted {
                self.timeline.semaphore.as_raw()
            } else {
                0
            },
            get_instance_proc_addr: self.instance_gipa() as usize as u64,
            features: self.features.0,
            transfer_queue: self.transfer.as_ref().map_or(0, |l| l.queue.as_raw()),
            transfer_family: self.transfer.as_ref().map_or(u32::MAX, |l| l.family),
        }
    }

    fn instance_gipa(&self) -> vk::PFN_vkGetInstanceProcAddr {
        self._entry.static_fn().get_instance_proc_addr
    }

    /// Destroys a device this copy built and lost the publication race with.
    fn discard(self) {
        // SAFETY: nothing else has seen these objects: they were never published, and nothing
        // was ever submitted with the pools.
        unsafe {
            self.device.destroy_semaphore(self.timeline.semaphore, None);
            if let Some(tracked) = self.timeline.tracked {
                self.device.destroy_semaphore(tracked, None);
            }
            self.work.destroy(&self.device);
            if let Some(lane) = &self.transfer {
                lane.work.destroy(&self.device);
            }
            if self.origin == Origin::Created {
                self.device.destroy_device(None);
                if let Some((utils, messenger)) = &self.messenger {
                    utils.destroy_debug_utils_messenger(*messenger, None);
                }
                self.instance.destroy_instance(None);
            }
        }
    }

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
