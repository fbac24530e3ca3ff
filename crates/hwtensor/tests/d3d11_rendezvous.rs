//! A rendezvous record of a layout this copy does not know is neither trusted nor overwritten
//! (its own test binary: the record and the device are process-wide).

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use hwtensor::gpu::windows::core::HSTRING;
use hwtensor::gpu::windows::Win32::Foundation::INVALID_HANDLE_VALUE;
use hwtensor::gpu::windows::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, FILE_MAP_ALL_ACCESS, PAGE_READWRITE,
};
use hwtensor::gpu::{self, Origin, RECORD_VERSION_OFFSET};

/// A layout no version of hwtensor writes.
const FOREIGN: u32 = 0x0bad_0001;

#[test]
fn a_record_of_a_foreign_layout_is_not_trusted_and_left_as_it_is() {
    let name = HSTRING::from(gpu::record_name(std::process::id()).as_str());
    // SAFETY: a pagefile-backed mapping of one page, kept open (and mapped) for the test.
    let version = unsafe {
        let mapping =
            CreateFileMappingW(INVALID_HANDLE_VALUE, None, PAGE_READWRITE, 0, 4096, &name).unwrap();
        let view = MapViewOfFile(mapping, FILE_MAP_ALL_ACCESS, 0, 0, 4096);
        assert!(!view.Value.is_null());
        &*view
            .Value
            .cast::<u8>()
            .add(RECORD_VERSION_OFFSET)
            .cast::<AtomicU32>()
    };
    version.store(FOREIGN, Ordering::Release);

    let Some(d) = common::device_or_skip(test_name!()) else {
        return;
    };
    assert_eq!(
        d.origin(),
        Origin::Created,
        "nothing was adopted from the foreign record"
    );
    assert_eq!(
        version.load(Ordering::Acquire),
        FOREIGN,
        "and nothing was written over it"
    );
    assert!(d.signal().is_ok(), "the device works on a private counter");
}
