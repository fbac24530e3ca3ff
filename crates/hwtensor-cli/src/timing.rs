//! Medians and formatting shared by the demo and the benchmarks.

use std::time::{Duration, Instant};

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// The `p`-th percentile (0..=100) of sorted `samples` (the demo's tail figures).
#[cfg_attr(not(unix), allow(dead_code))]
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let i = (sorted.len() * p / 100).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}

/// Median time of one call of `f`, timing `batch` calls at a time `samples` times: batching makes
/// nanosecond operations measurable over the cost of reading the clock.
pub fn median_per_call(samples: usize, batch: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..batch {
        f(); // warm up: first touches, lazy initialisation
    }
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed() / batch as u32
        })
        .collect();
    median(&mut times)
}

/// Formats a duration in the unit that suits it.
pub fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.1} us", ns as f64 / 1e3),
        _ => format!("{:.2} ms", ns as f64 / 1e6),
    }
}
