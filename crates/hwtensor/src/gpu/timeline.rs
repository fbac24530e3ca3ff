//! The timeline's shared words, written once for both backends: the signal counter, the highest
//! deferred value, the highest submitted value and the queue lock.
//!
//! They live in the rendezvous record (shared by every copy of the library in the process) or,
//! without one, privately in this copy. The invariant they keep is the process's most delicate:
//! values are handed out in increasing order and reach the fence in that order, so the timeline
//! never goes backwards, whichever copy or thread signals. Every step that allocates or submits
//! therefore runs under the queue lock, and takes a [`QueueHeld`] to prove it.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::gpu::claim::QueueLock;

/// Proof that the caller holds the process's queue lock: the record's [`QueueLock`], or a
/// device's own serialising bracket (D3D11's `ID3D11Multithread`, which every copy shares).
pub(crate) struct QueueHeld<'a>(PhantomData<&'a ()>);

impl<'a> QueueHeld<'a> {
    /// Held through the record's lock. (D3D11 takes that lock only inside `with_queue`, whose
    /// callers vouch with [`QueueHeld::by_device_bracket`].)
    #[cfg_attr(windows, allow(dead_code))]
    pub(crate) fn by(_lock: &'a QueueLock<'_>) -> QueueHeld<'a> {
        QueueHeld(PhantomData)
    }

    /// Held through a device's own bracket, which serialises every copy's queue use. Call it
    /// only inside such a bracket.
    #[cfg_attr(not(windows), allow(dead_code))]
    pub(crate) fn by_device_bracket() -> QueueHeld<'a> {
        QueueHeld(PhantomData)
    }
}

/// The shared words of one timeline.
#[derive(Clone, Copy)]
pub(crate) struct TimelineWords {
    /// The last value allocated. Never reset: the next value must exceed every earlier one.
    counter: &'static AtomicU64,
    /// The highest value allocated by `defer` and not yet submitted.
    pending: &'static AtomicU64,
    /// The highest value whose signal has been submitted.
    submitted: &'static AtomicU64,
    /// The queue lock word (the holder's pid; 0 when free).
    lock: &'static AtomicU32,
}

impl TimelineWords {
    /// The words at these places (a rendezvous record's fields).
    pub(crate) fn at(
        counter: &'static AtomicU64,
        pending: &'static AtomicU64,
        submitted: &'static AtomicU64,
        lock: &'static AtomicU32,
    ) -> TimelineWords {
        TimelineWords {
            counter,
            pending,
            submitted,
            lock,
        }
    }

    /// Words of this copy alone (no rendezvous, or a private fallback timeline).
    pub(crate) fn private() -> TimelineWords {
        TimelineWords::at(
            Box::leak(Box::new(AtomicU64::new(0))),
            Box::leak(Box::new(AtomicU64::new(0))),
            Box::leak(Box::new(AtomicU64::new(0))),
            Box::leak(Box::new(AtomicU32::new(0))),
        )
    }

    /// Takes the queue lock (bounded; see [`QueueLock::acquire`]).
    pub(crate) fn lock(&self) -> crate::Result<QueueLock<'static>> {
        QueueLock::acquire(self.lock)
    }

    /// Allocates the next value for a signal submitted now. That signal covers every deferred
    /// value, so none is left pending.
    pub(crate) fn allocate(&self, _held: &QueueHeld<'_>) -> u64 {
        let value = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.pending.store(0, Ordering::Release);
        value
    }

    /// Allocates the next value for a signal submitted later (by `take_pending`'s caller, or
    /// by the next `allocate`'s).
    pub(crate) fn defer(&self, _held: &QueueHeld<'_>) -> u64 {
        let value = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.pending.fetch_max(value, Ordering::AcqRel);
        value
    }

    /// The deferred value to submit now, if any that is not yet submitted.
    pub(crate) fn take_pending(&self, _held: &QueueHeld<'_>) -> Option<u64> {
        let pending = self.pending.swap(0, Ordering::AcqRel);
        (pending > self.submitted()).then_some(pending)
    }

    /// Records that the signal of `value` has been submitted.
    pub(crate) fn mark_submitted(&self, value: u64, _held: &QueueHeld<'_>) {
        self.submitted.fetch_max(value, Ordering::AcqRel);
    }

    /// The highest value whose signal has been submitted.
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }

    /// The last value allocated by any copy.
    pub(crate) fn last(&self) -> u64 {
        self.counter.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_from_racing_threads_are_unique_and_submitted_in_increasing_order() {
        let words = TimelineWords::private();
        let submitted_in_order = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..4 {
                let (words, order) = (&words, &submitted_in_order);
                s.spawn(move || {
                    for i in 0..500 {
                        let lock = words.lock().unwrap();
                        let held = QueueHeld::by(&lock);
                        let v = if (t + i) % 3 == 0 {
                            words.defer(&held)
                        } else {
                            words.allocate(&held)
                        };
                        if let Some(p) = words.take_pending(&held) {
                            order.lock().unwrap().push(p);
                            words.mark_submitted(p, &held);
                        }
                        if v > words.submitted() {
                            order.lock().unwrap().push(v);
                            words.mark_submitted(v, &held);
                        }
                    }
                });
            }
        });
        let order = submitted_in_order.into_inner().unwrap();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "the timeline went backwards"
        );
        assert_eq!(words.last(), 2000, "every value handed out once");
        assert_eq!(words.submitted(), 2000);
    }

    #[test]
    fn a_signal_covers_the_values_deferred_before_it() {
        let words = TimelineWords::private();
        let lock = words.lock().unwrap();
        let held = QueueHeld::by(&lock);
        let deferred = words.defer(&held);
        let now = words.allocate(&held);
        assert!(now > deferred);
        words.mark_submitted(now, &held);
        assert_eq!(words.take_pending(&held), None, "nothing left to flush");
    }

    #[test]
    fn a_flush_submits_the_highest_deferred_value_once() {
        let words = TimelineWords::private();
        let lock = words.lock().unwrap();
        let held = QueueHeld::by(&lock);
        words.defer(&held);
        let second = words.defer(&held);
        assert_eq!(words.take_pending(&held), Some(second));
        words.mark_submitted(second, &held);
        assert_eq!(words.take_pending(&held), None);
    }
}
