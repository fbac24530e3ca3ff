//! CPU maps: a pointer and a length, ended by `hwt_map_end`, under the same exclusivity rules
//! as Rust's maps (a write map excludes every other map of the buffer in the process).

use std::ffi::c_void;
use std::sync::Arc;

use hwtensor::ByteMap;

use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::tensor::{direction_of, share, HwtTensor};

/// A live CPU map (opaque). It holds a reference to its tensor, so the tensor may be released
/// before the map ends.
pub struct HwtMap {
    /// Declared first, so it is dropped (and the claim and any write-back done) before the
    /// tensor reference below goes.
    _map: ByteMap<'static>,
    _tensor: Arc<HwtTensor>,
}

/// Maps `t` for the CPU in `mode` (an `HwtAccess`: READ, WRITE or READ_WRITE). On success
/// `*out_map` is the map, `*out_ptr` the tensor's first element and `*out_len` the bytes from
/// it to the last element (row padding included: address it through the byte strides).
/// `HWT_STATUS_BUSY` when another map of the buffer excludes this one; `HWT_STATUS_INVALID_OPERATION`
/// when the tensor's CPU access does not allow `mode`. A READ map must not be written through.
/// End it with `hwt_map_end` (after a write, that is when the bytes reach a device buffer).
///
/// # Safety
/// `t` must be a live handle; each out-pointer valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_map(
    t: *const HwtTensor,
    mode: u32,
    out_map: *mut *mut HwtMap,
    out_ptr: *mut *mut c_void,
    out_len: *mut usize,
) -> HwtStatus {
    guard(|| {
        let direction = direction_of(mode)?;
        if out_map.is_null() || out_ptr.is_null() || out_len.is_null() {
            return Err(invalid("an out-pointer of hwt_tensor_map is null"));
        }
        let owner = share(t)?;
        // SAFETY: the reference points into the Arc's allocation, which never moves and which
        // the map object keeps alive (its second field, dropped after the map).
        let tensor: &'static hwtensor::TensorDyn = unsafe { &*std::ptr::addr_of!(owner.tensor) };
        let map = tensor.map_bytes(direction).or_status()?;
        let (ptr, len) = (map.as_ptr(), map.len());
        let handle = Box::into_raw(Box::new(HwtMap {
            _map: map,
            _tensor: owner,
        }));
        put(out_ptr, "out_ptr", ptr.cast::<c_void>())?;
        put(out_len, "out_len", len)?;
        put(out_map, "out_map", handle)
    })
}

/// Ends a map: a write map's bytes are then the buffer's (copied to device memory where the
/// tensor lives there). Null is ignored. Ending a map twice is undefined behaviour.
///
/// # Safety
/// `map` must be null or a map from `hwt_tensor_map` not yet ended.
#[no_mangle]
pub unsafe extern "C" fn hwt_map_end(map: *mut HwtMap) -> HwtStatus {
    guard(|| {
        if !map.is_null() {
            // SAFETY: a map this library made with Box::into_raw, ended once (the contract).
            drop(unsafe { Box::from_raw(map) });
        }
        Ok(())
    })
}
