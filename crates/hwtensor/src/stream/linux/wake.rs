//! Wake-ups between the two sides of a channel: a byte on the channel's own socket, sent only
//! when the other side said it sleeps, and a wait on that socket, so a peer that dies wakes
//! the sleeper instead of leaving it blocked. The same socket carries the hand-off of each
//! buffer a producer adds to its pool after attach (`Producer::add`): a drain takes only the
//! wake-up bytes at its head and leaves a message (which starts otherwise) to its reader.
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

/// What a wake-up is on the socket. A hand-off message starts with the blob's magic ("HWTB"),
/// never with this byte, so a drain tells the two apart by the first byte.
pub(crate) const WAKE_BYTE: u8 = 1;

/// Wakes the side sleeping on the other end of `socket` (one syscall, never blocking). A full
/// socket already holds wake-ups the peer has not read: nothing is lost by dropping this one.
pub(crate) fn wake(socket: BorrowedFd<'_>) {
    let _ = rustix::net::send(
        socket,
        &[WAKE_BYTE],
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    );
}

/// Sleeps until a peer on one of `sockets` sends a wake-up, a message, or leaves, or
/// `deadline` passes (`None`: no deadline; a deadline already past: one look, no sleep).
/// Bounded by the deadline whatever the peers send: a socket that is readable with nothing to
/// read is looked at again only until then. A message stays on its socket for the caller.
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
                Drained::Message => return Ok(Woken::Message(i)),
                Drained::Closed => return Ok(Woken::Left(i)),
                Drained::Nothing => {}
            }
        }
        if woken {
            return Ok(Woken::Event);
        }
    }
}

/// What one non-blocking look at a socket found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Wake-ups, now read.
    Bytes,
    /// A message at the head, left there (any wake-ups before it were read).
    Message,
    Closed,
    Nothing,
}

/// Reads the wake-ups at the head of `socket` (at most [`DRAIN_BYTES`]), never blocking, and
/// never past them: the bytes are peeked first, and only the wake-ups among the first are read.
pub(crate) fn drain(socket: BorrowedFd<'_>) -> Drained {
    let mut buf = [0u8; DRAIN_BYTES];
    let flags = RecvFlags::DONTWAIT | RecvFlags::PEEK;
    loop {
        let seen = match rustix::net::recv(socket, &mut buf, flags) {
            Ok((0, _)) => return Drained::Closed,
            Ok((n, _)) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return Drained::Nothing,
            // Reset, or not a socket at all: either way the peer is gone.
            Err(_) => return Drained::Closed,
        };
        let wakes = buf[..seen].iter().take_while(|&&b| b == WAKE_BYTE).count();
        if wakes == 0 {
            return Drained::Message;
        }
        // Only this reader takes bytes off the socket, so the peeked wake-ups are still there.
        return match rustix::net::recv(socket, &mut buf[..wakes], RecvFlags::DONTWAIT) {
            Ok(_) | Err(Errno::AGAIN) => Drained::Bytes,
            Err(Errno::INTR) => continue,
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
    fn a_message_after_wake_ups_is_left_on_the_socket_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        wake(a.as_fd());
        rustix::net::send(&a, b"HWTB", SendFlags::empty()).unwrap();
        assert_eq!(wait(&[b.as_fd()], None).unwrap(), Woken::Event);
        assert_eq!(wait(&[b.as_fd()], None).unwrap(), Woken::Message(0));
        let mut head = [0u8; 4];
        rustix::net::recv(&b, &mut head, RecvFlags::DONTWAIT).unwrap();
        assert_eq!(&head, b"HWTB", "the drains took none of the message");
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
