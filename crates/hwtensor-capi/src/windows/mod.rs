//! The Windows side of the C ABI: D3D11 interface pointers and NT handles, the hand-off over
//! a named pipe (`handoff.rs`) and the channel's two sides on one (`stream.rs`).

mod handoff;
mod stream;
pub use handoff::*;
pub use stream::*;

use std::ffi::c_void;
use std::os::windows::io::IntoRawHandle;

use hwtensor::gpu::windows::core::Interface;
use hwtensor::gpu::windows::Win32::Graphics::Direct3D11::ID3D11Texture2D;
use hwtensor::{Error, GpuErrorKind, TensorDyn};

use crate::codes::{access_of, dtype_of};
use crate::image::{spec_in, HwtImageSpec};
use crate::status::{guard, invalid, OrStatus};
use crate::tensor::{hand_out, HwtTensor};
use crate::{with_device, HwtStatus};

/// The `ID3D11Device*` of the process device, as an integer (borrowed: no reference added).
#[no_mangle]
pub extern "C" fn hwt_gpu_device_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| Ok(d.device().as_raw() as usize as u64))
}

/// The shared `ID3D11Fence*` every copy signals, as an integer (borrowed);
/// `HWT_STATUS_UNAVAILABLE` where the device has no fences (no `ID3D11Device5`).
#[no_mangle]
pub extern "C" fn hwt_gpu_fence_handle(out: *mut u64) -> HwtStatus {
    with_device(out, |d| {
        d.fence()
            .map(|f| f.as_raw() as usize as u64)
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Unsupported,
                    format!("{} has no fences", d.adapter_label()),
                )
            })
    })
}

/// A manual-reset event that is set when `value` completes; the caller closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_completion_event(value: u64, out_event: *mut *mut c_void) -> HwtStatus {
    with_device(out_event, |d| {
        d.completion_event(value)
            .map(|h| h.into_raw_handle().cast())
    })
}

/// A new NT handle of the shared fence; `HWT_STATUS_UNAVAILABLE` where there is none. The
/// caller closes it.
#[no_mangle]
pub extern "C" fn hwt_gpu_export_fence_handle(out_handle: *mut *mut c_void) -> HwtStatus {
    with_device(out_handle, |d| {
        d.export_fence()
            .map(|h| h.into_raw_handle().cast())
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Unsupported,
                    format!("{} cannot export its fence", d.adapter_label()),
                )
            })
    })
}

/// A `width` x `height` GPU image of `format` and `dtype` over `texture`, an
/// `ID3D11Texture2D*` the caller made on the process device (`hwt_gpu_device_handle`): no copy.
/// The tensor takes its own reference; the caller keeps (and releases) its own. `completion` is
/// the timeline value after which the caller's last write to it is done (0: none pending); it
/// is waited for, at most 10 s, and a value never signalled is `HWT_STATUS_INVALID_ARGUMENT`,
/// as are a null texture, one of another device and one that is not this image.
///
/// # Safety
/// `texture` must be null or a live `ID3D11Texture2D*`; `spec` valid for one read; `out` valid
/// for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_from_d3d11_texture(
    texture: *mut c_void,
    completion: u64,
    spec: *const HwtImageSpec,
    dtype: u32,
    cpu_access: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null is refused; otherwise the caller's contract: a live texture, borrowed
        // for the call (the tensor adds its own reference).
        let texture = unsafe { ID3D11Texture2D::from_raw_borrowed(&texture) }
            .ok_or_else(|| invalid("the texture is null"))?;
        // SAFETY: the caller's contract.
        let spec = unsafe { spec_in(spec) }?;
        let (dtype, access) = (dtype_of(dtype)?, access_of(cpu_access)?);
        let t =
            TensorDyn::from_d3d11_texture(texture, completion, &spec, dtype, access).or_status()?;
        hand_out(out, t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::{HwtAccess, HwtDType, HwtPixelFormat};

    const GPU: Option<hwtensor::TensorMemory> = Some(hwtensor::TensorMemory::Gpu);
    const RW: hwtensor::CpuAccess = hwtensor::CpuAccess::ReadWrite;

    fn from_texture(texture: *mut c_void, out: &mut *mut HwtTensor) -> HwtStatus {
        let (u8_, rw) = (HwtDType::U8, HwtAccess::ReadWrite);
        let spec = HwtImageSpec {
            format: HwtPixelFormat::Rgba as u32,
            width: 8,
            height: 2,
            ..HwtImageSpec::default()
        };
        // SAFETY: `texture` is null or a live texture of this test; `out` a local.
        unsafe { hwt_tensor_from_d3d11_texture(texture, 0, &spec, u8_ as u32, rw as u32, out) }
    }

    #[test]
    fn a_c_host_wraps_its_own_texture_and_a_null_one_is_refused() {
        let mut out = std::ptr::null_mut();
        assert_eq!(
            from_texture(std::ptr::null_mut(), &mut out),
            HwtStatus::InvalidArgument
        );
        // A host's texture on the process device: here, the one a GPU image of ours has.
        let made = hwtensor::Tensor::<u8>::image(
            &hwtensor::ImageSpec::new(hwtensor::PixelFormat::Rgba, 8, 2),
            GPU,
            RW,
        );
        let Some(resource) = made.ok().and_then(|t| t.d3d11_texture()) else {
            return eprintln!(
                "SKIPPED: a_c_host_wraps_its_own_texture_and_a_null_one_is_refused - no D3D11 device"
            );
        };
        let texture: ID3D11Texture2D = resource.cast().unwrap();
        assert_eq!(from_texture(texture.as_raw(), &mut out), HwtStatus::Ok);
        let t = crate::tensor::tensor(out, "the tensor").unwrap();
        assert_eq!(t.shape(), &[2, 8, 4]);
        // SAFETY: a handle this test owns.
        unsafe { crate::tensor::hwt_tensor_release(out) };
    }
}
