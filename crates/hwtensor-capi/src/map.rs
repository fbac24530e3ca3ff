//! CPU maps: a pointer and a length, ended by `hwt_map_end`, under the same exclusivity rules
//! as Rust's maps (a write map excludes every other map of the buffer in the process).

use std::ffi::c_void;

use hwtensor::{ByteMap, TensorDyn};

use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::tensor::{direction_of, tensor, HwtTensor};

/// The tensor behind a live handle, for a map that outlives the borrow.
///
/// A CPU map holds on to the buffer's shared state only (its claim counter and storage, behind
/// the buffer's own reference count), never to the handle's memory; and the last release of a
/// buffer a map still claims keeps it (`hwt_tensor_release`). So the map stays valid however
/// long the caller keeps it.
fn tensor_unbound(t: *const HwtTensor) -> Result<&'static TensorDyn, HwtStatus> {
    let borrowed = tensor(t, "the tensor")?;
    // SAFETY: see above: nothing the map keeps points into the handle.
    Ok(unsafe { &*(borrowed as *const TensorDyn) })
}

/// A live CPU map (opaque). End it before the last release of its tensor; a release that
/// would free a buffer a map still claims keeps the tensor instead (a leak, logged), so a late
/// `hwt_map_end` still touches live memory.
///
/// The map takes no reference of its own: an atomic increment and decrement per map were a
/// third of a C map's cost (a 1080p map + unmap: 40 ns without them, 49 ns with).
pub struct HwtMap {
    _map: ByteMap<'static>,
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
        let tensor: &'static hwtensor::TensorDyn = tensor_unbound(t)?;
        let map = tensor.map_bytes(direction).or_status()?;
        let (ptr, len) = (map.as_ptr(), map.len());
        let handle = Box::into_raw(Box::new(HwtMap { _map: map }));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{hwt_tensor_new, hwt_tensor_release, HwtDType, HwtMemory};
    use hwtensor::Direction;

    fn new_tensor() -> *mut HwtTensor {
        let shape = [64usize];
        let mut t = std::ptr::null_mut();
        // SAFETY: a one-dimension shape and a valid out-pointer.
        let s = unsafe {
            hwt_tensor_new(
                shape.as_ptr(),
                1,
                HwtDType::U8 as u32,
                HwtMemory::Mem as u32,
                &mut t,
            )
        };
        assert_eq!(s, HwtStatus::Ok);
        t
    }

    fn map(t: *const HwtTensor, mode: Direction) -> Result<*mut HwtMap, HwtStatus> {
        let (mut m, mut p, mut n) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        let code = match mode {
            Direction::Read => 1,
            Direction::Write => 2,
            Direction::ReadWrite => 3,
        };
        // SAFETY: a live handle and valid out-pointers.
        match unsafe { hwt_tensor_map(t, code, &mut m, &mut p, &mut n) } {
            HwtStatus::Ok => Ok(m),
            other => Err(other),
        }
    }

    #[test]
    fn a_last_release_under_a_live_map_keeps_the_buffer_for_the_map() {
        let t = new_tensor();
        // SAFETY: a live handle.
        let liveness = unsafe { &(*t).tensor }.liveness();
        let m = map(t, Direction::Write).unwrap();
        // SAFETY: the handle's one reference, given back while the map lives.
        unsafe { hwt_tensor_release(t) };
        assert!(
            liveness.is_alive(),
            "the mapped buffer was freed under its map"
        );
        // SAFETY: the live map, ended once.
        assert_eq!(unsafe { hwt_map_end(m) }, HwtStatus::Ok);
    }

    #[test]
    fn a_release_after_the_maps_end_frees_the_buffer() {
        let t = new_tensor();
        // SAFETY: a live handle.
        let liveness = unsafe { &(*t).tensor }.liveness();
        let m = map(t, Direction::Read).unwrap();
        // SAFETY: the live map, ended once; then the handle's one reference.
        unsafe {
            assert_eq!(hwt_map_end(m), HwtStatus::Ok);
            hwt_tensor_release(t);
        }
        assert!(!liveness.is_alive());
    }

    #[test]
    fn a_write_map_excludes_every_other_map_until_it_ends() {
        let t = new_tensor();
        let w = map(t, Direction::Write).unwrap();
        assert_eq!(map(t, Direction::Read).unwrap_err(), HwtStatus::Busy);
        assert_eq!(map(t, Direction::ReadWrite).unwrap_err(), HwtStatus::Busy);
        // SAFETY: live maps and handle, each ended or released once.
        unsafe {
            hwt_map_end(w);
            let r = map(t, Direction::Read).unwrap();
            hwt_map_end(r);
            hwt_tensor_release(t);
        }
    }
}
