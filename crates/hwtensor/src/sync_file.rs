//! [`SyncFile`]: a Linux DMA-fence sync_file, the fence the Linux media stack hands around
//! (V4L2, DRM/KMS, Wayland's linux-drm-syncobj, GPU drivers' `SYNC_FD` exports, EdgeFirst's
//! `fence_fd`). Unlike hwtensor's own timeline it is a one-shot fence: it signals once.
//!
//! A received one is only ever waited for, on the CPU by `poll` with a bound, before the
//! memory it guards is read: it is never merged into hwtensor's timeline, so a producer whose
//! fence never signals costs its consumer a timeout, not a device that waits for ever.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::os::classify::FdKind;
use crate::{Error, Result};

/// A DMA-fence sync_file, checked to be one.
#[derive(Debug)]
pub struct SyncFile {
    fd: OwnedFd,
}

impl SyncFile {
    /// Takes `fd` as a sync_file; anything else (an eventfd, a pipe, a driver's own fence
    /// object) is refused by name and closed, since `poll` on it would not mean "signalled".
    pub fn from_fd(fd: OwnedFd) -> Result<SyncFile> {
        let kind = FdKind::of(fd.as_fd())?;
        if !kind.is_sync_file() {
            return Err(Error::Fd(format!(
                "expected a DMA-fence sync_file, got {}",
                kind.describe()
            )));
        }
        Ok(SyncFile { fd })
    }

    /// Whether the fence has signalled (it never unsignals).
    pub fn is_signalled(&self) -> Result<bool> {
        readable(self.fd.as_fd(), Duration::ZERO)
    }

    /// Waits at most `timeout` for the fence to signal: `Error::Timeout` naming the bound if it
    /// does not, so a producer that never finishes costs a bounded wait.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        match readable(self.fd.as_fd(), timeout)? {
            true => Ok(()),
            false => Err(Error::Timeout(format!(
                "a sync_file fence did not signal within {timeout:?}: its producer has not \
                 finished the frame (or never will)"
            ))),
        }
    }

    /// The fd, to hand on.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for SyncFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether `fd` polls readable within `timeout` (a sync_file does once signalled), retrying
/// interrupted polls with what is left of the bound.
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let spec = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&spec)) {
            Ok(0) => return Ok(false),
            Ok(_) if fds[0].revents().contains(PollFlags::IN) => return Ok(true),
            Ok(_) => {
                return Err(Error::Fd(format!(
                    "polling a sync_file reported {:?}, not a signal",
                    fds[0].revents()
                )))
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                return Err(Error::Os {
                    op: "polling a sync_file",
                    source: e.into(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd(initial: u32) -> OwnedFd {
        rustix::event::eventfd(initial, rustix::event::EventfdFlags::CLOEXEC).unwrap()
    }

    #[test]
    fn an_eventfd_a_pipe_and_a_memfd_are_refused_as_sync_files_by_what_they_are() {
        let (pipe, _w) = std::io::pipe().unwrap();
        let memfd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        for (fd, what) in [
            (eventfd(0), "eventfd"),
            (pipe.into(), "pipe"),
            (memfd, "shm"),
        ] {
            let err = SyncFile::from_fd(fd).unwrap_err().to_string();
            assert!(err.contains("sync_file") && err.contains(what), "{err}");
        }
    }

    // The bounded poll is the one a sync_file gets; an eventfd polls readable the same way
    // once its counter is set, so it stands in for a fence here (no machine of ours can make a
    // sync_file without a GPU or sw_sync).
    #[test]
    fn the_poll_wait_returns_once_readable_and_times_out_at_its_bound_when_not() {
        assert!(readable(eventfd(1).as_fd(), Duration::from_secs(5)).unwrap());
        let started = Instant::now();
        assert!(!readable(eventfd(0).as_fd(), Duration::from_millis(30)).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
