//! Linux: who this process is, what runs at exit, and the fd helpers the backings and the
//! Vulkan backend share. Every `/proc` read, every raw syscall without a safe wrapper, lives here.

// Raw syscalls (kcmp, fstat on a bare number, close) and atexit.
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use rustix::fs::FileType;

/// Who this process is: pid and start time (clock ticks after boot, from /proc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessKey {
    pub pid: u32,
    pub start_time: u64,
}

impl ProcessKey {
    /// The claim token: the low half of the start time. Two processes that held the same pid
    /// in one namespace (the only ones that share a record) started at different ticks; their
    /// tokens collide only if their starts are a multiple of 2^32 ticks (over a year) apart.
    pub(crate) fn token(self) -> u32 {
        self.start_time as u32
    }

    /// This process: its pid and start time. The start time is read from `/proc` once per pid
    /// (every GPU allocation and every rendezvous step asks), and again only after a fork.
    pub(crate) fn current() -> Option<ProcessKey> {
        static KNOWN: std::sync::Mutex<Option<ProcessKey>> = std::sync::Mutex::new(None);
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let mut known = KNOWN.lock().ok()?;
        if let Some(key) = *known {
            if key.pid == pid {
                return Some(key);
            }
        }
        let key = ProcessKey {
            pid,
            start_time: start_time_of("self")?,
        };
        *known = Some(key);
        Some(key)
    }
}

/// Field 22 of /proc/<pid>/stat: when the process started.
pub(crate) fn start_time_of(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`), 0 where it cannot be read.
/// Part of the GPU rendezvous record's name: a process of another namespace may have our pid.
pub(crate) fn pid_namespace() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| rustix::fs::stat("/proc/self/ns/pid").map_or(0, |st| st.st_ino))
}

/// Whether process `pid` of this pid namespace exists.
pub(crate) fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

/// Runs `hook` at normal process exit (or at `dlclose` of a library that registered it, while
/// its code is still mapped). `false` when it cannot be registered.
pub(crate) fn at_exit(hook: extern "C" fn()) -> bool {
    // SAFETY: `atexit` takes a plain function of this copy and keeps only its address.
    unsafe { libc::atexit(hook) == 0 }
}

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

    #[test]
    fn this_process_has_a_start_time() {
        let me = ProcessKey::current().unwrap();
        assert!(me.start_time > 0);
        assert_eq!(start_time_of(&me.pid.to_string()), Some(me.start_time));
    }
}
