//! How the process device comes to be: adopted from another copy of the library through the
//! rendezvous record, installed by the host (`use_external_device`), or created here
//! (`new_device.rs`: the instance, the adapter and the logical device). Each way ends in
//! [`DeviceParts`], from which `GpuDevice::assemble` builds the one device; a device that lost
//! the race to publish is discarded whole.

pub(super) mod new_device;

use std::sync::{Mutex, OnceLock};

use ash::vk;
use ash::vk::Handle;

use super::adapter::AdapterInfo;
use super::fence::{create_semaphore, words_in_record, Timeline};
use super::record::{self, Found, ProcessKey, Published, Record};
use super::{extensions, failed, peer, submit, sync_fd, vk_kind, ExternalDevice, GpuDevice};
use crate::gpu::process_device::DeviceCell;
use crate::gpu::timeline::TimelineWords;
use crate::gpu::{Features, Origin};
use crate::{Error, Result};

static DEVICE: DeviceCell<GpuDevice> = DeviceCell::new();
static EXTERNAL: Mutex<Option<ExternalDevice>> = Mutex::new(None);

/// The process device, made on the first call. A failure is kept, and every later call gets
/// the same text at once.
pub fn device() -> Result<&'static GpuDevice> {
    DEVICE.get_or_init(init)
}

/// Every adapter this machine's Vulkan sees.
pub fn adapters() -> Result<Vec<AdapterInfo>> {
    let entry = new_device::load_entry()?;
    let instance = new_device::create_instance(&entry, false)?.instance;
    let list = new_device::enumerate(&instance).map(|v| v.into_iter().map(|(_, i)| i).collect());
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
    fn created(c: new_device::Created) -> DeviceParts {
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
            let mut c = new_device::create()?;
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
}
