//! What the device layer's polling threads share, whichever driver they poll: the schedule of
//! their looks (a [`Backoff`]), their request queue ([`Requests`]), and the gate that keeps
//! them out of the driver once the process exits ([`ExitGate`]). The timeline's completion
//! waiter (`vulkan/fence.rs`) and CUDA's read waiter (`cuda/event.rs`) are built from these.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The first sleep between two looks at the counter once the spin is over: a wait for work of
/// the expected length ends at most about this late (plus the scheduler's wake-up), not the
/// ~10 ms a blocked `vkWaitSemaphores` on a CUDA-signalled value takes on NVIDIA.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_micros(50);

/// The longest the completion-fd waiter sleeps between two looks at the counter. It polls,
/// starting at [`POLL_INTERVAL`] and doubling up to this, and never blocks in
/// `vkWaitSemaphores`: the Khronos validation layer of Debian 12 (1.3.239) deadlocks a host
/// wait on one thread against submissions on others (its issue 4968; one run in ~25 of
/// `vulkan_device` under the layer hung so for longer than the test's 5 s), and on NVIDIA a
/// blocked wait on a CUDA-signalled value wakes ~10 ms late. A short wait is answered within
/// ~0.1 ms, a long one costs a wake-up every 2 ms.
pub(crate) const WAITER_SLICE: Duration = Duration::from_millis(2);

/// The pause of a thread that polls for completions: [`POLL_INTERVAL`] after news, doubling up
/// to [`WAITER_SLICE`] while nothing changes. The timeline's completion waiter and the CUDA
/// read waiter (`cuda/event.rs`) keep the same schedule.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(POLL_INTERVAL)
    }

    /// The pause now.
    pub(crate) fn pause(self) -> Duration {
        self.0
    }

    /// Nothing changed: the next pause is longer.
    pub(crate) fn grow(&mut self) {
        self.0 = (self.0 * 2).min(WAITER_SLICE);
    }
}

/// The requests of a polling waiter thread, and its pause between two looks at what it waits for.
pub(crate) struct Requests<M> {
    rx: mpsc::Receiver<M>,
    pause: Backoff,
}

/// What a polling waiter thread does next ([`Requests::next`]).
pub(crate) enum Next<M> {
    /// Takes on this request.
    Request(M),
    /// Looks again at what it waits for.
    LookAgain,
    /// Ends: every sender is gone and nothing waits.
    End,
}

impl<M> Requests<M> {
    pub(crate) fn new(rx: mpsc::Receiver<M>) -> Requests<M> {
        Requests {
            rx,
            pause: Backoff::new(),
        }
    }

    /// What to do next. With nothing `waiting` it sleeps until a request comes; else at most
    /// the pause, which grows while no request does.
    pub(crate) fn next(&mut self, waiting: bool) -> Next<M> {
        let next = match waiting {
            false => self
                .rx
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            true => self.rx.recv_timeout(self.pause.pause()),
        };
        match next {
            Ok(m) => {
                self.pause = Backoff::new();
                Next::Request(m)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.pause.grow();
                Next::LookAgain
            }
            Err(mpsc::RecvTimeoutError::Disconnected) if !waiting => Next::End,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(self.pause.pause());
                Next::LookAgain
            }
        }
    }
}

/// How long exit waits for a polling thread to step out of the driver: one wait slice and then
/// some.
const EXIT_BUDGET: Duration = Duration::from_millis(50);

/// Keeps a polling thread out of the driver once the process exits. Exit hooks run before the
/// static destructors of libraries loaded earlier (the validation layer's, the driver's): a
/// thread still inside them then would crash the exiting process. The hook [`close`]s the gate
/// and waits, bounded, for the thread to step out; the thread calls the driver only through
/// [`enter`], which refuses once closed.
///
/// [`close`]: ExitGate::close
/// [`enter`]: ExitGate::enter
pub(crate) struct ExitGate {
    /// Set at exit: the driver is off limits from then on.
    closed: AtomicBool,
    /// Whether the thread is inside the driver now.
    inside: AtomicBool,
}

impl ExitGate {
    /// An open gate, for a `static`.
    pub(crate) const fn new() -> ExitGate {
        ExitGate {
            closed: AtomicBool::new(false),
            inside: AtomicBool::new(false),
        }
    }

    /// Runs `call` (a call into the driver) unless the process is exiting: `None` then.
    pub(crate) fn enter<R>(&self, call: impl FnOnce() -> R) -> Option<R> {
        // Announce first, then check: exit either sees us inside, or we see it closed.
        self.inside.store(true, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.inside.store(false, Ordering::SeqCst);
            return None;
        }
        let r = call();
        self.inside.store(false, Ordering::SeqCst);
        Some(r)
    }

    /// Closes the gate, then waits at most [`EXIT_BUDGET`] for a thread inside to step out.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let started = Instant::now();
        while self.inside.load(Ordering::SeqCst) && started.elapsed() < EXIT_BUDGET {
            std::thread::yield_now();
        }
    }

    /// Whether the process is exiting (the gate is closed).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_refuses_the_call_and_an_open_one_runs_it() {
        let gate = ExitGate::new();
        assert_eq!(gate.enter(|| 7), Some(7));
        gate.close();
        let mut ran = false;
        assert_eq!(gate.enter(|| ran = true), None);
        assert!(!ran && gate.is_closed());
    }

    #[test]
    fn the_backoff_doubles_from_the_poll_interval_up_to_the_slice() {
        let mut b = Backoff::new();
        assert_eq!(b.pause(), POLL_INTERVAL);
        b.grow();
        assert_eq!(b.pause(), POLL_INTERVAL * 2);
        (0..32).for_each(|_| b.grow());
        assert_eq!(b.pause(), WAITER_SLICE);
    }
}
