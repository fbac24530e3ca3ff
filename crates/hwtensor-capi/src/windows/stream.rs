//! Attaching a channel's two sides on Windows: a connected named pipe (`HwtPipe`).

use hwtensor::handoff::Pipe;

use super::handoff::HwtPipe;
use crate::status::{guard, invalid, HwtStatus, OrStatus};
use crate::stream::{connect_into, producer, HwtConsumer, HwtProducer};

/// A second handle to the caller's pipe: the channel keeps its own, the caller closes theirs.
///
/// # Safety
/// `pipe` must be null or a live pipe.
unsafe fn pipe_of(pipe: *const HwtPipe) -> Result<Pipe, HwtStatus> {
    // SAFETY: null refused; otherwise a live pipe (the caller's contract).
    let pipe = unsafe { pipe.as_ref() }.ok_or_else(|| invalid("the pipe is null"))?;
    pipe.0.try_clone().or_status()
}

/// Attaches a consumer on the connected pipe `pipe` (the channel takes a second handle; the
/// caller keeps and closes its own, and uses it for nothing else while the channel runs):
/// sends the set-up and the pool. The consumer calls `hwt_consumer_connect_pipe` on its end at
/// the same time.
///
/// # Safety
/// `p` must be a live producer, `pipe` a live pipe.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_attach_pipe(
    p: *mut HwtProducer,
    pipe: *const HwtPipe,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        // SAFETY: the caller's contract.
        let link = unsafe { pipe_of(pipe) }?;
        producer.attach(link).or_status()
    })
}

/// Attaches to a producer on the connected pipe `pipe` (a second handle, as for
/// `hwt_producer_attach_pipe`): receives the set-up and imports the pool within `timeout_ns`
/// (`HWT_STATUS_TIMEOUT` when nothing comes by then; a producer that stalls mid-message or
/// names a handle that is not its section is a hand-off error). Free it with
/// `hwt_consumer_free`.
///
/// # Safety
/// `pipe` must be a live pipe; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_connect_pipe(
    pipe: *const HwtPipe,
    timeout_ns: u64,
    out: *mut *mut HwtConsumer,
) -> HwtStatus {
    guard(|| {
        connect_into(out, timeout_ns, || {
            // SAFETY: the caller's contract.
            unsafe { pipe_of(pipe) }
        })
    })
}
