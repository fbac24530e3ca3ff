//! The Linux-only benchmarks: hand-off over a Unix socket, across a thread and across processes,
//! and the Vulkan device's figures.

use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use hwtensor::blob::Transport;
use hwtensor::handoff::{recv, send_as};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

use super::monotonic_ns;
use crate::bench::{shape, verdict, Samples};
use crate::timing::{fmt, median};

const HANDOFF_FRAMES: [(&str, usize, usize); 3] = [
    ("360p", 640, 360),
    ("1080p", 1920, 1080),
    ("4k", 3840, 2160),
];

/// Targets from the issues, checked and printed beside the figures.
const HANDOFF_TARGET: Duration = Duration::from_micros(50);
const HANDOFF_GROWTH_LIMIT: f64 = 2.0;

/// Everything after the core figures, in order.
pub fn run(s: &Samples) -> crate::Result {
    println!("\n== hand-off: send + receive + import + first map, across a thread (medians) ==");
    handoff(s)?;
    super::capi::bench(s.rounds)?;
    super::gpu::bench(s.rounds)?;
    let references = super::cuda::bench(s.rounds)?;
    super::gpu::bandwidth(s.rounds, references.as_ref())?;
    drop(references); // the CUDA session's context comes off this thread
    println!("\n== GPU hand-off: send + receive + import, across a thread of the same process (medians) ==");
    gpu_handoff(s)?;
    super::channel::bench(s.rounds < 50)?;
    Ok(())
}

/// Median latency of handing `tensor` to a consumer thread in `mode`: from just before `send`
/// to just after the consumer's first map returns.
fn handoff_latency(
    tensor: &TensorDyn,
    mode: Transport,
    rounds: usize,
    map: bool,
) -> crate::Result<Duration> {
    let (tx, rx) = UnixStream::pair()?;
    let (done_tx, done_rx) = mpsc::channel::<Result<u64, String>>();
    let consumer = std::thread::spawn(move || {
        while let Ok(received) = recv(&rx) {
            let first_map = received
                .as_tensor::<u8>()
                .map_err(|e| e.to_string())
                .and_then(|t| {
                    if map {
                        let m = t.map_read().map_err(|e| e.to_string())?;
                        std::hint::black_box(m.first().copied());
                    }
                    Ok(monotonic_ns())
                });
            if done_tx.send(first_map).is_err() {
                break;
            }
        }
    });
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds + 5 {
        let sent_at = monotonic_ns();
        send_as(&tx, tensor, mode)?;
        let mapped_at = done_rx.recv_timeout(Duration::from_secs(10))??;
        if round >= 5 {
            times.push(Duration::from_nanos(mapped_at.saturating_sub(sent_at)));
        }
    }
    drop(tx);
    consumer
        .join()
        .map_err(|_| "the consumer thread panicked")?;
    Ok(median(&mut times))
}

/// GPU tensors by reference: the cost does not grow with the frame either.
fn gpu_handoff(s: &Samples) -> crate::Result {
    if hwtensor::gpu::device().is_err() {
        println!("skipped: no GPU device");
        return Ok(());
    }
    for (name, w, h) in HANDOFF_FRAMES {
        let t: TensorDyn = Tensor::<u8>::new(&shape(w, h), Some(TensorMemory::Gpu))?.into();
        let zc = handoff_latency(&t, Transport::Reference, s.rounds, false)?;
        println!("{name:<8} {:>12}", fmt(zc));
    }
    Ok(())
}

/// Runs the two-process demo and reports the consumer's hand-off latency line.
fn handoff(s: &Samples) -> crate::Result {
    println!(
        "{:<8} {:>12} {:>14} {:>10}",
        "frame", "zero-copy", "copy (inline)", "copy/zero"
    );
    let mut zero_copy = vec![];
    for (name, w, h) in HANDOFF_FRAMES {
        let t: TensorDyn = Tensor::<u8>::new(&shape(w, h), Some(TensorMemory::Shm))?.into();
        let zc = handoff_latency(&t, Transport::Reference, s.rounds, true)?;
        let copy = handoff_latency(&t, Transport::Inline, s.rounds.min(31), true)?;
        let note = if name == "1080p" {
            verdict(zc <= HANDOFF_TARGET)
        } else {
            ""
        };
        println!(
            "{name:<8} {:>12} {:>14} {:>9.1}x  {note}",
            fmt(zc),
            fmt(copy),
            copy.as_secs_f64() / zc.as_secs_f64()
        );
        zero_copy.push(zc);
    }
    let growth = zero_copy[2].as_secs_f64() / zero_copy[0].as_secs_f64();
    println!(
        "4k / 360p zero-copy hand-off: {growth:.2}x  {}",
        verdict(growth <= HANDOFF_GROWTH_LIMIT)
    );
    Ok(())
}
