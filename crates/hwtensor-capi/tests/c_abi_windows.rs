//! The Windows half of the C ABI, called through the DLL as a C host would: the device handle,
//! a signal, the completion event, and the fence handles (absent under Wine, where the device
//! has no `ID3D11Device5`).

// Calls into the C ABI through raw function pointers and out-pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

use std::ffi::c_void;

use hwtensor::gpu::windows::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0};
use hwtensor::gpu::windows::Win32::System::Threading::WaitForSingleObject;

mod common;
mod loader;

use loader::{GetU64, Library};

type Event = unsafe extern "C" fn(u64, *mut *mut c_void) -> i32;
type Handle = unsafe extern "C" fn(*mut *mut c_void) -> i32;
const OK: i32 = 0;
const UNAVAILABLE: i32 = 1;
const INVALID_ARGUMENT: i32 = 3;

#[test]
fn a_c_host_signals_waits_on_an_event_and_learns_whether_there_is_a_fence() {
    let lib = Library::open_private(&common::cdylib_dir().join(common::CDYLIB));
    // SAFETY: the symbols have these signatures (include/hwtensor.h, HWT_WINDOWS part).
    let (device, signal, fence, event, export): (GetU64, GetU64, GetU64, Event, Handle) = unsafe {
        (
            lib.get(c"hwt_gpu_device_handle"),
            lib.get(c"hwt_gpu_signal"),
            lib.get(c"hwt_gpu_fence_handle"),
            lib.get(c"hwt_gpu_completion_event"),
            lib.get(c"hwt_gpu_export_fence_handle"),
        )
    };
    let mut handle = 0;
    // SAFETY: valid out-pointers throughout; handles returned to us are closed here.
    unsafe {
        match device(&mut handle) {
            OK => assert_ne!(handle, 0),
            status if std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                panic!("no device through the C ABI (status {status})")
            }
            _ => {
                eprintln!("SKIPPED: a_c_host_signals_waits_on_an_event_and_learns_whether_there_is_a_fence - no GPU device");
                return;
            }
        }
        assert_eq!(
            device(std::ptr::null_mut()),
            INVALID_ARGUMENT,
            "a null out-pointer"
        );

        let mut value = 0;
        assert_eq!(signal(&mut value), OK);
        let mut ev: *mut c_void = std::ptr::null_mut();
        assert_eq!(event(value, &mut ev), OK);
        assert_eq!(
            WaitForSingleObject(HANDLE(ev), 5000),
            WAIT_OBJECT_0,
            "the event is set"
        );
        CloseHandle(HANDLE(ev)).unwrap();

        let (mut f, mut exported) = (0u64, std::ptr::null_mut());
        let has_fence = fence(&mut f) == OK;
        let exports = export(&mut exported) == OK;
        if has_fence {
            assert!(exports, "a shared fence exports an NT handle");
            CloseHandle(HANDLE(exported)).unwrap();
        } else {
            // Wine: no ID3D11Device5, so neither a fence pointer nor a handle, and both say so.
            assert_eq!(fence(&mut f), UNAVAILABLE);
            assert_eq!(export(&mut exported), UNAVAILABLE);
            assert!(
                exported.is_null(),
                "out-pointers are written only on success"
            );
        }
    }
}
