//! The set-up message on a Unix socket: the control block's fd and the fence's in the first
//! byte's ancillary data (`SCM_RIGHTS`), received close-on-exec and within a deadline.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::handoff::{readable_by, MID_MESSAGE_TIMEOUT};
use crate::stream::setup::{self, bad, Setup, LEN};
use crate::{Error, Result};

/// fds a set-up message carries at most: the control block, the fence.
const MAX_HANDLES: usize = 2;

/// Sends set-up message `msg` with `fds` (all in the first byte's ancillary data).
pub(crate) fn send(stream: &UnixStream, msg: &[u8; LEN], fds: &[BorrowedFd<'_>]) -> Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_HANDLES))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(bad("the fds do not fit one message"));
    }
    let mut sent = 0;
    while sent < LEN {
        let iov = [IoSlice::new(&msg[sent..])];
        match rustix::net::sendmsg(stream, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => {
                sent += n;
                control.clear();
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(bad(format!("send failed: {e}"))),
        }
    }
    Ok(())
}

/// Receives and checks a set-up message: its first byte by `deadline`, the rest by the
/// earlier of `deadline` and [`MID_MESSAGE_TIMEOUT`] after the first. Never blocking in the
/// receive itself, so the bound holds on a socket in either blocking mode.
pub(crate) fn recv(stream: &UnixStream, deadline: Instant) -> Result<Setup<OwnedFd>> {
    let mut msg = [0u8; LEN];
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut got = 0;
    let mut started: Option<Instant> = None;
    while got < LEN {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_HANDLES))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut msg[got..])];
        let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
        let r = match rustix::net::recvmsg(stream, &mut iov, &mut control, flags) {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                let by = started.map_or(deadline, |s| deadline.min(s + MID_MESSAGE_TIMEOUT));
                if readable_by(stream, by)? {
                    continue;
                }
                return Err(match started {
                    None => Error::Timeout("no channel set-up within the timeout".into()),
                    Some(_) => bad(format!("the producer stalled after {got} of {LEN} bytes")),
                });
            }
            Err(e) => return Err(bad(format!("receive failed: {e}"))),
        };
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if r.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_HANDLES {
            return Err(bad("more fds than a set-up carries"));
        }
        if r.bytes == 0 {
            return Err(bad(format!(
                "the producer closed the socket after {got} of {LEN} bytes"
            )));
        }
        started.get_or_insert_with(Instant::now);
        got += r.bytes;
    }
    setup::parse(&msg, fds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn a_truncated_set_up_is_an_error_not_a_hang() {
        let (a, b) = UnixStream::pair().unwrap();
        rustix::io::write(&a, &setup::encode(3, 4, false, false)[..10]).unwrap();
        drop(a);
        let err = recv(&b, far()).unwrap_err();
        assert!(err.to_string().contains("after 10 of 24"), "{err}");
    }

    #[test]
    fn a_producer_silent_before_its_set_up_is_a_timeout_at_the_deadline() {
        let (_a, b) = UnixStream::pair().unwrap();
        let soon = Instant::now() + Duration::from_millis(100);
        assert!(matches!(recv(&b, soon), Err(Error::Timeout(_))));
    }

    #[test]
    fn a_producer_that_stalls_mid_set_up_is_an_error_by_the_deadline() {
        let (a, b) = UnixStream::pair().unwrap();
        rustix::io::write(&a, &setup::encode(3, 4, false, false)[..10]).unwrap();
        let soon = Instant::now() + Duration::from_millis(100);
        let err = recv(&b, soon).unwrap_err();
        assert!(err.to_string().contains("stalled after 10 of 24"), "{err}");
    }

    #[test]
    fn a_set_up_arrives_whole_with_its_fd_on_a_non_blocking_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let block = rustix::pipe::pipe().unwrap().0;
            send(&a, &setup::encode(3, 4, false, false), &[block.as_fd()]).unwrap();
            a
        });
        assert_eq!(recv(&b, far()).unwrap().slots, 3);
        drop(sender.join());
    }

    #[test]
    fn a_set_up_with_fewer_fds_than_it_names_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let block = rustix::pipe::pipe().unwrap().0;
        send(&a, &setup::encode(3, 4, true, false), &[block.as_fd()]).unwrap();
        let err = recv(&b, far()).unwrap_err();
        assert!(err.to_string().contains("1 handles where 2"), "{err}");
    }
}
