//! CPU maps: a pointer and a length, ended by `hwt_map_end`, under the same exclusivity rules
//! as Rust's maps (a write map excludes every map in the process that shares a byte with it).

use std::ffi::c_void;

use hwtensor::{ByteMap, TensorDyn};

use crate::codes::direction_of;
use crate::status::{fail, guard, invalid, HwtStatus, OrStatus};
use crate::tensor::{tensor, HwtTensor};

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

/// Words of an `HwtMap` that hold the library's state of a live map. Room to spare: the state
/// is 9 words today, and a map the caller allocates fixes this size in its programs.
pub const HWT_MAP_PRIVATE_WORDS: usize = 16;

/// What `HwtMap.state` holds while the map is live; anything else is refused by `hwt_map_end`
/// (a map ended twice, one never made, a zeroed struct). Values no pointer or count takes.
const MAP_LIVE: u64 = 0x6877_745f_6d61_7021; // "hwt_map!"
/// A live map whose end is a bracket's end too (a GPU write-back, a DMA-BUF sync): driver
/// code, so it ends under the panic guard.
const MAP_LIVE_BRACKETED: u64 = 0x6877_745f_6d61_7042; // "hwt_mapB"
/// What `HwtMap.state` holds once the map has ended.
const MAP_ENDED: u64 = 0;

// The library's state of a live map fits the room the struct gives it, aligned.
const _: () = assert!(
    size_of::<ByteMap<'static>>() <= HWT_MAP_PRIVATE_WORDS * size_of::<u64>()
        && align_of::<ByteMap<'static>>() <= align_of::<u64>()
);

/// A CPU map, in memory the caller provides (a local variable, as a `GstMapInfo` is): no
/// allocation per map. `hwt_tensor_map` fills it; `data` and `len` are the caller's to read;
/// `hwt_map_end` ends it. A live map must not be copied (end the struct that was mapped into);
/// it stays valid however long it is kept, but end it before the last release of its tensor
/// (a release that would free a buffer a map still claims keeps the tensor instead: a leak,
/// logged).
///
/// Why caller memory and no reference of its own: a C map + unmap of a 1080p frame is about
/// 20 ns (a Rust map's 14-16), and an atomic increment and decrement per map cost 9 ns, a heap
/// allocation per map another 10.
#[repr(C)]
pub struct HwtMap {
    /// The tensor's first element; null when not mapped.
    pub data: *mut c_void,
    /// Bytes from the first element to the end of the last (what lies between the elements
    /// is not the map's: address them through the byte strides).
    pub len: usize,
    /// Private: whether the map is live.
    pub state: u64,
    /// Private: the library's state of a live map.
    pub private_: [u64; HWT_MAP_PRIVATE_WORDS],
}

impl std::fmt::Debug for HwtMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwtMap")
            .field("data", &self.data)
            .field("len", &self.len)
            .field("live", &matches!(self.state, MAP_LIVE | MAP_LIVE_BRACKETED))
            .finish()
    }
}

/// Maps `t` for the CPU in `mode` (an `HwtAccess`: READ, WRITE or READ_WRITE) into `*map`
/// (memory the caller provides; its previous contents are ignored). On success `map->data` is
/// the tensor's first element and `map->len` the bytes from it to the end of the last. Only
/// the elements, addressed through the byte strides, are the map's: between them lie row
/// padding or, for a crop, pixels of the parent another map may be writing.
/// `HWT_STATUS_BUSY` when another map of the buffer excludes this one; `HWT_STATUS_INVALID_OPERATION`
/// when the tensor's CPU access does not allow `mode`. A READ map must not be written through.
/// End it with `hwt_map_end` (after a write, that is when the bytes reach a device buffer).
/// On failure `*map` is left not live: ending it is refused, harmlessly.
///
/// # Safety
/// `t` must be a live handle; `map` valid for writing one `HwtMap`, and not a live map.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_map(
    t: *const HwtTensor,
    mode: u32,
    map: *mut HwtMap,
) -> HwtStatus {
    guard(|| {
        if map.is_null() {
            return Err(invalid("the HwtMap of hwt_tensor_map is null"));
        }
        // The caller's struct may be uninitialised: it is written through raw pointers only.
        // SAFETY: non-null, and valid for one HwtMap (the contract).
        unsafe { (&raw mut (*map).state).write(MAP_ENDED) };
        let direction = direction_of(mode)?;
        let mapped = tensor_unbound(t)?.map_bytes(direction).or_status()?;
        // SAFETY: as above. The private words hold a ByteMap (size and alignment asserted
        // above); it is read back once, by the end call that sees MAP_LIVE and clears it.
        unsafe {
            (&raw mut (*map).data).write(mapped.as_ptr().cast::<c_void>());
            (&raw mut (*map).len).write(mapped.len());
            let state = match mapped.is_bracketed() {
                true => MAP_LIVE_BRACKETED,
                false => MAP_LIVE,
            };
            (&raw mut (*map).private_)
                .cast::<ByteMap<'static>>()
                .write(mapped);
            (&raw mut (*map).state).write(state);
        }
        Ok(())
    })
}

/// Ends a map: a write map's bytes are then the buffer's (copied to device memory where the
/// tensor lives there), and `map->data` is null. Null is ignored. A map that is not live (ended
/// already, or never made) is `HWT_STATUS_INVALID_OPERATION`, not a second end.
///
/// # Safety
/// `map` must be null or point at an `HwtMap` that `hwt_tensor_map` was given (live or ended),
/// not a copy of a live one.
#[no_mangle]
pub unsafe extern "C" fn hwt_map_end(map: *mut HwtMap) -> HwtStatus {
    // SAFETY: null is ignored; otherwise an HwtMap (the contract).
    let Some(map) = (unsafe { map.as_mut() }) else {
        return HwtStatus::Ok;
    };
    match map.state {
        // Giving back a claim is an atomic operation (for a part, a list update under a lock
        // whose poisoning is handled): nothing that can panic, so it runs outside the panic
        // guard, whose cost was a tenth of a C map.
        MAP_LIVE => {
            end(map);
            HwtStatus::Ok
        }
        MAP_LIVE_BRACKETED => guard(|| {
            end(map);
            Ok(())
        }),
        _ => fail(
            HwtStatus::InvalidOperation,
            "hwt_map_end of a map that is not live (ended already, or never made)",
        ),
    }
}

/// Ends a live map: marks it ended, then drops its state where it lies (a copy out first read
/// the words back in 16-byte loads that the store buffer could not forward from the map's
/// 8-byte stores: 3 ns a map).
fn end(map: &mut HwtMap) {
    map.state = MAP_ENDED;
    map.data = std::ptr::null_mut();
    // SAFETY: a live map holds the ByteMap hwt_tensor_map wrote; marked ended above, so it is
    // dropped (ending the map) once.
    unsafe { std::ptr::drop_in_place(map.private_.as_mut_ptr().cast::<ByteMap<'static>>()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::{HwtDType, HwtMemory};
    use crate::tensor::{hwt_tensor_new, hwt_tensor_release};
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

    fn map(t: *const HwtTensor, mode: Direction) -> Result<Box<HwtMap>, HwtStatus> {
        let code = match mode {
            Direction::Read => 1,
            Direction::Write => 2,
            Direction::ReadWrite => 3,
        };
        let mut m = Box::new(std::mem::MaybeUninit::<HwtMap>::uninit());
        // SAFETY: a live handle and room for one HwtMap; read back only once it is written.
        match unsafe { hwt_tensor_map(t, code, m.as_mut_ptr()) } {
            // SAFETY: a successful map wrote every field.
            HwtStatus::Ok => Ok(unsafe { m.assume_init() }),
            other => Err(other),
        }
    }

    #[test]
    fn a_last_release_under_a_live_map_keeps_the_buffer_for_the_map() {
        let t = new_tensor();
        // SAFETY: a live handle.
        let liveness = unsafe { &(*t).tensor }.liveness();
        let mut m = map(t, Direction::Write).unwrap();
        // SAFETY: the handle's one reference, given back while the map lives.
        unsafe { hwt_tensor_release(t) };
        assert!(
            liveness.is_alive(),
            "the mapped buffer was freed under its map"
        );
        // SAFETY: the live map, ended once.
        assert_eq!(unsafe { hwt_map_end(&mut *m) }, HwtStatus::Ok);
    }

    #[test]
    fn a_release_after_the_maps_end_frees_the_buffer() {
        let t = new_tensor();
        // SAFETY: a live handle.
        let liveness = unsafe { &(*t).tensor }.liveness();
        let mut m = map(t, Direction::Read).unwrap();
        // SAFETY: the live map, ended once; then the handle's one reference.
        unsafe {
            assert_eq!(hwt_map_end(&mut *m), HwtStatus::Ok);
            hwt_tensor_release(t);
        }
        assert!(!liveness.is_alive());
    }

    #[test]
    fn a_write_map_excludes_every_other_map_until_it_ends() {
        let t = new_tensor();
        let mut w = map(t, Direction::Write).unwrap();
        assert_eq!(map(t, Direction::Read).unwrap_err(), HwtStatus::Busy);
        assert_eq!(map(t, Direction::ReadWrite).unwrap_err(), HwtStatus::Busy);
        // SAFETY: live maps and handle, each ended or released once.
        unsafe {
            hwt_map_end(&mut *w);
            let mut r = map(t, Direction::Read).unwrap();
            hwt_map_end(&mut *r);
            hwt_tensor_release(t);
        }
    }

    #[test]
    fn a_map_ended_twice_is_refused_the_second_time_and_frees_nothing_twice() {
        let t = new_tensor();
        let mut w = map(t, Direction::Write).unwrap();
        // SAFETY: a live map, then the same struct once it has ended; then the handle.
        unsafe {
            assert_eq!(hwt_map_end(&mut *w), HwtStatus::Ok);
            assert!(w.data.is_null());
            assert_eq!(hwt_map_end(&mut *w), HwtStatus::InvalidOperation);
            // Had the second end released the claim again, the counter would be off and this
            // write map refused or (worse) two writers let in.
            let mut again = map(t, Direction::Write).unwrap();
            assert_eq!(map(t, Direction::Write).unwrap_err(), HwtStatus::Busy);
            hwt_map_end(&mut *again);
            hwt_tensor_release(t);
        }
    }

    #[test]
    fn a_refused_map_leaves_a_struct_whose_end_is_refused() {
        let t = new_tensor();
        let mut w = map(t, Direction::Write).unwrap();
        let mut refused = Box::new(std::mem::MaybeUninit::<HwtMap>::uninit());
        // SAFETY: a live handle, room for a map; the refused struct read only as the end call
        // reads it (its state word, written on failure too).
        unsafe {
            assert_eq!(hwt_tensor_map(t, 1, refused.as_mut_ptr()), HwtStatus::Busy);
            assert_eq!(
                hwt_map_end(refused.as_mut_ptr()),
                HwtStatus::InvalidOperation
            );
            hwt_map_end(&mut *w);
            hwt_tensor_release(t);
        }
    }
}
