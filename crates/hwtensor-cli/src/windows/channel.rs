//! `hwtensor bench`'s pooled-channel figures on Windows: one-way latency from a producer
//! process to a consumer process through `hwtensor::stream` on a named pipe, measured as the
//! Linux bench measures it (each frame sent once the previous one came back, the consumer
//! taking the time against the producer's stamp on one machine-wide clock), so the two
//! platforms' figures compare on one machine.

use std::time::Duration;

use hwtensor::handoff::{Pipe, PipeListener};
use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

use super::monotonic_ns;
use crate::timing::fmt;

/// Buffers in the channel's pool.
const POOL: usize = 3;
/// How long either side waits for the other before the bench gives up.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// The gap between frames of the paced run: a receiver that sleeps between frames.
const PACE: Duration = Duration::from_millis(5);
/// Frame sizes: a tiny message and a 1080p RGBA frame (the cost must not grow with size).
const SIZES: [(&str, usize); 2] = [("64 B", 64), ("1080p", 1920 * 1080 * 4)];
/// The ways of waiting, as on Linux: name, busy-poll, paced, frames.
const MODES: [(&str, bool, bool, usize); 3] = [
    ("busy-poll", true, false, 2000),
    ("blocking", false, false, 2000),
    ("paced 5 ms", false, true, 200),
];

/// Runs the figures.
pub fn bench(quick: bool) -> crate::Result {
    println!(
        "\n== pooled channel (hwtensor::stream) on a named pipe: one-way latency across two \
         processes, shm sections, pool of {POOL}, median / p99 =="
    );
    for (name, spin, paced, frames) in MODES {
        let frames = if quick { frames / 10 } else { frames };
        print!("{name:<11}");
        for (size, bytes) in SIZES {
            let (m, p) = run(bytes, frames, spin, paced)?;
            print!(" | {size} {:>8} / {:<8}", fmt(m), fmt(p));
        }
        println!();
    }
    Ok(())
}

/// Median and p99 one-way latency of `frames` frames of `bytes`.
fn run(
    bytes: usize,
    frames: usize,
    spin: bool,
    paced: bool,
) -> crate::Result<(Duration, Duration)> {
    let name = format!("hwtensor-bench-{}-{bytes}-{spin}", std::process::id());
    let mut listener = PipeListener::bind(&name)?;
    let mut args = vec!["bench-peer", "--pipe", &name];
    let count = frames.to_string();
    args.extend(["--frames", &count]);
    if spin {
        args.push("--spin");
    }
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let pipe = listener.accept(PEER_TIMEOUT)?;
    let pool: Vec<TensorDyn> = (0..POOL)
        .map(|_| Tensor::<u8>::new(&[bytes], Some(TensorMemory::Shm)).map(TensorDyn::from))
        .collect::<Result<_, _>>()?;
    let mut producer = Producer::new(pool)?;
    producer.attach(pipe)?;
    for seq in 0..frames as u64 {
        if paced {
            std::thread::sleep(PACE);
        }
        let slot = producer.acquire(PEER_TIMEOUT)?;
        producer.send(slot, FrameMeta::new(seq, monotonic_ns()))?;
        // Every buffer free again: the frame came back before the next goes.
        let all: Vec<_> = (0..POOL)
            .map(|_| producer.acquire(PEER_TIMEOUT))
            .collect::<Result<_, _>>()?;
        all.into_iter().for_each(|s| producer.release(s));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("the bench peer failed ({})", out.status).into());
    }
    crate::timing::parse_report(&String::from_utf8_lossy(&out.stdout))
}

/// The consumer process: receives `frames`, then prints the median and p99 latency in ns.
pub fn peer(pipe: &str, frames: usize, spin: bool) -> crate::Result {
    let pipe = Pipe::connect(pipe, PEER_TIMEOUT)?;
    let mut consumer = Consumer::connect(pipe, CONNECT_TIMEOUT)?;
    let wait = if spin {
        Wait::Spin
    } else {
        Wait::For(PEER_TIMEOUT)
    };
    let mut latencies = Vec::with_capacity(frames);
    for _ in 0..frames {
        let frame = consumer.recv(wait)?;
        let now = monotonic_ns();
        latencies.push(Duration::from_nanos(
            now.saturating_sub(frame.meta().timestamp_ns),
        ));
    }
    println!("{}", crate::timing::report(&mut latencies));
    Ok(())
}
