//! Attaching a channel's two sides on Linux: a connected Unix socket, by fd.

use std::os::unix::net::UnixStream;

use super::fd::dup_callers;
use hwtensor::stream::{Lending, Peers};

use std::time::Duration;

use crate::status::{free_handle, guard, invalid, put, HwtStatus, OrStatus};
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

/// Where a producer listens (opaque): `hwt_listener_bind`, then `hwt_listener_accept` for each
/// consumer and `hwt_producer_attach` of the fd it gives (the producer's attach policy decides
/// who stays). Free it with `hwt_listener_free`.
pub struct HwtListener(hwtensor::stream::Listener);

/// The caller's NUL-terminated `address`, as UTF-8.
///
/// # Safety
/// `address` must be null or a NUL-terminated string.
unsafe fn address_in<'a>(address: *const std::ffi::c_char) -> Result<&'a str, HwtStatus> {
    if address.is_null() {
        return Err(invalid("the address is null"));
    }
    // SAFETY: non-null, NUL-terminated (the caller's contract).
    unsafe { std::ffi::CStr::from_ptr(address) }
        .to_str()
        .map_err(|_| invalid("the address is not UTF-8"))
}

/// Listens on `address`: a socket path, or `@name` for the abstract namespace (which has no
/// file permissions: the producer's attach policy, `hwt_producer_admit`, decides who attaches).
/// A path that exists already is refused, never removed.
///
/// # Safety
/// `address` must be a NUL-terminated string; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_listener_bind(
    address: *const std::ffi::c_char,
    out: *mut *mut HwtListener,
) -> HwtStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let address = unsafe { address_in(address) }?;
        let listener = hwtensor::stream::Listener::bind(address).or_status()?;
        put(out, "out", Box::into_raw(Box::new(HwtListener(listener))))
    })
}

/// Waits at most `timeout_ns` (`HWT_WAIT_FOREVER`: no bound) for a consumer to connect
/// (`HWT_STATUS_TIMEOUT` otherwise) and gives its connected socket through `out_fd` (yours to
/// close once `hwt_producer_attach` has taken its own).
///
/// # Safety
/// `l` must be a live listener; `out_fd` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_listener_accept(
    l: *mut HwtListener,
    timeout_ns: u64,
    out_fd: *mut i32,
) -> HwtStatus {
    guard(|| {
        if out_fd.is_null() {
            return Err(invalid("out_fd is null"));
        }
        // SAFETY: null refused; otherwise a live listener (the caller's contract).
        let l = unsafe { l.as_ref() }.ok_or_else(|| invalid("the listener is null"))?;
        let stream = l.0.accept(Duration::from_nanos(timeout_ns)).or_status()?;
        put(
            out_fd,
            "out_fd",
            std::os::fd::IntoRawFd::into_raw_fd(stream),
        )
    })
}

/// Frees a listener (null is ignored); consumers already accepted are not affected.
///
/// # Safety
/// `l` must be null or a listener from `hwt_listener_bind`, freed once.
#[no_mangle]
pub unsafe extern "C" fn hwt_listener_free(l: *mut HwtListener) {
    // SAFETY: the caller's contract.
    unsafe { free_handle(l) }
}

/// Connects to the producer listening on `address` (a path, or `@name`) and gives the
/// connected socket through `out_fd` (yours to close once `hwt_consumer_connect` has taken its
/// own).
///
/// # Safety
/// `address` must be a NUL-terminated string; `out_fd` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_connect(
    address: *const std::ffi::c_char,
    out_fd: *mut i32,
) -> HwtStatus {
    guard(|| {
        if out_fd.is_null() {
            return Err(invalid("out_fd is null"));
        }
        // SAFETY: the caller's contract.
        let address = unsafe { address_in(address) }?;
        let stream = hwtensor::stream::connect(address).or_status()?;
        put(
            out_fd,
            "out_fd",
            std::os::fd::IntoRawFd::into_raw_fd(stream),
        )
    })
}
