//! The pieces of the rendezvous protocol that do not depend on the platform: the version word's
//! states, the bounded wait for a claim to settle, and the shared queue lock. The Vulkan record
//! (POSIX shared memory) and the D3D11 record (a `Local\` file mapping) both build on them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The version word of an empty record.
pub(crate) const EMPTY: u32 = 0;
/// The version word while a copy writes the record.
pub(crate) const CLAIMING: u32 = u32::MAX;

/// How long a reader waits for a claim to settle: long enough for a copy to write a few words,
/// short enough that a stuck claim costs one device-creation's worth of time.
const SETTLE_BUDGET: Duration = Duration::from_millis(50);
/// Yields before the reader starts sleeping: a claim normally settles within microseconds.
const SETTLE_YIELDS: u32 = 64;
/// The sleep between checks once yielding has not been enough.
const SETTLE_SLEEP: Duration = Duration::from_millis(1);

/// Calls `look` until it returns an answer (it returns `None` while a claim is in progress),
/// yielding first and then sleeping, for at most [`SETTLE_BUDGET`]. `None`: never settled.
///
/// Why wait instead of calling the record stale: a stale verdict would mint a second device,
/// which is exactly what the rendezvous exists to prevent.
pub(crate) fn wait_settled<R>(mut look: impl FnMut() -> Option<R>) -> Option<R> {
    let started = Instant::now();
    let mut tries = 0;
    loop {
        if let Some(found) = look() {
            return Some(found);
        }
        if started.elapsed() >= SETTLE_BUDGET {
            return None;
        }
        tries += 1;
        if tries < SETTLE_YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(SETTLE_SLEEP);
        }
    }
}

/// Claims a record: compare-and-swap of the version word from `expected` to [`CLAIMING`].
pub(crate) fn try_claim(version: &AtomicU32, expected: u32) -> bool {
    version
        .compare_exchange(expected, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// A lock word shared by every copy in the process (it lives in the record), held for one
/// submission.
pub(crate) struct QueueLock<'a>(&'a AtomicU32);

/// Spins before yielding: a submission holds the lock for microseconds.
const LOCK_SPINS: u32 = 100;

impl<'a> QueueLock<'a> {
    pub(crate) fn acquire(word: &'a AtomicU32) -> Self {
        let mut spins = 0;
        while word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < LOCK_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        QueueLock(word)
    }
}

impl Drop for QueueLock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_that_never_settles_is_reported_after_the_budget_not_before() {
        let started = Instant::now();
        assert_eq!(wait_settled(|| None::<()>), None);
        let spent = started.elapsed();
        assert!(spent >= SETTLE_BUDGET, "gave up after {spent:?}");
        assert!(spent < SETTLE_BUDGET * 20, "bounded: {spent:?}");
    }

    #[test]
    fn a_claim_succeeds_only_from_the_expected_version() {
        let v = AtomicU32::new(EMPTY);
        assert!(!try_claim(&v, 7));
        assert!(try_claim(&v, EMPTY));
        assert_eq!(v.load(Ordering::Relaxed), CLAIMING);
        assert!(!try_claim(&v, EMPTY), "a second claimant loses");
    }
}
