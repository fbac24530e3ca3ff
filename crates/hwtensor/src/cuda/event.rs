//! CUDA reads marked by events, not by timeline signals.
//!
//! Why: on NVIDIA, a process whose CUDA stream signals the (Vulkan-exported) timeline once a
//! frame stalls CUDA work in *other* processes on the same GPU: a channel consumer that ended
//! each frame's read map with a signal cost its producer's next kernel launch ~150-265 us of
//! host time (H100 and H200, `hwtensor bench` and `scripts/gpu-probes/cuda_stalls.py`), where
//! a consumer that signalled nothing cost ~10 us one way. A read needs no timeline value unless
//! a later write must wait for it GPU-side on Vulkan, so a read's end records a CUDA event (a
//! [`ReadMark`]) on its stream instead, and the value is made from the marks only when such a
//! write comes ([`settle`]). What else follows a read waits on the events themselves: CUDA
//! writes on their stream (`cuStreamWaitEvent`), CPU writes and frees by polling them, and a
//! channel frame's hand-back from the read waiter's thread ([`when_read`]).

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::device::CudaDevice;
use super::driver::{check, sys};
use crate::gpu::waiter::{Backoff, ExitGate, Next, Requests};
use crate::{Error, Result};

/// `CU_EVENT_DISABLE_TIMING`: the event only marks a point in the stream; without timing it
/// is the cheapest kind to record and query.
const EVENT_DISABLE_TIMING: u32 = 0x2;

/// Events kept for reuse at most: a frame loop reads a few buffers at a time, and an event
/// made and destroyed per read cost two driver calls a frame.
const SPARE_EVENTS: usize = 64;

/// A CUDA event no mark uses (its last record done, or never made).
struct Spare(sys::CUevent);

// SAFETY: a CUDA event handle is usable from any thread.
unsafe impl Send for Spare {}

/// Events of marks that are gone, for the next marks: re-recording an event leaves the waits
/// queued on its earlier record as they were (CUDA captures the record at the wait's call).
static SPARES: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

/// A point on a CUDA stream after a read of a buffer: done once the stream's work before it is.
pub(crate) struct ReadMark {
    event: sys::CUevent,
    device: &'static CudaDevice,
}

// SAFETY: a CUDA event may be queried, waited on and destroyed from any thread; every call
// here makes the primary context current first.
unsafe impl Send for ReadMark {}
// SAFETY: as above; the event is only read after it is recorded (in `record`).
unsafe impl Sync for ReadMark {}

impl std::fmt::Debug for ReadMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadMark")
            .field("event", &self.event)
            .finish()
    }
}

impl ReadMark {
    /// Records a mark on `stream`, after the work queued on it so far. The caller made
    /// `device`'s primary context current.
    pub(crate) fn record(
        device: &'static CudaDevice,
        stream: sys::CUstream,
    ) -> Result<Arc<ReadMark>> {
        let spare = SPARES.lock().ok().and_then(|mut s| s.pop());
        let event = match spare {
            Some(Spare(event)) => event,
            None => {
                let mut event = std::ptr::null_mut();
                // SAFETY: an out-pointer to a local; the context is current (the caller's guard).
                let r = unsafe { sys::cuEventCreate(&mut event, EVENT_DISABLE_TIMING) };
                check(r, "cuEventCreate")?;
                event
            }
        };
        let mark = ReadMark { event, device };
        // SAFETY: a live event of this context, and the caller's stream.
        let r = unsafe { sys::cuEventRecord(mark.event, stream) };
        check(r, "cuEventRecord")?;
        Ok(Arc::new(mark))
    }

    /// Whether the stream's work before the mark is done.
    pub(crate) fn done(&self) -> Result<bool> {
        let _current = self.device.enter()?;
        // SAFETY: a live, recorded event.
        match unsafe { sys::cuEventQuery(self.event) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|_| false),
        }
    }

    /// Makes `stream` wait GPU-side for the mark: no semaphore, nothing signalled.
    pub(crate) fn order_before(&self, stream: sys::CUstream) -> Result<()> {
        let _current = self.device.enter()?;
        // SAFETY: a live, recorded event and a stream of this context; flags 0.
        let r = unsafe { sys::cuStreamWaitEvent(stream, self.event, 0) };
        check(r, "cuStreamWaitEvent")
    }
}

impl Drop for ReadMark {
    fn drop(&mut self) {
        if READER_GATE.is_closed() {
            return; // the process is exiting: the driver may be gone
        }
        if let Ok(mut spares) = SPARES.lock() {
            if spares.len() < SPARE_EVENTS {
                spares.push(Spare(self.event));
                return;
            }
        }
        let Ok(_current) = self.device.enter() else {
            return;
        };
        // SAFETY: made by this mark, destroyed once; CUDA frees it once its work is done.
        let r = unsafe { sys::cuEventDestroy_v2(self.event) };
        if let Err(e) = check(r, "cuEventDestroy") {
            log::error!("hwtensor: {e}");
        }
    }
}

/// `marks` less those already done (a query each); an error of a query keeps its mark.
pub(crate) fn pending(marks: Vec<Arc<ReadMark>>) -> Vec<Arc<ReadMark>> {
    marks
        .into_iter()
        .filter(|m| !m.done().unwrap_or(false))
        .collect()
}

/// Waits (CPU, polling on the completion waiter's schedule) until every mark is done, at most
/// `timeout`: before the CPU writes or frees memory a CUDA read may still be reading. A wait
/// that found a read pending counts in `gpu::cpu_waits`, as one that slept (it polls by
/// sleeping).
pub(crate) fn wait(marks: &[Arc<ReadMark>], timeout: Duration) -> Result<()> {
    let started = Instant::now();
    let mut pause = Backoff::new();
    let mut counted = false;
    for mark in marks {
        while !mark.done()? {
            if !std::mem::replace(&mut counted, true) {
                crate::gpu::count_cpu_wait(true);
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout(format!(
                    "a CUDA read of the buffer did not finish within {timeout:?}"
                )));
            }
            std::thread::sleep(pause.pause());
            pause.grow();
        }
    }
    Ok(())
}

/// Turns `marks` into a timeline value: hwtensor's own stream waits for each mark and then
/// signals the next value, which Vulkan work and other timeline users can wait on. One signal
/// for however many reads, and only when a write needs it.
pub(crate) fn settle(device: &CudaDevice, marks: &[Arc<ReadMark>]) -> Result<u64> {
    let _current = device.enter()?;
    let stream = device.own_stream()?;
    for mark in marks {
        mark.order_before(stream)?;
    }
    device.signal_from_stream(stream, 0)
}

/// Keeps the read waiter and mark drops out of the driver once the process exits.
static READER_GATE: ExitGate = ExitGate::new();

/// Runs at normal exit, before the driver's own teardown: a waiter still querying events
/// through it would crash the exiting process (as the timeline's completion waiter would).
extern "C" fn stop_reader_at_exit() {
    READER_GATE.close();
}

/// The calls of `waiting` whose marks are done, run; the rest kept. `None` once the process
/// is exiting.
fn run_finished(waiting: Vec<Waiting>) -> Option<Vec<Waiting>> {
    let (still, finished) = READER_GATE.enter(|| {
        let mut still = Vec::with_capacity(waiting.len());
        let mut finished = Vec::new();
        for (marks, then) in waiting {
            let marks = pending(marks);
            match marks.is_empty() {
                true => finished.push(then),
                false => still.push((marks, then)),
            }
        }
        (still, finished)
    })?;
    finished.into_iter().for_each(|then| then());
    Some(still)
}

/// A call waiting for its marks.
type Waiting = (Vec<Arc<ReadMark>>, Box<dyn FnOnce() + Send>);

/// Runs `then` once every mark is done: at once if they are, else from the read waiter's
/// thread (which polls them, never blocking in the driver). Marks that never complete never
/// run `then`: a channel then keeps the frame's buffer, which costs its producer a bounded
/// `acquire`, never a hang.
pub(crate) fn when_read(
    marks: Vec<Arc<ReadMark>>,
    then: impl FnOnce() + Send + 'static,
) -> Result<()> {
    let marks = pending(marks);
    if marks.is_empty() {
        then();
        return Ok(());
    }
    static WAITER: OnceLock<Mutex<mpsc::Sender<Waiting>>> = OnceLock::new();
    let gone = || Error::InvalidOperation("the CUDA read waiter is gone".into());
    WAITER
        .get_or_init(|| Mutex::new(spawn_reader()))
        .lock()
        .map_err(|_| gone())?
        .send((marks, Box::new(then)))
        .map_err(|_| gone())
}

fn spawn_reader() -> mpsc::Sender<Waiting> {
    let (tx, rx) = mpsc::channel::<Waiting>();
    if !crate::os::at_exit(stop_reader_at_exit) {
        log::warn!("hwtensor: cannot register the CUDA read waiter's exit hook");
    }
    let body = move || {
        let mut waiting: Vec<Waiting> = Vec::new();
        let mut requests = Requests::new(rx);
        loop {
            let Some(still) = run_finished(std::mem::take(&mut waiting)) else {
                return;
            };
            waiting = still;
            match requests.next(!waiting.is_empty()) {
                Next::End => return,
                Next::Request(w) => waiting.push(w),
                Next::LookAgain => {}
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("hwtensor-cuda-reads".into())
        .spawn(body)
    {
        log::error!("hwtensor: cannot start the CUDA read waiter: {e}");
    }
    tx
}
