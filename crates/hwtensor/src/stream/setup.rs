//! The set-up message that opens a channel: what the pool and the rings look like, with the
//! control block and (for GPU pools) the producer's fence beside it. The pool's buffers follow
//! as ordinary hand-offs. Parsed as hostile input. (Wake-ups travel on the socket itself: see
//! `wake.rs` for why no wake-up fd crosses.)

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::ring::{MAX_CAPACITY, VERSION};
use crate::handoff::{readable_by, MID_MESSAGE_TIMEOUT};
use crate::{Error, Result};

/// "HWTCHAN1": what a set-up message starts with.
const MAGIC: [u8; 8] = *b"HWTCHAN1";
/// Bytes of the message: magic, version, slots, ring capacity, flags.
pub(crate) const LEN: usize = 24;
/// Flag: a fence fd comes after the control block's.
const HAS_FENCE: u32 = 1;
/// fds a set-up message carries at most: the control block, the fence.
const MAX_FDS: usize = 2;

/// What a set-up message says.
#[derive(Debug)]
pub(crate) struct Setup {
    pub slots: u32,
    pub capacity: u32,
    pub block: OwnedFd,
    pub fence: Option<OwnedFd>,
}

fn bad(what: impl Into<String>) -> Error {
    Error::Handoff(format!("channel set-up: {}", what.into()))
}

/// Sends the set-up message with its fds (all in the first byte's ancillary data).
pub(crate) fn send(
    stream: &UnixStream,
    slots: u32,
    capacity: u32,
    block: BorrowedFd<'_>,
    fence: Option<BorrowedFd<'_>>,
) -> Result<()> {
    let mut msg = [0u8; LEN];
    msg[..8].copy_from_slice(&MAGIC);
    msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
    msg[12..16].copy_from_slice(&slots.to_le_bytes());
    msg[16..20].copy_from_slice(&capacity.to_le_bytes());
    let flags = if fence.is_some() { HAS_FENCE } else { 0 };
    msg[20..24].copy_from_slice(&flags.to_le_bytes());
    let all: Vec<BorrowedFd<'_>> = std::iter::once(block).chain(fence).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&all)) {
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
pub(crate) fn recv(stream: &UnixStream, deadline: Instant) -> Result<Setup> {
    let mut msg = [0u8; LEN];
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut got = 0;
    let mut started: Option<Instant> = None;
    while got < LEN {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
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
        if r.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_FDS {
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
    parse(&msg, fds)
}

/// Checks a received message and its fds.
pub(crate) fn parse(msg: &[u8; LEN], fds: Vec<OwnedFd>) -> Result<Setup> {
    let word = |at: usize| u32::from_le_bytes([msg[at], msg[at + 1], msg[at + 2], msg[at + 3]]);
    if msg[..8] != MAGIC {
        return Err(bad("not a channel set-up message"));
    }
    if word(8) != VERSION {
        return Err(bad(format!(
            "version {} (this side speaks {VERSION})",
            word(8)
        )));
    }
    let (slots, capacity, flags) = (word(12), word(16), word(20));
    if slots == 0 || slots > MAX_CAPACITY {
        return Err(bad(format!("a pool of {slots} buffers")));
    }
    if !capacity.is_power_of_two() || capacity < slots || capacity > MAX_CAPACITY {
        return Err(bad(format!("a {capacity}-entry ring for {slots} buffers")));
    }
    if flags & !HAS_FENCE != 0 {
        return Err(bad(format!("unknown flags {flags:#x}")));
    }
    let want = 1 + (flags & HAS_FENCE != 0) as usize;
    if fds.len() != want {
        return Err(bad(format!("{} fds where {want} belong", fds.len())));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| bad("an fd is missing"));
    Ok(Setup {
        slots,
        capacity,
        block: next()?,
        fence: if want == 2 { Some(next()?) } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n).map(|_| rustix::pipe::pipe().unwrap().0).collect()
    }

    fn message(slots: u32, capacity: u32, flags: u32) -> [u8; LEN] {
        let mut m = [0u8; LEN];
        m[..8].copy_from_slice(&MAGIC);
        m[8..12].copy_from_slice(&VERSION.to_le_bytes());
        m[12..16].copy_from_slice(&slots.to_le_bytes());
        m[16..20].copy_from_slice(&capacity.to_le_bytes());
        m[20..24].copy_from_slice(&flags.to_le_bytes());
        m
    }

    #[test]
    fn a_well_formed_set_up_parses_with_its_fds() {
        let s = parse(&message(3, 4, 0), fds(1)).unwrap();
        assert_eq!((s.slots, s.capacity, s.fence.is_some()), (3, 4, false));
        assert!(parse(&message(3, 4, HAS_FENCE), fds(2))
            .unwrap()
            .fence
            .is_some());
    }

    #[test]
    fn hostile_set_ups_are_refused_by_what_is_wrong() {
        let cases = [
            (message(0, 4, 0), 1, "pool of 0"),
            (message(3, 3, 0), 1, "3-entry ring"),
            (message(8, 4, 0), 1, "4-entry ring"),
            (message(3, 1 << 20, 0), 1, "entry ring"),
            (message(3, 4, 0x10), 1, "unknown flags"),
            (message(3, 4, 0), 3, "3 fds"),
            (message(3, 4, HAS_FENCE), 1, "1 fds"),
        ];
        for (m, n, why) in cases {
            let err = parse(&m, fds(n)).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let mut wrong = message(3, 4, 0);
        wrong[0] = b'X';
        assert!(parse(&wrong, fds(1)).is_err());
        let mut newer = message(3, 4, 0);
        newer[8] = 9;
        assert!(parse(&newer, fds(1))
            .unwrap_err()
            .to_string()
            .contains("version 9"));
    }

    proptest::proptest! {
        #[test]
        fn any_message_and_fd_count_parses_or_is_refused_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), LEN),
            keep_magic in proptest::prelude::any::<bool>(),
            n in 0usize..6,
        ) {
            let mut msg = [0u8; LEN];
            msg.copy_from_slice(&bytes);
            if keep_magic {
                msg[..8].copy_from_slice(&MAGIC);
                msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
            }
            if let Ok(s) = parse(&msg, fds(n)) {
                proptest::prop_assert!(s.slots >= 1 && s.slots <= s.capacity);
                proptest::prop_assert!(s.capacity.is_power_of_two() && s.capacity <= MAX_CAPACITY);
            }
        }
    }

    #[test]
    fn a_truncated_set_up_is_an_error_not_a_hang() {
        let (a, b) = UnixStream::pair().unwrap();
        rustix::io::write(&a, &message(3, 4, 0)[..10]).unwrap();
        drop(a);
        let err = recv(&b, far()).unwrap_err();
        assert!(err.to_string().contains("after 10 of 24"), "{err}");
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(30)
    }

    #[test]
    fn a_producer_silent_before_its_set_up_is_a_timeout_at_the_deadline() {
        let (_a, b) = UnixStream::pair().unwrap();
        let soon = Instant::now() + std::time::Duration::from_millis(100);
        assert!(matches!(recv(&b, soon), Err(Error::Timeout(_))));
    }

    #[test]
    fn a_producer_that_stalls_mid_set_up_is_an_error_by_the_deadline() {
        let (a, b) = UnixStream::pair().unwrap();
        rustix::io::write(&a, &message(3, 4, 0)[..10]).unwrap();
        let soon = Instant::now() + std::time::Duration::from_millis(100);
        let err = recv(&b, soon).unwrap_err();
        assert!(err.to_string().contains("stalled after 10 of 24"), "{err}");
    }

    #[test]
    fn a_set_up_arrives_whole_on_a_non_blocking_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            let block = rustix::pipe::pipe().unwrap().0;
            send(&a, 3, 4, block.as_fd(), None).unwrap();
            a
        });
        assert_eq!(recv(&b, far()).unwrap().slots, 3);
        drop(sender.join());
    }
}
