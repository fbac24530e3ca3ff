//! Linux: the facts about the operating system that the backings, the devices and the channel
//! all need. Every `/proc` read, every raw syscall without a safe wrapper, lives under here.
//!
//! - `process`: who this process is (pid, start time, pid namespace) and what runs at exit;
//! - `fd`: the fd helpers (a driver's fd made ours, a failed import's dup closed, same file?);
//! - `classify`: what kind of memory a foreign fd holds, and its size;
//! - `memfd`: sealed memfds, and the seals an imported one must carry;
//! - `sync_file`: a DMA-fence sync_file, checked and waited for by `poll`.

pub(crate) mod classify;
mod fd;
pub(crate) mod memfd;
mod process;
mod sync_file;

pub(crate) use fd::*;
pub(crate) use process::*;
pub(crate) use sync_file::AcquireFence;
pub use sync_file::SyncFile;
