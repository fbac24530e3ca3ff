//! The channel on Windows: a connected named pipe carries the set-up; the control block is a
//! pagefile-backed section, and wake-ups are events, which the consumer duplicates out of the
//! producer's process as it does a hand-off's sections (the pipe names the producer, never the
//! message; both must run as one user). Pools are shared memory: GPU textures cross with
//! `Tensor::share_gpu`, and a frame never carries a GPU completion.
//!
//! Why events and not bytes on the pipe (as Linux's socket): under Wine a pipe wake-up took
//! 125 us one way against 74 us for an event (a ping-pong of each between two threads), every
//! overlapped read being several calls into the server. An event does not tell that its
//! peer died, so a sleeper also waits on the peer's process (signalled when it exits) and on a
//! shared "closed" event, which a side that leaves while its process lives sets (a dropped
//! `Consumer` whose frames still hold its handles).

use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::time::{Duration, Instant};

use crate::backing::SectionMapping;
use crate::handoff::MID_MESSAGE_TIMEOUT;
use crate::identity::BufferIdentity;
use crate::os::pipe;
use crate::os::sync::{self, MAX_WAIT_OBJECTS};
use crate::stream::access::{Lending, Peer};
use crate::stream::setup::Refusal;
use crate::stream::setup::{self, bad, Setup, LEN};
use crate::stream::Woken;
use crate::{Error, Result, TensorDyn, TensorMemory};

/// The connection a channel runs over: a connected named pipe ([`crate::handoff::Pipe`]).
pub type Link = pipe::Pipe;

/// A producer's listening pipe: `bind(name)`, then `accept(timeout)` per consumer.
pub use crate::os::pipe::Listener;

/// Connects to the producer serving pipe `address`, waiting at most
/// [`CONNECT_TIMEOUT`](super::CONNECT_TIMEOUT) for it to listen.
pub fn connect(address: &str) -> Result<Link> {
    pipe::Pipe::connect(address, super::CONNECT_TIMEOUT)
}

/// Windows pools carry no GPU completion: a fence that never exists (always `None`).
pub(crate) type PeerFence = std::convert::Infallible;

/// Handle values after the set-up message: the block, the consumer's and the producer's wake-up
/// events, the shared "closed" event.
const HANDLES: usize = 4;
/// Bytes of the set-up as it travels here: the message and the handle values.
const SETUP_BYTES: usize = LEN + HANDLES * 8;
/// Objects one side waits on per connection: its wake-up event, "closed", the peer's process.
const WAITS_PER_CONN: usize = 3;

/// A channel's connection once set up.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The pipe the set-up and the pool went over, kept for the channel's life.
    pipe: Link,
    /// Set to wake the peer.
    wake_peer: OwnedHandle,
    /// Set by the peer to wake this side.
    woken: OwnedHandle,
    /// Set, and left set, by the side that leaves.
    closed: OwnedHandle,
    /// The peer's process: signalled when it exits, whatever it did before.
    peer: OwnedHandle,
}

impl Conn {
    fn try_clone(&self) -> Result<Conn> {
        let dup = |h: &OwnedHandle| {
            h.try_clone().map_err(|source| Error::Os {
                op: "duplicating a channel handle",
                source,
            })
        };
        Ok(Conn {
            pipe: self.pipe.try_clone()?,
            wake_peer: dup(&self.wake_peer)?,
            woken: dup(&self.woken)?,
            closed: dup(&self.closed)?,
            peer: dup(&self.peer)?,
        })
    }
}

/// The link under a connection, for the pool's hand-offs.
pub(crate) fn link(conn: &Conn) -> &Link {
    &conn.pipe
}

/// Wakes the side sleeping on the other end of `conn` (never waits).
pub(crate) fn wake(conn: &Conn) {
    sync::set(&conn.wake_peer);
}

/// Sleeps until a peer on one of `conns` wakes us or leaves, or `deadline` passes (`None`: no
/// deadline). Bounded by the deadline whatever the peers do with the events.
pub(crate) fn wait(conns: &[&Conn], deadline: Option<Instant>) -> Result<Woken> {
    let objects: Vec<&OwnedHandle> = conns
        .iter()
        .flat_map(|c| [&c.woken, &c.closed, &c.peer])
        .collect();
    Ok(match sync::wait_any(&objects, deadline)? {
        Some(i) if i % WAITS_PER_CONN == 0 => Woken::Event,
        Some(i) => Woken::Left(i / WAITS_PER_CONN),
        None => Woken::Timeout,
    })
}

/// Tells the peer this side left (never waits).
pub(crate) fn leave(conn: &Conn) {
    sync::set(&conn.closed);
}

/// A second handle to `conn`'s objects, for frames to wake the producer on from any thread.
pub(crate) fn duplicate(conn: &Conn) -> Result<Conn> {
    conn.try_clone()
}

/// Whether a producer with `attached` consumers may take one more: a producer waits on all
/// their objects at once, and Windows waits on at most 64.
pub(crate) fn room_for_consumer(attached: usize) -> Result<()> {
    let most = MAX_WAIT_OBJECTS / WAITS_PER_CONN;
    match attached < most {
        true => Ok(()),
        false => Err(Error::InvalidOperation(format!(
            "a channel on Windows serves at most {most} consumers"
        ))),
    }
}

/// Refuses a pool buffer a consumer could not import by reference: on Windows, anything but
/// shared memory.
pub(crate) fn lendable(t: &TensorDyn) -> Result<()> {
    match t.memory() {
        TensorMemory::Shm => Ok(()),
        memory => Err(Error::Unavailable {
            memory,
            reason: "a channel on Windows lends shared memory (sections): allocate the pool \
                     with TensorMemory::Shm (GPU textures cross with Tensor::share_gpu)"
                .into(),
        }),
    }
}

/// The control block: a section, mapped.
#[derive(Debug)]
pub(crate) struct Block(SectionMapping);

/// What a consumer receives the block as: its duplicate of the producer's section handle.
pub(crate) type BlockHandle = OwnedHandle;

impl Block {
    /// A new zeroed block of `len` bytes.
    pub(crate) fn create(len: usize) -> Result<Block> {
        Ok(Block(SectionMapping::allocate(len)?))
    }

    /// The producer's block as a consumer maps it: a section (a section's size is fixed, so no
    /// peer can shrink it later) of at least `len` bytes, mapped writable.
    pub(crate) fn open(handle: OwnedHandle, len: usize) -> Result<Block> {
        // Not a tensor: the identity is never read.
        let identity = BufferIdentity::Section { pid: 0, serial: 0 };
        SectionMapping::import(handle, len, identity)
            .map(Block)
            .map_err(|e| block_error(format!("cannot be used: {e}")))
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// A handle for another side of this process to open (tests and the fuzz target).
    pub(crate) fn share(&self) -> Result<BlockHandle> {
        self.0
            .handle()
            .try_clone_to_owned()
            .map_err(|source| Error::Os {
                op: "duplicating the channel's control block",
                source,
            })
    }
}

pub(crate) fn block_error(what: String) -> Error {
    Error::Handoff(format!("the channel's control block {what}"))
}

/// A handle to the process on the other end of `link`, to see it exit.
fn peer_process(link: &Link) -> Result<OwnedHandle> {
    sync::watch_process(link.peer_pid()?)
}

/// Sends the set-up on `link`: the message, then the handle values of the block and of the
/// three events the producer made for this consumer.
pub(crate) fn send_setup(
    link: Link,
    capacity: u32,
    block: &Block,
    pool: &[TensorDyn],
    _lending: Lending,
    info: bool,
) -> Result<Conn> {
    let (to_consumer, to_producer, closed) =
        (sync::event(false)?, sync::event(false)?, sync::event(true)?);
    let mut msg = [0u8; SETUP_BYTES];
    // Never "read-only": a consumer here duplicates the sections out of the producer with the
    // access it asks for, so read-only lending is its own choice (`Lending::Read` narrows its
    // maps), not the producer's.
    let flags = setup::Flags {
        info,
        ..setup::Flags::default()
    };
    msg[..LEN].copy_from_slice(&setup::encode_with(pool.len() as u32, capacity, flags));
    let values = [
        block.0.handle().as_raw_handle(),
        to_consumer.as_raw_handle(),
        to_producer.as_raw_handle(),
        closed.as_raw_handle(),
    ];
    for (i, v) in values.into_iter().enumerate() {
        msg[LEN + i * 8..LEN + i * 8 + 8].copy_from_slice(&(v as u64).to_le_bytes());
    }
    link.write_all(&msg, Instant::now() + MID_MESSAGE_TIMEOUT)?;
    Ok(Conn {
        peer: peer_process(&link)?,
        pipe: link,
        wake_peer: to_consumer,
        woken: to_producer,
        closed,
    })
}

/// Sends `refusal` in the set-up's place (padded to a set-up's length, so the consumer reads
/// it whole), and leaves the pipe.
pub(crate) fn refuse(link: Link, refusal: Refusal) -> Result<()> {
    let mut msg = [0u8; SETUP_BYTES];
    msg[..LEN].copy_from_slice(&refusal.encode());
    link.write_all(&msg, Instant::now() + MID_MESSAGE_TIMEOUT)
}

/// Who the consumer on `link` is: on Windows always a process of this user, by construction (a
/// consumer duplicates the pool's handles out of the producer's process, which the system
/// grants only to the producer's own user and administrators).
pub(crate) fn peer(_link: &Link) -> Result<Peer> {
    Ok(Peer {
        own_user: true,
        uid: None,
        gid: None,
    })
}

/// Whether `pool` can be lent read-only by the producer: not on Windows (see `send_setup`).
pub(crate) fn read_only_lendable(_pool: &[TensorDyn]) -> bool {
    false
}

/// Nothing to guard on Windows: consumers are of this user (see [`peer`]).
pub(crate) fn guard_from_other_users(_pool: &[TensorDyn]) -> Result<()> {
    Ok(())
}

/// Hands `t` to the consumer on `conn` by reference (sections: see `send_setup` for why
/// `lending` changes nothing here).
pub(crate) fn lend(conn: &Conn, t: &TensorDyn, _lending: Lending) -> Result<()> {
    crate::handoff::send_as(&conn.pipe, t, crate::blob::Transport::Reference)
}

/// Receives the set-up on `link` by `deadline`: the message's first byte by then, the rest
/// within [`MID_MESSAGE_TIMEOUT`] of it; every handle duplicated out of the producer, and the
/// events checked to be events (the block is checked when it is mapped).
pub(crate) fn recv_setup(
    link: Link,
    deadline: Instant,
) -> Result<(Setup<BlockHandle>, Option<PeerFence>, Conn)> {
    let mut msg = [0u8; SETUP_BYTES];
    link.read_exact(&mut msg[..1], deadline)
        .map_err(|e| match e {
            Error::Timeout(_) => Error::Timeout("no channel set-up within the timeout".into()),
            e => e,
        })?;
    let rest = deadline.min(Instant::now() + MID_MESSAGE_TIMEOUT);
    link.read_exact(&mut msg[1..], rest)
        .map_err(|e| bad(format!("the producer's message broke off: {e}")))?;
    let head: &[u8; LEN] = msg[..LEN].try_into().unwrap_or(&[0; LEN]);
    let value = |i: usize| {
        let at = LEN + i * 8;
        u64::from_le_bytes(msg[at..at + 8].try_into().unwrap_or([0; 8]))
    };
    // The block is the one handle the message format counts: one that names a fence is
    // refused here by that count.
    let s = setup::parse(head, vec![value(0)])?;
    let pid = link.peer_pid()?;
    let take = |i: usize| crate::os::handles::duplicate_from(pid, value(i));
    let block = take(0)?;
    let conn = Conn {
        wake_peer: checked_event(take(2)?, "wake-up")?,
        woken: checked_event(take(1)?, "wake-up")?,
        closed: checked_event(take(3)?, "closed")?,
        peer: peer_process(&link)?,
        pipe: link,
    };
    let s = Setup {
        slots: s.slots,
        capacity: s.capacity,
        block,
        fence: None,
        read_only: s.read_only,
        has_info: s.has_info,
    };
    Ok((s, None, conn))
}

/// `h`, refused unless it is an event (resetting it is how to ask: at set-up nothing is
/// pending on it yet).
fn checked_event(h: OwnedHandle, what: &str) -> Result<OwnedHandle> {
    sync::reset(&h).map_err(|e| bad(format!("the producer's {what} handle: {e}")))?;
    Ok(h)
}

/// Whether a pool's frames need a fence: never on Windows (pools are sections).
pub(crate) fn needs_fence(_pool: &[TensorDyn]) -> bool {
    false
}

/// Whether a producer may add buffers after attach: not on Windows yet. A hand-off there
/// waits for the receiver's answer (it duplicates the handles out of the sender, which must
/// hold them until then), and a consumer reads an addition only when it next receives: the
/// producer would stall on every consumer in turn.
pub(crate) fn can_add() -> Result<()> {
    Err(Error::InvalidOperation(
        "a channel on Windows cannot add buffers after attach: make the pool whole before \
         consumers attach"
            .into(),
    ))
}

/// Receives a buffer a producer added, by `deadline`: its hand-off on the pipe. Our producers
/// add none on Windows ([`can_add`]); a frame naming the next buffer still comes here, and is
/// refused unless a hand-off is really there.
pub(crate) fn recv_addition(conn: &Conn, deadline: Instant) -> Result<TensorDyn> {
    crate::handoff::recv_by(&conn.pipe, deadline)
}

/// Never runs: a Windows consumer has no fence.
pub(crate) fn wait_fence(fence: &PeerFence, _value: u64, _bound: Duration) -> Result<()> {
    match *fence {}
}

/// A pool of sections has no GPU writes to wait for.
pub(crate) fn completion(_t: &TensorDyn) -> Result<u64> {
    Ok(0)
}

/// Runs `then` now: no GPU work of this process reads a section frame after its CPU use.
pub(crate) fn after_gpu_use(_t: &TensorDyn, then: impl FnOnce() + Send + 'static) {
    then()
}
