//! The Unix side of the C ABI: Vulkan handles and fds.

use std::os::fd::IntoRawFd;

use hwtensor::gpu::ash::vk::Handle;
use hwtensor::{Error, GpuErrorKind};

use crate::{with_device, HwtStatus};

/// The `VkDevice` of the process device, as an integer.
#[no_mangle]
pub extern "C" fn hwt_gpu_device_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| Ok(d.device().handle().as_raw()))
}

/// The timeline `VkSemaphore` every copy signals, as an integer.
#[no_mangle]
pub extern "C" fn hwt_gpu_semaphore_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| Ok(d.semaphore().as_raw()))
}

/// The device UUID (16 bytes) of the process device.
#[no_mangle]
pub extern "C" fn hwt_gpu_device_uuid(out: *mut [u8; 16]) -> HwtStatus {
    with_device(out, |d| Ok(d.device_uuid()))
}

/// A pollable, close-on-exec fd that becomes readable when `value` completes; the caller
/// closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_completion_fd(value: u64, out_fd: *mut i32) -> HwtStatus {
    with_device(out_fd, |d| {
        d.completion_fd(value).map(IntoRawFd::into_raw_fd)
    })
}

/// A new fd of the timeline semaphore (OPAQUE_FD); `HWT_STATUS_UNAVAILABLE` where the driver
/// cannot export one. The caller closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_export_fence(out_fd: *mut i32) -> HwtStatus {
    with_device(out_fd, |d| {
        d.export_fence().map(IntoRawFd::into_raw_fd).ok_or_else(|| {
            Error::gpu(
                GpuErrorKind::Unsupported,
                format!("{} cannot export its timeline", d.adapter_label()),
            )
        })
    })
}
