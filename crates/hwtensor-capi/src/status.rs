//! Statuses, the per-thread last error, the guard every entry point runs its body in, and the
//! checks on what crosses the boundary (pointers and counts in, values out).

use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use hwtensor::{Error, GpuErrorKind};

/// The outcome of a call. New statuses are only ever added at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtStatus {
    /// The call succeeded.
    Ok = 0,
    /// What the call needs is not here: no GPU device (no loader, no adapter, no timeline
    /// support), no CUDA, no exportable fence.
    Unavailable = 1,
    /// A bounded wait ran out.
    Timeout = 2,
    /// A null pointer, a buffer too short, an unknown enum value, a shape or region that does
    /// not fit, or another argument that cannot work.
    InvalidArgument = 3,
    /// A call at the wrong time, or one the tensor's declared CPU access does not allow.
    InvalidOperation = 4,
    /// Anything else; see `hwt_last_error`.
    Failed = 5,
    /// The GPU device is lost (reset, removed, hung): nothing on it works any more.
    DeviceLost = 6,
    /// The GPU or the host ran out of memory for the request.
    OutOfMemory = 7,
    /// The GPU or CUDA driver reported a failure of another kind; see `hwt_last_error`.
    DriverError = 8,
    /// The buffer is mapped in a way that excludes this map (a write map excludes every
    /// other): end the other map first, or try again.
    Busy = 9,
    /// An fd that is closed, or not of a kind that can back a tensor.
    BadFd = 10,
    /// A blob that is malformed, truncated or not what its fds say (hostile input is refused).
    BadBlob = 11,
    /// The hand-off peer is gone or broke the protocol (closed socket, short message).
    PeerGone = 12,
    /// A peer the other side's policy does not admit, or a use it does not grant: a channel's
    /// producer refused this consumer (its user, or its asking to write).
    NotPermitted = 13,
    /// The peer sent something that is not the protocol (garbage where a channel's set-up
    /// belongs, a version this library does not speak): the peer is there, not gone.
    BadMessage = 14,
}

/// Every status, for the string table and its test.
const STATUSES: [(HwtStatus, &CStr); 15] = [
    (HwtStatus::Ok, c"ok"),
    (HwtStatus::Unavailable, c"unavailable"),
    (HwtStatus::Timeout, c"timeout"),
    (HwtStatus::InvalidArgument, c"invalid argument"),
    (HwtStatus::InvalidOperation, c"invalid operation"),
    (HwtStatus::Failed, c"failed"),
    (HwtStatus::DeviceLost, c"device lost"),
    (HwtStatus::OutOfMemory, c"out of memory"),
    (HwtStatus::DriverError, c"driver error"),
    (HwtStatus::Busy, c"busy"),
    (HwtStatus::BadFd, c"bad fd"),
    (HwtStatus::BadBlob, c"bad blob"),
    (HwtStatus::PeerGone, c"peer gone"),
    (HwtStatus::NotPermitted, c"not permitted"),
    (HwtStatus::BadMessage, c"bad message"),
];

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Keeps `message` as this thread's last error and returns `status`. Cold and out of line, as
/// are the other error paths: inlined, they made every entry point's frame (and a C map) bigger.
#[cold]
#[inline(never)]
pub(crate) fn fail(status: HwtStatus, message: impl Into<String>) -> HwtStatus {
    LAST_ERROR.with(|e| *e.borrow_mut() = message.into());
    status
}

/// The status of a library error (its message kept for `hwt_last_error`).
#[cold]
#[inline(never)]
pub(crate) fn from_error(e: Error) -> HwtStatus {
    let status = match &e {
        Error::Gpu { kind, .. } => match kind {
            GpuErrorKind::Lost => HwtStatus::DeviceLost,
            GpuErrorKind::OutOfMemory => HwtStatus::OutOfMemory,
            GpuErrorKind::Unsupported => HwtStatus::Unavailable,
            GpuErrorKind::Timeout => HwtStatus::Timeout,
            _ => HwtStatus::DriverError,
        },
        Error::Cuda { .. } => HwtStatus::DriverError,
        Error::Alloc { .. } => HwtStatus::OutOfMemory,
        Error::Unavailable { .. } => HwtStatus::Unavailable,
        Error::Timeout(_) => HwtStatus::Timeout,
        Error::InvalidArgument(_)
        | Error::UnknownName { .. }
        | Error::Shape(_)
        | Error::OutOfBounds(_)
        | Error::RegionOutside { .. }
        | Error::IndexOutside { .. }
        | Error::TooSmall { .. }
        | Error::NotContiguous { .. }
        | Error::RowStride(_)
        | Error::Image(_)
        | Error::DType { .. }
        | Error::Length(_) => HwtStatus::InvalidArgument,
        Error::InvalidOperation(_) | Error::AccessDenied { .. } => HwtStatus::InvalidOperation,
        Error::MapBusy { .. } => HwtStatus::Busy,
        Error::Fd(_) => HwtStatus::BadFd,
        Error::Blob(_) => HwtStatus::BadBlob,
        Error::Handoff(_) | Error::PeerLeft(_) => HwtStatus::PeerGone,
        Error::NotPermitted(_) => HwtStatus::NotPermitted,
        Error::Protocol(_) => HwtStatus::BadMessage,
        _ => HwtStatus::Failed,
    };
    fail(status, e.message_for(hwtensor::Lang::C))
}

/// What an entry point's body returns: `Err` carries a status already explained.
pub(crate) type Outcome = Result<(), HwtStatus>;

/// Runs an entry point's body: a library error becomes its status, and a panic (a bug of
/// ours) becomes `HWT_STATUS_FAILED` instead of unwinding into C, which would abort the host.
pub(crate) fn guard(body: impl FnOnce() -> Outcome) -> HwtStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => HwtStatus::Ok,
        Ok(Err(status)) => status,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            fail(
                HwtStatus::Failed,
                format!("internal error (a bug in hwtensor, please report it): {what}"),
            )
        }
    }
}

/// `?` for library results inside a guarded body.
pub(crate) trait OrStatus<T> {
    /// The value, or the error's status (its message kept).
    fn or_status(self) -> Result<T, HwtStatus>;
}

impl<T> OrStatus<T> for hwtensor::Result<T> {
    fn or_status(self) -> Result<T, HwtStatus> {
        self.map_err(from_error)
    }
}

/// A refusal of an argument, as a guarded body returns it.
#[cold]
#[inline(never)]
pub(crate) fn invalid(message: impl Into<String>) -> HwtStatus {
    fail(HwtStatus::InvalidArgument, message)
}

/// Writes `value` through `out`, refusing a null out-pointer (named `what` in the message).
pub(crate) fn put<T>(out: *mut T, what: &str, value: T) -> Outcome {
    if out.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: non-null (checked) and, by this ABI's contract, valid for one write of T.
    unsafe { out.write(value) };
    Ok(())
}

/// `(pointer, count)` from C as a slice, refusing null with a count and absurd counts.
///
/// # Safety
/// A non-null `ptr` must be valid for `len` reads of T.
pub(crate) unsafe fn slice_in<'a, T>(
    ptr: *const T,
    len: usize,
    what: &str,
    max: usize,
) -> Result<&'a [T], HwtStatus> {
    if len > max {
        return Err(invalid(format!(
            "{what}: {len} entries, at most {max} make sense"
        )));
    }
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: the caller's contract; non-null and `len` checked above.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Copies `values` into the caller's array of `capacity` entries, refusing one too short.
pub(crate) fn copy_out<T: Copy>(values: &[T], out: *mut T, capacity: usize, what: &str) -> Outcome {
    if capacity < values.len() {
        return Err(invalid(format!(
            "{what}: the array holds {capacity} entries, {} are needed",
            values.len()
        )));
    }
    if values.is_empty() {
        return Ok(());
    }
    if out.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: the caller's contract: `out` holds `capacity` >= len entries (checked).
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
    Ok(())
}

/// Frees a handle made by `Box::into_raw` (null ignored), its drop run under the panic guard.
///
/// # Safety
/// `handle` must be null or a `Box::into_raw` of a `T`, given here once.
#[cfg_attr(windows, allow(dead_code))] // the Linux blobs and channel objects use it
pub(crate) unsafe fn free_handle<T>(handle: *mut T) {
    if !handle.is_null() {
        // SAFETY: the caller's contract: a box of ours, freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(handle) })));
    }
}

/// Copies this thread's last error message into `buf` (NUL-terminated, truncated to `len`) and
/// returns its full length in bytes. The message is kept until the thread's next failing call.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn hwt_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|e| {
        let e = e.borrow();
        if !buf.is_null() && len > 0 {
            let n = e.len().min(len - 1);
            // SAFETY: the caller guarantees `buf` holds `len` bytes; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(e.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        e.len()
    })
}

/// A short, static, NUL-terminated name of a status (`"busy"`, `"bad fd"`, ...); "unknown
/// status" for a value no version of hwtensor returns. Never free it.
#[no_mangle]
pub extern "C" fn hwt_status_str(status: i32) -> *const c_char {
    STATUSES
        .iter()
        .find(|(s, _)| *s as i32 == status)
        .map_or(c"unknown status".as_ptr(), |(_, name)| name.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_gpu_failure_has_its_own_status_and_keeps_its_message() {
        let cases = [
            (GpuErrorKind::Lost, HwtStatus::DeviceLost),
            (GpuErrorKind::OutOfMemory, HwtStatus::OutOfMemory),
            (GpuErrorKind::Unsupported, HwtStatus::Unavailable),
            (GpuErrorKind::Timeout, HwtStatus::Timeout),
            (GpuErrorKind::Driver, HwtStatus::DriverError),
        ];
        for (kind, status) in cases {
            assert_eq!(from_error(Error::gpu(kind, "what failed")), status);
            assert!(LAST_ERROR.with(|e| e.borrow().contains("what failed")));
        }
    }

    #[test]
    fn every_status_has_its_own_name_in_the_table_in_order() {
        for (i, (status, name)) in STATUSES.iter().enumerate() {
            assert_eq!(*status as usize, i);
            // SAFETY: the table's names are static C strings.
            let got = unsafe { CStr::from_ptr(hwt_status_str(i as i32)) };
            assert_eq!(got, *name);
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(hwt_status_str(1000)) };
        assert_eq!(unknown, c"unknown status");
    }

    #[test]
    fn a_panic_in_a_body_is_a_failed_status_with_a_message_not_an_abort() {
        let status = guard(|| panic!("a bug"));
        assert_eq!(status, HwtStatus::Failed);
        assert!(LAST_ERROR.with(|e| e.borrow().contains("a bug")));
    }
}
