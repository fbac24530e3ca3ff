//! The pieces of the rendezvous protocol that do not depend on the platform: the version word's
//! states, the bounded wait for a claim to settle, and the shared queue lock. The Vulkan record
//! (POSIX shared memory) and the D3D11 record (a `Local\` file mapping) both build on them.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
/// (The D3D11 record's claim: a `Local\` mapping dies with its processes, so no claim there can
/// be left by a dead one. Linux uses [`try_claim_as`].)
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) fn try_claim(version: &AtomicU32, expected: u32) -> bool {
    version
        .compare_exchange(expected, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// Claims a record whose claim word holds the version word in its low half and the claimer's
/// `token` in its high half: from `expected` to ([`CLAIMING`], `token`) in one CAS, so a claim
/// never exists without saying whose it is (a process killed right after claiming leaves a
/// claim others can tell is not theirs).
#[cfg_attr(windows, allow(dead_code))] // the Linux record's claim
pub(crate) fn try_claim_as(state: &AtomicU64, expected: u64, token: u32) -> bool {
    state
        .compare_exchange(
            expected,
            claim_word(CLAIMING, token),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// The claim word of `version` written by the claimer with `token`.
#[cfg_attr(windows, allow(dead_code))]
pub(crate) fn claim_word(version: u32, token: u32) -> u64 {
    u64::from(version) | u64::from(token) << 32
}

/// A lock word shared by every copy in the process (it lives in the record), held for one
/// submission. The word holds the holder's pid (0: free), so a holder that died with it can
/// be recognised and the lock taken over.
pub(crate) struct QueueLock<'a>(&'a AtomicU32);

/// Spins before yielding: a submission holds the lock for microseconds.
const LOCK_SPINS: u32 = 100;
/// How long a copy waits for the lock before it says so: a submission holds it for
/// microseconds, so a second means a holder that is stuck or dead.
const LOCK_BOUND: Duration = Duration::from_secs(10);
/// How often a waiter past its spins asks whether the holder is still alive.
const LOCK_OWNER_CHECK: Duration = Duration::from_millis(100);

impl<'a> QueueLock<'a> {
    /// Takes the lock, waiting at most [`LOCK_BOUND`]; a lock held by a process that no longer
    /// exists is taken over.
    pub(crate) fn acquire(word: &'a AtomicU32) -> crate::Result<Self> {
        let me = this_pid();
        // The hot path: a free lock, taken at once (no clock, no syscall).
        if word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(QueueLock(word));
        }
        Self::acquire_contended(word, me)
    }

    fn acquire_contended(word: &'a AtomicU32, me: u32) -> crate::Result<Self> {
        let started = Instant::now();
        let mut last_check = started;
        let mut spins = 0;
        loop {
            match word.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(QueueLock(word)),
                Err(holder) if holder != 0 && last_check.elapsed() >= LOCK_OWNER_CHECK => {
                    last_check = Instant::now();
                    let taken = !crate::os::process_alive(holder)
                        && word
                            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok();
                    if taken {
                        log::warn!(
                            "hwtensor: took over the GPU queue lock from dead process {holder}"
                        );
                        return Ok(QueueLock(word));
                    }
                    if started.elapsed() >= LOCK_BOUND {
                        return Err(crate::Error::Timeout(format!(
                            "the shared GPU queue lock stayed held by process {holder} for {LOCK_BOUND:?}"
                        )));
                    }
                }
                Err(_) => {}
            }
            spins += 1;
            if spins < LOCK_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// This process's id, asked of the kernel once (glibc no longer caches `getpid`, and the lock
/// is taken for every signal).
fn this_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
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

    #[test]
    fn a_claim_says_whose_it_is_in_the_same_step() {
        let state = AtomicU64::new(u64::from(EMPTY));
        assert!(try_claim_as(&state, u64::from(EMPTY), 77));
        assert_eq!(state.load(Ordering::Relaxed), claim_word(CLAIMING, 77));
        assert!(
            !try_claim_as(&state, u64::from(EMPTY), 78),
            "a second claimant loses"
        );
    }

    /// Unix only: a Windows record dies with its processes, so no dead holder can be seen there.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_queue_lock_held_by_a_dead_process_is_taken_over() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let word = AtomicU32::new(dead);
        let started = Instant::now();
        let lock = QueueLock::acquire(&word).unwrap();
        assert_eq!(word.load(Ordering::Relaxed), std::process::id());
        assert!(started.elapsed() < LOCK_BOUND);
        drop(lock);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_queue_lock_held_by_a_live_process_is_a_timeout_not_a_hang() {
        // Held by process 1 (alive): the waiter gives up after the bound, naming the holder.
        let word = AtomicU32::new(1);
        let started = Instant::now();
        let err = QueueLock::acquire(&word).err().expect("the lock is held");
        assert!(err.to_string().contains("process 1"), "{err}");
        assert!(started.elapsed() < LOCK_BOUND * 2);
    }
}
