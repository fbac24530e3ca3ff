//! The process device on Windows (D3D11): under Wine in CI, where there is no
//! `ID3D11Device5` and so no fence, and on a real Windows machine, where there is.

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

mod common;

use std::time::Duration;

use hwtensor::gpu::{self, Features, Origin};

use common::{device_or_skip, skip_unless_required};

const NO_FENCE: &str = "no ID3D11Device5 under this driver";

#[test]
fn the_device_is_made_once_and_every_call_gets_the_same_one() {
    let Some(a) = device_or_skip(test_name!()) else {
        return;
    };
    let b = gpu::device().unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.origin(), Origin::Created);
    assert!(!a.adapter_label().is_empty());
    assert!(
        a.feature_level() >= 0xb000,
        "feature level 11.0 or better: {:#x}",
        a.feature_level()
    );
    eprintln!("device: {} {:?}", a.adapter_label(), a.features());
    assert!(a.features().tier() <= 2, "one of the three rungs");
    assert!(
        a.features().has(Features::MULTITHREAD),
        "every D3D11 runtime we target has ID3D11Multithread"
    );
}

#[test]
fn the_default_adapter_is_listed_by_dxgi() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let list = gpu::adapters().unwrap();
    assert!(!list.is_empty());
    assert!(
        list.iter().any(|a| a.luid == d.luid()),
        "the device's adapter {:?} is among {list:?}",
        d.luid()
    );
}

#[test]
fn a_completion_event_is_set_once_its_value_completes() {
    use std::os::windows::io::AsRawHandle;
    use windows::Win32::Foundation::{HANDLE, WAIT_OBJECT_0};
    use windows::Win32::System::Threading::WaitForSingleObject;
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let v = d.signal().unwrap();
    let event = d.completion_event(v).unwrap();
    // SAFETY: a live event handle.
    let r = unsafe { WaitForSingleObject(HANDLE(event.as_raw_handle()), 5000) };
    assert_eq!(r, WAIT_OBJECT_0, "set within the bound");
}

#[test]
fn without_id3d11device5_there_is_no_fence_and_every_signal_has_finished_when_it_returns() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    if d.features().has(Features::FENCE) {
        eprintln!("this device has fences: the no-fence path is not what runs here");
        return;
    }
    assert!(d.fence().is_none());
    assert!(d.export_fence().is_none(), "no fence, nothing to export");
    let v = d.signal().unwrap();
    assert!(
        d.completed_value().unwrap() >= v,
        "finished on the CPU before the value was handed out"
    );
    let c = d.completion(v);
    assert!(
        c.fence.is_none(),
        "a value is never paired with a fence that does not exist"
    );
    assert_eq!(c.value, v);
}

#[test]
fn the_shared_fence_exports_an_nt_handle_and_reaches_every_signalled_value() {
    let test = "the_shared_fence_exports_an_nt_handle_and_reaches_every_signalled_value";
    let Some(d) = device_or_skip(test) else {
        return;
    };
    if !d.features().has(Features::FENCE) {
        return skip_unless_required(test, NO_FENCE);
    }
    let fence = d.fence().expect("FENCE means a fence");
    assert!(
        d.export_fence().is_some(),
        "a shared fence exports a handle"
    );
    let v = d.signal().unwrap();
    d.wait(v, Duration::from_secs(5)).unwrap();
    // SAFETY: a read of a live fence.
    assert!(unsafe { fence.GetCompletedValue() } >= v);
    assert!(d.completion(v).fence.is_some());
}

use hwtensor::gpu::windows;
