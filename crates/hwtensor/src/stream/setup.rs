//! The set-up message that opens a channel: what the pool and the rings look like, with the
//! control block, the two eventfds and (for GPU pools) the producer's fence beside it. The pool's
//! buffers follow as ordinary hand-offs. Parsed as hostile input.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::ring::{MAX_CAPACITY, VERSION};
use crate::{Error, Result};

/// "HWTCHAN1": what a set-up message starts with.
const MAGIC: [u8; 8] = *b"HWTCHAN1";
/// Bytes of the message: magic, version, slots, ring capacity, flags.
pub(crate) const LEN: usize = 24;
/// Flag: a fence fd comes after the three others.
const HAS_FENCE: u32 = 1;
/// fds a set-up message carries at most: block, forward and back eventfds, fence.
const MAX_FDS: usize = 4;

/// What a set-up message says.
#[derive(Debug)]
pub(crate) struct Setup {
    pub slots: u32,
    pub capacity: u32,
    pub block: OwnedFd,
    /// Written by the producer to wake the consumer.
    pub forward: OwnedFd,
    /// Written by the consumer to wake the producer.
    pub back: OwnedFd,
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
    fds: [BorrowedFd<'_>; 3],
    fence: Option<BorrowedFd<'_>>,
) -> Result<()> {
    let mut msg = [0u8; LEN];
    msg[..8].copy_from_slice(&MAGIC);
    msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
    msg[12..16].copy_from_slice(&slots.to_le_bytes());
    msg[16..20].copy_from_slice(&capacity.to_le_bytes());
    let flags = if fence.is_some() { HAS_FENCE } else { 0 };
    msg[20..24].copy_from_slice(&flags.to_le_bytes());
    let all: Vec<BorrowedFd<'_>> = fds.into_iter().chain(fence).collect();
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

/// Receives and checks a set-up message.
pub(crate) fn recv(stream: &UnixStream) -> Result<Setup> {
    let mut msg = [0u8; LEN];
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut got = 0;
    while got < LEN {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut msg[got..])];
        let r = match rustix::net::recvmsg(stream, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
        {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(Error::Timeout(
                    "no channel set-up within the read timeout".into(),
                ))
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
    let want = 3 + (flags & HAS_FENCE != 0) as usize;
    if fds.len() != want {
        return Err(bad(format!("{} fds where {want} belong", fds.len())));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| bad("an fd is missing"));
    Ok(Setup {
        slots,
        capacity,
        block: next()?,
        forward: next()?,
        back: next()?,
        fence: if want == 4 { Some(next()?) } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| super::super::wake::new_eventfd().unwrap())
            .collect()
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
        let s = parse(&message(3, 4, 0), fds(3)).unwrap();
        assert_eq!((s.slots, s.capacity, s.fence.is_some()), (3, 4, false));
        assert!(parse(&message(3, 4, HAS_FENCE), fds(4))
            .unwrap()
            .fence
            .is_some());
    }

    #[test]
    fn hostile_set_ups_are_refused_by_what_is_wrong() {
        let cases = [
            (message(0, 4, 0), 3, "pool of 0"),
            (message(3, 3, 0), 3, "3-entry ring"),
            (message(8, 4, 0), 3, "4-entry ring"),
            (message(3, 1 << 20, 0), 3, "entry ring"),
            (message(3, 4, 0x10), 3, "unknown flags"),
            (message(3, 4, 0), 2, "2 fds"),
            (message(3, 4, HAS_FENCE), 3, "3 fds"),
        ];
        for (m, n, why) in cases {
            let err = parse(&m, fds(n)).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let mut wrong = message(3, 4, 0);
        wrong[0] = b'X';
        assert!(parse(&wrong, fds(3)).is_err());
        let mut newer = message(3, 4, 0);
        newer[8] = 9;
        assert!(parse(&newer, fds(3))
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
        let err = recv(&b).unwrap_err();
        assert!(err.to_string().contains("after 10 of 24"), "{err}");
    }
}
