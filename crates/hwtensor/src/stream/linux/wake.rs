//! Wake-ups between the two sides of a channel: a byte on the channel's own socket, sent only
//! when the other side said it sleeps, and a wait on that socket, so a peer that dies wakes
//! the sleeper instead of leaving it blocked.
//!
//! Why the socket and not an eventfd each way: an fd the peer sent us shares its open file
//! description with the peer, `O_NONBLOCK` included, so a hostile peer can make it blocking
//! (and fill an eventfd's counter) at any moment after we checked it, and an eventfd write has
//! no per-call non-blocking flag (`pwritev2(RWF_NOWAIT)` answers `EOPNOTSUPP` on Linux 6.18).
//! A socket takes `MSG_DONTWAIT` on each send and receive: whatever the peer does to the
//! socket, a wake-up never blocks and a drain never blocks, and there is no fd to trust.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};

use crate::stream::Woken;
use crate::{Error, Result};

/// Bytes one look at a socket drains: wake-ups are single bytes, and a peer that sends more
/// only wakes us again (each look is bounded; the caller's deadline bounds the looks).
const DRAIN_BYTES: usize = 256;

/// Wakes the side sleeping on the other end of `socket` (one syscall, never blocking). A full
/// socket already holds wake-ups the peer has not read: nothing is lost by dropping this one.
pub(crate) fn wake(socket: BorrowedFd<'_>) {
    let _ = rustix::net::send(socket, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
}

/// Sleeps until a peer on one of `sockets` sends a wake-up or leaves, or `deadline` passes
/// (`None`: no deadline; a deadline already past: one look, no sleep). Bounded by the
/// deadline whatever the peers send: a socket that is readable with nothing to read is looked
/// at again only until then.
pub(crate) fn wait(sockets: &[BorrowedFd<'_>], deadline: Option<Instant>) -> Result<Woken> {
    let mut first = true;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !first && left.is_some_and(|l| l.is_zero()) {
            return Ok(Woken::Timeout);
        }
        first = false;
        let mut fds: Vec<PollFd<'_>> = sockets
            .iter()
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
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(Error::os("poll of a channel's sockets", e)),
        }
        let ready: Vec<usize> = (0..fds.len())
            .filter(|&i| !fds[i].revents().is_empty())
            .collect();
        let mut woken = false;
        for i in ready {
            match drain(sockets[i]) {
                Drained::Bytes => woken = true,
                Drained::Closed => return Ok(Woken::Left(i)),
                Drained::Nothing => {}
            }
        }
        if woken {
            return Ok(Woken::Event);
        }
    }
}

/// What one non-blocking read of a socket found.
enum Drained {
    Bytes,
    Closed,
    Nothing,
}

fn drain(socket: BorrowedFd<'_>) -> Drained {
    let mut buf = [0u8; DRAIN_BYTES];
    loop {
        return match rustix::net::recv(socket, &mut buf, RecvFlags::DONTWAIT) {
            Ok((0, _)) => Drained::Closed,
            Ok(_) => Drained::Bytes,
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => Drained::Nothing,
            // Reset, or not a socket at all: either way the peer is gone.
            Err(_) => Drained::Closed,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    #[test]
    fn a_wake_up_wakes_the_other_end_once_and_is_drained() {
        let (a, b) = UnixStream::pair().unwrap();
        wake(a.as_fd());
        wake(a.as_fd());
        assert_eq!(wait(&[b.as_fd()], None).unwrap(), Woken::Event);
        let soon = Some(Instant::now() + Duration::from_millis(20));
        assert_eq!(wait(&[b.as_fd()], soon).unwrap(), Woken::Timeout);
    }

    #[test]
    fn a_peer_that_left_is_told_apart_from_a_wake_up() {
        let (a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        drop(a);
        assert_eq!(wait(&[d.as_fd(), b.as_fd()], None).unwrap(), Woken::Left(1));
    }

    #[test]
    fn a_wake_up_to_a_peer_that_never_reads_does_not_block() {
        let (a, _b) = UnixStream::pair().unwrap();
        // Far more than any socket buffer holds: every send past it is dropped, not waited on.
        for _ in 0..1_000_000 {
            wake(a.as_fd());
        }
    }
}
