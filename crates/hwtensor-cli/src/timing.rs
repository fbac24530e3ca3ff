//! Medians and formatting shared by the demo and the benchmarks.

use std::time::{Duration, Instant};

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// The `p`-th percentile (0..=100) of sorted `samples` (the demo's tail figures).
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

/// Median times of one call of `a` and of `b`, called alternately `rounds` times after one
/// warm-up call each: a figure and its reference measured side by side see the same machine,
/// where one measured after the other may see another tenant's load.
#[cfg(target_os = "linux")] // the CUDA references, Linux only
pub fn side_by_side(
    rounds: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Duration, Duration) {
    a();
    b();
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        ta.push(time(&mut a));
        tb.push(time(&mut b));
    }
    (median(&mut ta), median(&mut tb))
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

/// What a bench peer prints: the median and p99 of its `latencies` (sorted here), in ns.
pub fn report(latencies: &mut [Duration]) -> String {
    latencies.sort_unstable();
    let ns = |p| percentile(latencies, p).as_nanos();
    format!("{} {}", ns(50), ns(99))
}

/// The median and p99 in a bench peer's `report`.
pub fn parse_report(report: &str) -> crate::Result<(Duration, Duration)> {
    let nums: Vec<u64> = report
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [median, p99] => Ok((Duration::from_nanos(median), Duration::from_nanos(p99))),
        _ => Err(format!("the bench peer reported {report:?}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_report_reads_back_as_its_median_and_p99() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let (m, p) = parse_report(&report(&mut samples)).unwrap();
        assert_eq!(
            (m, p),
            (Duration::from_micros(51), Duration::from_micros(100))
        );
        assert!(parse_report("error: no socket").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn side_by_side_alternates_the_two_after_one_warm_up_call_each() {
        let calls = std::cell::RefCell::new(String::new());
        side_by_side(
            3,
            || calls.borrow_mut().push('a'),
            || calls.borrow_mut().push('b'),
        );
        assert_eq!(calls.into_inner(), "abababab");
    }
}
