//! The set-up message that opens a channel: what the pool and the rings look like. The control
//! block and (for GPU pools) the producer's fence travel beside it as the platform passes
//! handles (fds in the same message on Linux, handle values to duplicate on Windows: see the
//! platform folders); the pool's buffers follow as ordinary hand-offs. Parsed as hostile input.

use super::ring::{MAX_CAPACITY, VERSION};
use crate::{Error, Result};

/// "HWTCHAN1": what a set-up message starts with.
const MAGIC: [u8; 8] = *b"HWTCHAN1";
/// Bytes of the message: magic, version, slots, ring capacity, flags.
pub(crate) const LEN: usize = 24;
/// Flag: a fence comes after the control block.
pub(crate) const HAS_FENCE: u32 = 1;
/// Flag: the pool is lent read-only (the producer's attach policy does not let this consumer
/// write).
pub(crate) const READ_ONLY: u32 = 2;
/// Flag: the producer's stream description follows the pool ([`super::Producer::set_stream_info`]).
pub(crate) const HAS_INFO: u32 = 4;

/// What a set-up message says, with the handles (of type `H`: fds, section handles) that came
/// with it.
#[derive(Debug)]
pub(crate) struct Setup<H> {
    pub slots: u32,
    pub capacity: u32,
    pub block: H,
    #[cfg_attr(windows, allow(dead_code))] // Windows pools carry no fence: always `None` there
    pub fence: Option<H>,
    /// The pool is lent read-only.
    pub read_only: bool,
    /// A stream description follows the pool.
    pub has_info: bool,
}

/// A set-up message that is not one: the peer is no channel producer of this version, or is
/// hostile (`Error::Protocol`, which callers tell apart from a peer that left).
fn garbage(what: impl Into<String>) -> Error {
    Error::Protocol(format!("channel set-up: {}", what.into()))
}

pub(crate) fn bad(what: impl Into<String>) -> Error {
    Error::Handoff(format!("channel set-up: {}", what.into()))
}

/// What a set-up says besides the pool's size: whether a fence comes, whether the pool is lent
/// read-only, whether a stream description follows the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    pub fence: bool,
    pub read_only: bool,
    pub info: bool,
}

impl Flags {
    fn word(self) -> u32 {
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        bit(self.fence, HAS_FENCE) | bit(self.read_only, READ_ONLY) | bit(self.info, HAS_INFO)
    }
}

/// The message for a pool of `slots` buffers and rings of `capacity` entries, lent read-only
/// or not.
/// "HWTREFUS": what a refusal starts with, in the place of a set-up message.
pub(crate) const REFUSAL_MAGIC: [u8; 8] = *b"HWTREFUS";

/// Why a producer refused a consumer: the code a refusal carries. Codes are only appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The attach policy does not admit this consumer's user.
    NotAdmitted = 1,
    /// The consumer asked to write, and the producer lent the pool read-only (the consumer
    /// says this to itself: the set-up says read-only).
    WriteNotGranted = 2,
    /// The pool holds memory that cannot be lent read-only, and this consumer of another user
    /// may not write.
    CannotLendReadOnly = 3,
}

impl Refusal {
    fn from_code(code: u32) -> Option<Refusal> {
        [
            Refusal::NotAdmitted,
            Refusal::WriteNotGranted,
            Refusal::CannotLendReadOnly,
        ]
        .into_iter()
        .find(|r| *r as u32 == code)
    }

    /// The error the consumer's connect returns for this refusal.
    pub(crate) fn to_error(self) -> Error {
        Error::NotPermitted(
            match self {
                Refusal::NotAdmitted => {
                    "the producer's attach policy does not admit this process's user; \
                     [[admit_peer]]"
                }
                Refusal::WriteNotGranted => {
                    "this consumer asked to write the pool, and the producer lends it read-only \
                     to this process's user; connect to read only, or [[grant_write]]"
                }
                Refusal::CannotLendReadOnly => {
                    "the pool holds DMA-BUF, GPU or CUDA memory, which cannot be lent read-only, \
                     and this consumer of another user may not write; [[grant_write]]"
                }
            }
            .into(),
        )
    }

    /// The message that says this refusal in the set-up's place.
    pub(crate) fn encode(self) -> [u8; LEN] {
        let mut msg = [0u8; LEN];
        msg[..8].copy_from_slice(&REFUSAL_MAGIC);
        msg[8..12].copy_from_slice(&super::ring::VERSION.to_le_bytes());
        msg[12..16].copy_from_slice(&(self as u32).to_le_bytes());
        msg
    }

    /// The error a refusal message `msg` says (an unknown code still refuses, by number).
    pub(crate) fn parse(msg: &[u8; LEN]) -> Error {
        let code = u32::from_le_bytes([msg[12], msg[13], msg[14], msg[15]]);
        match Refusal::from_code(code) {
            Some(r) => r.to_error(),
            None => {
                Error::NotPermitted(format!("the producer refused this consumer (code {code})"))
            }
        }
    }
}

#[cfg(test)]
pub(crate) fn encode(slots: u32, capacity: u32, has_fence: bool, read_only: bool) -> [u8; LEN] {
    let flags = Flags {
        fence: has_fence,
        read_only,
        info: false,
    };
    encode_with(slots, capacity, flags)
}

/// The message for a pool of `slots` buffers and rings of `capacity` entries, with `flags`.
pub(crate) fn encode_with(slots: u32, capacity: u32, flags: Flags) -> [u8; LEN] {
    let mut msg = [0u8; LEN];
    msg[..8].copy_from_slice(&MAGIC);
    msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
    msg[12..16].copy_from_slice(&slots.to_le_bytes());
    msg[16..20].copy_from_slice(&capacity.to_le_bytes());
    msg[20..24].copy_from_slice(&flags.word().to_le_bytes());
    msg
}

/// Checks a received message and the handles that came with it. A producer's refusal in the
/// set-up's place is the `Error::NotPermitted` it says.
pub(crate) fn parse<H>(msg: &[u8; LEN], handles: Vec<H>) -> Result<Setup<H>> {
    let word = |at: usize| u32::from_le_bytes([msg[at], msg[at + 1], msg[at + 2], msg[at + 3]]);
    if msg[..8] == REFUSAL_MAGIC {
        return Err(Refusal::parse(msg));
    }
    if msg[..8] != MAGIC {
        return Err(garbage("not a channel set-up message"));
    }
    if word(8) != VERSION {
        return Err(garbage(format!(
            "version {} (this side speaks {VERSION})",
            word(8)
        )));
    }
    let (slots, capacity, flags) = (word(12), word(16), word(20));
    if slots == 0 || slots > MAX_CAPACITY {
        return Err(garbage(format!("a pool of {slots} buffers")));
    }
    if !capacity.is_power_of_two() || capacity < slots || capacity > MAX_CAPACITY {
        return Err(garbage(format!(
            "a {capacity}-entry ring for {slots} buffers"
        )));
    }
    if flags & !(HAS_FENCE | READ_ONLY | HAS_INFO) != 0 {
        return Err(garbage(format!("unknown flags {flags:#x}")));
    }
    let want = 1 + (flags & HAS_FENCE != 0) as usize;
    if handles.len() != want {
        return Err(garbage(format!(
            "{} handles where {want} belong",
            handles.len()
        )));
    }
    let mut handles = handles.into_iter();
    let mut next = || handles.next().ok_or_else(|| garbage("a handle is missing"));
    Ok(Setup {
        slots,
        capacity,
        block: next()?,
        fence: if want == 2 { Some(next()?) } else { None },
        read_only: flags & READ_ONLY != 0,
        has_info: flags & HAS_INFO != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` stand-in handles: parsing only counts them.
    fn handles(n: usize) -> Vec<()> {
        vec![(); n]
    }

    fn message(slots: u32, capacity: u32, flags: u32) -> [u8; LEN] {
        let mut m = encode(slots, capacity, false, false);
        m[20..24].copy_from_slice(&flags.to_le_bytes());
        m
    }

    #[test]
    fn a_well_formed_set_up_parses_with_its_handles() {
        let s = parse(&message(3, 4, 0), handles(1)).unwrap();
        assert_eq!((s.slots, s.capacity, s.fence.is_some()), (3, 4, false));
        let fenced = encode(3, 4, true, false);
        assert!(parse(&fenced, handles(2)).unwrap().fence.is_some());
        let read_only = encode(3, 4, false, true);
        assert!(parse(&read_only, handles(1)).unwrap().read_only);
        assert!(!s.read_only);
    }

    #[test]
    fn hostile_set_ups_are_refused_by_what_is_wrong() {
        let cases = [
            (message(0, 4, 0), 1, "pool of 0"),
            (message(3, 3, 0), 1, "3-entry ring"),
            (message(8, 4, 0), 1, "4-entry ring"),
            (message(3, 1 << 20, 0), 1, "entry ring"),
            (message(3, 4, 0x10), 1, "unknown flags"),
            (Refusal::NotAdmitted.encode(), 0, "does not admit"),
            (message(3, 4, 0), 3, "3 handles"),
            (message(3, 4, HAS_FENCE), 1, "1 handles"),
        ];
        for (m, n, why) in cases {
            let err = parse(&m, handles(n)).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let mut wrong = message(3, 4, 0);
        wrong[0] = b'X';
        assert!(parse(&wrong, handles(1)).is_err());
        let mut newer = message(3, 4, 0);
        newer[8] = 9;
        assert!(parse(&newer, handles(1))
            .unwrap_err()
            .to_string()
            .contains("version 9"));
    }

    proptest::proptest! {
        #[test]
        fn any_message_and_handle_count_parses_or_is_refused_without_a_panic(
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
            if let Ok(s) = parse(&msg, handles(n)) {
                proptest::prop_assert!(s.slots >= 1 && s.slots <= s.capacity);
                proptest::prop_assert!(s.capacity.is_power_of_two() && s.capacity <= MAX_CAPACITY);
            }
        }
    }

    #[test]
    fn every_refusal_reads_back_as_the_error_it_names() {
        for r in [
            Refusal::NotAdmitted,
            Refusal::WriteNotGranted,
            Refusal::CannotLendReadOnly,
        ] {
            let err = Refusal::parse(&r.encode());
            assert!(matches!(err, Error::NotPermitted(_)), "{err:?}");
            assert_eq!(err.to_string(), r.to_error().to_string());
        }
        let mut unknown = Refusal::NotAdmitted.encode();
        unknown[12] = 77;
        assert!(Refusal::parse(&unknown).to_string().contains("code 77"));
    }
}
