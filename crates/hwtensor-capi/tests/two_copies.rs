//! Two independently linked copies of hwtensor in one process: this test binary links the
//! library statically, and loads the C ABI cdylib (with its own copy inside) through
//! `dlopen(RTLD_LOCAL)`, so neither can see the other's statics or symbols. They must share one
//! device, one counter and one fence.

use std::collections::HashSet;
use std::time::Duration;

use hwtensor::gpu::{self, ash::vk::Handle, ExternalDevice, Origin};
use hwtensor::Error;
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};

mod common;

type GetU64 = unsafe extern "C" fn(*mut u64) -> i32;
const OK: i32 = 0;
const UNAVAILABLE: i32 = 1;

fn required() -> bool {
    std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

struct OtherCopy {
    _lib: Library,
    device: Symbol<GetU64>,
    semaphore: Symbol<GetU64>,
    signal: Symbol<GetU64>,
    last: Symbol<GetU64>,
    wait: Symbol<unsafe extern "C" fn(u64, u64) -> i32>,
}

impl OtherCopy {
    fn load() -> OtherCopy {
        let path = common::cdylib_dir().join("libhwtensor_capi.so");
        // SAFETY: loading our own cdylib runs no initialisers beyond Rust's and libc's.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }.unwrap();
        // SAFETY: the symbols exist with these signatures (see include/hwtensor.h).
        unsafe {
            OtherCopy {
                device: lib.get(b"hwt_gpu_device_handle").unwrap(),
                semaphore: lib.get(b"hwt_gpu_semaphore_handle").unwrap(),
                signal: lib.get(b"hwt_gpu_signal").unwrap(),
                last: lib.get(b"hwt_gpu_last_signalled").unwrap(),
                wait: lib.get(b"hwt_gpu_wait").unwrap(),
                _lib: lib,
            }
        }
    }

    fn get(&self, f: &Symbol<GetU64>) -> Result<u64, i32> {
        let mut v = 0;
        // SAFETY: a valid out-pointer to a C ABI function of the loaded library.
        match unsafe { f(&mut v) } {
            OK => Ok(v),
            status => Err(status),
        }
    }
}

#[test]
fn a_dlopened_copy_and_a_static_copy_share_one_device_one_counter_and_one_fence() {
    let other = OtherCopy::load();
    // The dlopened copy goes first, so it creates and publishes the device.
    let other_device = match other.get(&other.device) {
        Ok(d) => d,
        Err(UNAVAILABLE) if !required() => {
            eprintln!("SKIPPED: a_dlopened_copy_and_a_static_copy_share_one_device_one_counter_and_one_fence - no GPU device");
            return;
        }
        Err(status) => panic!("the dlopened copy has no device (status {status})"),
    };

    // A host device offered now would be ignored: another copy already published one.
    let ext = ExternalDevice {
        instance: Handle::from_raw(1),
        physical_device: Handle::from_raw(1),
        device: Handle::from_raw(1),
        queue_family: 0,
        queue_index: 0,
        get_instance_proc_addr: dummy_gipa,
    };
    // SAFETY: refused before any handle is touched, which is what is checked.
    let err = unsafe { gpu::use_external_device(ext) }.unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation(ref m) if m.contains("another copy")),
        "{err}"
    );

    let ours = gpu::device().unwrap();
    assert_eq!(ours.origin(), Origin::Adopted);
    assert_eq!(ours.device().handle().as_raw(), other_device, "one device");
    assert_eq!(
        ours.semaphore().as_raw(),
        other.get(&other.semaphore).unwrap(),
        "one fence"
    );

    // Four threads, two per copy, signalling at once.
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let mut handles = vec![];
        for t in 0..4 {
            let other = &other;
            handles.push(s.spawn(move || {
                (0..500)
                    .map(|_| {
                        if t % 2 == 0 {
                            ours.signal().unwrap()
                        } else {
                            other.get(&other.signal).unwrap()
                        }
                    })
                    .collect::<Vec<u64>>()
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for values in &per_thread {
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "strictly increasing within each thread"
        );
    }
    let all: HashSet<u64> = per_thread.iter().flatten().copied().collect();
    assert_eq!(
        all.len(),
        2000,
        "no value handed out twice across the copies: one counter"
    );
    let max = *all.iter().max().unwrap();
    assert_eq!(
        ours.last_signalled(),
        other.get(&other.last).unwrap(),
        "one counter"
    );
    assert_eq!(ours.last_signalled(), max);
    ours.wait(max, Duration::from_secs(5)).unwrap();
    // SAFETY: a C ABI call of the loaded library.
    assert_eq!(
        unsafe { (other.wait)(max, 5_000_000_000) },
        OK,
        "the other copy sees the same completion"
    );
}

unsafe extern "system" fn dummy_gipa(
    _: gpu::ash::vk::Instance,
    _: *const std::ffi::c_char,
) -> gpu::ash::vk::PFN_vkVoidFunction {
    None
}
