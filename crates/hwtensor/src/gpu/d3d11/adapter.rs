//! Adapters on Windows: what DXGI lists, described, and which one `HWTENSOR_GPU_ADAPTER` picks.

use windows::core::Interface;
use windows::Win32::Graphics::Dxgi::{
    CreateDXGIFactory1, IDXGIAdapter1, IDXGIFactory1, DXGI_ADAPTER_DESC1,
    DXGI_ADAPTER_FLAG_SOFTWARE,
};

use super::choice::description_is_warp;
pub use super::choice::AdapterChoice;

/// The environment variable that selects the adapter.
pub const ADAPTER_ENV: &str = "HWTENSOR_GPU_ADAPTER";

/// Dedicated video memory from which a hardware adapter counts as discrete. DXGI has no
/// discrete/integrated flag; integrated GPUs report a small carve-out (typically 128 MiB).
const DISCRETE_MEMORY_FROM: usize = 512 << 20;

/// The kind of device an adapter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdapterKind {
    /// A GPU of its own.
    Discrete,
    /// A GPU sharing the CPU's memory.
    Integrated,
    /// WARP or another CPU rasteriser: a real, conformant device without hardware.
    Software,
}

/// One DXGI adapter, described.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdapterInfo {
    /// The adapter's description.
    pub name: String,
    /// What sort of adapter it is.
    pub kind: AdapterKind,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub device_id: u32,
    /// The adapter LUID as (high, low), the form `HWTENSOR_GPU_ADAPTER` takes.
    pub luid: (i32, u32),
    /// Video memory of its own, in bytes (0 for integrated and software adapters).
    pub dedicated_video_memory: usize,
}

impl AdapterInfo {
    pub(crate) fn from_desc(desc: &DXGI_ADAPTER_DESC1) -> AdapterInfo {
        let len = desc
            .Description
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(desc.Description.len());
        let name = String::from_utf16_lossy(&desc.Description[..len]);
        let software =
            desc.Flags & DXGI_ADAPTER_FLAG_SOFTWARE.0 as u32 != 0 || description_is_warp(&name);
        let kind = if software {
            AdapterKind::Software
        } else if desc.DedicatedVideoMemory >= DISCRETE_MEMORY_FROM {
            AdapterKind::Discrete
        } else {
            AdapterKind::Integrated
        };
        AdapterInfo {
            name,
            kind,
            vendor_id: desc.VendorId,
            device_id: desc.DeviceId,
            luid: (desc.AdapterLuid.HighPart, desc.AdapterLuid.LowPart),
            dedicated_video_memory: desc.DedicatedVideoMemory,
        }
    }

    /// Whether this is a CPU implementation, from the DXGI flag or a WARP description.
    pub fn is_software(&self) -> bool {
        self.kind == AdapterKind::Software
    }

    /// `"name (kind, LUID high:low)"`, for logs.
    pub fn label(&self) -> String {
        format!(
            "{} ({:?}, LUID {}:{:#x})",
            self.name, self.kind, self.luid.0, self.luid.1
        )
    }
}

pub(crate) fn factory() -> crate::Result<IDXGIFactory1> {
    // SAFETY: a plain factory creation.
    unsafe { CreateDXGIFactory1() }.map_err(|e| {
        crate::Error::gpu(
            crate::GpuErrorKind::Unsupported,
            format!("CreateDXGIFactory1 failed: {e}"),
        )
    })
}

/// Every adapter DXGI lists, in its order (the first is the default).
pub(crate) fn enumerate(factory: &IDXGIFactory1) -> Vec<(IDXGIAdapter1, AdapterInfo)> {
    (0..)
        // SAFETY: enumeration stops at the first index DXGI refuses.
        .map_while(|i| unsafe { factory.EnumAdapters1(i) }.ok())
        .filter_map(|a| {
            // SAFETY: a description query of a live adapter.
            unsafe { a.GetDesc1() }
                .ok()
                .map(|d| (a, AdapterInfo::from_desc(&d)))
        })
        .collect()
}

/// The adapter `choice` names among `list`; `None` means "let the driver type decide" (the
/// default adapter for `Hardware`, the WARP driver for `Warp`). An explicit choice that names
/// no adapter present is an error naming those present, not a silent fallback.
pub(crate) fn pick<'a>(
    choice: &AdapterChoice,
    list: &'a [(IDXGIAdapter1, AdapterInfo)],
) -> crate::Result<Option<&'a (IDXGIAdapter1, AdapterInfo)>> {
    let found = match choice {
        AdapterChoice::Hardware | AdapterChoice::Warp => return Ok(None),
        AdapterChoice::Discrete => list.iter().find(|(_, i)| i.kind == AdapterKind::Discrete),
        AdapterChoice::Luid { high, low } => list.iter().find(|(_, i)| i.luid == (*high, *low)),
        AdapterChoice::Description(_) => list
            .iter()
            .find(|(_, i)| choice.matches_description(&i.name)),
    };
    match found {
        Some(a) => Ok(Some(a)),
        None => Err(crate::gpu::no_adapter_matches(
            &std::env::var(ADAPTER_ENV).unwrap_or_default(),
            list.iter().map(|(_, i)| i.label()),
        )),
    }
}

/// The description of the adapter a device runs on.
pub(crate) fn of_device(
    device: &windows::Win32::Graphics::Direct3D11::ID3D11Device,
) -> Option<AdapterInfo> {
    let dxgi: windows::Win32::Graphics::Dxgi::IDXGIDevice = device.cast().ok()?;
    // SAFETY: queries of live objects.
    let adapter: IDXGIAdapter1 = unsafe { dxgi.GetAdapter() }.ok()?.cast().ok()?;
    // SAFETY: as above.
    let desc = unsafe { adapter.GetDesc1() }.ok()?;
    Some(AdapterInfo::from_desc(&desc))
}
