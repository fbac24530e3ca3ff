//! Taking a publisher's fds by number: `pidfd_open` on the pid a message names, then
//! `pidfd_getfd` for each fd number it lists (Linux 5.6+).
//!
//! The kernel allows `pidfd_getfd` only where this process could ptrace the publisher (ptrace
//! access mode `PTRACE_MODE_ATTACH_REALCREDS`): the same user, and Yama's
//! `kernel.yama.ptrace_scope` at 0 (at 1, only a parent may), or `CAP_SYS_PTRACE`. So a
//! message can only name fds of a process whose memory this process could read anyway, and
//! every fd taken is then checked as any import is (its kind, seals, size).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd, RawFd};

use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};

/// Yama's setting, read for the message that explains a refusal.
const PTRACE_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// The publishing process, opened by pid, and the fds taken from it so far (one per number:
/// planes in one buffer name the same fd).
pub(crate) struct Publisher {
    pid: u32,
    pidfd: OwnedFd,
    taken: HashMap<RawFd, OwnedFd>,
}

impl Publisher {
    /// Opens process `pid`; `field` names where the pid was read, for the error.
    pub(crate) fn open(pid: u32) -> Result<Publisher, String> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| {
                format!(
                    "pid: {pid} names no process (a frame by reference must name its publisher)"
                )
            })?;
        let pidfd = pidfd_open(raw, PidfdFlags::empty()).map_err(|e| match e {
            rustix::io::Errno::SRCH => format!(
                "pid: no process {pid} on this host (the publisher exited, or the frame came \
                 from another host with fd numbers instead of inline data)"
            ),
            rustix::io::Errno::NOSYS => {
                "pid: this kernel has no pidfd_open (Linux 5.3+ is needed for frames by \
                 reference; ask the publisher for inline data)"
                    .to_string()
            }
            e => format!("pid: pidfd_open({pid}) failed: {e}"),
        })?;
        Ok(Publisher {
            pid,
            pidfd,
            taken: HashMap::new(),
        })
    }

    /// A copy of the publisher's fd `number` (read from `field`), owned by this process; a
    /// number asked for again gets a duplicate of the same copy.
    pub(crate) fn take(&mut self, number: i64, field: &str) -> Result<OwnedFd, String> {
        let fd = fd_number(number, field)?;
        if let Some(held) = self.taken.get(&fd) {
            return held
                .try_clone()
                .map_err(|e| format!("{field}: dup of fd {fd} failed: {e}"));
        }
        let ours = self.get(fd, field)?;
        let copy = ours
            .try_clone()
            .map_err(|e| format!("{field}: dup of fd {fd} failed: {e}"))?;
        self.taken.insert(fd, ours);
        Ok(copy)
    }

    /// A copy of the publisher's fd `number` that no other field names (nothing kept).
    pub(crate) fn take_once(&self, number: i64, field: &str) -> Result<OwnedFd, String> {
        self.get(fd_number(number, field)?, field)
    }

    /// `pidfd_getfd` of the publisher's fd `fd`.
    fn get(&self, fd: RawFd, field: &str) -> Result<OwnedFd, String> {
        pidfd_getfd(self.pidfd.as_fd(), fd, PidfdGetfdFlags::empty())
            .map_err(|e| self.refusal(e, fd, field))
    }

    /// Why `pidfd_getfd` refused fd `fd`, with what to change.
    fn refusal(&self, e: rustix::io::Errno, fd: RawFd, field: &str) -> String {
        let pid = self.pid;
        match e {
            rustix::io::Errno::BADF => format!("{field}: fd {fd} is not open in process {pid}"),
            rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => format!(
                "{field}: the kernel refused to copy fd {fd} out of process {pid} ({e}): \
                 pidfd_getfd needs ptrace access to the publisher, so run both as the same \
                 user with kernel.yama.ptrace_scope at 0 ({}), or give the subscriber \
                 CAP_SYS_PTRACE, or have the publisher send inline data",
                ptrace_scope()
            ),
            rustix::io::Errno::SRCH => {
                format!("{field}: process {pid} exited before fd {fd} could be taken")
            }
            e => format!("{field}: pidfd_getfd of fd {fd} in process {pid} failed: {e}"),
        }
    }
}

/// The fd number a message field holds, if it is one.
fn fd_number(number: i64, field: &str) -> Result<RawFd, String> {
    RawFd::try_from(number)
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("{field}: {number} is not an fd number"))
}

/// What Yama's ptrace scope is here, in words.
fn ptrace_scope() -> String {
    match std::fs::read_to_string(PTRACE_SCOPE) {
        Ok(v) => format!("it is {} here", v.trim()),
        Err(_) => "Yama is not active here".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fds_of_this_process_are_taken_and_one_number_is_fetched_once() {
        let _fds = crate::edgefirst::fds_held();
        let memfd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let number = std::os::fd::AsRawFd::as_raw_fd(&memfd) as i64;
        let mut me = Publisher::open(std::process::id()).unwrap();
        let a = me.take(number, "planes[0].handle").unwrap();
        let b = me.take(number, "planes[1].handle").unwrap();
        assert_eq!(me.taken.len(), 1);
        let ino = |fd: &OwnedFd| rustix::fs::fstat(fd).unwrap().st_ino;
        assert_eq!(ino(&a), ino(&memfd));
        assert_eq!(ino(&b), ino(&memfd));
    }

    #[test]
    fn a_closed_fd_a_negative_number_and_a_missing_process_each_name_their_field() {
        let _fds = crate::edgefirst::fds_held();
        let mut me = Publisher::open(std::process::id()).unwrap();
        let not_open = {
            let fd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
            std::os::fd::AsRawFd::as_raw_fd(&fd) as i64 + 1000
        };
        let err = me.take(not_open, "planes[0].handle").unwrap_err();
        assert!(
            err.starts_with("planes[0].handle") && err.contains("not open"),
            "{err}"
        );
        let err = me.take(-5, "planes[1].handle").unwrap_err();
        assert!(err.contains("not an fd number"), "{err}");
        let err = Publisher::open(0).err().unwrap();
        assert!(err.starts_with("pid:"), "{err}");
        // Past the kernel's pid_max (at most 2^22): no such process can exist.
        let err = Publisher::open(1 << 23).err().unwrap();
        assert!(
            err.starts_with("pid:") && err.contains("no process"),
            "{err}"
        );
    }
}
