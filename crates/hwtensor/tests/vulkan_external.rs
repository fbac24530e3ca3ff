//! A host application's device installed as the process device (its own binary: the process
//! device is installed once per process).

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::gpu_required;
use hwtensor::gpu::ash::vk::{self, Handle};
use hwtensor::gpu::{self, ash, ExternalDevice, Origin};
use hwtensor::Error;

/// The host's side: its own instance and device, the way an application that already renders
/// with Vulkan has them.
fn host_device() -> Option<(
    ash::Entry,
    ash::Instance,
    vk::PhysicalDevice,
    ash::Device,
    u32,
)> {
    // SAFETY: loading the system loader.
    let entry = unsafe { ash::Entry::load() }.ok()?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    // SAFETY: plain creation with locals that outlive the call.
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )
    }
    .ok()?;
    // SAFETY: a query on a live instance.
    let physical = *unsafe { instance.enumerate_physical_devices() }
        .ok()?
        .first()?;
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(0)
        .queue_priorities(&priorities)];
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .push_next(&mut v12);
    // SAFETY: as above.
    let device = unsafe { instance.create_device(physical, &info, None) }.ok()?;
    Some((entry, instance, physical, device, 0))
}

#[test]
fn a_host_device_installed_before_first_use_becomes_the_process_device() {
    let null = ExternalDevice {
        instance: vk::Instance::null(),
        physical_device: vk::PhysicalDevice::null(),
        device: vk::Device::null(),
        queue_family: 0,
        queue_index: 0,
        get_instance_proc_addr: dummy_gipa,
    };
    // SAFETY: null handles are refused before anything uses them.
    let err = unsafe { gpu::use_external_device(null) }.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    let Some((entry, instance, physical, device, family)) = host_device() else {
        assert!(
            !gpu_required(),
            "HWTENSOR_TEST_REQUIRE_GPU=1 but the host device could not be made"
        );
        eprintln!("SKIPPED: {} - no Vulkan device", test_name!());
        return;
    };
    let ext = ExternalDevice {
        instance: instance.handle(),
        physical_device: physical,
        device: device.handle(),
        queue_family: family,
        queue_index: 0,
        get_instance_proc_addr: entry.static_fn().get_instance_proc_addr,
    };
    // SAFETY: live handles that this test keeps alive until the process exits.
    unsafe { gpu::use_external_device(ext) }.unwrap();
    let d = gpu::device().unwrap();
    assert_eq!(d.origin(), Origin::External);
    assert_eq!(d.device().handle().as_raw(), device.handle().as_raw());
    let v = d.signal().unwrap();
    d.wait(v, Duration::from_secs(5)).unwrap();

    // SAFETY: refused: the process device exists.
    let err = unsafe { gpu::use_external_device(ext) }.unwrap_err();
    assert!(matches!(err, Error::InvalidOperation(_)), "{err}");
    std::mem::forget((entry, instance, device));
}

unsafe extern "system" fn dummy_gipa(
    _: vk::Instance,
    _: *const std::ffi::c_char,
) -> vk::PFN_vkVoidFunction {
    None
}
