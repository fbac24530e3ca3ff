//! The process device as `probe` and `bench` show it, written once for both backends: its
//! adapter, origin and features, the `device()` hot path, signal + wait, signals per second.
//! Each platform adds what only its backend has (Vulkan's queues, D3D11's feature level) and the
//! second copy of the library where it can load one.

use std::time::{Duration, Instant};

use hwtensor::gpu::{self, GpuDevice};

use crate::timing::{fmt, median, median_per_call};

/// Target for `device()` after the first call.
const DEVICE_TARGET: Duration = Duration::from_nanos(20);
/// Threads that signal at once when measuring throughput.
const SIGNAL_THREADS: usize = 4;
/// Round trips timed per sample round.
const ROUND_TRIPS_PER_ROUND: usize = 10;
/// How long a signal's completion may take in the benchmarks before it counts as a failure.
const SIGNAL_WAIT: Duration = Duration::from_secs(5);

/// The process device as JSON: the fields every backend has, then `extra`'s.
pub fn probe_json(extra: impl FnOnce(&GpuDevice) -> serde_json::Value) -> serde_json::Value {
    match gpu::device() {
        Ok(d) => {
            let mut v = serde_json::json!({
                "adapter": d.adapter_label(), "origin": format!("{:?}", d.origin()),
                "features": d.features().names(), "feature_tier": d.features().tier(),
                "export_fence": d.export_fence().is_some(),
            });
            if let (Some(all), serde_json::Value::Object(more)) = (v.as_object_mut(), extra(d)) {
                all.extend(more);
            }
            v
        }
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// The process device as text: adapter, origin and features, then `extra`'s lines.
pub fn probe_text<W: std::io::Write>(
    out: &mut W,
    extra: impl FnOnce(&mut W, &GpuDevice) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let d = match gpu::device() {
        Ok(d) => d,
        Err(e) => return writeln!(out, "process device: none: {e}"),
    };
    writeln!(
        out,
        "process device: {} ({:?})",
        d.adapter_label(),
        d.origin()
    )?;
    writeln!(
        out,
        "  features: {} (tier {})",
        d.features().names().join(", "),
        d.features().tier()
    )?;
    extra(out, d)
}

/// The device's own figures; `None` (and a printed skip) where there is no device.
pub fn bench(rounds: usize) -> crate::Result<Option<&'static GpuDevice>> {
    let d = match gpu::device() {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: no GPU device ({e})");
            return Ok(None);
        }
    };
    println!("device: {}", d.adapter_label());
    let hot = median_per_call(rounds, 10_000, || {
        std::hint::black_box(gpu::device().is_ok());
    });
    println!(
        "device() after the first call:  {:>10}  {}",
        fmt(hot),
        crate::bench::verdict(hot <= DEVICE_TARGET)
    );
    // Each round trip timed on its own: one signal's whole latency, as a frame's producer
    // sees it (a batch would let the next signal overlap the last wait).
    let mut round_trips = Vec::with_capacity(rounds * ROUND_TRIPS_PER_ROUND);
    for _ in 0..rounds * ROUND_TRIPS_PER_ROUND {
        let started = Instant::now();
        d.signal()
            .and_then(|v| d.wait(v, SIGNAL_WAIT))
            .map_err(|e| format!("a signal + wait failed: {e}"))?;
        round_trips.push(started.elapsed());
    }
    println!(
        "signal() + wait() round trip:   {:>10}",
        fmt(median(&mut round_trips))
    );
    Ok(Some(d))
}

/// Signals per second from [`SIGNAL_THREADS`] threads making `per_thread` signals each; with
/// `other`, every second thread signals through it (another copy of the library) instead.
pub fn signal_throughput(
    d: &'static GpuDevice,
    per_thread: usize,
    other: Option<&(dyn Fn() -> bool + Sync)>,
) -> crate::Result<f64> {
    let started = Instant::now();
    let ok = std::thread::scope(|s| {
        let threads: Vec<_> = (0..SIGNAL_THREADS)
            .map(|t| {
                s.spawn(move || {
                    (0..per_thread).all(|_| match other {
                        Some(signal) if t % 2 == 1 => signal(),
                        _ => d.signal().is_ok(),
                    })
                })
            })
            .collect();
        threads.into_iter().all(|t| t.join().unwrap_or(false))
    });
    let elapsed = started.elapsed();
    if !ok {
        return Err("a signal failed during the throughput run".into());
    }
    d.wait(d.last_signalled(), SIGNAL_WAIT * 2)?;
    Ok((SIGNAL_THREADS * per_thread) as f64 / elapsed.as_secs_f64())
}
