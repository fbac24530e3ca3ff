//! A process that cannot make a GPU device (its own binary: the failure is process-wide).

// A fake `vkGetInstanceProcAddr` and a host device that must be refused before use.
#![allow(unsafe_code)]
#![cfg(target_os = "linux")]

use std::time::Instant;

use hwtensor::gpu::{self, ExternalDevice};
use hwtensor::Error;

#[test]
fn a_failure_is_cached_with_identical_text_and_blocks_a_late_host_device() {
    // No driver manifest can be found: every Vulkan loader fails to find a device.
    std::env::set_var("VK_ICD_FILENAMES", "/nonexistent/hwtensor-test-icd.json");
    std::env::set_var("VK_DRIVER_FILES", "/nonexistent/hwtensor-test-icd.json");
    let failure = gpu::device().expect_err("no driver, so no device");
    assert_eq!(
        failure.gpu_kind(),
        Some(hwtensor::GpuErrorKind::Unsupported),
        "a machine without a device is told apart from a device that failed: {failure}"
    );
    let first = failure.to_string();
    let started = Instant::now();
    let second = gpu::device().expect_err("still no device").to_string();
    let again = started.elapsed();
    assert_eq!(first, second, "the same text every time");
    eprintln!("cached failure returned in {again:?}: {first}");

    let ext = ExternalDevice {
        instance: gpu::ash::vk::Handle::from_raw(1),
        physical_device: gpu::ash::vk::Handle::from_raw(1),
        device: gpu::ash::vk::Handle::from_raw(1),
        queue_family: 0,
        queue_index: 0,
        get_instance_proc_addr: dummy_gipa,
    };
    // SAFETY: refused before any handle is used, which is what this test checks.
    let err = unsafe { gpu::use_external_device(ext) }.unwrap_err();
    assert!(matches!(err, Error::InvalidOperation(_)), "{err}");
    assert!(
        err.to_string()
            .contains(first.trim_start_matches("GPU unsupported: ")),
        "quotes the cached failure: {err}"
    );
}

unsafe extern "system" fn dummy_gipa(
    _: gpu::ash::vk::Instance,
    _: *const std::ffi::c_char,
) -> gpu::ash::vk::PFN_vkVoidFunction {
    None
}
