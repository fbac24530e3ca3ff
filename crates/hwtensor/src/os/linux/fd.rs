//! The fd helpers the backings and the Vulkan backend share: taking a driver's fd as our own,
//! closing a failed import's dup only while it is still ours, and telling two fds apart.

// Raw syscalls (kcmp, fstat on a bare number, close).
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

use rustix::fs::FileType;

/// Makes a fresh fd from the driver close-on-exec (lavapipe returns them without the flag).
pub(crate) fn own_cloexec(raw: i32) -> Option<OwnedFd> {
    if raw < 0 {
        return None;
    }
    // SAFETY: the driver just created this fd for us and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).ok()?;
    Some(fd)
}

/// Closes the dup handed to a failed import, if the driver left it open.
///
/// Drivers differ: the spec leaves the fd with the caller on failure, but lavapipe closes it
/// anyway when it refuses a memfd's size. Closing it blindly would close whatever file took
/// the number since (or abort on EBADF); so it is closed only while it still names the same
/// file as `original`.
pub(crate) fn close_if_still_ours(raw: i32, original: BorrowedFd<'_>) {
    let Ok(want) = rustix::fs::fstat(original) else {
        return;
    };
    // SAFETY: fstat on a raw number writes only into `st`; a closed number fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let open = unsafe { libc::fstat(raw, &mut st) } == 0;
    if open && st.st_dev == want.st_dev && st.st_ino == want.st_ino {
        // SAFETY: the number is open and still names our memory's file: it is the dup we made.
        unsafe { libc::close(raw) };
    }
}

/// `kcmp` type that compares two fds' open file descriptions (linux/kcmp.h).
const KCMP_FILE: libc::c_long = 0;

/// Whether `a` and `b` name the same open file (the same exported object, not just a file
/// with the same claims): `kcmp`, which compares the kernel's file descriptions. Where `kcmp`
/// is not allowed (seccomp, no CONFIG_KCMP), two regular files with the same device and inode
/// are the same memory; nothing else can be proven, and `false` is the safe answer.
pub(crate) fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let pid = libc::c_long::from(rustix::process::getpid().as_raw_nonzero().get());
    // SAFETY: kcmp only compares kernel objects named by two fd numbers of this process; both
    // are borrowed, so open for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            libc::c_long::from(a.as_raw_fd()),
            libc::c_long::from(b.as_raw_fd()),
        )
    };
    if r >= 0 {
        return r == 0;
    }
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(x), Ok(y)) => {
            FileType::from_raw_mode(x.st_mode) == FileType::RegularFile
                && (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dup_is_the_same_file_and_another_memfd_of_the_same_name_is_not() {
        use std::os::fd::AsFd;
        let flags = rustix::fs::MemfdFlags::CLOEXEC;
        let a = rustix::fs::memfd_create("same", flags).unwrap();
        let b = rustix::fs::memfd_create("same", flags).unwrap();
        let dup = a.try_clone().unwrap();
        assert!(same_file(a.as_fd(), dup.as_fd()));
        assert!(!same_file(a.as_fd(), b.as_fd()));
    }
}
