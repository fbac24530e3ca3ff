//! How the process device comes to be: adopted from another copy of the library through the
//! rendezvous record, installed by the host (`use_external_device`), or created here
//! (`new_device.rs`: the adapter and the creation ladder). Each way ends in [`DeviceParts`],
//! from which `GpuDevice::assemble` builds the one device; a device that lost the race to
//! publish is discarded whole. (The Vulkan backend's `create/` is its twin.)

pub(super) mod new_device;

use std::ffi::c_void;
use std::sync::Mutex;

use windows::core::Interface;
use windows::Win32::Foundation::{GENERIC_ALL, HANDLE};
use windows::Win32::Graphics::Direct3D11::{
    ID3D11Device, ID3D11Fence, D3D11_FENCE_FLAG_NONE, D3D11_FENCE_FLAG_SHARED,
};

use super::adapter::{self, AdapterInfo, AdapterKind};
use super::fence::{self, Fence, Timeline};
use super::record::{self, Found, Published, Record};
use super::{failed, ExternalDevice, GpuDevice, Interfaces};
use crate::gpu::process_device::DeviceCell;
use crate::gpu::timeline::TimelineWords;
use crate::gpu::{Features, Origin};
use crate::{Error, Result};

static DEVICE: DeviceCell<GpuDevice> = DeviceCell::new();
static EXTERNAL: Mutex<Option<ID3D11Device>> = Mutex::new(None);

/// The process device, made on the first call. A failure is kept, and every later call gets
/// the same text at once.
pub fn device() -> Result<&'static GpuDevice> {
    DEVICE.get_or_init(init)
}

/// Every adapter DXGI lists.
pub fn adapters() -> Result<Vec<AdapterInfo>> {
    let factory = adapter::factory()?;
    Ok(adapter::enumerate(&factory)
        .into_iter()
        .map(|(_, i)| i)
        .collect())
}

/// Installs the host's device as the process device. Call it before anything calls
/// [`device`]. Takes a reference of its own.
///
/// # Safety
/// `ext.device` must be null or a live `ID3D11Device*` (any COM interface of it).
pub unsafe fn use_external_device(ext: ExternalDevice) -> Result<()> {
    DEVICE.refuse_late_host_device()?;
    if ext.device.is_null() {
        return Err(Error::InvalidArgument(
            "use_external_device needs a non-null ID3D11Device".into(),
        ));
    }
    let pid = std::process::id();
    if let Ok(record) = record::open_record(pid) {
        if let Found::Ours(_) = record.read_as(pid) {
            return Err(crate::gpu::process_device::already_published());
        }
    }
    // SAFETY: the caller vouches that the pointer is a live COM object.
    let device = unsafe { ID3D11Device::from_raw_borrowed(&ext.device) }
        .and_then(|d| d.cast::<ID3D11Device>().ok())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "the host object does not answer QueryInterface for ID3D11Device".into(),
            )
        })?;
    *EXTERNAL
        .lock()
        .map_err(|_| Error::InvalidOperation("a previous installer panicked".into()))? =
        Some(device);
    Ok(())
}

fn init() -> Result<GpuDevice> {
    let pid = std::process::id();
    let record = match record::open_record(pid) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("hwtensor: no GPU rendezvous ({e}); other copies of hwtensor in this process will make their own device");
            return own_device(None);
        }
    };
    crate::gpu::rendezvous::adopt_or_publish::<D3d11>(record)
}

/// The D3D11 backend as the rendezvous state machine sees it.
struct D3d11;

impl crate::gpu::rendezvous::DeviceMaker for D3d11 {
    type Record = Record;
    type Device = GpuDevice;

    fn own(record: Option<&'static Record>) -> Result<GpuDevice> {
        own_device(record)
    }

    fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
        adopt(record, p)
    }

    fn published(device: &GpuDevice) -> Published {
        device.published()
    }

    fn discard(device: GpuDevice) {
        device.discard();
    }
}

/// A device's interfaces and what it is, however this copy came by them (made, the host's, or
/// adopted from another copy): what [`GpuDevice::assemble`] builds a device from.
struct DeviceParts {
    ifaces: Interfaces,
    info: AdapterInfo,
    features: Features,
    origin: Origin,
    feature_level: i32,
}

impl DeviceParts {
    /// The parts of a device the host made and installed with `use_external_device`.
    fn external(device: ID3D11Device) -> Result<DeviceParts> {
        let info = adapter::of_device(&device).unwrap_or_else(unknown_adapter);
        // SAFETY: queries of a live device.
        let (flags, level) = unsafe { (device.GetCreationFlags(), device.GetFeatureLevel()) };
        let ifaces = Interfaces::query(device)?;
        Ok(DeviceParts {
            features: Features(ifaces.features(flags, 0)),
            ifaces,
            info,
            origin: Origin::External,
            feature_level: level.0,
        })
    }

    /// The parts of a device this copy made.
    fn created(c: new_device::Created) -> Result<DeviceParts> {
        // SAFETY: a query of a live device. Wine reports 0 whatever was asked for; keep what
        // was asked for then, so the record says which rung took.
        let reported = unsafe { c.device.GetCreationFlags() };
        let flags = match reported {
            0 => c.requested_flags,
            _ => reported,
        };
        let ifaces = Interfaces::query(c.device)?;
        Ok(DeviceParts {
            features: Features(ifaces.features(flags, c.tier)),
            ifaces,
            info: c.info,
            origin: Origin::Created,
            feature_level: c.feature_level.0,
        })
    }

    /// The parts of the device another copy published (`features` as it published them).
    fn adopted(device: ID3D11Device, features: Features) -> Result<DeviceParts> {
        let ifaces = Interfaces::query(device)?;
        let info = adapter::of_device(&ifaces.device).unwrap_or_else(unknown_adapter);
        // SAFETY: a query of a live device.
        let level = unsafe { ifaces.device.GetFeatureLevel() };
        Ok(DeviceParts {
            ifaces,
            info,
            features,
            origin: Origin::Adopted,
            feature_level: level.0,
        })
    }
}

/// A device of this copy: the host's, if installed, else a new one. Its counter is the
/// record's when there is a record to share.
fn own_device(record: Option<&'static Record>) -> Result<GpuDevice> {
    let shared = record.map_or_else(TimelineWords::private, fence::words_in_record);
    let external = EXTERNAL.lock().ok().and_then(|mut e| e.take());
    let parts = match external {
        Some(device) => DeviceParts::external(device)?,
        None => DeviceParts::created(new_device::create()?)?,
    };
    let fence = make_fence(&parts.ifaces, shared.last())?;
    log::info!(
        "hwtensor: process GPU device on {} (feature level {:#x}, {:?})",
        parts.info.label(),
        parts.feature_level,
        parts.features
    );
    Ok(GpuDevice::assemble(parts, Timeline { fence, shared }))
}

fn unknown_adapter() -> AdapterInfo {
    AdapterInfo {
        name: "unknown adapter".into(),
        kind: AdapterKind::Integrated,
        vendor_id: 0,
        device_id: 0,
        luid: (0, 0),
        dedicated_video_memory: 0,
    }
}

/// A shared fence starting at `initial` with its NT handle, where the device can make one.
fn make_fence(ifaces: &Interfaces, initial: u64) -> Result<Option<Fence>> {
    let (Some(device5), Some(context)) = (&ifaces.device5, &ifaces.context4) else {
        return Ok(None);
    };
    let mut fence: Option<ID3D11Fence> = None;
    // SAFETY: an out-pointer to a local.
    unsafe { device5.CreateFence(initial, D3D11_FENCE_FLAG_SHARED, &mut fence) }
        .map_err(failed("CreateFence"))?;
    let fence = fence.ok_or_else(|| {
        Error::gpu(
            crate::GpuErrorKind::Driver,
            "CreateFence succeeded without a fence",
        )
    })?;
    // SAFETY: a shareable fence; the handle is kept for the life of the process.
    let shared_handle = unsafe { fence.CreateSharedHandle(None, GENERIC_ALL.0, None) }
        .map_err(|e| {
            log::warn!("hwtensor: the fence cannot be shared ({e}); other APIs get no fence")
        })
        .ok();
    Ok(Some(Fence {
        fence,
        context: context.clone(),
        shared_handle,
    }))
}

/// Adopts the device another copy published, after `QueryInterface` says it is one.
fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
    let raw = p.device as usize as *mut c_void;
    if raw.is_null() {
        return Err(Error::gpu(
            crate::GpuErrorKind::Driver,
            "the published GPU device record is incomplete",
        ));
    }
    // SAFETY: a pointer published by a copy in this very process (the record is named after
    // it and dies with it), which holds its reference for the life of the process.
    let device = unsafe { ID3D11Device::from_raw_borrowed(&raw) }
        .and_then(|d| d.cast::<ID3D11Device>().ok())
        .ok_or_else(|| {
            Error::gpu(
                crate::GpuErrorKind::Driver,
                "the published device does not answer QueryInterface for ID3D11Device",
            )
        })?;
    let parts = DeviceParts::adopted(device, Features(p.features))?;
    let timeline = adopt_fence(&parts.ifaces, record, p.fence_handle)?;
    Ok(GpuDevice::assemble(parts, timeline))
}

/// The published fence, opened from its NT handle; a copy that cannot open it signals a
/// private fence and exports nothing, so a value is never paired with the wrong fence.
fn adopt_fence(ifaces: &Interfaces, record: &'static Record, handle: u64) -> Result<Timeline> {
    let shared = fence::words_in_record(record);
    let (Some(device5), Some(context)) = (&ifaces.device5, &ifaces.context4) else {
        return Ok(Timeline {
            fence: None,
            shared,
        });
    };
    let handle = HANDLE(handle as usize as *mut c_void);
    let mut opened: Option<ID3D11Fence> = None;
    let result = if handle.is_invalid() || handle.0.is_null() {
        Err(windows::core::Error::from_hresult(
            windows::Win32::Foundation::E_HANDLE,
        ))
    } else {
        // SAFETY: an NT handle published by a copy in this process; an out-pointer to a local.
        unsafe { device5.OpenSharedFence(handle, &mut opened) }
    };
    match (result, opened) {
        (Ok(()), Some(fence)) => Ok(Timeline {
            fence: Some(Fence {
                fence,
                context: context.clone(),
                shared_handle: Some(handle),
            }),
            shared,
        }),
        _ => {
            log::warn!("hwtensor: cannot open the published fence; this copy signals a private one and exports none");
            let mut fence: Option<ID3D11Fence> = None;
            // SAFETY: an out-pointer to a local.
            unsafe { device5.CreateFence(0, D3D11_FENCE_FLAG_NONE, &mut fence) }
                .map_err(failed("creating a private fence"))?;
            Ok(Timeline {
                fence: fence.map(|fence| Fence {
                    fence,
                    context: context.clone(),
                    shared_handle: None,
                }),
                shared: TimelineWords::private(),
            })
        }
    }
}

impl GpuDevice {
    /// The device from its parts and its timeline, once for every origin.
    fn assemble(parts: DeviceParts, timeline: Timeline) -> GpuDevice {
        GpuDevice {
            ifaces: parts.ifaces,
            info: parts.info,
            features: parts.features,
            origin: parts.origin,
            feature_level: parts.feature_level,
            timeline,
            finish: Mutex::new(None),
        }
    }

    /// Releases a device this copy built and lost the publication race with: the COM
    /// references go with the value; the fence's NT handle is closed by hand.
    fn discard(self) {
        if let Some(handle) = self.timeline.fence.as_ref().and_then(|f| f.shared_handle) {
            // SAFETY: a handle this copy created and never published or shared.
            let _ = unsafe { windows::Win32::Foundation::CloseHandle(handle) };
        }
    }

    fn published(&self) -> Published {
        Published {
            device: self.ifaces.device.as_raw() as usize as u64,
            fence_handle: self
                .timeline
                .fence
                .as_ref()
                .and_then(|f| f.shared_handle)
                .map_or(0, |h| h.0 as usize as u64),
            features: self.features.0,
        }
    }
}
