//! A host's own D3D11 device installed as the process device (its own test binary: the device
//! is process-wide).

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

mod common;

use hwtensor::gpu::windows::core::Interface;
use hwtensor::gpu::windows::Win32::Foundation::HMODULE;
use hwtensor::gpu::windows::Win32::Graphics::Direct3D::D3D_DRIVER_TYPE_HARDWARE;
use hwtensor::gpu::windows::Win32::Graphics::Direct3D11::{
    D3D11CreateDevice, ID3D11Device, D3D11_CREATE_DEVICE_FLAG, D3D11_SDK_VERSION,
};
use hwtensor::gpu::{self, ExternalDevice, Origin};
use hwtensor::Error;

fn host_device() -> Option<ID3D11Device> {
    let mut device = None;
    // SAFETY: out-pointer to a local; default adapter and feature levels.
    let made = unsafe {
        D3D11CreateDevice(
            None,
            D3D_DRIVER_TYPE_HARDWARE,
            HMODULE::default(),
            D3D11_CREATE_DEVICE_FLAG(0),
            None,
            D3D11_SDK_VERSION,
            Some(&mut device),
            None,
            None,
        )
    };
    made.ok().and(device)
}

#[test]
fn a_host_device_becomes_the_process_device_and_a_second_install_is_refused() {
    // SAFETY: a null pointer is refused before anything is touched.
    let err = unsafe {
        gpu::use_external_device(ExternalDevice {
            device: std::ptr::null_mut(),
        })
    }
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    let Some(host) = host_device() else {
        return common::skip_unless_required(test_name!(), "no D3D11 device can be made here");
    };
    // SAFETY: a live device, kept alive by `host` for the rest of the test.
    unsafe {
        gpu::use_external_device(ExternalDevice {
            device: host.as_raw(),
        })
    }
    .unwrap();
    let d = gpu::device().unwrap();
    assert_eq!(d.origin(), Origin::External);
    assert_eq!(
        d.device().as_raw(),
        host.as_raw(),
        "the host's device, not a new one"
    );
    assert!(d.signal().is_ok());

    // SAFETY: refused before the pointer is touched.
    let err = unsafe {
        gpu::use_external_device(ExternalDevice {
            device: host.as_raw(),
        })
    }
    .unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation(ref m) if m.contains("already has")),
        "{err}"
    );
}
