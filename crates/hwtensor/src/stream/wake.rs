//! Wake-ups between the two sides of a channel: an eventfd each way, written only when the
//! other side said it sleeps, and a wait that also watches the socket, so a peer that dies
//! wakes the sleeper instead of leaving it blocked.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

use crate::{Error, Result};

/// A new eventfd for one direction's wake-ups.
pub(crate) fn new_eventfd() -> Result<OwnedFd> {
    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| Error::os("eventfd", e))
}

/// Wakes the side sleeping on `fd` (one syscall).
pub(crate) fn wake(fd: BorrowedFd<'_>) {
    // A full counter (2^64 - 2 wake-ups unread) still wakes the reader: ignoring the error is
    // right, and it cannot happen in practice.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// What ended a wait.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// One of the eventfds was written (and is now drained).
    Event,
    /// One of the sockets is readable or hung up: the peer left, or broke the protocol.
    Socket(usize),
    /// The deadline passed.
    Timeout,
}

/// Sleeps until one of `events` is written, one of `sockets` becomes readable or hangs up, or
/// `deadline` passes (`None`: no deadline; a deadline already past: one look, no sleep).
pub(crate) fn wait(
    events: &[BorrowedFd<'_>],
    sockets: &[BorrowedFd<'_>],
    deadline: Option<Instant>,
) -> Result<Woken> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let mut fds: Vec<PollFd<'_>> = events
            .iter()
            .chain(sockets)
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        let timeout = left.map(|l| {
            Timespec::try_from(l).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) if left.is_some() => return Ok(Woken::Timeout),
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::os("poll of a channel's wake-ups", e)),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        if let Some(i) = ready[events.len()..].iter().position(|r| *r) {
            return Ok(Woken::Socket(i));
        }
        if ready[..events.len()].iter().any(|r| *r) {
            for (fd, _) in events.iter().zip(&ready).filter(|(_, r)| **r) {
                drain(fd.as_fd());
            }
            return Ok(Woken::Event);
        }
    }
}

/// Reads an eventfd's counter back to zero.
fn drain(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 8];
    let _ = rustix::io::read(fd, &mut buf);
}
