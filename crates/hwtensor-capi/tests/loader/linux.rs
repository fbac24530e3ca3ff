use std::ffi::CStr;
use std::path::Path;

use hwtensor::gpu::ash::vk::{self, Handle};
use hwtensor::gpu::{ExternalDevice, GpuDevice};
use libloading::os::unix::{Library as Lib, RTLD_LOCAL, RTLD_NOW};

/// A library loaded with `dlopen(RTLD_NOW | RTLD_LOCAL)`.
pub struct Library(Lib);

impl Library {
    pub fn open_private(path: &Path) -> Library {
        // SAFETY: our own cdylib; loading it runs only Rust's and libc's initialisers.
        Library(unsafe { Lib::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.unwrap())
    }

    /// # Safety
    /// `F` must be the symbol's real function type.
    pub unsafe fn get<F: Copy>(&self, name: &CStr) -> F {
        // SAFETY: the caller's contract.
        unsafe { *self.0.get::<F>(name.to_bytes_with_nul()).unwrap() }
    }
}

pub fn device_handle(d: &GpuDevice) -> u64 {
    d.device().handle().as_raw()
}

pub fn assert_one_fence(ours: &GpuDevice, lib: &Library) {
    // SAFETY: the symbol's signature (include/hwtensor.h).
    let semaphore: super::GetU64 = unsafe { lib.get(c"hwt_gpu_semaphore_handle") };
    let mut theirs = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { semaphore(&mut theirs) }, 0);
    assert_eq!(ours.semaphore().as_raw(), theirs, "one fence");
}

pub fn bogus_external_device() -> ExternalDevice {
    ExternalDevice {
        instance: Handle::from_raw(1),
        physical_device: Handle::from_raw(1),
        device: Handle::from_raw(1),
        queue_family: 0,
        queue_index: 0,
        get_instance_proc_addr: dummy_gipa,
    }
}

unsafe extern "system" fn dummy_gipa(
    _: vk::Instance,
    _: *const std::ffi::c_char,
) -> vk::PFN_vkVoidFunction {
    None
}
