//! Two independently linked copies of hwtensor in one process: this test binary links the
//! library statically, and loads the C ABI cdylib (with its own copy inside) as a second,
//! private copy -- `dlopen(RTLD_LOCAL)` on Linux, `LoadLibraryW` on Windows -- so neither can
//! see the other's statics or symbols. They must share one device, one counter and one fence.

// Calls into the C ABI through raw function pointers and out-pointers.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::time::Duration;

use hwtensor::gpu::{self, Origin};
use hwtensor::Error;

mod common;
mod loader;

use loader::{GetU64, Library};

type Wait = unsafe extern "C" fn(u64, u64) -> i32;
const OK: i32 = 0;
const UNAVAILABLE: i32 = 1;

fn required() -> bool {
    std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

struct OtherCopy {
    _lib: Library,
    device: GetU64,
    signal: GetU64,
    last: GetU64,
    wait: Wait,
}

impl OtherCopy {
    fn load() -> OtherCopy {
        let lib = Library::open_private(&common::cdylib_dir().join(common::CDYLIB));
        // SAFETY: the symbols exist with these signatures (see include/hwtensor.h).
        unsafe {
            OtherCopy {
                device: lib.get(c"hwt_gpu_device_handle"),
                signal: lib.get(c"hwt_gpu_signal"),
                last: lib.get(c"hwt_gpu_last_signalled"),
                wait: lib.get(c"hwt_gpu_wait"),
                _lib: lib,
            }
        }
    }

    fn get(&self, f: GetU64) -> Result<u64, i32> {
        let mut v = 0;
        // SAFETY: a valid out-pointer to a C ABI function of the loaded library.
        match unsafe { f(&mut v) } {
            OK => Ok(v),
            status => Err(status),
        }
    }
}

#[test]
fn a_privately_loaded_copy_and_a_static_copy_share_one_device_one_counter_and_one_fence() {
    let other = OtherCopy::load();
    // The loaded copy goes first, so it creates and publishes the device.
    let other_device = match other.get(other.device) {
        Ok(d) => d,
        Err(UNAVAILABLE) if !required() => {
            eprintln!("SKIPPED: a_privately_loaded_copy_and_a_static_copy_share_one_device_one_counter_and_one_fence - no GPU device");
            return;
        }
        Err(status) => panic!("the loaded copy has no device (status {status})"),
    };

    // A host device offered now would be ignored: another copy already published one.
    // SAFETY: refused before the handle is touched, which is what is checked.
    let err = unsafe { gpu::use_external_device(loader::bogus_external_device()) }.unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation(ref m) if m.contains("another copy")),
        "{err}"
    );

    let ours = gpu::device().unwrap();
    assert_eq!(ours.origin(), Origin::Adopted);
    assert_eq!(loader::device_handle(ours), other_device, "one device");
    loader::assert_one_fence(ours, &other._lib);

    // Four threads, two per copy, signalling at once.
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let other = &other;
                s.spawn(move || {
                    (0..500)
                        .map(|_| {
                            if t % 2 == 0 {
                                ours.signal().unwrap()
                            } else {
                                other.get(other.signal).unwrap()
                            }
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
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
        other.get(other.last).unwrap(),
        "one counter"
    );
    assert_eq!(ours.last_signalled(), max);
    ours.wait(max, Duration::from_secs(5)).unwrap();
    assert_eq!(
        // SAFETY: a C ABI call of the loaded library.
        unsafe { (other.wait)(max, 5_000_000_000) },
        OK,
        "the other copy sees the same completion"
    );
}
