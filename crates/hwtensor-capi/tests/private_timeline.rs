//! A copy that cannot open the shared semaphore signals a private timeline and exports no
//! fence: a value is never paired with the wrong fence. Simulated by blanking the semaphore in
//! the record the dlopened copy published, before the static copy adopts the device.

// Calls into the C ABI through raw function pointers and out-pointers.
#![allow(unsafe_code)]
#![cfg(target_os = "linux")]

use std::os::unix::fs::FileExt;

use hwtensor::gpu::{self, ash::vk::Handle, Origin};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};

mod common;

type GetU64 = unsafe extern "C" fn(*mut u64) -> i32;

#[test]
fn a_copy_without_the_shared_semaphore_signals_a_private_one_and_exports_no_fence() {
    let path = common::cdylib_dir().join("libhwtensor_capi.so");
    // SAFETY: our own cdylib; loading it runs only Rust's and libc's initialisers.
    let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }.unwrap();
    // SAFETY: the symbol has this signature (include/hwtensor.h).
    let device_handle: Symbol<GetU64> = unsafe { lib.get(b"hwt_gpu_device_handle") }.unwrap();
    let mut other_device = 0;
    // SAFETY: a valid out-pointer.
    if unsafe { device_handle(&mut other_device) } != 0 {
        let required = std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "HWTENSOR_TEST_REQUIRE_GPU=1 but the dlopened copy has no device"
        );
        eprintln!("SKIPPED: a_copy_without_the_shared_semaphore_signals_a_private_one_and_exports_no_fence - no GPU device");
        return;
    }
    // SAFETY: the symbol has this signature (include/hwtensor.h).
    let semaphore_handle: Symbol<GetU64> = unsafe { lib.get(b"hwt_gpu_semaphore_handle") }.unwrap();
    let mut shared_semaphore = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { semaphore_handle(&mut shared_semaphore) }, 0);
    let record = hwtensor::gpu::record_path(std::process::id());
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&record)
        .expect("the other copy published");
    file.write_all_at(&0u64.to_ne_bytes(), gpu::RECORD_SEMAPHORE_OFFSET as u64)
        .unwrap();

    let ours = gpu::device().unwrap();
    assert_eq!(ours.origin(), Origin::Adopted);
    assert_eq!(
        ours.device().handle().as_raw(),
        other_device,
        "still one device"
    );
    assert_ne!(
        ours.semaphore().as_raw(),
        shared_semaphore,
        "a private timeline, not the shared one"
    );
    assert!(
        ours.export_fence().is_none(),
        "a private timeline is never exported"
    );
    let v = ours.signal().unwrap();
    ours.wait(v, std::time::Duration::from_secs(5)).unwrap();
    assert!(
        ours.completion(v).fence.is_none(),
        "no fence to pair the value with"
    );
}
