//! Loading the cdylib as a private second copy, and what differs per platform in checking that
//! it shares the static copy's device and fence. Shared by several test binaries, each using
//! part of it.

// Loading a second copy of the library and calling its C functions.
#![allow(unsafe_code)]
#![allow(dead_code)]

/// `HwtStatus f(uint64_t *out)`, the shape of most of the C ABI.
pub type GetU64 = unsafe extern "C" fn(*mut u64) -> i32;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(windows)]
mod windows;

#[cfg(target_os = "linux")]
pub use linux::*;
#[cfg(windows)]
pub use windows::*;
