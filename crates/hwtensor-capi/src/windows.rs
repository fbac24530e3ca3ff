//! The Windows side of the C ABI: D3D11 interface pointers and NT handles.

use std::ffi::c_void;
use std::os::windows::io::IntoRawHandle;

use hwtensor::gpu::windows::core::Interface;
use hwtensor::{Error, GpuErrorKind};

use crate::{with_device, HwtStatus};

/// The `ID3D11Device*` of the process device, as an integer (borrowed: no reference added).
#[no_mangle]
pub extern "C" fn hwt_gpu_device_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| Ok(d.device().as_raw() as usize as u64))
}

/// The shared `ID3D11Fence*` every copy signals, as an integer (borrowed);
/// `HWT_STATUS_UNAVAILABLE` where the device has no fences (no `ID3D11Device5`).
#[no_mangle]
pub extern "C" fn hwt_gpu_fence_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| {
        d.fence()
            .map(|f| f.as_raw() as usize as u64)
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Unsupported,
                    format!("{} has no fences", d.adapter_label()),
                )
            })
    })
}

/// A manual-reset event that is set when `value` completes; the caller closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_completion_event(value: u64, out_event: *mut *mut c_void) -> HwtStatus {
    with_device(out_event, |d| {
        d.completion_event(value)
            .map(|h| h.into_raw_handle().cast())
    })
}

/// A new NT handle of the shared fence; `HWT_STATUS_UNAVAILABLE` where there is none. The
/// caller closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_export_fence_handle(out_handle: *mut *mut c_void) -> HwtStatus {
    with_device(out_handle, |d| {
        d.export_fence()
            .map(|h| h.into_raw_handle().cast())
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Unsupported,
                    format!("{} cannot export its fence", d.adapter_label()),
                )
            })
    })
}
