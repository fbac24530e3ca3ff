//! Hand-off from C: blobs (the wire description of a tensor, with the fds that travel beside
//! it) and whole tensors sent and received on a connected Unix stream socket, with timeouts.

use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use hwtensor::blob;
use hwtensor::{handoff, ImportPolicy};

use super::fd::dup_callers;
use crate::codes::transport_of;
use crate::status::{fail, free_handle, guard, invalid, put, slice_in, HwtStatus, OrStatus};
use crate::tensor::{share, tensor, HwtTensor};

/// Import flag: the sender is trusted (GPU and CUDA memory by reference, whose content the
/// driver trusts, and shared memory that cannot be sealed). Without it, `hwt_recv` accepts
/// device memory only from a peer of this user, and `hwt_blob_import` not at all.
pub const HWT_IMPORT_TRUSTED_PEER: u32 = 1;

/// A timeout that never runs out (`hwt_send`, `hwt_recv`).
pub const HWT_WAIT_FOREVER: u64 = u64::MAX;

/// The most fds a blob names (the buffer's and the fence's); more is refused.
const MAX_BLOB_FDS: usize = 8;

/// The most bytes `hwt_blob_import` looks at: an inline 8K RGBA frame with room to spare.
const MAX_BLOB_BYTES: usize = 1 << 30;

/// An exported blob (opaque): its bytes and the fds to send beside them, borrowed from the
/// tensor it holds a reference to.
pub struct HwtBlob {
    bytes: Vec<u8>,
    fds: Vec<i32>,
    _tensor: Arc<HwtTensor>,
}

fn policy_of(flags: u32) -> Result<ImportPolicy, HwtStatus> {
    match flags {
        0 => Ok(ImportPolicy::STRICT),
        HWT_IMPORT_TRUSTED_PEER => Ok(ImportPolicy::TRUSTED_PEER),
        other => Err(invalid(format!("unknown import flags {other:#x}"))),
    }
}

/// Describes `t` as a blob for `transport`. Read its bytes with `hwt_blob_data` and the fds to
/// send beside them with `hwt_blob_fds`; free it with `hwt_blob_free`.
///
/// # Safety
/// `t` must be a live handle; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_blob_export(
    t: *const HwtTensor,
    transport: u32,
    out: *mut *mut HwtBlob,
) -> HwtStatus {
    guard(|| {
        let mode = transport_of(transport)?;
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let owner = share(t)?;
        let (bytes, fds) = blob::export(&owner.tensor, mode).or_status()?;
        let fds = fds.iter().map(|f| f.as_raw_fd()).collect();
        let made = Box::into_raw(Box::new(HwtBlob {
            bytes,
            fds,
            _tensor: owner,
        }));
        put(out, "out", made)
    })
}

/// The blob's bytes, valid until `hwt_blob_free`.
///
/// # Safety
/// `b` must be a live blob; `data` and `len` valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_blob_data(
    b: *const HwtBlob,
    data: *mut *const u8,
    len: *mut usize,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live blob (the contract).
        let b = unsafe { b.as_ref() }.ok_or_else(|| invalid("the blob is null"))?;
        put(data, "data", b.bytes.as_ptr())?;
        put(len, "len", b.bytes.len())
    })
}

/// The fds to send beside the blob (buffer first, then the fence where there is one), borrowed:
/// valid until `hwt_blob_free`, never closed by the caller (sending them by SCM_RIGHTS copies
/// them). An inline blob has none.
///
/// # Safety
/// `b` must be a live blob; `fds` and `count` valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_blob_fds(
    b: *const HwtBlob,
    fds: *mut *const i32,
    count: *mut usize,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live blob (the contract).
        let b = unsafe { b.as_ref() }.ok_or_else(|| invalid("the blob is null"))?;
        put(fds, "fds", b.fds.as_ptr())?;
        put(count, "count", b.fds.len())
    })
}

/// Frees a blob (and its reference to the tensor). Null is ignored.
///
/// # Safety
/// `b` must be null or a blob from `hwt_blob_export`, freed once.
#[no_mangle]
pub unsafe extern "C" fn hwt_blob_free(b: *mut HwtBlob) {
    // SAFETY: the caller's contract, as above.
    unsafe { free_handle(b) }
}

/// A tensor from a blob received from elsewhere, parsed as hostile input (`HWT_STATUS_BAD_BLOB`
/// for a malformed or truncated one), with the `nfds` fds that came beside it. The fds are
/// duplicated: the caller keeps and closes its own. `flags`: 0 or `HWT_IMPORT_TRUSTED_PEER`.
///
/// # Safety
/// `data` must hold `len` bytes and `fds` `nfds` ints; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_blob_import(
    data: *const u8,
    len: usize,
    fds: *const i32,
    nfds: usize,
    flags: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice_in(data, len, "the blob", MAX_BLOB_BYTES) }?;
        // SAFETY: as above.
        let raw = unsafe { slice_in(fds, nfds, "the fds", MAX_BLOB_FDS) }?;
        let policy = policy_of(flags)?;
        let owned = raw
            .iter()
            .map(|&fd| dup_callers(fd))
            .collect::<Result<Vec<OwnedFd>, _>>()?;
        let t = blob::import_with(bytes, owned, &policy).or_status()?;
        crate::tensor::hand_out(out, t)
    })
}

/// The caller's connected socket as a stream, never closed here (see `handoff::borrow_socket`).
fn socket(fd: i32) -> Result<ManuallyDrop<UnixStream>, HwtStatus> {
    // SAFETY: the caller's socket, open for this call (the ABI's contract for `fd`).
    unsafe { hwtensor::handoff::borrow_socket(fd) }.or_status()
}

/// `timeout_ns` as a socket timeout: `HWT_WAIT_FOREVER` is none, and 0 the shortest the
/// kernel takes (a socket timeout of zero would mean none).
fn socket_timeout(timeout_ns: u64) -> Option<Duration> {
    (timeout_ns != HWT_WAIT_FOREVER).then(|| Duration::from_nanos(timeout_ns.max(1_000)))
}

/// Runs `f` on the socket with `set` applied to it for the call, then puts back what was there.
fn with_timeout<T>(
    stream: &UnixStream,
    timeout: Option<Duration>,
    read: bool,
    f: impl FnOnce(&UnixStream) -> Result<T, HwtStatus>,
) -> Result<T, HwtStatus> {
    let before = if read {
        stream.read_timeout()
    } else {
        stream.write_timeout()
    };
    let before = before.map_err(|e| fail(HwtStatus::BadFd, format!("socket timeout: {e}")))?;
    let set = |t| {
        if read {
            stream.set_read_timeout(t)
        } else {
            stream.set_write_timeout(t)
        }
    };
    set(timeout).map_err(|e| {
        fail(
            HwtStatus::BadFd,
            format!("setting the socket timeout failed: {e}"),
        )
    })?;
    let result = f(stream);
    if let Err(e) = set(before) {
        log::warn!("hwtensor: putting back the socket's timeout failed: {e}");
    }
    result
}

/// Sends `t` on the connected Unix stream socket `socket` (the caller's, left open) as
/// `transport`, waiting at most `timeout_ns` for room (`HWT_WAIT_FOREVER`: no bound).
///
/// # Safety
/// `t` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn hwt_send(
    socket_fd: i32,
    t: *const HwtTensor,
    transport: u32,
    timeout_ns: u64,
) -> HwtStatus {
    guard(|| {
        let (t, mode) = (tensor(t, "the tensor")?, transport_of(transport)?);
        let stream = socket(socket_fd)?;
        with_timeout(&stream, socket_timeout(timeout_ns), false, |s| {
            handoff::send_as(s, t, mode).or_status()
        })
    })
}

/// Receives one tensor on the connected Unix stream socket `socket`, waiting at most
/// `timeout_ns` for it (`HWT_STATUS_TIMEOUT` when none comes; `HWT_WAIT_FOREVER`: no bound).
/// A peer that closes or stalls mid-message is `HWT_STATUS_PEER_GONE`, a hostile message
/// `HWT_STATUS_BAD_BLOB`. `flags`: 0 (device memory by reference only from a peer of this
/// user) or `HWT_IMPORT_TRUSTED_PEER`.
///
/// # Safety
/// `out` must be valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_recv(
    socket_fd: i32,
    timeout_ns: u64,
    flags: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let trusted = policy_of(flags)?.gpu_memory;
        let stream = socket(socket_fd)?;
        let t = with_timeout(&stream, socket_timeout(timeout_ns), true, |s| {
            if trusted {
                handoff::recv_with(s, &ImportPolicy::TRUSTED_PEER).or_status()
            } else {
                handoff::recv(s).or_status()
            }
        })?;
        crate::tensor::hand_out(out, t)
    })
}
