//! A process that cannot make a D3D11 device (its own test binary: the failure is
//! process-wide). There is no in-process switch that makes D3D11 fail (Linux points the
//! Vulkan loader at no driver), so this needs a process started where no device can be made:
//! `scripts/windows-test` runs it once more under Wine without an X display, where DXGI answers
//! `DXGI_ERROR_UNSUPPORTED`. Where a device can be made, it says so and skips (whatever
//! `HWTENSOR_TEST_REQUIRE_GPU` says: this test needs the device to be absent).

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

use std::time::Instant;

use hwtensor::gpu::{self, ExternalDevice};
use hwtensor::Error;

mod common;

#[test]
fn a_failure_is_cached_with_identical_text_and_blocks_a_late_host_device() {
    let first = match gpu::device() {
        Ok(_) => {
            return eprintln!(
                "SKIPPED: {} - needs a process where no D3D11 device can be made",
                test_name!()
            );
        }
        Err(e) => e.to_string(),
    };
    let started = Instant::now();
    let second = gpu::device().expect_err("still no device").to_string();
    let again = started.elapsed();
    assert_eq!(first, second, "the same text every time");
    // SAFETY: refused before the pointer is touched.
    let err = unsafe {
        gpu::use_external_device(ExternalDevice {
            device: std::ptr::dangling_mut(),
        })
    }
    .unwrap_err();
    assert!(matches!(err, Error::InvalidOperation(_)), "{err}");
    assert!(
        err.to_string()
            .contains(first.trim_start_matches("GPU unsupported: ")),
        "quotes the cached failure: {err}"
    );
    eprintln!("cached failure checked ({again:?} the second time): {first}");
}
