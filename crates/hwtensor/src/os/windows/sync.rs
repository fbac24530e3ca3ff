//! Events and process handles to wait on: the objects a channel's two sides wake each other
//! with and watch each other's lives by, each wait bounded by a deadline.

// Events, processes and waits are reached through the Win32 API.
#![allow(unsafe_code)]

use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::time::Instant;

use windows::Win32::Foundation::{HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows::Win32::System::Threading::{
    CreateEventW, OpenProcess, ResetEvent, SetEvent, WaitForMultipleObjects, INFINITE,
    PROCESS_SYNCHRONIZE,
};

use crate::{Error, Result};

/// The most objects one wait takes (`MAXIMUM_WAIT_OBJECTS`).
pub(crate) const MAX_WAIT_OBJECTS: usize = 64;

fn raw(h: &OwnedHandle) -> HANDLE {
    HANDLE(h.as_raw_handle())
}

/// A new unnamed event, unsignalled: `manual` stays set once set, else it resets when a wait
/// takes it.
pub(crate) fn event(manual: bool) -> Result<OwnedHandle> {
    // SAFETY: an unnamed event with default security; the handle is owned at once.
    let e = unsafe { CreateEventW(None, manual, false, None) }.map_err(|e| Error::Os {
        op: "creating an event",
        source: e.into(),
    })?;
    // SAFETY: the handle just created, owned from here.
    Ok(unsafe { OwnedHandle::from_raw_handle(e.0) })
}

/// Sets event `h` (a handle of another kind: nothing happens).
pub(crate) fn set(h: &OwnedHandle) {
    // SAFETY: a live handle; SetEvent refuses any object that is not an event.
    let _ = unsafe { SetEvent(raw(h)) };
}

/// Resets event `h`; refused when `h` is not an event (how a handle's kind is asked).
pub(crate) fn reset(h: &OwnedHandle) -> Result<()> {
    // SAFETY: a live handle; ResetEvent refuses any object that is not an event.
    unsafe { ResetEvent(raw(h)) }.map_err(|e| Error::Handoff(format!("not an event ({e})")))
}

/// A handle to process `pid` to wait on (signalled when it exits).
pub(crate) fn watch_process(pid: u32) -> Result<OwnedHandle> {
    // SAFETY: opening a process by id for waiting only; the handle is owned at once.
    let h = unsafe { OpenProcess(PROCESS_SYNCHRONIZE, false, pid) }
        .map_err(|e| Error::Handoff(format!("cannot watch process {pid}: {e}")))?;
    // SAFETY: the handle just opened, owned from here.
    Ok(unsafe { OwnedHandle::from_raw_handle(h.0) })
}

/// Waits until one of `objects` is signalled (its index; the lowest when several are) or
/// `deadline` passes (`None`: no deadline). At most [`MAX_WAIT_OBJECTS`] objects.
pub(crate) fn wait_any(
    objects: &[&OwnedHandle],
    deadline: Option<Instant>,
) -> Result<Option<usize>> {
    if objects.is_empty() || objects.len() > MAX_WAIT_OBJECTS {
        return Err(Error::InvalidArgument(format!(
            "a wait takes 1 to {MAX_WAIT_OBJECTS} objects, not {}",
            objects.len()
        )));
    }
    let handles: Vec<HANDLE> = objects.iter().map(|h| raw(h)).collect();
    let ms = deadline.map_or(INFINITE, |d| {
        let left = d.saturating_duration_since(Instant::now());
        u32::try_from(left.as_millis()).unwrap_or(INFINITE - 1)
    });
    // SAFETY: live handles, within the limit checked above.
    let r = unsafe { WaitForMultipleObjects(&handles, false, ms) };
    let i = r.0.wrapping_sub(WAIT_OBJECT_0.0) as usize;
    match r {
        _ if i < handles.len() => Ok(Some(i)),
        WAIT_TIMEOUT => Ok(None),
        _ => Err(Error::Os {
            op: "waiting on events",
            source: windows::core::Error::from_thread().into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_set_event_ends_a_wait_with_its_index_and_none_times_out_at_the_deadline() {
        let (a, b) = (event(false).unwrap(), event(true).unwrap());
        set(&b);
        assert_eq!(wait_any(&[&a, &b], None).unwrap(), Some(1));
        let soon = Some(Instant::now() + Duration::from_millis(50));
        reset(&b).unwrap();
        assert_eq!(wait_any(&[&a, &b], soon).unwrap(), None);
    }

    #[test]
    fn a_handle_that_is_not_an_event_is_told_apart() {
        let me = watch_process(std::process::id()).unwrap();
        assert!(reset(&me).is_err());
        assert!(reset(&event(false).unwrap()).is_ok());
    }
}
