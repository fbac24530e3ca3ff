//! The operating system under every other layer, chosen once here: process identity, at-exit
//! hooks, fd helpers, zeroed heap memory (`heap`, every platform) and, on Linux, what a foreign
//! fd holds and the seals of shared memory.
//! Other modules call `crate::os::…` and name no platform.

pub(crate) mod heap;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::SyncFile;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;
