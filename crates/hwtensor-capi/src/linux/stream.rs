//! Attaching a channel's two sides on Linux: a connected Unix socket, by fd.

use std::os::unix::net::UnixStream;

use super::fd::dup_callers;
use hwtensor::stream::{Lending, Peers};

use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::stream::{connect_into, connect_into_with, producer, HwtConsumer, HwtProducer};

/// The caller's connected socket, duplicated: the channel keeps its own, the caller's stays.
/// An fd that is no socket is refused here by number (`HWT_STATUS_BAD_FD`), not taken for a
/// peer that broke the protocol later.
fn socket(fd: i32) -> Result<UnixStream, HwtStatus> {
    // SAFETY: only looked at (fstat); the stream is dropped at once, never closing the fd.
    unsafe { hwtensor::handoff::borrow_socket(fd) }.or_status()?;
    Ok(UnixStream::from(dup_callers(fd)?))
}

/// Attaches a consumer on the connected Unix socket `socket_fd` (duplicated; the caller keeps
/// and closes its own): sends the set-up and the pool. The consumer calls
/// `hwt_consumer_connect` on its end at the same time.
///
/// # Safety
/// `p` must be a live producer.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_attach(p: *mut HwtProducer, socket_fd: i32) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        producer.attach(socket(socket_fd)?).or_status()
    })
}

/// Attaches to a producer on the connected Unix socket `socket_fd` (duplicated): receives the
/// set-up and imports the pool, within 10 seconds (`hwt_consumer_connect_timeout` takes the
/// bound). Free it with `hwt_consumer_free`.
///
/// # Safety
/// `out` must be valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_connect(
    socket_fd: i32,
    out: *mut *mut HwtConsumer,
) -> HwtStatus {
    let ns = hwtensor::stream::CONNECT_TIMEOUT.as_nanos() as u64;
    // SAFETY: the same contract.
    unsafe { hwt_consumer_connect_timeout(socket_fd, ns, out) }
}

/// As `hwt_consumer_connect`, the whole set-up within `timeout_ns`: a producer that sends
/// nothing by then is `HWT_STATUS_TIMEOUT`, one that stalls mid-message a hand-off error,
/// whatever the socket's own timeouts and blocking mode.
///
/// # Safety
/// `out` must be valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_connect_timeout(
    socket_fd: i32,
    timeout_ns: u64,
    out: *mut *mut HwtConsumer,
) -> HwtStatus {
    guard(|| connect_into(out, timeout_ns, || socket(socket_fd)))
}

/// As `hwt_consumer_connect_timeout`, asking to write the pool's buffers (a consumer that
/// answers in the frame itself): `HWT_STATUS_NOT_PERMITTED` where the producer lends the pool
/// read-only, which it does unless `hwt_producer_admit` gave this consumer's user
/// `HWT_RIGHT_WRITE`. Without it, a consumer's maps of the pool refuse writing.
///
/// # Safety
/// `out` must be valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_connect_writable(
    socket_fd: i32,
    timeout_ns: u64,
    out: *mut *mut HwtConsumer,
) -> HwtStatus {
    guard(|| connect_into_with(out, timeout_ns, Lending::Write, || socket(socket_fd)))
}

/// `who` of `hwt_producer_admit`: this process's user.
pub const HWT_PEER_OWN_USER: u32 = 1;
/// `who` of `hwt_producer_admit`: the user `id`.
pub const HWT_PEER_UID: u32 = 2;
/// `who` of `hwt_producer_admit`: processes whose primary group is `id`.
pub const HWT_PEER_GID: u32 = 3;
/// `who` of `hwt_producer_admit`: every process that reaches the socket.
pub const HWT_PEER_ANY: u32 = 4;
/// A right of `hwt_producer_admit`: attach and read.
pub const HWT_RIGHT_ATTACH: u32 = 1;
/// A right of `hwt_producer_admit`: also write the pool (with `hwt_consumer_connect_writable`).
pub const HWT_RIGHT_WRITE: u32 = 2;

/// Widens who may attach to `p` (by default only this process's user; consumers read only):
/// `who` is one of `HWT_PEER_*` (`id` the uid or gid where it names one, else ignored), and
/// `rights` `HWT_RIGHT_ATTACH`, with `HWT_RIGHT_WRITE` to let them write. Applies to consumers
/// attached from now on. A consumer the policy refuses is told so, and `hwt_producer_attach`
/// returns `HWT_STATUS_NOT_PERMITTED` (counted: `hwt_producer_refused`).
///
/// # Safety
/// `p` must be a live producer.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_admit(
    p: *mut HwtProducer,
    who: u32,
    id: u32,
    rights: u32,
) -> HwtStatus {
    guard(|| {
        let peers = match who {
            HWT_PEER_OWN_USER => Peers::own_user(),
            HWT_PEER_UID => Peers::none().with_uid(id),
            HWT_PEER_GID => Peers::none().with_gid(id),
            HWT_PEER_ANY => Peers::any(),
            other => return Err(invalid(format!("who {other} is not an HWT_PEER_* value"))),
        };
        if rights & !(HWT_RIGHT_ATTACH | HWT_RIGHT_WRITE) != 0 || rights & HWT_RIGHT_ATTACH == 0 {
            return Err(invalid(format!(
                "rights {rights:#x}: HWT_RIGHT_ATTACH, optionally with HWT_RIGHT_WRITE"
            )));
        }
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        let access = producer
            .access()
            .clone()
            .admitting(peers, rights & HWT_RIGHT_WRITE != 0);
        producer.set_access(access);
        Ok(())
    })
}

/// How many consumers `p`'s attach policy refused so far, through `out`.
///
/// # Safety
/// `p` must be a live producer; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_refused(p: *mut HwtProducer, out: *mut u64) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let producer = unsafe { producer(p) }?;
        put(out, "out", producer.refused())
    })
}
