//! A write map's own mapping of shared memory: the arrays of `with t.map_write() as a:` point
//! at the memory itself, not at a copy, and still can never write it after the block.
//!
//! Why not the tensor's own mapping: NumPy keeps a view's writable flag when its base's is
//! cleared, so a view made inside the block could write the buffer later, under the next
//! frame. Why not a copy (what write maps did before): a 4K frame took 11-36 ms to copy in and
//! out for one byte written, and a sparse 1 TiB tensor aborted the interpreter on the
//! allocation. So each write map maps the memory afresh, shared, and at the block's end maps a
//! private copy-on-write view of the same memory over it in place (`MAP_FIXED`): an array kept
//! past the block still reads what the buffer held, and a stale write lands in private pages.
//! Where the memory cannot be mapped privately, a private zero mapping takes its place.

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use hwtensor::{TensorDyn, TensorMemory};
use rustix::mm::{MapFlags, ProtFlags};

/// A fresh shared mapping of a tensor's bytes, revoked in place when the map ends.
pub(crate) struct Alias {
    base: NonNull<std::ffi::c_void>,
    /// Bytes mapped (whole pages).
    size: usize,
    /// Where the tensor's first byte is in the mapping.
    at: usize,
    /// The memory's own fd (a duplicate), for the private view.
    fd: OwnedFd,
    /// The file offset the mapping starts at (page-aligned).
    file_offset: u64,
}

impl Alias {
    /// A shared mapping of the `len` bytes from `t`'s first byte, where `t` is shared memory or
    /// a DMA-BUF in one fd (its persistent mapping starts at the fd's byte 0, so its first byte
    /// is `byte_offset` into the file); `None` elsewhere (the map then copies).
    pub(crate) fn of(t: &TensorDyn, len: usize) -> Option<Alias> {
        if len == 0 || !matches!(t.memory(), TensorMemory::Shm | TensorMemory::DmaBuf) {
            return None;
        }
        if t.plane_fds().is_some() {
            return None;
        }
        let fd = t.as_fd()?.try_clone_to_owned().ok()?;
        let page = rustix::param::page_size();
        let first = t.byte_offset();
        let aligned = first - first % page;
        let at = first - aligned;
        let size = (at + len).div_ceil(page) * page;
        // SAFETY: a new mapping the kernel places, of an fd we hold; owned by the Alias from
        // here (unmapped in Drop).
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                size,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd.as_fd(),
                aligned as u64,
            )
        }
        .ok()?;
        Some(Alias {
            base: NonNull::new(base)?,
            size,
            at,
            fd,
            file_offset: aligned as u64,
        })
    }

    /// The address of the tensor's first byte in this mapping.
    pub(crate) fn ptr(&self) -> usize {
        self.base.as_ptr() as usize + self.at
    }

    /// Replaces the shared mapping, in place, by a private copy-on-write view of the same
    /// memory (or private zero pages where that cannot be made): nothing written through the
    /// arrays from now on reaches the memory.
    pub(crate) fn revoke(&mut self) {
        let private = ProtFlags::READ | ProtFlags::WRITE;
        let fixed = MapFlags::PRIVATE | MapFlags::FIXED;
        // SAFETY: MAP_FIXED over exactly our own mapping (same address and size): nothing
        // else lives there, and the arrays pointing into it stay valid.
        let cow = unsafe {
            rustix::mm::mmap(
                self.base.as_ptr(),
                self.size,
                private,
                fixed,
                self.fd.as_fd(),
                self.file_offset,
            )
        };
        if cow.is_err() {
            // SAFETY: as above, anonymous private pages in place of ours.
            let zeros = unsafe {
                rustix::mm::mmap_anonymous(self.base.as_ptr(), self.size, private, fixed)
            };
            if zeros.is_err() {
                // The shared mapping stays: make it unwritable rather than leave it writable.
                // SAFETY: our own mapping.
                let _ = unsafe {
                    rustix::mm::mprotect(
                        self.base.as_ptr(),
                        self.size,
                        rustix::mm::MprotectFlags::READ,
                    )
                };
            }
        }
    }
}

impl Drop for Alias {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `size` bytes; every array over it is gone (this map is
        // their base, and it is being freed).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr(), self.size) };
    }
}
