//! The channel on Linux: a connected Unix socket carries the set-up (fds by `SCM_RIGHTS`) and
//! the wake-ups; the control block is a sealed memfd; a GPU pool's completions are values of
//! the producer's exported timeline.

mod address;
mod setup;
mod wake;

pub use address::{connect, Listener};

#[cfg(test)]
pub(crate) use setup::send as send_set_up_message;
pub(crate) use wake::WAKE_BYTE;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backing::linux::mapping::FdMapping;
use crate::blob::Transport;
use crate::gpu::PeerTimeline;
use crate::os::{classify, memfd};
use crate::stream::access::{Lending, Peer};
use crate::stream::setup::Refusal;
use crate::stream::setup::{self as message, Setup};
use crate::stream::Woken;
use crate::{Direction, Error, Result, TensorDyn, TensorMemory};

/// The connection a channel runs over: a connected Unix stream socket.
pub type Link = UnixStream;

/// A channel's connection once set up: on Linux the socket itself carries everything after.
pub(crate) type Conn = UnixStream;

/// The link under a connection, for the pool's hand-offs.
pub(crate) fn link(conn: &Conn) -> &Link {
    conn
}

/// The producer's fence as a consumer imported it.
pub(crate) type PeerFence = Arc<PeerTimeline>;

/// Wakes the side sleeping on the other end of `link` (never blocks).
pub(crate) fn wake(link: &Conn) {
    wake::wake(link.as_fd())
}

/// Sleeps until a peer on one of `links` wakes us or leaves, or `deadline` passes.
pub(crate) fn wait(links: &[&Conn], deadline: Option<Instant>) -> Result<Woken> {
    let fds: Vec<BorrowedFd<'_>> = links.iter().map(|l| l.as_fd()).collect();
    wake::wait(&fds, deadline)
}

/// Tells the peer this side left, whoever else holds a handle to the socket (the caller's own,
/// a frame's): a shut-down socket hangs up for the peer as a closed one does.
pub(crate) fn leave(link: &Conn) {
    let _ = link.shutdown(std::net::Shutdown::Both);
}

/// A second handle to `link`, for frames to wake the producer on.
pub(crate) fn duplicate(link: &Conn) -> Result<Conn> {
    link.try_clone().map_err(|source| Error::Os {
        op: "dup of the channel's socket",
        source,
    })
}

/// Whether a producer with `attached` consumers may take one more: always on Linux (`poll`
/// watches any number of sockets).
pub(crate) fn room_for_consumer(_attached: usize) -> Result<()> {
    Ok(())
}

/// Refuses a pool buffer a consumer could not import by reference.
pub(crate) fn lendable(t: &TensorDyn) -> Result<()> {
    match t.has_fds() {
        true => Ok(()),
        false => Err(Error::Unavailable {
            memory: t.memory(),
            reason: "a channel lends its buffers by fd; allocate the pool on shm, DMA-BUF or GPU \
                     memory"
                .into(),
        }),
    }
}

/// The control block: a sealed memfd, mapped.
#[derive(Debug)]
pub(crate) struct Block(FdMapping);

/// What a consumer receives the block as.
pub(crate) type BlockHandle = OwnedFd;

impl Block {
    /// A new zeroed block of `len` bytes.
    pub(crate) fn create(len: usize) -> Result<Block> {
        Ok(Block(FdMapping::new(
            memfd::create(len)?,
            len,
            TensorMemory::Shm,
        )?))
    }

    /// The producer's block as a consumer maps it: sealed against shrinking before its size is
    /// read (a peer's truncation would fault us), at least `len` bytes, writable.
    pub(crate) fn open(fd: OwnedFd, len: usize) -> Result<Block> {
        memfd::seal_for_import(fd.as_fd(), false)?;
        let size = classify::size(fd.as_fd())?;
        if size < len as u64 {
            return Err(block_error(format!("holds {size} bytes, {len} are needed")));
        }
        let map = FdMapping::new(fd, len, TensorMemory::Shm)?;
        if !map.writable() {
            return Err(block_error("cannot be mapped writable".into()));
        }
        Ok(Block(map))
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
            .fd()
            .try_clone_to_owned()
            .map_err(|source| Error::Os {
                op: "dup of the channel's control block",
                source,
            })
    }
}

pub(crate) fn block_error(what: String) -> Error {
    Error::Handoff(format!("the channel's control block {what}"))
}

/// Whether a pool's frames need the device's fence: it has GPU or CUDA buffers. CUDA memory's
/// writes are values of the same timeline: its pools need the fence too (a pool of CUDA frames
/// without it was refused by every consumer).
pub(crate) fn needs_fence(pool: &[TensorDyn]) -> bool {
    pool.iter()
        .any(|t| matches!(t.memory(), TensorMemory::Gpu | TensorMemory::Cuda))
}

/// Sends the set-up on `link`, with the device's fence where the pool has GPU or CUDA
/// buffers, saying whether the pool is lent read-only and whether a stream description follows
/// the pool.
pub(crate) fn send_setup(
    link: Link,
    capacity: u32,
    block: &Block,
    pool: &[TensorDyn],
    lending: Lending,
    info: bool,
) -> Result<Conn> {
    let fence = match needs_fence(pool) {
        true => crate::gpu::device()?.fence_fd(),
        false => None,
    };
    let flags = message::Flags {
        fence: fence.is_some(),
        read_only: lending == Lending::Read,
        info,
    };
    let msg = message::encode_with(pool.len() as u32, capacity, flags);
    let fds: Vec<BorrowedFd<'_>> = std::iter::once(block.0.fd()).chain(fence).collect();
    setup::send(&link, &msg, &fds)?;
    Ok(link)
}

/// Sends `refusal` in the set-up's place, and hangs up.
pub(crate) fn refuse(link: Link, refusal: Refusal) -> Result<()> {
    let sent = setup::send(&link, &refusal.encode(), &[]);
    leave(&link);
    sent
}

/// Who the process on the other end of `link` is, as the kernel recorded it when it connected
/// (`SO_PEERCRED`: it cannot be forged by the peer, nor changed by what it does later).
pub(crate) fn peer(link: &Link) -> Result<Peer> {
    let cred = rustix::net::sockopt::socket_peercred(link).map_err(|e| {
        Error::Handoff(format!("cannot ask who the consumer is (SO_PEERCRED): {e}"))
    })?;
    let (uid, gid) = (cred.uid.as_raw(), cred.gid.as_raw());
    Ok(Peer {
        own_user: uid == rustix::process::geteuid().as_raw(),
        uid: Some(uid),
        gid: Some(gid),
    })
}

/// Whether every buffer of `pool` can be lent read-only: shared memory can (an fd reopened
/// read-only); a DMA-BUF's access is its exporter's, and GPU and CUDA memory handles carry
/// none.
pub(crate) fn read_only_lendable(pool: &[TensorDyn]) -> bool {
    pool.iter().all(lends_read_only)
}

/// Whether `t` is memory this side lends read-only: shared memory.
fn lends_read_only(t: &TensorDyn) -> bool {
    t.memory() == TensorMemory::Shm
}

/// The fds `t`'s bytes live in (one per plane for an image in several buffers).
fn fds_of(t: &TensorDyn) -> Vec<BorrowedFd<'_>> {
    match t.plane_fds() {
        Some(planes) => planes.into_iter().map(|(fd, _)| fd).collect(),
        None => t.as_fd().into_iter().collect(),
    }
}

/// Makes `pool`'s shared memory unwritable by group and others, so a consumer of another user
/// cannot reopen its read-only fd writable through `/proc/self/fd`. An fd whose mode this
/// process cannot change (another user's memory) is refused: it cannot be lent read-only.
pub(crate) fn guard_from_other_users(pool: &[TensorDyn]) -> Result<()> {
    for t in pool.iter().filter(|t| lends_read_only(t)) {
        for fd in fds_of(t) {
            let mode = classify::stat(fd)?.st_mode & MODE_BITS;
            if mode & OTHERS_WRITE == 0 {
                continue;
            }
            let unwritable = rustix::fs::Mode::from_raw_mode(mode & !OTHERS_WRITE);
            rustix::fs::fchmod(fd, unwritable).map_err(|e| {
                Error::NotPermitted(format!(
                    "the pool's shared memory cannot be made unwritable by other users \
                     (fchmod: {e}), so it cannot be lent read-only to another user"
                ))
            })?;
        }
    }
    Ok(())
}

/// The permission bits of a file mode.
const MODE_BITS: u32 = 0o7777;
/// Write permission for the file's group and for others.
const OTHERS_WRITE: u32 = 0o022;

/// Hands `t` to the consumer on `conn` by reference, as `lending` says: shared memory lent
/// read-only goes as an fd reopened read-only (neither a writable map, `mprotect` nor `write`
/// works through it); everything else as it is.
pub(crate) fn lend(conn: &Conn, t: &TensorDyn, lending: Lending) -> Result<()> {
    let (bytes, fds) = crate::blob::export(t, Transport::Reference)?;
    if lending == Lending::Write || !lends_read_only(t) {
        return crate::handoff::send_blob(conn, &bytes, &fds);
    }
    let read_only = fds
        .iter()
        .map(|fd| reopen_read_only(*fd))
        .collect::<Result<Vec<OwnedFd>>>()?;
    let borrowed: Vec<BorrowedFd<'_>> = read_only.iter().map(|fd| fd.as_fd()).collect();
    crate::handoff::send_blob(conn, &bytes, &borrowed)
}

/// A new read-only open of the shared memory behind `fd`, sealed against shrinking first
/// where it can be (a consumer cannot seal through a read-only fd, and refuses memory that
/// could shrink under its mapping).
fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    if !memfd::is_sealed(fd) {
        // Memory that cannot be sealed (a /dev/shm file) is refused by the consumer, as before.
        let _ = rustix::fs::fcntl_add_seals(fd, rustix::fs::SealFlags::SHRINK);
    }
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
    rustix::fs::open(path.as_str(), flags, rustix::fs::Mode::empty())
        .map_err(|e| Error::os("reopening the pool's shared memory read-only", e))
}

/// Receives the set-up and the fence on `link` by `deadline`.
pub(crate) fn recv_setup(
    link: Link,
    deadline: Instant,
) -> Result<(Setup<BlockHandle>, Option<PeerFence>, Conn)> {
    let mut s = setup::recv(&link, deadline)?;
    let fence = match s.fence.take() {
        Some(fd) => Some(crate::gpu::device()?.peer_timeline(fd)?),
        None => None,
    };
    Ok((s, fence, link))
}

/// Whether a producer may add buffers after attach: on Linux, yes (the fds wait in the socket
/// for the consumer, so adding never waits on it).
pub(crate) fn can_add() -> Result<()> {
    Ok(())
}

/// Receives a buffer the producer added to its pool, by `deadline`: the wake-ups before its
/// hand-off are read first (a wake-up after it stays for the next drain). A producer that
/// keeps sending wake-ups holds the drain only until the deadline.
pub(crate) fn recv_addition(conn: &Conn, deadline: Instant) -> Result<TensorDyn> {
    while Instant::now() < deadline && wake::drain(conn.as_fd()) == wake::Drained::Bytes {}
    crate::handoff::recv_by(conn, deadline)
}

/// Waits at most `bound` for the producer's fence to reach `value`.
pub(crate) fn wait_fence(fence: &PeerFence, value: u64, bound: Duration) -> Result<()> {
    fence.wait(value, bound)
}

/// The value consumers wait for before they read `t`: its last device write, or 0 when there
/// is none or this device cannot export its fence (then the write is waited for here, so
/// consumers read finished bytes).
pub(crate) fn completion(t: &TensorDyn) -> Result<u64> {
    let last = t.gpu_after(Direction::Read);
    if last == 0 {
        return Ok(0);
    }
    let completion = crate::gpu::device()?.peer_completion(last)?;
    Ok(completion.map_or(0, |(_, value)| value))
}

/// Runs `then` once this process's GPU work on `t` is complete: at once where there is none,
/// else from the completion waiter's thread (never waiting here). Work that cannot be followed
/// never runs `then` (logged): the buffer is kept rather than handed back under a GPU read.
///
/// CUDA reads marked by events (`cuda/event.rs`) are waited for as events, after the timeline
/// value: making them a value would queue the very signal they avoid.
pub(crate) fn after_gpu_use(t: &TensorDyn, then: impl FnOnce() + Send + 'static) {
    let (ours, reads) = each_tensor!(t, t => (t.buffer.device_after(true), t.buffer.cuda_reads()));
    let then = move || {
        if let Err(e) = crate::cuda::when_read(reads, then) {
            log::error!("hwtensor: a frame's CUDA reads cannot be followed ({e}); buffer kept");
        }
    };
    if ours == 0 {
        return then();
    }
    let deferred = crate::gpu::device().and_then(|d| d.when_complete(ours, then));
    if let Err(e) = deferred {
        log::error!("hwtensor: a frame's GPU work cannot be followed ({e}); buffer kept");
    }
}
