//! The hand-off on Windows: `hwt_send` and `hwt_recv` over a named pipe (`HwtPipe`), shared
//! memory by its section's handle and GPU images by their texture's, as `hwtensor::handoff`
//! does it.

use crate::codes::transport_of;
use crate::status::{guard, invalid, OrStatus};
use crate::tensor::{hand_out, tensor, HwtTensor};
use crate::HwtStatus;

/// A timeout that never runs out (`hwt_send`, `hwt_recv`): on Windows a day, the longest any
/// hand-off waits.
pub const HWT_WAIT_FOREVER: u64 = u64::MAX;

/// A connected named pipe (opaque), for `hwt_send` and `hwt_recv`: made by `hwt_pipe_accept`
/// or `hwt_pipe_connect`, freed by `hwt_pipe_close`.
pub struct HwtPipe(pub(crate) hwtensor::handoff::Pipe);

/// The pipe name behind `name`, a NUL-terminated UTF-8 string.
///
/// # Safety
/// `name` must be null or a NUL-terminated string.
unsafe fn pipe_name(name: *const std::ffi::c_char) -> Result<String, HwtStatus> {
    if name.is_null() {
        return Err(invalid("the pipe name is null"));
    }
    // SAFETY: a NUL-terminated string (the caller's contract), checked non-null.
    let name = unsafe { std::ffi::CStr::from_ptr(name) };
    name.to_str()
        .map(str::to_string)
        .map_err(|_| invalid("the pipe name is not UTF-8"))
}

/// Hands a pipe out through `out`.
fn hand_out_pipe(out: *mut *mut HwtPipe, pipe: hwtensor::handoff::Pipe) -> Result<(), HwtStatus> {
    if out.is_null() {
        return Err(invalid("out is null"));
    }
    let p = Box::into_raw(Box::new(HwtPipe(pipe)));
    // SAFETY: `out` is non-null and valid for one write (the caller's contract).
    unsafe { *out = p };
    Ok(())
}

/// Serves the local named pipe `\\.\pipe\<name>` and waits at most `timeout_ns` for one client
/// (`HWT_STATUS_TIMEOUT` when none comes; a name another process serves is refused).
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_pipe_accept(
    name: *const std::ffi::c_char,
    timeout_ns: u64,
    out: *mut *mut HwtPipe,
) -> HwtStatus {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        open_pipe(name, timeout_ns, out, |name, wait| {
            hwtensor::handoff::PipeListener::bind(name)?.accept(wait)
        })
    }
}

/// Connects to the local named pipe `\\.\pipe\<name>`, waiting at most `timeout_ns` for a
/// server.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_pipe_connect(
    name: *const std::ffi::c_char,
    timeout_ns: u64,
    out: *mut *mut HwtPipe,
) -> HwtStatus {
    // SAFETY: forwarded from the caller's contract.
    unsafe { open_pipe(name, timeout_ns, out, hwtensor::handoff::Pipe::connect) }
}

/// A pipe made by `open` from the caller's name and timeout, handed out through `out`.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` valid for one write.
unsafe fn open_pipe(
    name: *const std::ffi::c_char,
    timeout_ns: u64,
    out: *mut *mut HwtPipe,
    open: impl FnOnce(&str, std::time::Duration) -> hwtensor::Result<hwtensor::handoff::Pipe>,
) -> HwtStatus {
    guard(|| {
        // SAFETY: forwarded from the caller's contract.
        let name = unsafe { pipe_name(name) }?;
        let pipe = open(&name, duration_of(timeout_ns)).or_status()?;
        hand_out_pipe(out, pipe)
    })
}

/// Closes a pipe (NULL is ignored).
///
/// # Safety
/// `pipe` must be null or a pipe this library gave and not yet closed.
#[no_mangle]
pub unsafe extern "C" fn hwt_pipe_close(pipe: *mut HwtPipe) {
    if !pipe.is_null() {
        // SAFETY: a pipe this library boxed (the caller's contract), freed once.
        drop(unsafe { Box::from_raw(pipe) });
    }
}

/// Sends `t` on `pipe` as `transport`: by reference, shared memory goes as its section's handle
/// and a GPU image as a shared handle of its texture with its completion fence's, which the
/// receiver duplicates; returns once the receiver has answered, waiting at most `timeout_ns`.
///
/// # Safety
/// `pipe` and `t` must be live handles.
#[no_mangle]
pub unsafe extern "C" fn hwt_send(
    pipe: *const HwtPipe,
    t: *const HwtTensor,
    transport: u32,
    timeout_ns: u64,
) -> HwtStatus {
    guard(|| {
        let (t, mode) = (tensor(t, "the tensor")?, transport_of(transport)?);
        // SAFETY: a live pipe (the caller's contract), checked non-null.
        let pipe = unsafe { pipe.as_ref() }.ok_or_else(|| invalid("the pipe is null"))?;
        hwtensor::handoff::send_within(&pipe.0, t, mode, duration_of(timeout_ns)).or_status()
    })
}

/// Receives one tensor on `pipe`, waiting at most `timeout_ns` for it (`HWT_STATUS_TIMEOUT`
/// when none comes). A peer that closes mid-message is `HWT_STATUS_PEER_GONE`; a handle that is
/// not a section, or one smaller than the blob says, is refused, as is a texture of another
/// adapter or one that is not the blob's image; a texture's completion is waited for (at most
/// 10 seconds). `flags` must be 0.
///
/// # Safety
/// `pipe` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_recv(
    pipe: *const HwtPipe,
    timeout_ns: u64,
    flags: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        if flags != 0 {
            return Err(invalid("flags must be 0 on Windows"));
        }
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: a live pipe (the caller's contract), checked non-null.
        let pipe = unsafe { pipe.as_ref() }.ok_or_else(|| invalid("the pipe is null"))?;
        let t = hwtensor::handoff::recv(&pipe.0, duration_of(timeout_ns)).or_status()?;
        hand_out(out, t)
    })
}

/// `timeout_ns` as a duration (`HWT_WAIT_FOREVER` is the longest the hand-off waits).
fn duration_of(timeout_ns: u64) -> std::time::Duration {
    std::time::Duration::from_nanos(timeout_ns)
}
