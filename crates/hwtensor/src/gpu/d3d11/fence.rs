//! The timeline fence on D3D11: one shared `ID3D11Fence`, one counter, one queue bracket.
//!
//! Without `ID3D11Device5` (Wine's wined3d, pre-2017 drivers) there is no fence: a signal then
//! flushes and finishes the queued work on the CPU with an event query, so every value handed
//! out has completed by the time anyone sees it. That is the rule for hand-offs without a
//! fence (the producer finishes before it hands over), applied to every signal.

use std::os::windows::io::{FromRawHandle, OwnedHandle, RawHandle};
use std::time::{Duration, Instant};

use windows::Win32::Foundation::{
    DuplicateHandle, DUPLICATE_SAME_ACCESS, HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows::Win32::Graphics::Direct3D11::{ID3D11DeviceContext4, ID3D11Fence};
use windows::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, SetEvent, WaitForSingleObject,
};

use super::record::Record;
use super::GpuDevice;
use crate::gpu::timeline::{QueueHeld, TimelineWords};
use crate::{Error, Result};

/// How long `wait` spins on the fence before it blocks on an event: the Linux reasoning
/// (blocking costs tens of microseconds, spinning sees a value in a few) holds here too.
pub const WAIT_SPIN: Duration = Duration::from_micros(50);

/// The sleep between looks at the shared counter when there is no fence to block on.
const POLL_SLEEP: Duration = Duration::from_micros(200);

/// The words of the rendezvous record, shared by every copy.
pub(crate) fn words_in_record(r: &'static Record) -> TimelineWords {
    TimelineWords::at(&r.counter, &r.pending, &r.submitted, &r.queue_lock)
}

/// Without a fence, values complete inside `signal`: a value not reached yet is one a signal
/// in another thread is finishing, or one never signalled.
fn poll_until(words: TimelineWords, value: u64, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    while words.submitted() < value {
        if started.elapsed() >= timeout {
            return Err(timed_out(value, timeout));
        }
        std::thread::sleep(POLL_SLEEP);
    }
    Ok(())
}

/// The fence and what signals it.
pub(crate) struct Fence {
    pub fence: ID3D11Fence,
    pub context: ID3D11DeviceContext4,
    /// The shared NT handle, where this copy may export the fence (never for a private one).
    pub shared_handle: Option<HANDLE>,
}

pub(crate) struct Timeline {
    pub fence: Option<Fence>,
    pub shared: TimelineWords,
}

impl Timeline {
    /// Allocates the next value and signals it, as one step inside the queue bracket.
    pub(crate) fn signal(&self, dev: &GpuDevice) -> Result<u64> {
        dev.with_queue(|| {
            let held = QueueHeld::by_device_bracket();
            let value = self.shared.allocate(&held);
            self.submit(dev, value, &held)?;
            Ok(value)
        })
    }

    pub(crate) fn signal_deferred(&self, dev: &GpuDevice) -> u64 {
        dev.with_queue(|| self.shared.defer(&QueueHeld::by_device_bracket()))
    }

    pub(crate) fn flush(&self, dev: &GpuDevice) -> Result<()> {
        dev.with_queue(|| {
            let held = QueueHeld::by_device_bracket();
            match self.shared.take_pending(&held) {
                Some(pending) => self.submit(dev, pending, &held),
                None => Ok(()),
            }
        })
    }

    /// Signals `value` (called inside the queue bracket, so values reach the fence in order),
    /// or, without a fence, finishes the queued work first.
    fn submit(&self, dev: &GpuDevice, value: u64, held: &QueueHeld<'_>) -> Result<()> {
        match &self.fence {
            Some(f) => {
                // SAFETY: the fence belongs to this device; the bracket serialises the context.
                unsafe { f.context.Signal(&f.fence, value) }.map_err(|e| {
                    Error::gpu(
                        super::hr_kind(&e),
                        format!("signalling the fence failed: {e}"),
                    )
                })?;
                // SAFETY: as above.
                unsafe { dev.context().Flush() };
            }
            None => dev.finish_on_cpu()?,
        }
        self.shared.mark_submitted(value, held);
        Ok(())
    }

    pub(crate) fn last_signalled(&self) -> u64 {
        self.shared.last()
    }

    pub(crate) fn completed_value(&self) -> u64 {
        match &self.fence {
            // SAFETY: a read of a live fence.
            Some(f) => unsafe { f.fence.GetCompletedValue() },
            None => self.shared.submitted(),
        }
    }

    /// Waits for `value`, at most `timeout`: spins on the fence, then blocks on an event.
    pub(crate) fn wait(&self, value: u64, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        while started.elapsed() < WAIT_SPIN.min(timeout) {
            if self.completed_value() >= value {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let left = timeout.saturating_sub(started.elapsed());
        match &self.fence {
            Some(f) => {
                let event = completion_event(&f.fence, value)?;
                wait_handle(&event, left, value)
            }
            None => poll_until(self.shared, value, left),
        }
    }

    /// A manual-reset event that is set when `value` completes (at once if it has).
    pub(crate) fn completion_event(&'static self, value: u64) -> Result<OwnedHandle> {
        if let Some(f) = &self.fence {
            return completion_event(&f.fence, value);
        }
        let event = new_event()?;
        if self.completed_value() >= value {
            set(&event)?;
            return Ok(event);
        }
        // No fence to attach the event to: one short-lived thread watches the counter, bounded
        // by the GPU wait limit like every other wait.
        let theirs = event.try_clone().map_err(|e| {
            Error::gpu(
                crate::GpuErrorKind::Driver,
                format!("duplicating an event failed: {e}"),
            )
        })?;
        let shared = self.shared;
        std::thread::Builder::new()
            .name("hwtensor-completion".into())
            .spawn(move || {
                if poll_until(shared, value, crate::gpu::GPU_WAIT).is_ok() {
                    let _ = set(&theirs);
                }
            })
            .map_err(|e| {
                Error::gpu(
                    crate::GpuErrorKind::Driver,
                    format!("starting the completion watcher failed: {e}"),
                )
            })?;
        Ok(event)
    }

    /// A new NT handle of the shared fence; `None` without one, or for a private fence.
    pub(crate) fn export(&self) -> Option<OwnedHandle> {
        let handle = self.fence.as_ref()?.shared_handle?;
        let mut dup = HANDLE::default();
        // SAFETY: duplicating a live handle of this process into this process.
        unsafe {
            DuplicateHandle(
                GetCurrentProcess(),
                handle,
                GetCurrentProcess(),
                &mut dup,
                0,
                false,
                DUPLICATE_SAME_ACCESS,
            )
        }
        .ok()?;
        Some(owned(dup))
    }
}

fn timed_out(value: u64, timeout: Duration) -> Error {
    Error::Timeout(format!(
        "timeline value {value} did not complete within {timeout:?}"
    ))
}

fn owned(handle: HANDLE) -> OwnedHandle {
    // SAFETY: a fresh handle this process owns and nothing else will close.
    unsafe { OwnedHandle::from_raw_handle(handle.0 as RawHandle) }
}

fn raw(handle: &OwnedHandle) -> HANDLE {
    use std::os::windows::io::AsRawHandle;
    HANDLE(handle.as_raw_handle())
}

fn new_event() -> Result<OwnedHandle> {
    // SAFETY: an unnamed manual-reset event, initially clear.
    let event = unsafe { CreateEventW(None, true, false, None) }
        .map_err(super::failed("creating an event"))?;
    Ok(owned(event))
}

fn set(event: &OwnedHandle) -> Result<()> {
    // SAFETY: a live event handle.
    unsafe { SetEvent(raw(event)) }.map_err(super::failed("setting an event"))
}

/// Waits on the CPU, at most `timeout`, until `fence` (ours or a peer's) reaches `value`.
pub(super) fn wait_for_value(fence: &ID3D11Fence, value: u64, timeout: Duration) -> Result<()> {
    // SAFETY: a query of a live fence.
    if unsafe { fence.GetCompletedValue() } >= value {
        return Ok(());
    }
    wait_handle(&completion_event(fence, value)?, timeout, value)
}

fn completion_event(fence: &ID3D11Fence, value: u64) -> Result<OwnedHandle> {
    let event = new_event()?;
    // SAFETY: a live fence and a live event, which the fence sets once and does not keep.
    unsafe { fence.SetEventOnCompletion(value, raw(&event)) }.map_err(|e| {
        Error::gpu(
            super::hr_kind(&e),
            format!("SetEventOnCompletion failed: {e}"),
        )
    })?;
    Ok(event)
}

fn wait_handle(event: &OwnedHandle, timeout: Duration, value: u64) -> Result<()> {
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX - 1);
    // SAFETY: a live event handle.
    match unsafe { WaitForSingleObject(raw(event), ms) } {
        WAIT_OBJECT_0 => Ok(()),
        WAIT_TIMEOUT => Err(timed_out(value, timeout)),
        other => Err(Error::gpu(
            crate::GpuErrorKind::Driver,
            format!(
                "waiting for timeline value {value} failed ({:#x}): {}",
                other.0,
                windows::core::Error::from_thread()
            ),
        )),
    }
}
