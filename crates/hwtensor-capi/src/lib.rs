//! The C ABI of hwtensor: the process GPU device and its timeline fence.
//!
//! Every function returns an [`HwtStatus`]; on anything but `HWT_STATUS_OK` the reason is kept
//! per thread for [`hwt_last_error`]. Out-pointers are written only on success. This library
//! is also the "second copy" of hwtensor in tests: loaded with `dlopen(RTLD_LOCAL)` beside a
//! statically linked copy, it must find and share the same device, counter and fence.

// This crate is the FFI edge: every function takes raw pointers from C.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::c_char;
use std::time::Duration;

use hwtensor::gpu::{self, GpuDevice};
use hwtensor::{Error, GpuErrorKind};

// The platform's own handles: Vulkan and fds on Unix, D3D11 and NT handles on Windows.
#[cfg(target_os = "linux")]
mod unix;
#[cfg(target_os = "linux")]
pub use unix::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// The outcome of a call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtStatus {
    /// The call succeeded.
    Ok = 0,
    /// No GPU device here (no loader, no adapter, no timeline support), or no exportable fence.
    Unavailable = 1,
    /// A bounded wait ran out.
    Timeout = 2,
    /// A null out-pointer or another argument that cannot work.
    InvalidArgument = 3,
    /// A call at the wrong time.
    InvalidOperation = 4,
    /// Anything else; see `hwt_last_error`.
    Failed = 5,
    /// The GPU device is lost (reset, removed, hung): nothing on it works any more.
    DeviceLost = 6,
    /// The GPU or the host ran out of memory for the request.
    OutOfMemory = 7,
    /// The GPU driver reported a failure of another kind; see `hwt_last_error`.
    DriverError = 8,
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(crate) fn fail(status: HwtStatus, message: impl Into<String>) -> HwtStatus {
    LAST_ERROR.with(|e| *e.borrow_mut() = message.into());
    status
}

pub(crate) fn from_error(e: Error) -> HwtStatus {
    let status = match e {
        Error::Gpu { kind, .. } => match kind {
            GpuErrorKind::Lost => HwtStatus::DeviceLost,
            GpuErrorKind::OutOfMemory => HwtStatus::OutOfMemory,
            GpuErrorKind::Unsupported => HwtStatus::Unavailable,
            GpuErrorKind::Timeout => HwtStatus::Timeout,
            _ => HwtStatus::DriverError,
        },
        Error::Cuda { .. } => HwtStatus::DriverError,
        Error::Alloc { .. } => HwtStatus::OutOfMemory,
        Error::Unavailable { .. } => HwtStatus::Unavailable,
        Error::Timeout(_) => HwtStatus::Timeout,
        Error::InvalidArgument(_) | Error::UnknownName { .. } => HwtStatus::InvalidArgument,
        Error::InvalidOperation(_) => HwtStatus::InvalidOperation,
        _ => HwtStatus::Failed,
    };
    fail(status, e.to_string())
}

/// Runs `f` on the process device and writes its result through `out`.
pub(crate) fn with_device<T>(
    out: *mut T,
    f: impl FnOnce(&'static GpuDevice) -> Result<T, Error>,
) -> HwtStatus {
    if out.is_null() {
        return fail(HwtStatus::InvalidArgument, "the out-pointer is null");
    }
    match gpu::device().and_then(f) {
        Ok(v) => {
            // SAFETY: non-null (checked) and, by this ABI's contract, valid for one write of T.
            unsafe { out.write(v) };
            HwtStatus::Ok
        }
        Err(e) => from_error(e),
    }
}

/// Whether the process device is a software implementation (1) or hardware (0).
#[no_mangle]
pub extern "C" fn hwt_gpu_is_software(out: *mut u8) -> HwtStatus {
    with_device(out, |d| Ok(d.is_software() as u8))
}

/// Allocates the next timeline value and submits its signal.
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
    let mut unit = ();
    with_device(&mut unit, |d| {
        d.wait(value, Duration::from_nanos(timeout_ns))
    })
}

/// Copies this thread's last error message into `buf` (NUL-terminated, truncated to `len`) and
/// returns its full length in bytes.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn hwt_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        if !buf.is_null() && len > 0 {
            let n = e.len().min(len - 1);
            // SAFETY: the caller guarantees `buf` holds `len` bytes; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(e.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        e.len()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_gpu_failure_has_its_own_status_and_keeps_its_message() {
        let cases = [
            (GpuErrorKind::Lost, HwtStatus::DeviceLost),
            (GpuErrorKind::OutOfMemory, HwtStatus::OutOfMemory),
            (GpuErrorKind::Unsupported, HwtStatus::Unavailable),
            (GpuErrorKind::Timeout, HwtStatus::Timeout),
            (GpuErrorKind::Driver, HwtStatus::DriverError),
        ];
        for (kind, status) in cases {
            assert_eq!(from_error(Error::gpu(kind, "what failed")), status);
            assert!(LAST_ERROR.with(|e| e.borrow().contains("what failed")));
        }
    }
}
