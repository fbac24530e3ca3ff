//! Creating the D3D11 device: the adapter, then the creation ladder.

use windows::core::Interface;
use windows::Win32::Foundation::HMODULE;
use windows::Win32::Graphics::Direct3D::{
    D3D_DRIVER_TYPE, D3D_DRIVER_TYPE_HARDWARE, D3D_DRIVER_TYPE_UNKNOWN, D3D_DRIVER_TYPE_WARP,
    D3D_FEATURE_LEVEL, D3D_FEATURE_LEVEL_11_0, D3D_FEATURE_LEVEL_11_1, D3D_FEATURE_LEVEL_12_0,
    D3D_FEATURE_LEVEL_12_1,
};
use windows::Win32::Graphics::Direct3D11::{
    D3D11CreateDevice, ID3D11Device, D3D11_CREATE_DEVICE_BGRA_SUPPORT, D3D11_CREATE_DEVICE_DEBUG,
    D3D11_CREATE_DEVICE_FLAG, D3D11_CREATE_DEVICE_VIDEO_SUPPORT, D3D11_SDK_VERSION,
};
use windows::Win32::Graphics::Dxgi::IDXGIAdapter;

use super::super::adapter::{self, AdapterChoice, AdapterInfo, ADAPTER_ENV};
use super::super::hr_kind;
use crate::{Error, GpuErrorKind, Result};

/// The environment variable that turns on the D3D11 debug layer.
pub const DEBUG_ENV: &str = "HWTENSOR_GPU_DEBUG";

/// Feature levels asked for, best first; 11.0 is the floor (shared textures, BGRA, compute).
const FEATURE_LEVELS: [D3D_FEATURE_LEVEL; 4] = [
    D3D_FEATURE_LEVEL_12_1,
    D3D_FEATURE_LEVEL_12_0,
    D3D_FEATURE_LEVEL_11_1,
    D3D_FEATURE_LEVEL_11_0,
];

/// The creation ladder: BGRA (Direct2D and ANGLE interop) with video support (Media
/// Foundation decoders need it), then BGRA alone, then nothing. WARP refuses video support, so
/// without the ladder a WARP machine would have no device at all.
const LADDER: [D3D11_CREATE_DEVICE_FLAG; 3] = [
    D3D11_CREATE_DEVICE_FLAG(
        D3D11_CREATE_DEVICE_BGRA_SUPPORT.0 | D3D11_CREATE_DEVICE_VIDEO_SUPPORT.0,
    ),
    D3D11_CREATE_DEVICE_BGRA_SUPPORT,
    D3D11_CREATE_DEVICE_FLAG(0),
];

/// A device this copy created.
pub(crate) struct Created {
    pub device: ID3D11Device,
    pub feature_level: D3D_FEATURE_LEVEL,
    /// Which rung of the ladder took (0 = BGRA + video).
    pub tier: u32,
    /// The flags asked for on that rung.
    pub requested_flags: u32,
    pub info: AdapterInfo,
}

pub(crate) fn debug_requested() -> bool {
    std::env::var(DEBUG_ENV).is_ok_and(|v| v == "1")
}

/// Selects the adapter `HWTENSOR_GPU_ADAPTER` names and climbs down the ladder until a device
/// is made.
pub(crate) fn create() -> Result<Created> {
    let choice = AdapterChoice::parse(std::env::var(ADAPTER_ENV).ok().as_deref());
    let factory = adapter::factory()?;
    let list = adapter::enumerate(&factory);
    let picked = adapter::pick(&choice, &list)?;
    let (adapter, driver): (Option<IDXGIAdapter>, D3D_DRIVER_TYPE) = match (picked, &choice) {
        (Some((a, _)), _) => (a.cast().ok(), D3D_DRIVER_TYPE_UNKNOWN),
        (None, AdapterChoice::Warp) => (None, D3D_DRIVER_TYPE_WARP),
        (None, _) => (None, D3D_DRIVER_TYPE_HARDWARE),
    };
    let debug = debug_requested();
    let mut last = Error::gpu(
        GpuErrorKind::Unsupported,
        "no rung of the creation ladder was tried",
    );
    for (tier, flags) in LADDER.iter().enumerate() {
        let attempt = try_create(adapter.as_ref(), driver, *flags, debug).or_else(|e| {
            if !debug {
                return Err(e);
            }
            log::warn!(
                "hwtensor: the D3D11 debug layer is not installed ({e}); continuing without it"
            );
            try_create(adapter.as_ref(), driver, *flags, false)
        });
        match attempt {
            Ok((device, feature_level)) => {
                let info = adapter::of_device(&device).unwrap_or_else(|| fallback_info(driver));
                return Ok(Created {
                    device,
                    feature_level,
                    tier: tier as u32,
                    requested_flags: flags.0,
                    info,
                });
            }
            Err(e) => last = e,
        }
    }
    Err(Error::gpu(
        last.gpu_kind().unwrap_or(GpuErrorKind::Unsupported),
        format!("D3D11CreateDevice failed on every rung of the ladder; last: {last}"),
    ))
}

fn try_create(
    adapter: Option<&IDXGIAdapter>,
    driver: D3D_DRIVER_TYPE,
    flags: D3D11_CREATE_DEVICE_FLAG,
    debug: bool,
) -> Result<(ID3D11Device, D3D_FEATURE_LEVEL)> {
    let flags = if debug {
        flags | D3D11_CREATE_DEVICE_DEBUG
    } else {
        flags
    };
    let (mut device, mut level) = (None, D3D_FEATURE_LEVEL::default());
    // SAFETY: out-pointers to locals; the feature-level slice outlives the call.
    unsafe {
        D3D11CreateDevice(
            adapter,
            driver,
            HMODULE::default(),
            flags,
            Some(&FEATURE_LEVELS),
            D3D11_SDK_VERSION,
            Some(&mut device),
            Some(&mut level),
            None,
        )
    }
    .map_err(|e| Error::gpu(hr_kind(&e), format!("flags {:#x}: {e}", flags.0)))?;
    device.map(|d| (d, level)).ok_or_else(|| {
        Error::gpu(
            GpuErrorKind::Driver,
            "D3D11CreateDevice succeeded without a device",
        )
    })
}

fn fallback_info(driver: D3D_DRIVER_TYPE) -> AdapterInfo {
    AdapterInfo {
        name: if driver == D3D_DRIVER_TYPE_WARP {
            "WARP"
        } else {
            "unknown adapter"
        }
        .into(),
        kind: if driver == D3D_DRIVER_TYPE_WARP {
            adapter::AdapterKind::Software
        } else {
            adapter::AdapterKind::Integrated
        },
        vendor_id: 0,
        device_id: 0,
        luid: (0, 0),
        dedicated_video_memory: 0,
    }
}
