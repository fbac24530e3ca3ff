//! Loading the cdylib as a private second copy, and what differs per platform in checking that
//! it shares the static copy's device and fence.

#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(unix)]
pub use unix::*;
#[cfg(windows)]
pub use windows::*;
