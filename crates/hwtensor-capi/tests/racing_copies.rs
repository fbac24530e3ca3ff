//! Two privately loaded copies that reach for the device at the same moment converge on one
//! device: the loser of the publication race drops what it built and adopts the winner's. The
//! cdylib is copied to two file names so the loader treats them as two libraries; the static
//! copy in this test binary comes last and adopts the same device.

// Calls into the C ABI through raw function pointers and out-pointers.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::sync::Barrier;

use hwtensor::gpu::{self, Origin};

mod common;
mod loader;

use loader::{GetU64, Library};

const UNAVAILABLE: i32 = 1;

/// A copy of the cdylib under a name of its own, in a folder of this test run (the machine's
/// temporary folder: the test binary may run far from the tree it was built in).
fn renamed_copy(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hwtensor-racing-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = common::CDYLIB.replacen("hwtensor_capi", &format!("hwtensor_capi_race_{tag}"), 1);
    let to = dir.join(name);
    std::fs::copy(common::cdylib_dir().join(common::CDYLIB), &to).unwrap();
    to
}

#[test]
fn two_copies_racing_to_publish_converge_on_one_device() {
    let paths = [renamed_copy("a"), renamed_copy("b")];
    let libs = [0, 1].map(|i| Library::open_private(&paths[i]));
    // Loaded libraries stay mapped without their files (Linux); Windows keeps loaded DLLs, so
    // the folder stays there until the temporary folder is cleaned.
    let _ = std::fs::remove_dir_all(paths[0].parent().unwrap());
    // SAFETY: the symbol's signature (include/hwtensor.h).
    let device: [GetU64; 2] = [0, 1].map(|i| unsafe { libs[i].get(c"hwt_gpu_device_handle") });
    let start = Barrier::new(2);
    let got: Vec<(i32, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = device
            .iter()
            .map(|&f| {
                let start = &start;
                s.spawn(move || {
                    let mut handle = 0;
                    start.wait();
                    // SAFETY: a valid out-pointer to a C ABI function of a loaded copy.
                    let status = unsafe { f(&mut handle) };
                    (status, handle)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    if got.iter().any(|&(status, _)| status == UNAVAILABLE)
        && !std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
    {
        eprintln!("SKIPPED: two_copies_racing_to_publish_converge_on_one_device - no GPU device");
        return;
    }
    assert_eq!(got[0].0, 0, "copy a has a device");
    assert_eq!(got[1].0, 0, "copy b has a device");
    assert_eq!(got[0].1, got[1].1, "one device, whoever won");
    let ours = gpu::device().unwrap();
    assert_eq!(ours.origin(), Origin::Adopted);
    assert_eq!(
        loader::device_handle(ours),
        got[0].1,
        "the late copy adopts it too"
    );
}
