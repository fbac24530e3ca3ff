//! The C ABI of hwtensor: tensors (create, import, map, view, copy), hand-off (blobs, send and
//! receive on a Unix socket), the process GPU device and its timeline fence, and CUDA maps.
//!
//! Every function returns an [`HwtStatus`] (or a plain value that cannot fail); on anything
//! but `HWT_STATUS_OK` the reason is kept per thread for [`hwt_last_error`]. Out-pointers are
//! written only on success. No panic crosses the boundary: a bug inside becomes
//! `HWT_STATUS_FAILED` with its message. Ownership is written beside each function: handles
//! (`HwtTensor*`, `HwtBlob*`, `HwtCudaMap*`) are freed by their own release or end call; CPU
//! maps (`HwtMap`) live in memory the caller provides and end with `hwt_map_end`; fds a
//! function hands out are the caller's to close, and fds a caller passes in are duplicated,
//! never taken.
//!
//! This library is also the "second copy" of hwtensor in tests: loaded with `dlopen(RTLD_LOCAL)`
//! beside a statically linked copy, it must find and share the same device, counter and fence.

// This crate is the FFI edge: every function takes raw pointers from C.
#![allow(unsafe_code)]

use std::time::Duration;

use hwtensor::gpu::{self, GpuDevice};

mod codes;
mod image;
mod map;
mod marker;
mod status;
mod stream;
mod tensor;
mod version;

pub use codes::*;
pub use image::*;
pub use map::*;
pub use marker::*;
pub use status::{hwt_last_error, hwt_status_str, HwtStatus};
pub use stream::*;
pub use tensor::*;
pub use version::*;

// The platform's own handles: Vulkan and fds on Linux, D3D11 and NT handles on Windows.
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

use status::{from_error, guard, put, OrStatus};

/// Runs `f` on the process device and writes its result through `out`.
pub(crate) fn with_device<T>(
    out: *mut T,
    f: impl FnOnce(&'static GpuDevice) -> Result<T, hwtensor::Error>,
) -> HwtStatus {
    guard(|| {
        if out.is_null() {
            return Err(status::invalid("the out-pointer is null"));
        }
        let value = gpu::device().and_then(f).map_err(from_error)?;
        put(out, "the out-pointer", value)
    })
}

/// Whether the process device is a software implementation (1) or hardware (0).
#[no_mangle]
pub extern "C" fn hwt_gpu_is_software(out: *mut u8) -> HwtStatus {
    with_device(out, |d| Ok(d.is_software() as u8))
}

/// Allocates the next timeline value and submits its signal (after everything submitted to
/// the shared queue so far).
#[no_mangle]
pub extern "C" fn hwt_gpu_signal(out_value: *mut u64) -> HwtStatus {
    with_device(out_value, |d| d.signal())
}

/// The newest timeline value any copy allocated.
#[no_mangle]
pub extern "C" fn hwt_gpu_last_signalled(out_value: *mut u64) -> HwtStatus {
    with_device(out_value, |d| Ok(d.last_signalled()))
}

/// The value the GPU has reached.
#[no_mangle]
pub extern "C" fn hwt_gpu_completed_value(out_value: *mut u64) -> HwtStatus {
    with_device(out_value, GpuDevice::completed_value)
}

/// Waits until the timeline reaches `value`, at most `timeout_ns` nanoseconds.
#[no_mangle]
pub extern "C" fn hwt_gpu_wait(value: u64, timeout_ns: u64) -> HwtStatus {
    guard(|| {
        gpu::device()
            .and_then(|d| d.wait(value, Duration::from_nanos(timeout_ns)))
            .or_status()
    })
}
