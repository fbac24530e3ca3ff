//! Time as the channel and its waits use it: deadlines that never overflow, and the clock
//! every process's frame stamps share.
//!
//! Why a module for two functions: `Instant + Duration` panics when the sum is past what the
//! platform's clock can hold (`Duration::MAX`, or a C caller's `UINT64_MAX` nanoseconds on
//! Windows), and a panic inside a wait aborts a C or Python host. Every deadline of the crate
//! is made here, so "a huge timeout" has one meaning: wait for ever, still woken by a peer that
//! leaves.

use std::time::{Duration, Instant};

/// How far ahead a deadline lies at most: a timeout beyond it waits as long as a process can
/// run. A century is far past any process's life and well inside every platform's clock.
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The deadline `timeout` from now, saturated at [`FOREVER`] (never a panic, whatever the
/// timeout).
pub fn deadline_after(timeout: Duration) -> Instant {
    deadline_from(Instant::now(), timeout)
}

/// The deadline `timeout` after `start`, saturated at [`FOREVER`] after it.
pub fn deadline_from(start: Instant, timeout: Duration) -> Instant {
    let mut ahead = timeout.min(FOREVER);
    loop {
        // A clock that cannot hold a century ahead (none we know) gets the furthest it can.
        match start.checked_add(ahead) {
            Some(deadline) => return deadline,
            None => ahead /= 2,
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (Linux; the performance counter on Windows): one clock for
/// every process of the machine, so a producer's [`FrameMeta`](crate::stream::FrameMeta)
/// stamp and a consumer's receive time can be subtracted.
#[cfg(target_os = "linux")]
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * NANOS_PER_SECOND + t.tv_nsec as u64
}

/// The performance counter in nanoseconds: Windows' one clock for every process of the
/// machine (`QueryPerformanceCounter` counts from boot at a fixed frequency).
#[cfg(windows)]
#[allow(unsafe_code)] // two plain Win32 queries into locals
pub fn monotonic_ns() -> u64 {
    use windows::Win32::System::Performance::{QueryPerformanceCounter, QueryPerformanceFrequency};
    let (mut count, mut frequency) = (0i64, 0i64);
    // SAFETY: out-pointers to locals; both calls cannot fail on Windows XP and later.
    let _ = unsafe { QueryPerformanceCounter(&mut count) };
    // SAFETY: as above.
    let _ = unsafe { QueryPerformanceFrequency(&mut frequency) };
    let (count, frequency) = (count.max(0) as u128, frequency.max(1) as u128);
    (count * u128::from(NANOS_PER_SECOND) / frequency) as u64
}

/// Nanoseconds in a second.
const NANOS_PER_SECOND: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_past_what_the_clock_holds_is_a_deadline_far_ahead_not_a_panic() {
        let now = Instant::now();
        let far = deadline_from(now, Duration::MAX);
        assert!(far >= now + FOREVER);
        assert_eq!(
            deadline_from(now, Duration::from_millis(5)),
            now + Duration::from_millis(5)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        assert!(monotonic_ns() >= a + 1_000_000);
    }
}
