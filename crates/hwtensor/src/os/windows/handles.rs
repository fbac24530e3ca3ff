//! Handles of another process: duplicated out of it into this one, the Windows counterpart of
//! `pidfd_getfd`.

// Processes and handles are reached through the Win32 API.
#![allow(unsafe_code)]

use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows::Win32::Foundation::{DuplicateHandle, DUPLICATE_SAME_ACCESS, HANDLE};
use windows::Win32::System::Threading::{GetCurrentProcess, OpenProcess, PROCESS_DUP_HANDLE};

use crate::{Error, Result};

/// A handle of this process to the object handle `value` names in process `pid`: refused when
/// this process may not duplicate handles out of it (another user), or when `value` is not a
/// handle there. Nothing of this process is touched on failure.
pub(crate) fn duplicate_from(pid: u32, value: u64) -> Result<OwnedHandle> {
    // SAFETY: opening a process by id; the handle is owned at once.
    let process = unsafe { OpenProcess(PROCESS_DUP_HANDLE, false, pid) }.map_err(|e| {
        Error::Handoff(format!(
            "cannot open process {pid} to take its handle ({e}): it must run as the same user"
        ))
    })?;
    // SAFETY: the valid process handle just opened, owned from here.
    let process = unsafe { OwnedHandle::from_raw_handle(process.0) };
    let mut ours = HANDLE::default();
    // SAFETY: duplicating a value of the other process's handle table into ours; a value that
    // is not a handle there fails.
    unsafe {
        DuplicateHandle(
            HANDLE(process.as_raw_handle()),
            HANDLE(value as usize as *mut _),
            GetCurrentProcess(),
            &mut ours,
            0,
            false,
            DUPLICATE_SAME_ACCESS,
        )
    }
    .map_err(|e| {
        Error::Handoff(format!(
            "handle {value:#x} of process {pid} cannot be duplicated ({e}): it is not a handle \
             that process holds"
        ))
    })?;
    // SAFETY: the handle DuplicateHandle just made in this process, owned from here.
    Ok(unsafe { OwnedHandle::from_raw_handle(ours.0) })
}

/// Handles this process holds now: what a unit test counts before and after hostile input to
/// show nothing was left open (the integration tests have theirs in `tests/common`).
#[cfg(test)]
pub(crate) fn held() -> u32 {
    use windows::Win32::System::Threading::GetProcessHandleCount;
    let mut n = 0;
    // SAFETY: this process's pseudo handle and a valid out pointer.
    unsafe { GetProcessHandleCount(GetCurrentProcess(), &mut n) }
        .expect("GetProcessHandleCount on this process");
    n
}
