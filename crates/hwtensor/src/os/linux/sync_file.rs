//! [`SyncFile`]: a Linux DMA-fence sync_file, the fence the Linux media stack hands around
//! (V4L2, DRM/KMS, Wayland's linux-drm-syncobj, GPU drivers' `SYNC_FD` exports, EdgeFirst's
//! `fence_fd`). Unlike hwtensor's own timeline it is a one-shot fence: it signals once. An OS
//! object, so it lives here: the tensors carry it (`crate::sync_file`), the device imports and
//! exports it (`gpu/vulkan/sync_fd.rs`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::classify::FdKind;
use crate::{Error, Result};

/// A DMA-fence sync_file, checked to be one.
#[derive(Debug)]
pub struct SyncFile {
    fd: OwnedFd,
    /// Seen signalled once: a fence never unsignals, so later waits cost no poll.
    signalled: AtomicBool,
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
        Ok(SyncFile::checked(fd))
    }

    /// An fd already known to be a sync_file.
    fn checked(fd: OwnedFd) -> SyncFile {
        SyncFile {
            fd,
            signalled: AtomicBool::new(false),
        }
    }

    /// Whether the fence has signalled (it never unsignals).
    pub fn is_signalled(&self) -> Result<bool> {
        if self.signalled.load(Ordering::Acquire) {
            return Ok(true);
        }
        let now = readable(self.fd.as_fd(), Duration::ZERO)?;
        self.signalled.store(now, Ordering::Release);
        Ok(now)
    }

    /// Waits at most `timeout` for the fence to signal: `Error::Timeout` naming the bound if it
    /// does not, so a producer that never finishes costs a bounded wait.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        if self.signalled.load(Ordering::Acquire) {
            return Ok(());
        }
        match readable(self.fd.as_fd(), timeout)? {
            true => {
                self.signalled.store(true, Ordering::Release);
                Ok(())
            }
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

/// What a tensor holds of a sync_file it must wait for before its bytes are read: shared with
/// its clones (Windows has the same name for a type without values).
pub(crate) type AcquireFence = std::sync::Arc<SyncFile>;

/// Whether `fd` polls readable within `timeout` (a sync_file does once signalled), retrying
/// interrupted polls with what is left of the bound.
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> Result<bool> {
    let deadline = crate::time::deadline_after(timeout);
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
impl SyncFile {
    /// Any pollable fd taken as a fence, for tests: no machine of ours can make a sync_file
    /// without a GPU or sw_sync, and an eventfd polls readable as a signalled fence does.
    pub(crate) fn stand_in(fd: OwnedFd) -> SyncFile {
        SyncFile::checked(fd)
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
