//! The timeline fence: one timeline semaphore, one shared counter, one queue lock.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ash::vk;

use crate::gpu::timeline::{QueueHeld, TimelineWords};
use crate::gpu::waiter::{ExitGate, Next, Requests, POLL_INTERVAL, WAITER_SLICE};
use crate::{Error, GpuErrorKind, Result};

/// How long `wait` spins on the counter before it polls. A thread blocked in
/// `vkWaitSemaphores` on NVIDIA can wake ~10 ms after a value signalled by CUDA lands, and
/// blocking costs ~36 us where spinning sees a value in ~8 us (PLATFORM.md); 50 us of spinning
/// catches the common case and costs little when the value is far off.
pub const WAIT_SPIN: Duration = Duration::from_micros(50);

/// A wait spins on the counter at most this long: beyond it a spinning CPU does no one any
/// good, and the rest of the wait polls instead.
const SPIN_CAP: Duration = Duration::from_millis(2);

/// How long [`Timeline::observe`] gives the tracked timeline to show a value the process
/// timeline showed: both are signalled by the same submission.
const OBSERVE_WAIT: Duration = Duration::from_millis(100);

/// CPU waits on a timeline (this copy's, or a peer's) that found their value not yet reached,
/// and those of them that went on past their spin to sleep: a frame loop in its steady state
/// should add to neither (`hwtensor bench` and bench_ipc.py count them, issue #27).
static WAITS_PENDING: AtomicU64 = AtomicU64::new(0);
static WAITS_SLEPT: AtomicU64 = AtomicU64::new(0);

/// How many CPU waits on a timeline this copy of the library has made that found their value
/// not yet reached, and how many of those slept: `(pending, slept)`. No wait ever blocks in
/// `vkWaitSemaphores` (it polls the counter); these count the waits that waited at all.
pub fn cpu_waits() -> (u64, u64) {
    (
        WAITS_PENDING.load(Ordering::Relaxed),
        WAITS_SLEPT.load(Ordering::Relaxed),
    )
}

/// Counts a CPU wait for GPU work that is not a timeline value (a CUDA read's event) that found
/// the work pending, and whether it slept, in [`cpu_waits`]: the steady-state figure counts
/// every CPU wait for GPU work, whatever marks it.
pub(crate) fn count_cpu_wait(slept: bool) {
    WAITS_PENDING.fetch_add(1, Ordering::Relaxed);
    if slept {
        WAITS_SLEPT.fetch_add(1, Ordering::Relaxed);
    }
}

/// The words of the rendezvous record, shared by every copy.
pub(crate) fn words_in_record(r: &'static super::record::Record) -> TimelineWords {
    TimelineWords::at(&r.counter, &r.pending, &r.submitted, &r.queue_lock)
}

/// What one submission carries besides the timeline value it signals.
#[derive(Default)]
struct Batch<'a> {
    command: Option<vk::CommandBuffer>,
    /// Semaphores (timeline or binary) and values to wait for.
    waits: &'a [(vk::Semaphore, u64)],
    /// Binary semaphores to signal with the value.
    binary: &'a [vk::Semaphore],
}

/// What the waiter thread does when a value completes.
pub(crate) enum OnDone {
    /// Makes a completion fd's pipe readable.
    Fd(OwnedFd),
    /// Runs a deferred step (a frame's hand-back once the GPU work on it is done).
    Call(Box<dyn FnOnce() + Send>),
}

impl OnDone {
    fn run(self) {
        match self {
            OnDone::Fd(write) => signal_done(&write),
            OnDone::Call(f) => f(),
        }
    }
}

pub(crate) struct Timeline {
    pub semaphore: vk::Semaphore,
    /// A second timeline of this copy's own, never exported, that each of its submissions
    /// signals with the same value, where `semaphore` is exported. Why: the Khronos validation
    /// layer stops tracking a semaphore once it is exported (its scope becomes external), so it
    /// never learns that a submission signalling the process timeline completed, and reports
    /// every later free of its command buffers and buffers as a free of objects in use
    /// (`VUID-vkFreeCommandBuffers-pCommandBuffers-00047`, `VUID-vkDestroyBuffer-buffer-00922`:
    /// thousands per run on NVIDIA, none on lavapipe, which exports nothing). A wait on this one
    /// is what tells the layer (see [`Timeline::observe`]).
    pub tracked: Option<vk::Semaphore>,
    pub shared: TimelineWords,
    /// Whether the semaphore is the process one (false: a private fallback, never exported).
    pub exportable: bool,
    /// Whether the timeline has more than one signaller (two queues, or CUDA): then each
    /// submission also waits for the last submitted value, because signals from two queues
    /// could otherwise execute out of order and drive the timeline backwards. Set once and
    /// never cleared.
    pub chained: AtomicBool,
    waiter: OnceLock<Mutex<mpsc::Sender<(u64, OnDone)>>>,
}

impl Timeline {
    pub(crate) fn new(
        semaphore: vk::Semaphore,
        tracked: Option<vk::Semaphore>,
        shared: TimelineWords,
        exportable: bool,
    ) -> Timeline {
        Timeline {
            semaphore,
            tracked,
            shared,
            exportable,
            chained: AtomicBool::new(false),
            waiter: OnceLock::new(),
        }
    }

    /// Allocates the next value and submits its signal, as one step under the queue lock: two
    /// threads that took 1 and 2 and submitted 2 first would drive the timeline backwards.
    pub(crate) fn signal(&self, device: &ash::Device, queue: vk::Queue) -> Result<u64> {
        let lock = self.shared.lock()?;
        let held = QueueHeld::by(&lock);
        let value = self.shared.allocate(&held);
        self.submit_signal(device, queue, value, &held)?;
        Ok(value)
    }

    /// Submits the bare signal of `value` (under the queue lock `held`).
    fn submit_signal(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        value: u64,
        held: &QueueHeld<'_>,
    ) -> Result<()> {
        self.submit(device, queue, value, Batch::default(), held)
            .map_err(|e| {
                Error::gpu(
                    super::vk_kind(e),
                    format!("submitting timeline signal {value} failed: {e}"),
                )
            })
    }

    /// Submits a batch without commands that waits for every `(semaphore, value)` in `waits`
    /// and signals a newly allocated value and the binary semaphores `binary` (a sync_file's
    /// export), all under the queue lock; returns the value.
    pub(crate) fn submit_signals(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        waits: &[(vk::Semaphore, u64)],
        binary: &[vk::Semaphore],
    ) -> Result<u64> {
        let batch = Batch {
            command: None,
            waits,
            binary,
        };
        self.submit_new(device, queue, batch, "a sync_file's signal")
    }

    /// Allocates the next value; its signal goes with the next submission (`flush`, or any
    /// copy's `signal`). Submit the work it covers before calling this.
    pub(crate) fn signal_deferred(&self) -> Result<u64> {
        let lock = self.shared.lock()?;
        Ok(self.shared.defer(&QueueHeld::by(&lock)))
    }

    /// Submits the signal of every deferred value in one submission.
    pub(crate) fn flush(&self, device: &ash::Device, queue: vk::Queue) -> Result<()> {
        let lock = self.shared.lock()?;
        let held = QueueHeld::by(&lock);
        match self.shared.take_pending(&held) {
            Some(pending) => self.submit_signal(device, queue, pending, &held),
            None => Ok(()),
        }
    }

    /// Submits `command` after every `(semaphore, value)` in `waits`, signalling a newly
    /// allocated value, all under the queue lock.
    pub(crate) fn submit_work(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        command: vk::CommandBuffer,
        waits: &[(vk::Semaphore, u64)],
    ) -> Result<u64> {
        let batch = Batch {
            command: Some(command),
            waits,
            binary: &[],
        };
        self.submit_new(device, queue, batch, "GPU work")
    }

    /// Allocates the next value and submits `batch` signalling it, under the queue lock;
    /// a failure names `what` was submitted.
    fn submit_new(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        batch: Batch<'_>,
        what: &str,
    ) -> Result<u64> {
        let lock = self.shared.lock()?;
        let held = QueueHeld::by(&lock);
        let value = self.shared.allocate(&held);
        self.submit(device, queue, value, batch, &held)
            .map_err(|e| {
                Error::gpu(
                    super::vk_kind(e),
                    format!("submitting {what} (value {value}) failed: {e}"),
                )
            })?;
        Ok(value)
    }

    /// One submission signalling `value`. The caller holds the queue lock (`held`), which gives
    /// the queue its external synchronisation and keeps values increasing in submission order.
    fn submit(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        value: u64,
        batch: Batch<'_>,
        held: &QueueHeld<'_>,
    ) -> std::result::Result<(), vk::Result> {
        let Batch {
            command,
            waits,
            binary,
        } = batch;
        let mut waits = waits.to_vec();
        let previous = self.shared.submitted();
        if self.chained.load(Ordering::Relaxed) && previous > 0 {
            waits.push((self.semaphore, previous));
        }
        let (wait_semaphores, wait_values): (Vec<_>, Vec<_>) = waits.iter().copied().unzip();
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; waits.len()];
        let semaphores: Vec<vk::Semaphore> = std::iter::once(self.semaphore)
            .chain(self.tracked)
            .chain(binary.iter().copied())
            .collect();
        // A binary semaphore's value is ignored, but the arrays must be as long.
        let signal_values = vec![value; semaphores.len()];
        let commands: Vec<vk::CommandBuffer> = command.into_iter().collect();
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&commands)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline);
        // SAFETY: the caller holds the queue lock (shared by every copy); the command buffer, if
        // any, is recorded and owned by the caller's pool; the semaphore is a timeline semaphore
        // of this device and `value` is above every value submitted before; binary semaphores
        // waited for carry an imported payload, those signalled none pending.
        unsafe { device.queue_submit(queue, &[submit], vk::Fence::null()) }?;
        self.shared.mark_submitted(value, held);
        Ok(())
    }

    /// Allocates the next value and has another signaller (CUDA) signal it: `enqueue(after,
    /// value)` must queue, on its own stream, a wait for `after` (every value before this one,
    /// so the timeline never goes backwards) and then the signal of `value`. All under the queue
    /// lock, after every deferred value is submitted, so no later submission can signal past
    /// `value` before it lands: from here on every submission waits for the one before.
    /// Should `enqueue` fail, the value is signalled here instead, so nothing waits for ever.
    pub(crate) fn signal_by(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        enqueue: impl FnOnce(u64, u64) -> Result<()>,
    ) -> Result<u64> {
        if !self.chained.load(Ordering::Relaxed) {
            self.chained.store(true, Ordering::Relaxed);
        }
        let lock = self.shared.lock()?;
        let held = QueueHeld::by(&lock);
        if let Some(pending) = self.shared.take_pending(&held) {
            self.submit_signal(device, queue, pending, &held)?;
        }
        let after = self.shared.submitted();
        let value = self.shared.allocate(&held);
        match enqueue(after, value) {
            Ok(()) => {
                self.shared.mark_submitted(value, &held);
                Ok(value)
            }
            Err(e) => {
                self.submit_signal(device, queue, value, &held)?;
                Err(e)
            }
        }
    }

    /// Tells trackers of submissions (the validation layer) that this copy's submissions up to
    /// `value`, which completed, did: a wait, which returns at once, on the timeline they track.
    /// `value` must be one this copy submitted (a command buffer's) and known complete.
    pub(crate) fn observe(&self, device: &ash::Device, value: u64) {
        if let Some(tracked) = self.tracked {
            // Bounded: its signal came with the one seen complete, at most a moment later.
            let _ = wait_semaphore(device, tracked, value, OBSERVE_WAIT, OBSERVE_WAIT);
        }
    }

    pub(crate) fn last_signalled(&self) -> u64 {
        self.shared.last()
    }

    pub(crate) fn completed_value(&self, device: &ash::Device) -> Result<u64> {
        // SAFETY: a query of a live semaphore of this device.
        unsafe { device.get_semaphore_counter_value(self.semaphore) }.map_err(|e| {
            Error::gpu(
                super::vk_kind(e),
                format!("reading the timeline failed: {e}"),
            )
        })
    }

    /// Waits until the timeline reaches `value`, at most `timeout`, watching the counter for
    /// the `expected` time first (see [`wait_semaphore`]).
    pub(crate) fn wait(
        &self,
        device: &ash::Device,
        value: u64,
        timeout: Duration,
        expected: Duration,
    ) -> Result<()> {
        wait_semaphore(device, self.semaphore, value, timeout, expected).map_err(|e| match e {
            Error::Timeout(t) => {
                Error::Timeout(format!("{t}, last allocated {}", self.last_signalled()))
            }
            other => other,
        })
    }

    /// The read end of a pipe that becomes readable when `value` completes (at once if it
    /// has). One waiter thread per copy serves every such fd, so an event loop needs no thread
    /// per wait; it holds the write end, and lets go of it as soon as the caller closes the
    /// read end. A value never allocated is refused: its completion would never come, and the
    /// waiter would hold its fd for ever.
    pub(crate) fn completion_fd(
        &self,
        device: &'static ash::Device,
        value: u64,
    ) -> Result<OwnedFd> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        let (read, write) = rustix::pipe::pipe_with(flags).map_err(|e| Error::os("pipe", e))?;
        self.when_complete(device, value, OnDone::Fd(write))?;
        Ok(read)
    }

    /// Runs `then` once `value` completes: at once if it has, else on the waiter thread (which
    /// polls the counter, never blocking in the driver). A value never allocated is refused.
    pub(crate) fn when_complete(
        &self,
        device: &'static ash::Device,
        value: u64,
        then: OnDone,
    ) -> Result<()> {
        let last = self.last_signalled();
        if value > last {
            return Err(Error::InvalidArgument(format!(
                "timeline value {value} was never allocated (the newest is {last}); it would never complete"
            )));
        }
        if self.completed_value(device)? >= value {
            then.run();
            return Ok(());
        }
        let gone = || Error::gpu(GpuErrorKind::Driver, "the completion waiter is gone");
        let sender = self
            .waiter
            .get_or_init(|| Mutex::new(spawn_waiter(device, self.semaphore)));
        sender
            .lock()
            .map_err(|_| gone())?
            .send((value, then))
            .map_err(|_| gone())
    }
}

/// Makes a completion fd readable: one byte down its pipe (the write end is dropped after).
/// A timeline semaphore at `initial`, exportable as an fd where asked: the process timeline, a
/// copy's tracked one, or a private one.
pub(super) fn create_semaphore(
    device: &ash::Device,
    initial: u64,
    exportable: bool,
) -> std::result::Result<vk::Semaphore, vk::Result> {
    let mut type_info = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(initial);
    let mut export = vk::ExportSemaphoreCreateInfo::default()
        .handle_types(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
    let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut type_info);
    if exportable {
        info = info.push_next(&mut export);
    }
    // SAFETY: a plain creation on a live device; the chain outlives the call.
    unsafe { device.create_semaphore(&info, None) }
}

fn signal_done(write: &OwnedFd) {
    let _ = rustix::io::write(write, &[1]);
}

/// Drops the write ends whose read end the caller has closed (poll reports POLLERR on them);
/// deferred calls stay.
fn drop_abandoned(waiting: &mut BTreeMap<u64, Vec<OnDone>>) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    for waits in waiting.values_mut() {
        waits.retain(|w| {
            let OnDone::Fd(fd) = w else {
                return true;
            };
            let mut polled = [PollFd::new(fd, PollFlags::OUT)];
            let polled_ok = poll(&mut polled, Some(&Timespec::default())).is_ok();
            !(polled_ok && polled[0].revents().contains(PollFlags::ERR))
        });
    }
    waiting.retain(|_, waits| !waits.is_empty());
}

/// Waits until the timeline `semaphore` reaches `value`, at most `timeout`, watching the
/// counter and never blocking in `vkWaitSemaphores`: a blocked wait on a value CUDA signals
/// wakes ~10 ms late on NVIDIA (PLATFORM.md; a consumer's hand-back waited so 10 ms a frame),
/// and the Khronos validation layer of Debian 12 can deadlock a host wait against submissions
/// on other threads (see [`WAITER_SLICE`]). The counter is spun on for the first `expected`
/// of the wait (at most [`SPIN_CAP`]), then polled every [`POLL_INTERVAL`] until `expected`
/// has passed, then with the interval doubling up to [`WAITER_SLICE`]: work that ends when
/// expected is seen within microseconds, a long wait costs a wake-up every 2 ms and ends at
/// most that late. Once reached, a zero-timeout `vkWaitSemaphores` confirms it, which returns
/// at once and tells the validation layer (and any tool tracking submissions) that the work is
/// done, so it does not report its objects as still in use.
pub(crate) fn wait_semaphore(
    device: &ash::Device,
    semaphore: vk::Semaphore,
    value: u64,
    timeout: Duration,
    expected: Duration,
) -> Result<()> {
    let counter = || {
        // SAFETY: a query of a live timeline semaphore of this device.
        unsafe { device.get_semaphore_counter_value(semaphore) }
            .map_err(super::failed("reading the timeline"))
    };
    let started = Instant::now();
    let spin = expected.min(timeout).min(SPIN_CAP);
    let mut interval = POLL_INTERVAL;
    let (mut pending, mut slept) = (false, false);
    loop {
        if counter()? >= value {
            break;
        }
        if !std::mem::replace(&mut pending, true) {
            WAITS_PENDING.fetch_add(1, Ordering::Relaxed);
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            return Err(Error::Timeout(format!(
                "timeline value {value} did not complete within {timeout:?} (reached {})",
                counter().unwrap_or(0),
            )));
        }
        if elapsed < spin {
            std::hint::spin_loop();
            continue;
        }
        if !std::mem::replace(&mut slept, true) {
            WAITS_SLEPT.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(interval.min(timeout - elapsed));
        if elapsed >= expected {
            interval = (interval * 2).min(WAITER_SLICE);
        }
    }
    let values = [value];
    let semaphores = [semaphore];
    let info = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&values);
    // SAFETY: a wait on a live semaphore of this device, already reached (so it returns at
    // once); waits need no queue lock.
    unsafe { device.wait_semaphores(&info, 0) }
        .map_err(super::failed(&format!("confirming timeline value {value}")))
}

/// Keeps the completion waiter out of Vulkan once the process exits.
static WAITER_GATE: ExitGate = ExitGate::new();

/// Runs at normal exit, before the static destructors of libraries loaded earlier (the
/// validation layer's, the driver's): a waiter still polling the timeline through them would
/// crash the exiting process.
extern "C" fn stop_waiter_at_exit() {
    WAITER_GATE.close();
}

/// The timeline's counter, read by the waiter; `None` once the process is exiting.
fn counter_unless_exiting(device: &ash::Device, semaphore: vk::Semaphore) -> Option<u64> {
    WAITER_GATE.enter(|| {
        // SAFETY: the device and semaphore live for the process; a query needs no queue lock.
        unsafe { device.get_semaphore_counter_value(semaphore) }.unwrap_or(0)
    })
}

fn spawn_waiter(
    device: &'static ash::Device,
    semaphore: vk::Semaphore,
) -> mpsc::Sender<(u64, OnDone)> {
    let (tx, rx) = mpsc::channel::<(u64, OnDone)>();
    // SAFETY: registers a plain function of this copy (see record::unlink_at_exit).
    if !crate::os::at_exit(stop_waiter_at_exit) {
        log::warn!("hwtensor: cannot register the completion waiter's exit hook");
    }
    let body = move || {
        let mut waiting: BTreeMap<u64, Vec<OnDone>> = BTreeMap::new();
        let mut requests = Requests::new(rx);
        loop {
            if !waiting.is_empty() {
                let Some(reached) = counter_unless_exiting(device, semaphore) else {
                    return;
                };
                let later = waiting.split_off(&(reached + 1));
                for done in std::mem::replace(&mut waiting, later)
                    .into_values()
                    .flatten()
                {
                    done.run();
                }
                drop_abandoned(&mut waiting);
            }
            match requests.next(!waiting.is_empty()) {
                Next::End => return,
                Next::Request((value, done)) => waiting.entry(value).or_default().push(done),
                Next::LookAgain => {}
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("hwtensor-completion".into())
        .spawn(body)
    {
        log::error!("hwtensor: cannot start the completion waiter: {e}");
    }
    tx
}
