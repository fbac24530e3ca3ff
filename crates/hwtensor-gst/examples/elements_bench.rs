//! The elements against the bare channel, side by side in one run (issue #29's numbers):
//!
//! - one-way latency of 1080p I420 frames from a producer to a consumer process: the bare
//!   `hwtensor::stream` channel (a Rust producer and consumer) against hwtensorsink ->
//!   hwtensorsrc (send time stamped by the sink, arrival by a probe on the consumer's fakesink
//!   pad, the first point downstream sees the buffer), frames
//!   paced at 5 ms, alternating blocks. Both producers write each whole frame right after
//!   sending the one before, as a live source does: on two cores that work competes with the
//!   consumer's wake-up (here a bare producer that writes nothing measured 18 us, one that
//!   writes each frame 113 us), so a producer that writes nothing is no baseline. A third
//!   contender, hwtensorsink feeding a bare Rust consumer, shows which side adds what;
//! - the CPU time per frame of hwtensorsink (in the producer process, over a fakesink run) and
//!   of hwtensorsrc (the whole consumer process), against a `videoconvert` of the same frame
//!   to RGBA;
//! - the sink's copy counter (0 on the pooled path);
//! - the same frames' latency split at hwtensorsrc's receive (its received-time meta): the
//!   channel's part and the elements' own, and their ratio frame by frame, which the machine's
//!   noise skews far less than the comparison of separate blocks above (a busy machine still
//!   slows the elements' own part: 1.3-1.5 us quiet, 3.1-3.3 us busy, 2026-12-05; 1.2-1.3 us
//!   quiet once hwtensorsrc kept its stamps on its slot buffers, 2026-12-06).
//!
//! `cargo run --release -p hwtensor-gst --example elements_bench [-- ROUNDS FRAMES]`

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gst::prelude::*;
use gsthwtensor::stamp::{monotonic_ns, RECEIVED_TIME_CAPS, SENT_TIME_CAPS};
use hwtensor::stream::{Consumer, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::stream::{FrameKind, Marker};
use hwtensor::{CpuAccess, DType, ImageSpec, PixelFormat, TensorDyn, TensorMemory};

const CAPS: &str = "video/x-raw,format=I420,width=1920,height=1080";
/// Frames are paced as a 200 fps camera would send them, so each one finds its consumer idle.
const PACE: Duration = Duration::from_millis(5);
/// Alternating rounds, and frames per contender in each: many short rounds, because this
/// machine's load changes over seconds. With 4 rounds of 200 the elements / bare ratio of
/// medians swung from 1.11x to 1.85x between runs; with 12 of 150, runs of one hour agreed
/// (2026-12-06, 2 cores: 1.66x and 1.69x while busy, 1.25x and 1.26x while quiet).
const ROUNDS: usize = 12;
const FRAMES: usize = 150;

fn cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn addr(name: &str) -> SocketAddr {
    SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
}

fn connect(name: &str) -> UnixStream {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match UnixStream::connect_addr(&addr(name)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("connecting to @{name}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Child: a bare consumer of `frames` frames; prints each one-way latency (ns).
fn bare_consumer(name: &str, frames: usize) {
    let mut consumer = Consumer::connect(connect(name), CONNECT_TIMEOUT).unwrap();
    let mut lat = Vec::with_capacity(frames);
    for _ in 0..frames {
        let f = consumer.recv(Wait::For(Duration::from_secs(10))).unwrap();
        lat.push(monotonic_ns().saturating_sub(f.meta().timestamp_ns));
    }
    println!("LAT {}", join(&lat));
}

/// Child: hwtensorsrc into a fakesink until end of stream; prints each one-way latency (the
/// sink's send time to the fakesink), each frame's time from its send to hwtensorsrc's
/// receive, and the process's CPU time per frame.
fn gst_consumer(name: &str) {
    gst::init().unwrap();
    gsthwtensor::plugin_register_static().unwrap();
    let (per_frame, stamps, _) = run(&format!(
        "hwtensorsrc socket=@{name} is-live=false ! fakesink name=last sync=false"
    ));
    let (lat, channel): (Vec<u64>, Vec<u64>) = stamps.into_iter().unzip();
    println!("LAT {}", join(&lat));
    println!("CHANNEL {}", join(&channel));
    println!("CPU {per_frame}");
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

fn child(args: &[&str]) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Parses a child's `KEY v v v` lines.
fn report(out: std::process::Output, key: &str) -> Vec<u64> {
    assert!(out.status.success(), "a consumer child failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key).map(str::to_owned))
        .unwrap_or_default()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// One block of the bare channel: `frames` paced frames to a consumer process.
fn bare_block(name: &str, frames: usize) -> Vec<u64> {
    let listener = UnixListener::bind_addr(&addr(name)).unwrap();
    let consumer = child(&["--bare-consumer", name, &frames.to_string()]);
    let pool = (0..3)
        .map(|_| {
            TensorDyn::image(
                &ImageSpec::new(PixelFormat::I420, 1920, 1080),
                DType::U8,
                Some(TensorMemory::Shm),
                CpuAccess::ReadWrite,
            )
        })
        .collect::<hwtensor::Result<Vec<_>>>()
        .unwrap();
    let mut producer = Producer::new(pool).unwrap();
    producer.attach(listener.accept().unwrap().0).unwrap();
    // As a live source does: write the next frame as soon as the last is sent, then wait for
    // its time to send it (videotestsrc fills a frame, then waits on the clock).
    let fill = |producer: &mut Producer, i: usize| {
        let slot = producer.acquire(Duration::from_secs(10)).unwrap();
        let t = producer.tensor(slot).as_tensor::<u8>().unwrap();
        t.map_write().unwrap().fill(i as u8);
        slot
    };
    let mut slot = fill(&mut producer, 0);
    let mut next = Instant::now();
    for i in 0..frames {
        next += PACE;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        producer
            .send(slot, Marker::of(FrameKind::Frame).meta(i as u64))
            .unwrap();
        if i + 1 < frames {
            slot = fill(&mut producer, i + 1);
        }
    }
    report(consumer.wait_with_output().unwrap(), "LAT ")
}

/// Runs `pipeline` in this process to its end. Returns the process's CPU time per frame in
/// the steady state (from the first buffer reaching the element named `last` to the end of
/// stream: pool allocation and page faults of the first frames are set-up), and for each
/// buffer that carries hwtensorsrc's stamps its one-way latency and its send -> receive time.
fn run(pipeline: &str) -> (u64, Vec<(u64, u64)>, gst::Bin) {
    let p = gst::parse::launch(pipeline)
        .unwrap()
        .downcast::<gst::Bin>()
        .unwrap();
    let seen = Arc::new(Mutex::new((None::<u64>, 0u64, Vec::new())));
    let stamp_caps = [SENT_TIME_CAPS, RECEIVED_TIME_CAPS].map(gst::Caps::new_empty_simple);
    let pad = p.by_name("last").unwrap().static_pad("sink").unwrap();
    let probe = seen.clone();
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        let now = monotonic_ns();
        let mut s = probe.lock().unwrap();
        s.0.get_or_insert_with(cpu_ns);
        s.1 += 1;
        if let Some(b) = info.buffer() {
            let [sent, received] = stamp_caps.each_ref().map(|caps| {
                b.iter_meta::<gst::ReferenceTimestampMeta>()
                    .find(|m| m.reference().can_intersect(caps))
                    .map(|m| m.timestamp().nseconds())
            });
            if let (Some(sent), Some(received)) = (sent, received) {
                s.2.push((now.saturating_sub(sent), received.saturating_sub(sent)));
            }
        }
        gst::PadProbeReturn::Ok
    });
    p.set_state(gst::State::Playing).unwrap();
    let msg = p
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(120),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .unwrap();
    assert!(matches!(msg.view(), gst::MessageView::Eos(_)), "{msg:?}");
    let end = cpu_ns();
    p.set_state(gst::State::Null).unwrap();
    let (start, frames, lat) = std::mem::take(&mut *seen.lock().unwrap());
    let per_frame = (end - start.unwrap()) / frames.saturating_sub(1).max(1);
    (per_frame, lat, p)
}

/// One block through the elements.
struct GstBlock {
    /// One-way latencies.
    lat: Vec<u64>,
    /// The same frames' send -> hwtensorsrc receive times.
    channel: Vec<u64>,
    sink_cpu: u64,
    src_cpu: u64,
    copies: u64,
}

fn gst_block(name: &str, frames: usize) -> GstBlock {
    let consumer = child(&["--gst-consumer", name]);
    let (with_sink, _, p) = run(&format!(
        "{} ! hwtensorsink name=last socket=@{name} wait-for-consumer=true",
        live_source(frames)
    ));
    let copies = p.by_name("last").unwrap().property::<u64>("copies");
    let out = consumer.wait_with_output().unwrap();
    let line = |key| {
        let out = std::process::Output {
            status: out.status,
            stdout: out.stdout.clone(),
            stderr: Vec::new(),
        };
        report(out, key)
    };
    let (lat, channel) = (line("LAT "), line("CHANNEL "));
    let src_cpu = line("CPU ").first().copied().unwrap_or(0);
    let (without, _, _) = run(&format!(
        "{} ! fakesink name=last sync=false",
        live_source(frames)
    ));
    GstBlock {
        lat,
        channel,
        sink_cpu: with_sink.saturating_sub(without),
        src_cpu,
        copies,
    }
}

/// A live 1080p I420 test source of `frames` frames at the pace.
fn live_source(frames: usize) -> String {
    let fps = 1000 / PACE.as_millis();
    format!(
        "videotestsrc is-live=true num-buffers={frames} pattern=black ! {CAPS},framerate={fps}/1"
    )
}

/// One block of hwtensorsink feeding a bare Rust consumer process: where the elements' extra
/// latency lies, producer side or consumer side.
fn sink_to_bare_block(name: &str, frames: usize) -> Vec<u64> {
    let consumer = child(&["--bare-consumer", name, &frames.to_string()]);
    run(&format!(
        "{} ! hwtensorsink name=last socket=@{name} wait-for-consumer=true",
        live_source(frames)
    ));
    report(consumer.wait_with_output().unwrap(), "LAT ")
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--bare-consumer") => return bare_consumer(&args[2], args[3].parse().unwrap()),
        Some("--gst-consumer") => return gst_consumer(&args[2]),
        _ => {}
    }
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(ROUNDS);
    let frames: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(FRAMES);
    gst::init().unwrap();
    gsthwtensor::plugin_register_static().unwrap();
    let (mut bare, mut through, mut sink_only) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sink_cpu, mut src_cpu, mut copies) = (Vec::new(), Vec::new(), 0);
    // Each frame through the elements: (send -> receive, receive -> downstream, ratio of its
    // latency to its send -> receive in per mille).
    let mut split: Vec<(u64, u64, u64)> = Vec::new();
    for r in 0..rounds {
        let name = format!("hwtensor-gst-bench-{}-{r}", std::process::id());
        bare.extend(bare_block(&format!("{name}-bare"), frames));
        sink_only.extend(sink_to_bare_block(&format!("{name}-mixed"), frames));
        let b = gst_block(&format!("{name}-gst"), frames);
        // Per mille, frame by frame (`percentile` sorts integers).
        split.extend(b.lat.iter().zip(&b.channel).map(|(&l, &c)| {
            let own = l.saturating_sub(c);
            (c, own, l * 1000 / c.max(1))
        }));
        through.extend(b.lat);
        sink_cpu.push(b.sink_cpu);
        src_cpu.push(b.src_cpu);
        copies += b.copies;
    }
    let convert = {
        let n = frames;
        let src = format!("videotestsrc num-buffers={n} pattern=black ! {CAPS}");
        let (with, _, _) = run(&format!(
            "{src} ! videoconvert ! video/x-raw,format=RGBA ! fakesink name=last sync=false"
        ));
        let (without, _, _) = run(&format!("{src} ! fakesink name=last sync=false"));
        with.saturating_sub(without)
    };
    let (b50, b99) = (percentile(&mut bare, 0.5), percentile(&mut bare, 0.99));
    let (g50, g99) = (
        percentile(&mut through, 0.5),
        percentile(&mut through, 0.99),
    );
    let (sink, src) = (
        percentile(&mut sink_cpu, 0.5),
        percentile(&mut src_cpu, 0.5),
    );
    println!("1080p I420, {rounds} alternating rounds of {frames} frames paced at {PACE:?}");
    println!(
        "one-way latency  bare channel       median {:>8.1} us  p99 {:>8.1} us",
        b50 as f64 / 1e3,
        b99 as f64 / 1e3
    );
    let (m50, m99) = (
        percentile(&mut sink_only, 0.5),
        percentile(&mut sink_only, 0.99),
    );
    println!(
        "one-way latency  sink -> bare       median {:>8.1} us  p99 {:>8.1} us",
        m50 as f64 / 1e3,
        m99 as f64 / 1e3
    );
    println!(
        "one-way latency  sink -> src        median {:>8.1} us  p99 {:>8.1} us",
        g50 as f64 / 1e3,
        g99 as f64 / 1e3
    );
    println!(
        "ratio (elements / bare)             median {:>8.2}x    p99 {:>8.2}x",
        g50 as f64 / b50 as f64,
        g99 as f64 / b99 as f64
    );
    let (mut channel, mut own, mut ratio): (Vec<u64>, Vec<u64>, Vec<u64>) = (
        split.iter().map(|s| s.0).collect(),
        split.iter().map(|s| s.1).collect(),
        split.iter().map(|s| s.2).collect(),
    );
    println!(
        "  same frames:   send -> hwtensorsrc receive median {:>8.1} us, receive -> downstream median {:>6.1} us",
        percentile(&mut channel, 0.5) as f64 / 1e3,
        percentile(&mut own, 0.5) as f64 / 1e3
    );
    println!(
        "ratio (elements / channel, frame by frame) median {:>6.2}x    p99 {:>8.2}x",
        percentile(&mut ratio, 0.5) as f64 / 1e3,
        percentile(&mut ratio, 0.99) as f64 / 1e3
    );
    println!(
        "CPU per frame    hwtensorsink {:>8.1} us  hwtensorsrc {:>8.1} us",
        sink as f64 / 1e3,
        src as f64 / 1e3
    );
    println!(
        "CPU per frame    videoconvert I420 -> RGBA {:>8.1} us",
        convert as f64 / 1e3
    );
    println!(
        "ratio (sink + src) / videoconvert   {:>8.1} %",
        (sink + src) as f64 * 100.0 / convert as f64
    );
    println!("frames copied by the sink           {copies}");
}
