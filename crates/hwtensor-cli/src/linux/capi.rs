//! The C ABI library beside the `hwtensor` binary, loaded with RTLD_LOCAL: a second,
//! independently linked copy of hwtensor for the device benchmarks, and what a C caller pays
//! for a map through the ABI, measured beside the same map from Rust.

// The bench loads the C library (dlopen) and calls it.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::time::Duration;

use std::hint::black_box;

use hwtensor::{Direction, Tensor, TensorDyn, TensorMemory};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};

use crate::bench::{shape, verdict};
use crate::timing::{fmt, median, median_per_call};

/// How much slower a map + unmap through the C ABI may be than from Rust.
const C_MAP_TARGET_RATIO: f64 = 1.5;
/// Map + unmap pairs per timed batch.
const MAPS_PER_BATCH: usize = 1000;
/// The C ABI's `HwtMemory` / `HwtDType` / `HwtAccess` values are the core's own codes (the
/// C ABI's tests pin that), so they are taken from there rather than copied.
const HWT_MEMORY_SHM: u32 = TensorMemory::Shm.code() as u32;
const HWT_D_TYPE_U8: u32 = hwtensor::DType::U8.code() as u32;
const HWT_ACCESS_READ_WRITE: u32 = hwtensor::CpuAccess::ReadWrite as u32;

/// The C library next to this executable.
pub fn load() -> Result<Library, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.with_file_name("libhwtensor_capi.so");
    // SAFETY: our own cdylib; loading it runs only Rust's and libc's initialisers.
    unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
        format!(
            "{} not loadable: {e}; build it with `cargo build --release -p hwtensor-capi`",
            path.display()
        )
    })
}

type NewFn = unsafe extern "C" fn(*const usize, usize, u32, u32, *mut *mut c_void) -> i32;
type MapFn = unsafe extern "C" fn(*const c_void, u32, *mut HwtMap) -> i32;
type EndFn = unsafe extern "C" fn(*mut HwtMap) -> i32;

/// The C ABI's `HwtMap`, as a C caller declares it (a local variable, written by the map call).
#[repr(C)]
struct HwtMap {
    data: *mut c_void,
    len: usize,
    state: u64,
    private: [u64; 16],
}
type ReleaseFn = unsafe extern "C" fn(*const c_void);

/// A 1080p shm tensor made through the C ABI, and the functions that map it.
struct CTensor<'l> {
    handle: *mut c_void,
    map: Symbol<MapFn>,
    end: Symbol<EndFn>,
    release: Symbol<ReleaseFn>,
    /// The symbols are valid only while the library stays loaded.
    _lib: std::marker::PhantomData<&'l Library>,
}

impl<'l> CTensor<'l> {
    fn new(lib: &'l Library, dims: &[usize]) -> Result<Self, String> {
        // SAFETY: the symbols have these signatures (include/hwtensor.h).
        let (new, map, end, release) = unsafe {
            let new: Symbol<NewFn> = lib.get(b"hwt_tensor_new").map_err(|e| e.to_string())?;
            (
                new,
                lib.get(b"hwt_tensor_map").map_err(|e| e.to_string())?,
                lib.get(b"hwt_map_end").map_err(|e| e.to_string())?,
                lib.get(b"hwt_tensor_release").map_err(|e| e.to_string())?,
            )
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: a shape of `dims.len()` sizes and a valid out-pointer.
        let status = unsafe {
            new(
                dims.as_ptr(),
                dims.len(),
                HWT_D_TYPE_U8,
                HWT_MEMORY_SHM,
                &mut handle,
            )
        };
        if status != 0 {
            return Err(format!("hwt_tensor_new failed with status {status}"));
        }
        Ok(CTensor {
            handle,
            map,
            end,
            release,
            _lib: std::marker::PhantomData,
        })
    }

    /// One map and its end, as a C caller writes them: a function of its own, as the Rust
    /// measures are (see `bench`).
    #[inline(never)]
    fn map_and_end(&self) {
        let mut map = std::mem::MaybeUninit::<HwtMap>::uninit();
        // SAFETY: a live handle and room for one map, read only after the call wrote it; the
        // map is ended at once.
        unsafe {
            let status = (self.map)(self.handle, HWT_ACCESS_READ_WRITE, map.as_mut_ptr());
            assert_eq!(status, 0, "hwt_tensor_map failed");
            let map = map.assume_init_mut();
            std::hint::black_box((map.data, map.len));
            (self.end)(map);
        }
    }
}

impl Drop for CTensor<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle from hwt_tensor_new, released once.
        unsafe { (self.release)(self.handle) };
    }
}

/// A typed read-write map and its end, in a function of its own.
#[inline(never)]
fn typed_map_and_end(t: &Tensor<u8>) {
    let map = t.map().expect("a map of an idle tensor");
    black_box((map.as_ptr(), map.len()));
}

/// A byte map (the C ABI's path) and its end, in a function of its own.
#[inline(never)]
fn byte_map_and_end(t: &TensorDyn) {
    let map = t
        .map_bytes(Direction::ReadWrite)
        .expect("a map of an idle tensor");
    black_box((map.as_ptr(), map.len()));
}

/// A read-write map + unmap of a 1080p shm tensor from Rust (typed, and as bytes of a tensor of
/// any type: the path the C ABI takes) and through the C ABI, judged against the typed map.
pub fn bench(rounds: usize) -> crate::Result {
    println!("\n== C ABI: map + unmap of a 1080p shm tensor (medians) ==");
    let lib = match load() {
        Ok(lib) => lib,
        Err(e) => {
            println!("skipped: {e}");
            return Ok(());
        }
    };
    let dims = shape(1920, 1080);
    let ours = Tensor::<u8>::new(&dims, Some(TensorMemory::Shm))?;
    let dynamic = TensorDyn::from(ours.clone());
    let theirs = CTensor::new(&lib, &dims).map_err(std::io::Error::other)?;
    let (mut typed, mut bytes, mut c) = (Vec::new(), Vec::new(), Vec::new());
    // Alternated, so drift on a shared machine lands on all three. Each measure is a function
    // of its own that maps and unmaps (the map inlined into it, as into a Rust caller's code):
    // one loop shape for all three, since the loop the compiler builds around an inlined map
    // moved the Rust figure by a third (12 or 16 ns) with no change to the map.
    for _ in 0..5 {
        typed.push(median_per_call(rounds, MAPS_PER_BATCH, || {
            typed_map_and_end(black_box(&ours))
        }));
        bytes.push(median_per_call(rounds, MAPS_PER_BATCH, || {
            byte_map_and_end(black_box(&dynamic))
        }));
        c.push(median_per_call(rounds, MAPS_PER_BATCH, || {
            theirs.map_and_end()
        }));
    }
    let [typed, bytes, c] = [typed, bytes, c].map(|mut v| median(&mut v));
    let ratio = |of: Duration, to: Duration| of.as_secs_f64() / to.as_secs_f64().max(1e-9);
    println!(
        "Rust typed map {:>6}   Rust byte map {:>6}   C {:>6}   C/typed {:.2}x  {}   C/byte map {:.2}x",
        fmt(typed),
        fmt(bytes),
        fmt(c),
        ratio(c, typed),
        verdict(ratio(c, typed) <= C_MAP_TARGET_RATIO),
        ratio(c, bytes),
    );
    Ok(())
}
