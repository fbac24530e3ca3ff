//! [`BufferIdentity`]: a cache key for the memory under a tensor, derived from the OS object.
//!
//! Caches of GPU imports (EGL images, Vulkan memory, CUDA external memory) are keyed on the
//! buffer, not on the tensor or the fd number: a consumer that receives the same frame buffer
//! again, as a fresh `dup` through a socket, must find its existing import. Device and inode name
//! the kernel object itself, so every fd of it, in every process and every copy of this library,
//! yields the same identity.

#[cfg(target_os = "linux")]
use std::os::fd::BorrowedFd;

#[cfg(target_os = "linux")]
use crate::{Error, Result};

/// Which buffer a tensor's bytes live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
// New ones will come (BF16, P010, a backing, a kind of identity): outside this crate a
// match needs a wildcard arm, so adding one is not a breaking change.
#[non_exhaustive]
pub enum BufferIdentity {
    /// An fd-backed buffer: the device and inode of the kernel object (`fstat`).
    File {
        /// `st_dev` of the fd.
        dev: u64,
        /// `st_ino` of the fd.
        ino: u64,
    },
    /// A heap buffer of this process: its base address. Addresses are reused after a free, so
    /// pair a heap identity with a [`BufferLiveness`](crate::BufferLiveness) before trusting a cache hit.
    Heap {
        /// The buffer's base address.
        addr: usize,
    },
    /// GPU memory, named by the process that allocated it (pid and start time) and that
    /// allocation's serial there. Every importer, in any process, gets the allocator's identity:
    /// a driver's memory fd can be an anonymous inode shared by every buffer (NVIDIA), so the fd
    /// cannot name the buffer.
    Gpu {
        /// The allocating process.
        pid: u32,
        /// Its start time (clock ticks after boot), so a reused pid is another process.
        start_time: u64,
        /// The allocation's serial there.
        serial: u64,
    },
    /// Shared memory on Windows, a pagefile-backed section: named by the process that made it
    /// and the section's serial there (a section has no inode; its name travels with it).
    Section {
        /// The process that made the section.
        pid: u32,
        /// The section's serial there.
        serial: u64,
    },
}

impl BufferIdentity {
    #[cfg(target_os = "linux")]
    pub(crate) fn of_fd(fd: BorrowedFd<'_>) -> Result<Self> {
        let st = rustix::fs::fstat(fd)
            .map_err(|e| Error::Fd(format!("fstat for the buffer identity failed: {e}")))?;
        Ok(BufferIdentity::File {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    pub(crate) fn heap(addr: usize) -> Self {
        BufferIdentity::Heap { addr }
    }
}
