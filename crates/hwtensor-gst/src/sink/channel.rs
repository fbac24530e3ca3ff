//! What the sink shares with its buffer pool and its accept thread (the [`Hub`], holding the
//! sink's [`State`]), the waits for a free slot, the socket consumers connect to, and the
//! pool's memory.

use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hwtensor::stream::Slot;
use hwtensor::{CpuAccess, ImageSpec, TensorDyn, TensorMemory};

use super::state::{Channel, State};
use super::{PoolMemory, WhenFull, CAT};
use crate::caps::Geometry;
use crate::slots::{Lender, Lent};
use crate::socket::Address;

/// How often the accept thread looks for new consumers, and waits re-check for unlock: short
/// enough to attach a consumer before its connect times out, long enough to cost nothing.
pub(super) const POLL: Duration = Duration::from_millis(10);
/// One step of a wait for a free buffer, the state unlocked between steps so consumers can
/// attach meanwhile.
const ACQUIRE_STEP: Duration = Duration::from_millis(2);

/// What the pool and the accept thread share with the element.
#[derive(Default)]
pub(super) struct Hub {
    /// The sink's state: taken only through [`Hub::state`].
    state: Mutex<State>,
    /// Set by `unlock` (a flush or a state change): every wait gives up.
    pub(super) unlocked: AtomicBool,
    /// Consumers the attach policy refused, over every channel this sink made.
    pub(super) refused: AtomicU64,
}

impl Hub {
    /// The sink's state, locked: the one place it is.
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock (a bug) leaves a state that still holds together: every
        // method keeps its fields consistent before it can fail.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts `e` when it is the attach policy's refusal.
    pub(super) fn count_refusal(&self, e: &hwtensor::Error) {
        if matches!(e, hwtensor::Error::NotPermitted(_)) {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes a free slot, waiting as `when_full` says.
    /// `None` when `when_full` is `Drop` and none is free, or when `generation` names a
    /// channel that has been replaced (its pool's late users get plain memory instead).
    pub(super) fn acquire(
        &self,
        when_full: WhenFull,
        timeout: Duration,
        flushing: &AtomicBool,
        generation: Option<u64>,
    ) -> Result<Option<usize>, NoBuffer> {
        let wait = SlotWait {
            when_full,
            timeout,
            flushing,
            generation,
            // The producer's own acquire waits on its consumers' hand-backs (woken by them).
            pause: Duration::ZERO,
            what: "acquiring a buffer",
            held: "every buffer of the channel",
            remedy: "a larger pool-size, or when-full=drop",
        };
        self.wait_for_slot(wait, |ch| ch.acquire(ACQUIRE_STEP))
    }

    /// Acquires the adopted buffer's `slot` of channel `generation` once consumers handed it
    /// back, waiting as `when_full` says, in steps that let go of the lock (a property read, a
    /// consumer attaching and a state change go on meanwhile) and give up when the element
    /// stops. `None`: dropped (`when_full` is `Drop` and a consumer still holds it), or the
    /// channel was replaced meanwhile.
    pub(super) fn acquire_adopted(
        &self,
        slot: Slot,
        generation: u64,
        when_full: WhenFull,
        timeout: Duration,
    ) -> Result<Option<()>, NoBuffer> {
        let never = AtomicBool::new(false);
        let wait = SlotWait {
            when_full,
            timeout,
            flushing: &never,
            generation: Some(generation),
            pause: ACQUIRE_STEP,
            what: "an adopted buffer's slot",
            held: "an adopted buffer of upstream's",
            remedy: "when-full=drop, or upstream more buffers",
        };
        self.wait_for_slot(wait, |ch| ch.acquire_adopted(slot))
    }

    /// The wait both kinds of slot share: `take` tries under the lock (a timeout is "none
    /// free yet"), the lock is let go between tries (`wait.pause` apart), and the wait ends
    /// when the element stops, the channel is replaced, `when_full` drops, or the timeout
    /// passes (an error that says who held what, and what to change).
    fn wait_for_slot<T>(
        &self,
        wait: SlotWait<'_>,
        mut take: impl FnMut(&mut Channel) -> hwtensor::Result<T>,
    ) -> Result<Option<T>, NoBuffer> {
        let deadline = hwtensor::time::deadline_after(wait.timeout);
        loop {
            if self.unlocked.load(Ordering::SeqCst) || wait.flushing.load(Ordering::SeqCst) {
                return Err(NoBuffer::Flushing);
            }
            {
                let mut s = self.state();
                let ch = s.current().ok_or(NoBuffer::Flushing)?;
                if wait.generation.is_some_and(|g| g != ch.generation()) {
                    return Ok(None);
                }
                match take(ch) {
                    Ok(got) => return Ok(Some(got)),
                    Err(hwtensor::Error::Timeout(_)) => {}
                    Err(e) => return Err(NoBuffer::Failed(format!("{}: {e}", wait.what))),
                }
            }
            if wait.when_full == WhenFull::Drop {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(NoBuffer::Failed(format!(
                    "consumers held {} for {:?}; a consumer that keeps its frames needs {}",
                    wait.held, wait.timeout, wait.remedy
                )));
            }
            std::thread::sleep(wait.pause);
        }
    }
}

/// How [`Hub::wait_for_slot`] waits, and the words its errors use.
struct SlotWait<'a> {
    when_full: WhenFull,
    timeout: Duration,
    flushing: &'a AtomicBool,
    /// The channel the slot belongs to (`None`: whichever is current).
    generation: Option<u64>,
    /// Between tries, with the lock let go.
    pause: Duration,
    /// What failed, for an error of the channel's.
    what: &'static str,
    /// What consumers held, and what a user changes, for the timeout's error.
    held: &'static str,
    remedy: &'static str,
}

/// Why no buffer was had.
pub(super) enum NoBuffer {
    /// The element is stopping or flushing.
    Flushing,
    /// Consumers kept every buffer too long, or the channel failed: an element error.
    Failed(String),
}

/// The pool's view of the sink.
pub(super) struct SinkLender {
    pub(super) hub: Weak<Hub>,
    /// Where a failure to lend is posted as an element error (upstream would say only that
    /// its allocation failed).
    pub(super) element: gst::glib::WeakRef<super::HwtensorSink>,
    pub(super) generation: u64,
    pub(super) when_full: WhenFull,
    pub(super) timeout: Duration,
}

impl SinkLender {
    /// Runs `f` on this lender's channel, if it is still the current one.
    fn with_channel(&self, f: impl FnOnce(&mut Channel)) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let mut state = hub.state();
        if let Some(ch) = state.channel_of(self.generation) {
            f(ch);
        }
    }
}

impl Lender for SinkLender {
    fn next_slot(&self, flushing: &AtomicBool) -> Result<Lent, gst::FlowError> {
        let hub = self.hub.upgrade().ok_or(gst::FlowError::Flushing)?;
        let generation = Some(self.generation);
        match hub.acquire(self.when_full, self.timeout, flushing, generation) {
            Ok(Some(slot)) => Ok(Lent::Slot(slot)),
            Ok(None) => Ok(Lent::Spare),
            Err(NoBuffer::Flushing) => Err(gst::FlowError::Flushing),
            Err(NoBuffer::Failed(why)) => {
                if let Some(element) = self.element.upgrade() {
                    gst::element_error!(element, gst::ResourceError::Write, ("{why}"));
                }
                Err(gst::FlowError::Error)
            }
        }
    }

    fn returned(&self, slot: usize) {
        self.with_channel(|ch| ch.buffer_returned(slot));
    }

    fn unusable(&self, slot: usize) {
        self.with_channel(|ch| ch.release(slot));
    }
}

/// The socket consumers connect to, and the thread that attaches them.
pub(super) struct Listening {
    pub(super) address: Address,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.address.unlink();
    }
}

/// Attaches the consumers that connect, until `stop`; between looks, gives upstream back
/// the adopted buffers consumers handed back (upstream that waits for them renders nothing
/// meanwhile, so rendering alone would not).
pub(super) fn accept_loop(listener: UnixListener, hub: Weak<Hub>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        if let Some(hub) = hub.upgrade() {
            hub.state().release_returned();
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let Some(hub) = hub.upgrade() else { return };
                let connected = hub.state().connect(stream);
                if let Err(e) = connected {
                    hub.count_refusal(&e);
                    gst::warning!(CAT, "a consumer could not attach: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                gst::warning!(CAT, "accepting a consumer: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// A pool tensor for `g` on `memory`, at GStreamer's strides where hwtensor lays every plane
/// out as GStreamer does.
pub(super) fn pool_tensor(g: &Geometry, memory: PoolMemory) -> hwtensor::Result<TensorDyn> {
    let on = |memory| match (g.gst_stride, g.gst_chroma) {
        (Some(stride), Some(chroma)) => TensorDyn::image(
            &ImageSpec::new(g.format, g.width, g.height)
                .with_row_stride(stride)
                .with_chroma_stride(chroma),
            g.dtype,
            Some(memory),
            CpuAccess::ReadWrite,
        ),
        (Some(stride), None) => TensorDyn::image(
            &ImageSpec::new(g.format, g.width, g.height).with_row_stride(stride),
            g.dtype,
            Some(memory),
            CpuAccess::ReadWrite,
        ),
        (None, _) => TensorDyn::image(
            &ImageSpec::new(g.format, g.width, g.height),
            g.dtype,
            Some(memory),
            CpuAccess::ReadWrite,
        ),
    };
    match memory {
        PoolMemory::Shm => on(TensorMemory::Shm),
        PoolMemory::DmaBuf => on(TensorMemory::DmaBuf),
        PoolMemory::Auto => on(TensorMemory::DmaBuf).or_else(|_| on(TensorMemory::Shm)),
    }
}
