//! Linux: the facts about the operating system that the backings, the devices and the channel
//! all need. Every `/proc` read, every raw syscall without a safe wrapper, lives under here.
//!
//! - `process`: who this process is (pid, start time, pid namespace) and what runs at exit;
//! - `fd`: the fd helpers (a driver's fd made ours, a failed import's dup closed, same file?);
//! - `classify`: what kind of memory a foreign fd holds, and its size;
//! - `memfd`: sealed memfds, and the seals an imported one must carry.

pub(crate) mod classify;
mod fd;
pub(crate) mod memfd;
mod process;

pub(crate) use fd::*;
pub(crate) use process::*;
