//! One-way hand-off latency from a producer process to a consumer process, for three
//! contenders measured the same way in one run: hwtensor's pooled channel (`hwtensor::stream`),
//! an iceoryx2 publish-subscribe service (zero-copy samples; an event service wakes a sleeping
//! receiver), and a bare Unix socket carrying 24 bytes.
//!
//! The method is the same for all: each frame is stamped with `CLOCK_MONOTONIC` just before it
//! is sent, the consumer takes the time as its receive returns, and the producer sends the next
//! frame only once the previous one came back (the channel's hand-back, iceoryx2's and the
//! socket's acknowledgement), so no frame queues behind another. Modes: busy-poll (the receiver
//! spins), blocking back to back, and blocking paced at 5 ms (the receiver sleeps between
//! frames). Frames: 64 B, 1080p and 4K RGBA; their content is not written (the hand-off is what
//! is measured, and it must not grow with the size).
//!
//! Usage: `bench-ipc` (all figures), or as its own peer: `bench-ipc peer CONTENDER MODE BYTES FD`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use iceoryx2::prelude::*;

/// Frames per measurement in the back-to-back modes, and paced.
const FRAMES: usize = 2000;
/// Set BENCH_IPC_FRAMES to override (a quick look).
fn frames_override() -> Option<usize> {
    std::env::var("BENCH_IPC_FRAMES").ok()?.parse().ok()
}
const PACED_FRAMES: usize = 200;
/// The gap between frames of the paced mode.
const PACE: Duration = Duration::from_millis(5);
/// Buffers in flight: the pool of the channel, and iceoryx2's subscriber buffer.
const POOL: usize = 3;
/// How long anyone waits for the other side before calling the run failed.
const WAIT: Duration = Duration::from_secs(10);
const SIZES: [(&str, usize); 3] = [
    ("64 B", 64),
    ("1080p", 1920 * 1080 * 4),
    ("4k", 3840 * 2160 * 4),
];
const MODES: [&str; 3] = ["busy-poll", "blocking", "paced"];

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() -> Result {
    set_log_level(LogLevel::Error); // its "no config file, defaults used" warning is expected
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 6 && args[1] == "peer" {
        let bytes = args[4].parse()?;
        let fd: i32 = args[5].parse()?;
        return consumer(&args[2], &args[3], bytes, fd);
    }
    println!("across two processes, median / p99: one way | round trip (the same method for each)");
    let both = |f: &Figures| {
        format!(
            "{:>8} / {:<8} | {:>8} / {:<8}",
            fmt(f.one_way.0),
            fmt(f.one_way.1),
            fmt(f.round_trip.0),
            fmt(f.round_trip.1)
        )
    };
    for mode in MODES {
        let s = run("socket", mode, 24)?;
        println!("{mode:<10} socket   24 B  {}", both(&s));
        for (name, bytes) in SIZES {
            let h = run("hwtensor", mode, bytes)?;
            let i = run("iceoryx2", mode, bytes)?;
            println!("{mode:<10} hwtensor {name:<5} {}", both(&h));
            println!(
                "{mode:<10} iceoryx2 {name:<5} {}  one way hwtensor/iceoryx2 {:.2}x",
                both(&i),
                h.one_way.0.as_secs_f64() / i.one_way.0.as_secs_f64().max(1e-9)
            );
        }
    }
    Ok(())
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_micros(10) {
        format!("{} ns", d.as_nanos())
    } else {
        format!("{:.1} us", d.as_secs_f64() * 1e6)
    }
}

fn frames(mode: &str) -> usize {
    if let Some(n) = frames_override() {
        return n;
    }
    if mode == "paced" {
        PACED_FRAMES
    } else {
        FRAMES
    }
}

/// Runs one contender in one mode: starts the consumer process, produces, and reads its report.
fn run(contender: &str, mode: &str, bytes: usize) -> Result<Figures> {
    let (ours, theirs) = UnixStream::pair()?;
    let inherited = rustix::io::dup(&theirs)?; // without close-on-exec: the child's end
                                               // A service name of its own per run, for both processes (the child inherits it).
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let service = format!("hwtensor-bench-ipc-{}-{run}", std::process::id());
    std::env::set_var("BENCH_IPC_SERVICE", &service);
    let child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "peer",
            contender,
            mode,
            &bytes.to_string(),
            &inherited.as_raw_fd().to_string(),
        ])
        .env("BENCH_IPC_SERVICE", &service)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    drop((theirs, inherited));
    let mut trips = match contender {
        "hwtensor" => produce_hwtensor(ours, mode, bytes)?,
        "iceoryx2" => produce_iceoryx2(ours, mode, bytes)?,
        _ => produce_socket(ours, mode)?,
    };
    trips.sort_unstable();
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("the {contender} consumer failed ({})", out.status).into());
    }
    let nums: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let at = |p: usize| Duration::from_nanos(trips[(trips.len() * p / 100).min(trips.len() - 1)]);
    match nums[..] {
        [m, p] => Ok(Figures {
            one_way: (Duration::from_nanos(m), Duration::from_nanos(p)),
            round_trip: (at(50), at(99)),
        }),
        _ => Err("no report from the consumer".into()),
    }
}

/// Median and p99, one way (the consumer's receipt) and round trip (the frame back at the
/// producer).
struct Figures {
    one_way: (Duration, Duration),
    round_trip: (Duration, Duration),
}

fn pace(mode: &str) {
    if mode == "paced" {
        std::thread::sleep(PACE);
    }
}

fn produce_hwtensor(stream: UnixStream, mode: &str, bytes: usize) -> Result<Vec<u64>> {
    use hwtensor::stream::{FrameMeta, Producer};
    use hwtensor::{Tensor, TensorDyn, TensorMemory};
    let pool = (0..POOL)
        .map(|_| Tensor::<u8>::new(&[bytes], Some(TensorMemory::Shm)).map(TensorDyn::from))
        .collect::<hwtensor::Result<Vec<_>>>()?;
    let mut producer = Producer::new(pool)?;
    producer.attach(stream)?;
    let mut trips = Vec::new();
    for seq in 0..frames(mode) as u64 {
        pace(mode);
        let slot = producer.acquire(WAIT)?;
        let sent = now_ns();
        producer.send(slot, FrameMeta::new(seq, sent))?;
        // The frame came back once every buffer is free again.
        let all = (0..POOL)
            .map(|_| producer.acquire(WAIT))
            .collect::<hwtensor::Result<Vec<_>>>()?;
        trips.push(now_ns() - sent);
        all.into_iter().for_each(|s| producer.release(s));
    }
    Ok(trips)
}

fn produce_socket(mut stream: UnixStream, mode: &str) -> Result<Vec<u64>> {
    let mut ack = [0u8];
    let mut trips = Vec::new();
    for seq in 0..frames(mode) as u64 {
        pace(mode);
        let mut msg = [0u8; 24];
        let sent = now_ns();
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        msg[8..16].copy_from_slice(&sent.to_le_bytes());
        stream.write_all(&msg)?;
        stream.read_exact(&mut ack)?;
        trips.push(now_ns() - sent);
    }
    Ok(trips)
}

/// The iceoryx2 services of one run: frames forward (payload slices, the timestamp in the user
/// header), acknowledgements back, and an event each way to wake a sleeping side.
struct Iox {
    node: Node<ipc::Service>,
}

impl Iox {
    fn new() -> Result<Iox> {
        Ok(Iox {
            node: NodeBuilder::new().create::<ipc::Service>()?,
        })
    }

    fn name(what: &str) -> Result<ServiceName> {
        let base =
            std::env::var("BENCH_IPC_SERVICE").unwrap_or_else(|_| "hwtensor-bench-ipc".into());
        Ok(format!("{base}/{what}").as_str().try_into()?)
    }

    fn frames(
        &self,
    ) -> Result<
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], u64>,
    > {
        Ok(self
            .node
            .service_builder(&Iox::name("frames")?)
            .publish_subscribe::<[u8]>()
            .user_header::<u64>()
            .subscriber_max_buffer_size(POOL)
            .subscriber_max_borrowed_samples(POOL)
            .open_or_create()?)
    }

    fn acks(
        &self,
    ) -> Result<
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, u64, ()>,
    > {
        Ok(self
            .node
            .service_builder(&Iox::name("acks")?)
            .publish_subscribe::<u64>()
            .open_or_create()?)
    }

    fn event(
        &self,
        what: &str,
    ) -> Result<iceoryx2::service::port_factory::event::PortFactory<ipc::Service>> {
        Ok(self
            .node
            .service_builder(&Iox::name(what)?)
            .event()
            .open_or_create()?)
    }
}

fn produce_iceoryx2(stream: UnixStream, mode: &str, bytes: usize) -> Result<Vec<u64>> {
    let iox = Iox::new()?;
    let publisher = iox
        .frames()?
        .publisher_builder()
        .initial_max_slice_len(bytes)
        .create()?;
    let acks = iox.acks()?.subscriber_builder().create()?;
    let wake_consumer = iox.event("to-consumer")?.notifier_builder().create()?;
    let woken = iox.event("to-producer")?.listener_builder().create()?;
    // The consumer says it is attached (one byte on the socket) before the first frame.
    let mut ready = [0u8];
    (&stream).read_exact(&mut ready)?;
    let spin = mode == "busy-poll";
    let mut trips = Vec::new();
    for seq in 0..frames(mode) as u64 {
        pace(mode);
        let mut sample = publisher.loan_slice_uninit(bytes)?;
        let sent = now_ns();
        *sample.user_header_mut() = sent;
        // SAFETY: the payload is bytes nobody reads (the hand-off is measured, not the content).
        let sample = unsafe { sample.assume_init() };
        if sample.send()? == 0 {
            return Err("iceoryx2 delivered a frame to no subscriber".into());
        }
        if !spin {
            wake_consumer.notify()?;
        }
        // Wait for the acknowledgement of this frame.
        loop {
            if let Some(ack) = acks.receive()? {
                if *ack == seq {
                    break;
                }
            }
            if !spin {
                woken.timed_wait_all(|_| {}, WAIT)?; // drains every pending wake-up
            }
        }
        trips.push(now_ns() - sent);
    }
    drop(stream);
    Ok(trips)
}

/// The consumer process: receives every frame, prints the median and p99 latency in ns.
fn consumer(contender: &str, mode: &str, _bytes: usize, fd: i32) -> Result {
    // SAFETY: the fd the producer left open for this process, used by nothing else.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut latencies = Vec::with_capacity(frames(mode));
    let spin = mode == "busy-poll";
    match contender {
        "hwtensor" => {
            use hwtensor::stream::{Consumer, Wait};
            let mut c = Consumer::connect(stream, hwtensor::stream::CONNECT_TIMEOUT)?;
            let wait = if spin { Wait::Spin } else { Wait::Block };
            for _ in 0..frames(mode) {
                let frame = c.recv(wait)?;
                latencies.push(now_ns().saturating_sub(frame.meta().timestamp_ns));
            }
        }
        "iceoryx2" => {
            let iox = Iox::new()?;
            let frames_in = iox.frames()?.subscriber_builder().create()?;
            let acks = iox.acks()?.publisher_builder().create()?;
            let woken = iox.event("to-consumer")?.listener_builder().create()?;
            let wake_producer = iox.event("to-producer")?.notifier_builder().create()?;
            (&stream).write_all(&[1])?;
            for seq in 0..frames(mode) as u64 {
                let sample = loop {
                    if let Some(s) = frames_in.receive()? {
                        break s;
                    }
                    if !spin {
                        woken.timed_wait_all(|_| {}, WAIT)?; // drains every pending wake-up
                    }
                };
                latencies.push(now_ns().saturating_sub(*sample.user_header()));
                drop(sample);
                acks.send_copy(seq)?;
                if !spin {
                    wake_producer.notify()?;
                }
            }
        }
        _ => {
            let mut stream = stream;
            stream.set_nonblocking(spin)?;
            let mut msg = [0u8; 24];
            for _ in 0..frames(mode) {
                let mut got = 0;
                while got < msg.len() {
                    match stream.read(&mut msg[got..]) {
                        Ok(0) => return Err("the producer left".into()),
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::hint::spin_loop()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                let sent = u64::from_le_bytes(msg[8..16].try_into()?);
                latencies.push(now_ns().saturating_sub(sent));
                loop {
                    match stream.write(&[1]) {
                        Ok(_) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::hint::spin_loop()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
    latencies.sort_unstable();
    let at = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    println!("{} {}", at(50), at(99));
    Ok(())
}
