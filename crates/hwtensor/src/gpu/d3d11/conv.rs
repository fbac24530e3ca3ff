//! D3D11's and DXGI's words in the library's: HRESULTs as error kinds, what the device took as
//! feature bits. (The Vulkan backend's `conv.rs` is its twin.)

use crate::gpu::Features;
use crate::Error;

/// The error for a D3D11/DXGI call that failed: "`what` failed: `error`", of the error's kind.
pub(crate) fn failed(what: &str) -> impl Fn(windows::core::Error) -> Error + '_ {
    move |e| Error::gpu(hr_kind(&e), format!("{what} failed: {e}"))
}

/// The kind of failure a D3D11/DXGI error is, for [`Error::Gpu`].
pub(crate) fn hr_kind(e: &windows::core::Error) -> crate::GpuErrorKind {
    use crate::GpuErrorKind as K;
    use windows::Win32::Foundation::{E_NOINTERFACE, E_NOTIMPL, E_OUTOFMEMORY};
    use windows::Win32::Graphics::Dxgi::{
        DXGI_ERROR_DEVICE_HUNG, DXGI_ERROR_DEVICE_REMOVED, DXGI_ERROR_DEVICE_RESET,
        DXGI_ERROR_UNSUPPORTED, DXGI_ERROR_WAIT_TIMEOUT,
    };
    match e.code() {
        c if [
            DXGI_ERROR_DEVICE_REMOVED,
            DXGI_ERROR_DEVICE_RESET,
            DXGI_ERROR_DEVICE_HUNG,
        ]
        .contains(&c) =>
        {
            K::Lost
        }
        c if c == E_OUTOFMEMORY => K::OutOfMemory,
        c if [DXGI_ERROR_UNSUPPORTED, E_NOTIMPL, E_NOINTERFACE].contains(&c) => K::Unsupported,
        c if c == DXGI_ERROR_WAIT_TIMEOUT => K::Timeout,
        _ => K::Driver,
    }
}

impl Features {
    /// `D3D11_CREATE_DEVICE_BGRA_SUPPORT` took.
    pub const BGRA: u32 = 1 << 0;
    /// `D3D11_CREATE_DEVICE_VIDEO_SUPPORT` took.
    pub const VIDEO: u32 = 1 << 1;
    /// `ID3D11Device1`: opening shared NT handles.
    pub const SHARED_HANDLES: u32 = 1 << 2;
    /// `ID3D11Device5` and `ID3D11DeviceContext4`: the timeline fence.
    pub const FENCE: u32 = 1 << 3;
    /// `ID3D11Multithread`: the device's own lock orders every copy and thread.
    pub const MULTITHREAD: u32 = 1 << 4;
    /// The debug layer is on.
    pub const DEBUG: u32 = 1 << 5;
}

/// The names `Features::names` gives the bits of this backend.
pub(crate) const FEATURE_NAMES: [(u32, &str); 6] = [
    (Features::BGRA, "bgra"),
    (Features::VIDEO, "video"),
    (Features::SHARED_HANDLES, "shared_handles"),
    (Features::FENCE, "fence"),
    (Features::MULTITHREAD, "multithread"),
    (Features::DEBUG, "debug"),
];
