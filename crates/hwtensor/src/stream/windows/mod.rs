//! The channel on Windows: a connected named pipe carries the set-up and the wake-ups; the
//! control block is a pagefile-backed section, which the consumer duplicates out of the
//! producer's process as it does a hand-off's sections (the pipe names the producer, never the
//! message; both must run as one user). Pools are shared memory: GPU textures cross with
//! `Tensor::share_gpu`, and a frame never carries a GPU completion.
//!
//! Wake-ups are bytes on the pipe, as on Linux, rather than events: a byte costs one
//! `WriteFile` as `SetEvent` costs one call, and the sleeper's read on the same pipe also ends
//! when the peer's process dies (the pipe breaks), which an event never tells. A side that
//! leaves while its process lives (a dropped `Consumer` whose frames still hold the pipe) says
//! so with a [`BYE`] byte.

use std::os::windows::io::OwnedHandle;
use std::time::{Duration, Instant};

use crate::backing::SectionMapping;
use crate::handoff::MID_MESSAGE_TIMEOUT;
use crate::identity::BufferIdentity;
use crate::os::pipe::{self, Read, MAX_WATCHED};
use crate::stream::setup::{self, bad, Setup, LEN};
use crate::stream::Woken;
use crate::{Error, Result, TensorDyn, TensorMemory};

/// The connection a channel runs over: a connected named pipe ([`crate::handoff::Pipe`]).
pub type Link = pipe::Pipe;

/// Windows pools carry no GPU completion: a fence that never exists (always `None`).
pub(crate) type PeerFence = std::convert::Infallible;

/// A wake-up.
const WAKE: u8 = 1;
/// "This side left": sent by a producer or consumer that is dropped, since another handle to
/// its pipe (a frame's) may keep the pipe itself open.
const BYE: u8 = 0xff;
/// Bytes one look at a pipe drains: a peer that sends more only wakes us again.
const DRAIN_BYTES: usize = 256;
/// Bytes of a handle value after the set-up message.
const HANDLE_BYTES: usize = 8;

/// Wakes the side sleeping on the other end of `link`. Never waits: a write the pipe cannot
/// take at once (the peer reads nothing, its buffer is full) is cancelled, and the peer has
/// wake-ups unread already.
pub(crate) fn wake(link: &Link) {
    let _ = link.write_all(&[WAKE], Instant::now());
}

/// Sleeps until a peer on one of `links` wakes us or leaves, or `deadline` passes (`None`: no
/// deadline). Bounded by the deadline whatever the peers send.
pub(crate) fn wait(links: &[&Link], deadline: Option<Instant>) -> Result<Woken> {
    let mut bufs = vec![[0u8; DRAIN_BYTES]; links.len()];
    loop {
        let reads = pipe::read_any(links, &mut bufs, deadline)?;
        let mut woken = false;
        for (i, read) in reads.into_iter().enumerate() {
            match read {
                Read::Closed => return Ok(Woken::Left(i)),
                Read::Bytes(n) if bufs[i][..n].contains(&BYE) => return Ok(Woken::Left(i)),
                Read::Bytes(_) => woken = true,
                Read::Nothing => {}
            }
        }
        if woken {
            return Ok(Woken::Event);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Woken::Timeout);
        }
    }
}

/// Tells the peer this side left (never waits; a broken pipe tells it anyway).
pub(crate) fn leave(link: &Link) {
    let _ = link.write_all(&[BYE], Instant::now());
}

/// A second handle to `link`, for frames to wake the producer on from any thread.
pub(crate) fn duplicate(link: &Link) -> Result<Link> {
    link.try_clone()
}

/// Whether a producer with `attached` consumers may take one more: a producer waits on all
/// their pipes at once, and Windows waits on at most [`MAX_WATCHED`] objects.
pub(crate) fn room_for_consumer(attached: usize) -> Result<()> {
    match attached < MAX_WATCHED {
        true => Ok(()),
        false => Err(Error::InvalidOperation(format!(
            "a channel on Windows serves at most {MAX_WATCHED} consumers"
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

/// Sends the set-up on `link`: the message, then the block's handle value.
pub(crate) fn send_setup(
    link: &Link,
    capacity: u32,
    block: &Block,
    pool: &[TensorDyn],
) -> Result<()> {
    use std::os::windows::io::AsRawHandle;
    let mut msg = [0u8; LEN + HANDLE_BYTES];
    msg[..LEN].copy_from_slice(&setup::encode(pool.len() as u32, capacity, false));
    let value = block.0.handle().as_raw_handle() as u64;
    msg[LEN..].copy_from_slice(&value.to_le_bytes());
    link.write_all(&msg, Instant::now() + MID_MESSAGE_TIMEOUT)?;
    Ok(())
}

/// Receives the set-up on `link` by `deadline`: the message's first byte by then,
/// the rest within [`MID_MESSAGE_TIMEOUT`] of it; the block's handle duplicated out of the
/// producer (a value that is not a section there is refused when it is mapped).
pub(crate) fn recv_setup(
    link: &Link,
    deadline: Instant,
) -> Result<(Setup<BlockHandle>, Option<PeerFence>)> {
    let mut msg = [0u8; LEN + HANDLE_BYTES];
    link.read_exact(&mut msg[..1], deadline)
        .map_err(|e| match e {
            Error::Timeout(_) => Error::Timeout("no channel set-up within the timeout".into()),
            e => e,
        })?;
    let rest = deadline.min(Instant::now() + MID_MESSAGE_TIMEOUT);
    link.read_exact(&mut msg[1..], rest)
        .map_err(|e| bad(format!("the producer's message broke off: {e}")))?;
    let head: &[u8; LEN] = msg[..LEN].try_into().unwrap_or(&[0; LEN]);
    let value = u64::from_le_bytes(msg[LEN..].try_into().unwrap_or([0; 8]));
    // One handle value travels: a message that names a fence is refused here by its count.
    let s = setup::parse(head, vec![value])?;
    let block = crate::os::handles::duplicate_from(link.peer_pid()?, s.block)?;
    let s = Setup {
        slots: s.slots,
        capacity: s.capacity,
        block,
        fence: None,
    };
    Ok((s, None))
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
