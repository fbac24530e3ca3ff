//! Attaching a channel's two sides on Linux: a connected Unix socket, by fd.

use std::os::unix::net::UnixStream;

use super::fd::dup_callers;
use crate::status::{guard, HwtStatus, OrStatus};
use crate::stream::{connect_into, producer, HwtConsumer, HwtProducer};

/// The caller's connected socket, duplicated: the channel keeps its own, the caller's stays.
fn socket(fd: i32) -> Result<UnixStream, HwtStatus> {
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
