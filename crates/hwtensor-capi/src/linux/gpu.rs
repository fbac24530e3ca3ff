//! The process GPU device from C on Linux: Vulkan handles, the timeline's fds, the shared
//! queue, and a GPU tensor's buffer and timeline values.

use std::ffi::c_void;
use std::os::fd::IntoRawFd;

use hwtensor::gpu::ash::vk::Handle;
use hwtensor::{Error, GpuErrorKind};

use crate::codes::direction_of;
use crate::status::{fail, guard, put, OrStatus};
use crate::tensor::{tensor, HwtTensor};
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

/// The Vulkan objects of the process device, for a host that records its own work on it. All
/// borrowed: hwtensor owns and outlives them (the process device is never destroyed).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HwtVulkanHandles {
    /// `VkInstance`
    pub instance: u64,
    /// `VkPhysicalDevice`
    pub physical_device: u64,
    /// `VkDevice`
    pub device: u64,
    /// The shared main `VkQueue`: submit to it only inside `hwt_gpu_with_queue`.
    pub queue: u64,
    /// The main queue's family.
    pub queue_family: u32,
    /// The main queue's index in its family.
    pub queue_index: u32,
    /// The process timeline `VkSemaphore`.
    pub timeline: u64,
}

/// The Vulkan objects of the process device.
#[no_mangle]
pub extern "C" fn hwt_gpu_vulkan_handles(out: *mut HwtVulkanHandles) -> HwtStatus {
    with_device(out, |d| {
        Ok(HwtVulkanHandles {
            instance: d.instance().handle().as_raw(),
            physical_device: d.physical_device().as_raw(),
            device: d.device().handle().as_raw(),
            queue: d.queue().as_raw(),
            queue_family: d.queue_family(),
            queue_index: d.queue_index(),
            timeline: d.semaphore().as_raw(),
        })
    })
}

/// A host's submission, called by `hwt_gpu_with_queue` with its `user` pointer and the queue.
pub type HwtQueueFn = Option<unsafe extern "C" fn(user: *mut c_void, queue: u64)>;

/// Calls `submit(user, queue)` holding the queue lock every copy of hwtensor in the process
/// takes around its own submits: put a host's `vkQueueSubmit` on the shared queue inside it
/// (Vulkan forbids two threads submitting to one queue at once). Call no hwtensor function
/// from `submit`: the lock does not nest. Afterwards, `hwt_gpu_signal` gives a value that
/// completes after the host's work; record it on the tensors it touched
/// (`hwt_tensor_gpu_record`).
///
/// # Safety
/// `submit` must be a function that does not unwind; `user` is passed to it unchanged.
#[no_mangle]
pub unsafe extern "C" fn hwt_gpu_with_queue(submit: HwtQueueFn, user: *mut c_void) -> HwtStatus {
    let Some(submit) = submit else {
        return crate::status::invalid("submit is null");
    };
    let mut unit = ();
    with_device(&mut unit, |d| {
        // SAFETY: the caller's function and pointer, called once under the lock.
        d.with_queue(|q| unsafe { submit(user, q.as_raw()) })
    })
}

/// The `VkBuffer` under a GPU tensor and the byte offset of the tensor's first element in it;
/// `HWT_STATUS_INVALID_OPERATION` for memory of another kind.
///
/// # Safety
/// `t` must be a live handle; the out-pointers valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_vk_buffer(
    t: *const HwtTensor,
    out_buffer: *mut u64,
    out_offset: *mut u64,
) -> HwtStatus {
    guard(|| {
        let t = tensor(t, "the tensor")?;
        let Some((buffer, offset)) = t.vk_buffer() else {
            return Err(fail(
                HwtStatus::InvalidOperation,
                format!("a {} tensor has no VkBuffer", t.memory()),
            ));
        };
        put(out_buffer, "out_buffer", buffer.as_raw())?;
        put(out_offset, "out_offset", offset)
    })
}

/// The timeline value device work accessing `t` in `mode` (an `HwtAccess`) must wait for,
/// GPU-side (0: nothing): its last device write, and for a write its last read too.
///
/// # Safety
/// `t` must be a live handle; `out_value` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_gpu_after(
    t: *const HwtTensor,
    mode: u32,
    out_value: *mut u64,
) -> HwtStatus {
    guard(|| {
        let direction = direction_of(mode)?;
        put(
            out_value,
            "out_value",
            tensor(t, "the tensor")?.gpu_after(direction),
        )
    })
}

/// Records that the host's device work completing at timeline `value` accessed `t` in `mode`:
/// CPU maps, copies, CUDA maps and hand-offs then order behind it. `value` must come from the
/// process timeline (`hwt_gpu_signal`); only GPU and CUDA tensors record device work.
///
/// # Safety
/// `t` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_gpu_record(
    t: *const HwtTensor,
    value: u64,
    mode: u32,
) -> HwtStatus {
    guard(|| {
        let direction = direction_of(mode)?;
        tensor(t, "the tensor")?
            .gpu_record(value, direction)
            .or_status()
    })
}

/// The completion of `t`'s last device write, for another API or process: a new fd of the
/// process timeline (OPAQUE_FD; the caller closes it) and the value to wait for (0: none).
/// `HWT_STATUS_UNAVAILABLE` where the device cannot export its timeline.
///
/// # Safety
/// `t` must be a live handle; the out-pointers valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_gpu_completion(
    t: *const HwtTensor,
    out_fence_fd: *mut i32,
    out_value: *mut u64,
) -> HwtStatus {
    guard(|| {
        let value = tensor(t, "the tensor")?.gpu_after(hwtensor::Direction::Read);
        if out_fence_fd.is_null() || out_value.is_null() {
            return Err(crate::status::invalid("an out-pointer is null"));
        }
        let mut fd = -1;
        let status = hwt_gpu_export_fence(&mut fd);
        if status != HwtStatus::Ok {
            return Err(status);
        }
        put(out_fence_fd, "out_fence_fd", fd)?;
        put(out_value, "out_value", value)
    })
}
