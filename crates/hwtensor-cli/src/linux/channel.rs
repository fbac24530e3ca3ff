//! `hwtensor bench`'s pooled-channel figures: one-way latency from a producer process to a
//! consumer process through `hwtensor::stream`, beside a bare Unix socket carrying 24 bytes,
//! measured the same way in the same run. Each frame is sent once the previous one came back
//! (the channel's hand-back, the socket's one-byte acknowledgement), so no frame queues behind
//! another; the consumer takes the time against the producer's `CLOCK_MONOTONIC` stamp.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

use super::monotonic_ns;
use crate::timing::{fmt, median};

/// Buffers in the channel's pool.
const POOL: usize = 3;
/// How long the producer waits for a buffer before the bench gives up.
const ACQUIRE: Duration = Duration::from_secs(5);
/// Bytes of the socket reference's message: a sequence number, a timestamp, a spare word.
const SOCKET_MESSAGE: usize = 24;
/// The target for a GPU frame's hand-off across processes (issue 16, on the H200).
const GPU_TARGET: Duration = Duration::from_micros(30);
/// The gap between frames of the paced run: a receiver that sleeps between frames.
const PACE: Duration = Duration::from_millis(5);
/// Frame sizes: a tiny message, and two video frames (the cost must not grow with size).
const SIZES: [(&str, usize); 3] = [
    ("64 B", 64),
    ("1080p", 1920 * 1080 * 4),
    ("4k", 3840 * 2160 * 4),
];

/// One way of waiting, as the bench runs it.
#[derive(Clone, Copy)]
struct Mode {
    name: &'static str,
    spin: bool,
    paced: bool,
    frames: usize,
    /// GPU frames touched by CUDA on both sides: the producer writes one byte of each with a
    /// CUDA map, the consumer reads one byte back as this says (bench_ipc.py's pattern, in Rust).
    cuda: Option<CudaRead>,
}

/// How the CUDA consumer of the bench reaches each frame.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CudaRead {
    /// A CUDA map: its stream waits for the frame's write if that is pending, and its end
    /// records a CUDA event (what a later write of the buffer, and the hand-back, wait for).
    /// Until 2026-12 the end signalled the timeline, which stalled the producer's CUDA work.
    Map,
    /// The address `cuda_ready` gives: nothing queued for a finished write, nothing signalled
    /// (what DLPack consumers do; safe here because the read is synchronous). Beside `Map` it
    /// shows what a map's semaphore operations cost: on the H100, 315 us one way against 10 us,
    /// before a map skipped the wait for a finished write.
    Address,
}

const MODES: [Mode; 3] = [
    Mode {
        name: "busy-poll",
        spin: true,
        paced: false,
        frames: 2000,
        cuda: None,
    },
    Mode {
        name: "blocking",
        spin: false,
        paced: false,
        frames: 2000,
        cuda: None,
    },
    Mode {
        name: "paced 5 ms",
        spin: false,
        paced: true,
        frames: 200,
        cuda: None,
    },
];

/// Runs the figures.
pub fn bench(quick: bool) -> crate::Result {
    println!(
        "\n== pooled channel (hwtensor::stream) vs a bare Unix socket: one-way latency across two \
         processes, pool of {POOL}, median / p99 =="
    );
    for mode in MODES {
        let mode = Mode {
            frames: if quick { mode.frames / 10 } else { mode.frames },
            ..mode
        };
        let (sm, sp) = run(mode, None)?;
        print!("{:<11} socket {:>8} / {:<8}", mode.name, fmt(sm), fmt(sp));
        let mut small = Duration::ZERO;
        for (name, bytes) in SIZES {
            let (m, p) = run(mode, Some(bytes))?;
            print!(" | {name} {:>8} / {:<8}", fmt(m), fmt(p));
            if bytes == 64 {
                small = m;
            }
            if name == "4k" {
                let growth = m.as_secs_f64() / small.as_secs_f64().max(1e-9);
                print!(" 4k/64B {growth:.2}x");
            }
        }
        println!();
    }
    if hwtensor::gpu::device().is_ok() {
        let mode = Mode {
            frames: if quick { 200 } else { 2000 },
            ..MODES[1]
        };
        let (m, p) = run_on(mode, Some(SIZES[1].1), TensorMemory::Gpu)?;
        println!(
            "GPU 1080p frames, blocking: {:>8} / {:<8} {}",
            fmt(m),
            fmt(p),
            crate::bench::verdict(m <= GPU_TARGET)
        );
        match super::cuda::usable() {
            Ok(_) => {
                for (read, how) in [(CudaRead::Map, "map"), (CudaRead::Address, "cuda_ready")] {
                    let cuda = Mode {
                        cuda: Some(read),
                        ..mode
                    };
                    let (m, p) = run_on(cuda, Some(SIZES[1].1), TensorMemory::Gpu)?;
                    println!(
                        "GPU 1080p frames, CUDA both sides (a one-byte write, a one-byte read by {how}): {:>8} / {:<8}",
                        fmt(m),
                        fmt(p)
                    );
                }
            }
            Err(e) => println!("GPU frames with CUDA on both sides: skipped ({e})"),
        }
    }
    Ok(())
}

/// Median and p99 one-way latency of `mode`: the channel with shm frames of `bytes`, or the
/// socket.
fn run(mode: Mode, bytes: Option<usize>) -> crate::Result<(Duration, Duration)> {
    run_on(mode, bytes, TensorMemory::Shm)
}

/// As `run`, with the pool on `memory`.
fn run_on(
    mode: Mode,
    bytes: Option<usize>,
    memory: TensorMemory,
) -> crate::Result<(Duration, Duration)> {
    let (ours, theirs) = UnixStream::pair()?;
    // The child's end without close-on-exec, so it survives the exec.
    let inherited = rustix::io::dup(&theirs)?;
    let mut args = vec![
        "bench-peer".to_string(),
        "--fd".into(),
        inherited.as_raw_fd().to_string(),
        "--frames".into(),
        mode.frames.to_string(),
    ];
    if mode.spin {
        args.push("--spin".into());
    }
    if bytes.is_none() {
        args.push("--socket".into());
    }
    match mode.cuda {
        Some(CudaRead::Map) => args.push("--cuda".into()),
        Some(CudaRead::Address) => args.extend(["--cuda".into(), "--cuda-address".into()]),
        None => {}
    }
    // The peer's stderr (its step times, or why it failed) is passed on once it is done: both
    // processes print their steps as they finish, and their lines ran into each other.
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    drop((theirs, inherited));
    match bytes {
        Some(b) => produce_frames(ours, mode, b, memory)?,
        None => produce_messages(ours, mode)?,
    }
    let out = child.wait_with_output()?;
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("the bench peer failed ({})", out.status).into());
    }
    crate::timing::parse_report(&String::from_utf8_lossy(&out.stdout))
}

fn produce_frames(
    stream: UnixStream,
    mode: Mode,
    bytes: usize,
    memory: TensorMemory,
) -> crate::Result {
    let pool: Vec<TensorDyn> = (0..POOL)
        .map(|_| Tensor::<u8>::new(&[bytes], Some(memory)).map(TensorDyn::from))
        .collect::<Result<_, _>>()?;
    let mut producer = Producer::new(pool)?;
    producer.attach(stream)?;
    let cuda = match mode.cuda {
        Some(_) => Some(super::cuda::Session::open(super::cuda::usable()?)?),
        None => None,
    };
    let mut steps = StepTimes::default();
    for seq in 0..mode.frames as u64 {
        if mode.paced {
            std::thread::sleep(PACE);
        }
        let slot = producer.acquire(ACQUIRE)?;
        let mut step = Steps::start();
        if let Some(cuda) = &cuda {
            let t = producer.tensor(slot).as_tensor::<u8>()?;
            let map = t.cuda_map_write(cuda.stream())?;
            step.done();
            cuda.set_byte(map.device_ptr(), seq as u8)?;
            step.done();
            map.finish()?; // its value travels as the frame's completion
            step.done();
        }
        producer.send(slot, FrameMeta::new(seq, monotonic_ns()))?;
        step.done();
        if cuda.is_some() {
            steps.push(step);
        }
        // Every buffer free again: the frame came back before the next goes.
        let all: Vec<_> = (0..POOL)
            .map(|_| producer.acquire(ACQUIRE))
            .collect::<Result<_, _>>()?;
        all.into_iter().for_each(|s| producer.release(s));
    }
    if cuda.is_some() {
        steps.print("producer", ["map", "one-byte write", "map end", "send"]);
    }
    Ok(())
}

/// Times of the steps of one frame, each from the frame's start (where a CUDA frame's time
/// goes: issue #27's stalls showed in single CUDA calls).
struct Steps {
    start: Instant,
    at: Vec<Duration>,
}

impl Steps {
    fn start() -> Steps {
        Steps::started_ago(Duration::ZERO)
    }

    /// Steps of a frame that began `age` ago (a received frame, from its send).
    fn started_ago(age: Duration) -> Steps {
        let now = Instant::now();
        Steps {
            start: now.checked_sub(age).unwrap_or(now),
            at: Vec::new(),
        }
    }

    /// Marks the end of the next step.
    fn done(&mut self) {
        self.at.push(self.start.elapsed());
    }
}

/// The steps of every frame, for their medians.
#[derive(Default)]
struct StepTimes(Vec<Vec<Duration>>);

impl StepTimes {
    fn push(&mut self, steps: Steps) {
        self.0.push(steps.at);
    }

    /// The median length of step `i` (its mark less the one before), over the frames that
    /// reached it.
    fn median_length(&self, i: usize) -> Duration {
        let since = |at: &Vec<Duration>| i.checked_sub(1).map_or(Duration::ZERO, |p| at[p]);
        let mut lengths: Vec<Duration> = (self.0.iter())
            .filter_map(|at| Some(at.get(i)?.saturating_sub(since(at))))
            .collect();
        median(&mut lengths)
    }

    /// Prints the median length of each step, on stderr (a bench peer's stdout is its report).
    fn print<const N: usize>(&self, who: &str, names: [&str; N]) {
        let lengths = (names.iter().enumerate())
            .map(|(i, name)| format!("{name} {}", fmt(self.median_length(i))));
        eprintln!(
            "  {who} steps (medians): {}",
            lengths.collect::<Vec<_>>().join(", ")
        );
    }
}

fn produce_messages(mut stream: UnixStream, mode: Mode) -> crate::Result {
    let mut ack = [0u8];
    for seq in 0..mode.frames as u64 {
        if mode.paced {
            std::thread::sleep(PACE);
        }
        let mut msg = [0u8; SOCKET_MESSAGE];
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        msg[8..16].copy_from_slice(&monotonic_ns().to_le_bytes());
        stream.write_all(&msg)?;
        stream.read_exact(&mut ack)?;
    }
    Ok(())
}

/// The consumer process: receives `frames`, then prints the median and p99 latency in ns.
/// With `cuda`, each frame's first byte is read through CUDA, as it says, before the time is
/// taken.
pub fn peer(
    fd: i32,
    frames: usize,
    spin: bool,
    socket: bool,
    cuda: Option<CudaRead>,
) -> crate::Result {
    if fd < 0 {
        return Err("no socket fd".into());
    }
    // SAFETY: the fd the bench left open for this process, used by nothing else here.
    #[allow(unsafe_code)]
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut latencies = Vec::with_capacity(frames);
    if socket {
        consume_messages(stream, frames, spin, &mut latencies)?;
    } else {
        let mut consumer = Consumer::connect(stream, hwtensor::stream::CONNECT_TIMEOUT)?;
        let wait = if spin { Wait::Spin } else { Wait::Block };
        let session = match cuda {
            Some(read) => Some((super::cuda::Session::open(super::cuda::usable()?)?, read)),
            None => None,
        };
        let mut steps = StepTimes::default();
        for _ in 0..frames {
            let frame = consumer.recv(wait)?;
            if let Some((cuda, read)) = &session {
                // The first step is the frame's age when it is in hand.
                let age = monotonic_ns().saturating_sub(frame.meta().timestamp_ns);
                let mut step = Steps::started_ago(Duration::from_nanos(age));
                step.done();
                let got = read_first_byte(&frame, cuda, *read, &mut step)?;
                steps.push(step);
                if got != frame.meta().seq as u8 {
                    return Err(format!("frame {}: CUDA read {got}", frame.meta().seq).into());
                }
            }
            let now = monotonic_ns();
            latencies.push(Duration::from_nanos(
                now.saturating_sub(frame.meta().timestamp_ns),
            ));
        }
        if session.is_some() {
            let names = [
                "frame in hand after the send",
                "map (or cuda_ready)",
                "one-byte read",
                "map end",
            ];
            steps.print("consumer", names);
        }
    }
    println!("{}", crate::timing::report(&mut latencies));
    Ok(())
}

/// The frame's first byte read through CUDA as `read` says, each step marked in `step`.
fn read_first_byte(
    frame: &hwtensor::stream::Frame,
    cuda: &super::cuda::Session,
    read: CudaRead,
    step: &mut Steps,
) -> crate::Result<u8> {
    let t = frame.tensor().as_tensor::<u8>()?;
    let map = match read {
        CudaRead::Map => Some(t.cuda_map_read(cuda.stream())?),
        CudaRead::Address => None,
    };
    let ptr = match &map {
        Some(m) => m.device_ptr(),
        None => (frame.tensor()).cuda_ready(hwtensor::Direction::Read, cuda.stream())?,
    };
    step.done();
    let got = cuda.byte(ptr)?;
    step.done();
    if let Some(m) = map {
        m.end()?; // a CUDA event, which the frame's hand-back waits for: no timeline signal
    }
    step.done();
    Ok(got)
}

fn consume_messages(
    mut stream: UnixStream,
    frames: usize,
    spin: bool,
    latencies: &mut Vec<Duration>,
) -> crate::Result {
    stream.set_nonblocking(spin)?;
    let mut msg = [0u8; SOCKET_MESSAGE];
    for _ in 0..frames {
        let mut got = 0;
        while got < SOCKET_MESSAGE {
            match stream.read(&mut msg[got..]) {
                Ok(0) => return Err("the producer left".into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        let now = monotonic_ns();
        let sent = u64::from_le_bytes(msg[8..16].try_into().unwrap_or_default());
        latencies.push(Duration::from_nanos(now.saturating_sub(sent)));
        loop {
            match stream.write(&[1]) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_length_is_its_mark_less_the_one_before_as_a_median_over_frames() {
        let us = Duration::from_micros;
        let mut times = StepTimes::default();
        for marks in [[10, 30, 60], [20, 30, 100], [10, 50, 60]] {
            times.0.push(marks.into_iter().map(us).collect());
        }
        times.0.push(vec![us(15)]); // a frame that stopped after its first step
        let lengths: Vec<Duration> = (0..3).map(|i| times.median_length(i)).collect();
        assert_eq!(lengths, [us(15), us(20), us(30)]);
    }
}
