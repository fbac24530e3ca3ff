//! hwtensor-zenoh against plain Zenoh, side by side in one run, on loopback:
//!
//!     cargo run --release -p hwtensor-zenoh --example bench
//!
//! - 1080p RGBA across "hosts" (a subscriber that takes no local delivery): latency (one frame
//!   in flight) and frames per second (publishing back to back, congestion control `Block`)
//!   through hwtensor-zenoh, and the same bytes put with plain Zenoh (copied out of the tensor,
//!   as a user would) and taken out of the sample.
//! - One host, the fd hand-off: latency of 360p and of 4K frames (the ratio should be ~1).
//! - EdgeFirst `CameraFrame` messages, 1080p RGBA, to a subscriber process (this program again)
//!   that reads them with `edgefirst::decode` as an EdgeFirst node would: by pid and fd numbers
//!   against hwtensor's own blob by reference over the same Zenoh path (the blob and the
//!   publisher's pid and fd numbers in a sample, the fds taken with pidfd_getfd,
//!   `blob::import`), and inline against hwtensor's inline blob. The one-host fd hand-off is
//!   shown beside them.

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, qos::CongestionControl, sample::Sample, Wait};
use hwtensor_zenoh::{Encoding, Publisher, PublisherOptions, Subscriber, SubscriberOptions};

const WAIT: Duration = Duration::from_secs(10);
const LATENCY_FRAMES: usize = 200;
const FPS_FRAMES: usize = 300;

fn session(port: u16, listen: bool) -> zenoh::Session {
    let endpoint = format!("tcp/127.0.0.1:{port}");
    zenoh::open(hwtensor_zenoh::peer_config(&endpoint, listen).unwrap())
        .wait()
        .unwrap()
}

fn sessions() -> (zenoh::Session, zenoh::Session) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (session(port, true), session(port, false))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn frame(w: usize, h: usize) -> TensorDyn {
    Tensor::<u8>::new(&[h, w, 4], Some(TensorMemory::Shm))
        .unwrap()
        .into()
}

/// (median one-way latency in us, frames per second) through hwtensor-zenoh; frames per
/// second only across hosts (on one host a subscriber that falls behind drops frames, and
/// the measure there is latency).
fn ours(t: &TensorDyn, local: bool) -> (f64, f64) {
    let (a, b) = sessions();
    let key = "bench/ours";
    let options = PublisherOptions {
        congestion: CongestionControl::Block,
        ..PublisherOptions::default()
    };
    let mut publisher = Publisher::new(&a, key, options).unwrap();
    let sub_options = SubscriberOptions {
        local_delivery: local,
        queue: 64,
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, key, sub_options).unwrap();
    let ready = Instant::now();
    while !(publisher.local_subscribers() == 1 || publisher.publishes_inline()) {
        assert!(ready.elapsed() < WAIT, "no subscriber");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut lat = Vec::new();
    for _ in 0..LATENCY_FRAMES {
        publisher.publish(t).unwrap();
        let r = subscriber.recv(WAIT).unwrap();
        lat.push((now_ns() - r.timestamp_ns) as f64 / 1e3);
    }
    if local {
        return (median(lat), f64::NAN);
    }
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        for _ in 0..FPS_FRAMES {
            subscriber.recv(WAIT).unwrap();
        }
        FPS_FRAMES as f64 / started.elapsed().as_secs_f64()
    });
    for _ in 0..FPS_FRAMES {
        publisher.publish(t).unwrap();
    }
    (median(lat), reader.join().unwrap())
}

/// The same through plain Zenoh: the tensor's bytes copied out and put; the sample's bytes
/// taken on the other side.
fn plain(t: &TensorDyn) -> (f64, f64) {
    let (a, b) = sessions();
    let key = "bench/plain";
    let (publisher, rx, _sub) = plain_pair(&a, &b, key);
    let bytes = t.as_tensor::<u8>().unwrap();
    let put = || {
        let mut v = bytes.map_read().unwrap().to_vec();
        v[..8].copy_from_slice(&now_ns().to_le_bytes());
        publisher.put(v).wait().unwrap();
    };
    let take = |s: zenoh::sample::Sample| {
        let b = s.payload().to_bytes();
        u64::from_le_bytes(b[..8].try_into().unwrap())
    };
    let mut lat = Vec::new();
    for _ in 0..LATENCY_FRAMES {
        put();
        let sent = take(rx.recv_timeout(WAIT).unwrap());
        lat.push((now_ns() - sent) as f64 / 1e3);
    }
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        for _ in 0..FPS_FRAMES {
            take(rx.recv_timeout(WAIT).unwrap());
        }
        FPS_FRAMES as f64 / started.elapsed().as_secs_f64()
    });
    for _ in 0..FPS_FRAMES {
        put();
    }
    (median(lat), reader.join().unwrap())
}

/// How the subscriber process of the EdgeFirst rows is started: `bench --subscriber <kind>
/// <port>`.
const SUBSCRIBER: &str = "--subscriber";
/// Frames the subscriber process lets pass before it measures (sessions and caches warming).
const WARMUP: usize = 20;
/// The publisher's pace in the two-process rows: one frame in flight, as a camera sends them.
const PACE: Duration = Duration::from_millis(5);

/// What a subscriber process reads: EdgeFirst messages, or hwtensor's blob by reference with
/// the publisher's pid and fd numbers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    EdgeFirst,
    Blob,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::EdgeFirst => "edgefirst",
            Kind::Blob => "blob",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Kind::EdgeFirst => "bench/two/edgefirst",
            Kind::Blob => "bench/two/blob",
        }
    }
}

/// Median one-way latency in us of `t` sent `how` to a subscriber process on this host, which
/// imports each frame (taking its fds with pidfd_getfd) and measures.
fn two_processes(t: &TensorDyn, kind: Kind, inline: bool) -> f64 {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = session(port, true);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([SUBSCRIBER, kind.name(), &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ready = Instant::now();
    let token = format!("bench/ready/{}", kind.name());
    while !a
        .liveliness()
        .get(&token)
        .timeout(Duration::from_millis(200))
        .wait()
        .is_ok_and(|r| r.recv().is_ok())
    {
        assert!(ready.elapsed() < WAIT, "no subscriber process");
    }
    let frames = WARMUP + LATENCY_FRAMES;
    match kind {
        Kind::EdgeFirst => {
            let options = PublisherOptions {
                congestion: CongestionControl::Block,
                encoding: Encoding::EdgeFirst,
                always_inline: inline,
                local_delivery: false,
                ..PublisherOptions::default()
            };
            let mut publisher = Publisher::new(&a, kind.key(), options).unwrap();
            for _ in 0..frames {
                publisher.publish(t).unwrap();
                std::thread::sleep(PACE);
            }
        }
        Kind::Blob => {
            let publisher = a
                .declare_publisher(kind.key())
                .congestion_control(CongestionControl::Block)
                .wait()
                .unwrap();
            for _ in 0..frames {
                publisher.put(blob_message(t)).wait().unwrap();
                std::thread::sleep(PACE);
            }
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the subscriber process failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The subscriber process: imports each frame, prints the median one-way latency in us.
fn subscriber(kind: &str, port: u16) {
    let kind = match kind {
        "edgefirst" => Kind::EdgeFirst,
        _ => Kind::Blob,
    };
    let b = session(port, false);
    let (rx, _sub) = samples(&b, kind.key());
    let _ready = b
        .liveliness()
        .declare_token(format!("bench/ready/{}", kind.name()))
        .wait()
        .unwrap();
    let mut lat = Vec::new();
    for n in 0..WARMUP + LATENCY_FRAMES {
        let sample = rx.recv_timeout(WAIT).unwrap();
        let sent = match kind {
            Kind::EdgeFirst => {
                hwtensor_zenoh::edgefirst::decode(&sample.payload().to_bytes())
                    .unwrap()
                    .time_ns
            }
            Kind::Blob => take_blob(&sample),
        };
        if n >= WARMUP {
            lat.push((now_ns() - sent) as f64 / 1e3);
        }
    }
    println!("{}", median(lat));
}

/// hwtensor's own blob by reference as a sample: the send time, this process's pid, its fd
/// numbers and the blob (the EdgeFirst path, with our encoding).
fn blob_message(t: &TensorDyn) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let (blob, fds) = hwtensor::blob::export(t, hwtensor::blob::Transport::Reference).unwrap();
    let mut message = Vec::new();
    message.extend_from_slice(&now_ns().to_le_bytes());
    message.extend_from_slice(&std::process::id().to_le_bytes());
    message.extend_from_slice(&(fds.len() as u32).to_le_bytes());
    for fd in &fds {
        message.extend_from_slice(&fd.as_raw_fd().to_le_bytes());
    }
    message.extend_from_slice(&blob);
    message
}

/// Imports a [`blob_message`]: the fds taken with pidfd_getfd, the blob imported. Returns its
/// send time.
fn take_blob(sample: &Sample) -> u64 {
    use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
    let m = sample.payload().to_bytes();
    let word = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().unwrap());
    let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
    let pid = Pid::from_raw(word(8) as i32).unwrap();
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).unwrap();
    let n = word(12) as usize;
    let fds = (0..n)
        .map(|k| pidfd_getfd(&pidfd, word(16 + 4 * k) as i32, PidfdGetfdFlags::empty()).unwrap())
        .collect();
    hwtensor::blob::import(&m[16 + 4 * n..], fds).unwrap();
    sent
}

/// A plain Zenoh subscriber of `key` on `b`: its samples, and the subscriber to keep.
fn samples(
    b: &zenoh::Session,
    key: &'static str,
) -> (mpsc::Receiver<Sample>, zenoh::pubsub::Subscriber<()>) {
    let (tx, rx) = mpsc::channel();
    let sub = b
        .declare_subscriber(key)
        .callback(move |s| {
            let _ = tx.send(s);
        })
        .wait()
        .unwrap();
    (rx, sub)
}

/// A plain Zenoh publisher of `key` on `a` that blocks when full, once a subscriber on `b`
/// matches it.
fn plain_pair(
    a: &zenoh::Session,
    b: &zenoh::Session,
    key: &'static str,
) -> (
    zenoh::pubsub::Publisher<'static>,
    mpsc::Receiver<Sample>,
    zenoh::pubsub::Subscriber<()>,
) {
    let publisher = a
        .declare_publisher(key)
        .congestion_control(CongestionControl::Block)
        .wait()
        .unwrap();
    let (rx, sub) = samples(b, key);
    let ready = Instant::now();
    while !publisher.matching_status().wait().unwrap().matching() {
        assert!(ready.elapsed() < WAIT, "no subscriber");
        std::thread::sleep(Duration::from_millis(5));
    }
    (publisher, rx, sub)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SUBSCRIBER) {
        return subscriber(&args[2], args[3].parse().unwrap());
    }
    let hd = frame(1920, 1080);
    let (p_lat, p_fps) = plain(&hd);
    let (o_lat, o_fps) = ours(&hd, false);
    println!("1080p RGBA across hosts (loopback TCP), medians:");
    println!("  plain zenoh       latency {p_lat:8.1} us   {p_fps:7.1} frames/s");
    println!("  hwtensor-zenoh    latency {o_lat:8.1} us   {o_fps:7.1} frames/s");
    println!(
        "  ratio             latency {:.2}x       frames/s {:.2}x (target: within 1.2x)",
        o_lat / p_lat,
        p_fps / o_fps
    );
    let (small, _) = ours(&frame(640, 360), true);
    let (big, _) = ours(&frame(3840, 2160), true);
    println!("one host, fd hand-off: 360p {small:.1} us, 4K {big:.1} us: 4K/360p {:.2}x (target <= 1.2x)", big / small);
    let image: TensorDyn = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 1920, 1080),
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )
    .unwrap()
    .into();
    let (local, _) = ours(&image, true);
    let by_reference = two_processes(&image, Kind::EdgeFirst, false);
    let blob = two_processes(&image, Kind::Blob, false);
    let ef_inline = two_processes(&image, Kind::EdgeFirst, true);
    println!(
        "EdgeFirst CameraFrame, 1080p RGBA to a subscriber process, paced at {PACE:?}, medians \
         (target: within 1.2x of hwtensor's own):"
    );
    println!(
        "  by pid + fd numbers {by_reference:8.1} us, hwtensor blob by pidfd over Zenoh {blob:8.1} us: {:.2}x",
        by_reference / blob
    );
    println!(
        "  (hwtensor's fd hand-off in one process, which needs no Zenoh round: {local:.1} us)"
    );
    println!(
        "  inline data         {ef_inline:8.1} us, hwtensor inline blob (above)   {o_lat:8.1} us: {:.2}x",
        ef_inline / o_lat
    );
}
