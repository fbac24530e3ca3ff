//! Shared memory: a memfd, sized, then sealed against shrinking and growing.
//!
//! The seals are the point: a memfd that any holder could `ftruncate` would let one buggy or
//! hostile process shrink it under every other process mapping it, and their next access to the
//! lost pages would be a SIGBUS. A sealed size cannot change for anyone.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use rustix::fs::{MemfdFlags, SealFlags};

use crate::{Error, Result, TensorMemory};

/// The name memfds carry in `/proc/<pid>/fd` and `/proc/<pid>/maps`: says whose they are.
const MEMFD_NAME: &str = "hwtensor";

/// The seals every hwtensor memfd carries. `SEAL` stops anyone from adding `F_SEAL_WRITE` later,
/// which would make every writable mapping of ours fail.
fn size_seals() -> SealFlags {
    SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL
}

/// Creates a zero-filled memfd of `len` bytes with its size sealed.
pub(crate) fn create(len: usize) -> Result<OwnedFd> {
    let alloc_err = |op: &'static str, e: rustix::io::Errno| Error::Alloc {
        memory: TensorMemory::Shm,
        bytes: len,
        source: std::io::Error::other(format!("{op}: {e}")),
    };
    let fd = rustix::fs::memfd_create(MEMFD_NAME, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| alloc_err("memfd_create", e))?;
    rustix::fs::ftruncate(&fd, len as u64).map_err(|e| alloc_err("ftruncate", e))?;
    rustix::fs::fcntl_add_seals(&fd, size_seals()).map_err(|e| alloc_err("F_ADD_SEALS", e))?;
    Ok(fd)
}

/// Whether `fd` is sealed against shrinking already (false for an fd that is no memfd): then a
/// size read after this is final.
pub(crate) fn is_sealed(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(SealFlags::SHRINK))
}

/// Makes sure an imported tmpfs fd can no longer shrink: adds `F_SEAL_SHRINK` where the fd
/// allows it. Call it before reading the size: a size read first could be undercut by a peer's
/// `ftruncate` racing the seal, and our mapping would then reach past the end (a SIGBUS).
///
/// A memfd made without `MFD_ALLOW_SEALING`, or a POSIX shm file, cannot be sealed: a peer
/// that truncates it would fault us, so it is refused unless `allow_unsealed` (the caller's
/// explicit opt-in, [`ImportPolicy::unsealed_shm`](crate::ImportPolicy::unsealed_shm)).
pub(crate) fn seal_for_import(fd: BorrowedFd<'_>, allow_unsealed: bool) -> Result<()> {
    let sealed = rustix::fs::fcntl_get_seals(fd)
        .map(|s| s.contains(SealFlags::SHRINK))
        .unwrap_or(false);
    if sealed {
        return Ok(());
    }
    match rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK) {
        Ok(()) => Ok(()),
        Err(e) if allow_unsealed => {
            log::warn!(
                "imported shared memory cannot be sealed against shrinking ({e}); \
                 a peer that truncates it would fault this process (accepted by the import policy)"
            );
            Ok(())
        }
        Err(e) => Err(Error::Fd(format!(
            "the shared memory cannot be sealed against shrinking ({e}): a peer could truncate it \
             under our mapping and crash this process. Create it with MFD_ALLOW_SEALING, or \
             [[accept_unsealed_shm]]"
        ))),
    }
}

/// Why memfds cannot be made here, probed once (the kernel's support cannot change while the
/// process runs).
pub(crate) fn unavailable_reason() -> Option<String> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    REASON
        .get_or_init(|| {
            create(0)
                .err()
                .map(|e| format!("memfd_create with seals fails: {e}"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_memfd_refuses_to_shrink_or_grow() {
        let fd = create(8192).unwrap();
        assert_eq!(rustix::fs::fstat(&fd).unwrap().st_size, 8192);
        assert!(rustix::fs::ftruncate(&fd, 4096).is_err());
        assert!(rustix::fs::ftruncate(&fd, 16384).is_err());
        assert!(rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE).is_err());
        assert_eq!(rustix::fs::fstat(&fd).unwrap().st_size, 8192);
    }

    #[test]
    fn importing_an_unsealed_memfd_seals_it_against_shrinking() {
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        seal_for_import(std::os::fd::AsFd::as_fd(&fd), false).unwrap();
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
    }

    #[test]
    fn a_memfd_that_cannot_be_sealed_is_refused_unless_the_policy_accepts_it() {
        let fd = rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let err = seal_for_import(std::os::fd::AsFd::as_fd(&fd), false).unwrap_err();
        assert!(err.to_string().contains("MFD_ALLOW_SEALING"), "{err}");
        seal_for_import(std::os::fd::AsFd::as_fd(&fd), true).unwrap();
    }
}
