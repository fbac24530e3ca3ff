//! hwtensor-zenoh against plain Zenoh, side by side in one run, on loopback:
//!
//!     cargo run --release -p hwtensor-zenoh --example bench
//!
//! - 1080p RGBA across "hosts" (a subscriber that takes no local delivery): latency (one frame
//!   in flight) and frames per second (publishing back to back, congestion control `Block`)
//!   through hwtensor-zenoh, and the same bytes put with plain Zenoh (copied out of the tensor,
//!   as a user would) and taken out of the sample.
//! - One host, the fd hand-off: latency of 360p and of 4K frames (the ratio should be ~1).
//! - EdgeFirst `CameraFrame` messages, 1080p RGBA, read by a plain Zenoh subscriber with
//!   `edgefirst::decode` (as an EdgeFirst node would): by pid and fd numbers against
//!   hwtensor's own blob by reference over the same Zenoh path (the blob and the publisher's
//!   pid and fd numbers in a sample, the fds taken with pidfd_getfd, `blob::import`), and
//!   inline against hwtensor's inline blob. The one-host fd hand-off is shown beside them.
//!   Both sessions live in this process (the fds are taken from its own pid).

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hwtensor::{CpuAccess, PixelFormat, Tensor, TensorDyn, TensorMemory};
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

/// Median one-way latency in us of `t` as EdgeFirst messages (by reference, or inline) to a
/// plain Zenoh subscriber that imports each with `edgefirst::decode`.
fn edgefirst(t: &TensorDyn, inline: bool) -> f64 {
    let (a, b) = sessions();
    let key = "bench/edgefirst";
    let options = PublisherOptions {
        congestion: CongestionControl::Block,
        encoding: Encoding::EdgeFirst,
        always_inline: inline,
        local_delivery: false,
        ..PublisherOptions::default()
    };
    let mut publisher = Publisher::new(&a, key, options).unwrap();
    let (rx, _sub) = samples(&b, key);
    let ready = Instant::now();
    loop {
        publisher.publish(t).unwrap();
        if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
        assert!(ready.elapsed() < WAIT, "no subscriber");
    }
    let mut lat = Vec::new();
    for _ in 0..LATENCY_FRAMES {
        publisher.publish(t).unwrap();
        let sample = rx.recv_timeout(WAIT).unwrap();
        let frame = hwtensor_zenoh::edgefirst::decode(&sample.payload().to_bytes()).unwrap();
        lat.push((now_ns() - frame.time_ns) as f64 / 1e3);
    }
    median(lat)
}

/// Median one-way latency in us of `t` as hwtensor's own blob by reference over Zenoh: the
/// sample carries the publisher's pid, its fd numbers and the blob; the subscriber takes the
/// fds with pidfd_getfd and imports the blob (the EdgeFirst path, with our encoding).
fn blob_by_pidfd(t: &TensorDyn) -> f64 {
    use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
    use std::os::fd::AsRawFd;
    let (a, b) = sessions();
    let key = "bench/blob-pidfd";
    let (publisher, rx, _sub) = plain_pair(&a, &b, key);
    let put = || {
        let (blob, fds) = hwtensor::blob::export(t, hwtensor::blob::Transport::Reference).unwrap();
        let mut message = Vec::new();
        message.extend_from_slice(&now_ns().to_le_bytes());
        message.extend_from_slice(&std::process::id().to_le_bytes());
        message.extend_from_slice(&(fds.len() as u32).to_le_bytes());
        for fd in &fds {
            message.extend_from_slice(&fd.as_raw_fd().to_le_bytes());
        }
        message.extend_from_slice(&blob);
        publisher.put(message).wait().unwrap();
    };
    let take = |s: zenoh::sample::Sample| {
        let m = s.payload().to_bytes();
        let word = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().unwrap());
        let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
        let pid = Pid::from_raw(word(8) as i32).unwrap();
        let pidfd = pidfd_open(pid, PidfdFlags::empty()).unwrap();
        let n = word(12) as usize;
        let fds = (0..n)
            .map(|k| {
                pidfd_getfd(&pidfd, word(16 + 4 * k) as i32, PidfdGetfdFlags::empty()).unwrap()
            })
            .collect();
        hwtensor::blob::import(&m[16 + 4 * n..], fds).unwrap();
        sent
    };
    put();
    take(rx.recv_timeout(WAIT).unwrap());
    let mut lat = Vec::new();
    for _ in 0..LATENCY_FRAMES {
        put();
        let sent = take(rx.recv_timeout(WAIT).unwrap());
        lat.push((now_ns() - sent) as f64 / 1e3);
    }
    median(lat)
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
        1920,
        1080,
        PixelFormat::Rgba,
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )
    .unwrap()
    .into();
    let (local, _) = ours(&image, true);
    let by_reference = edgefirst(&image, false);
    let blob = blob_by_pidfd(&image);
    let ef_inline = edgefirst(&image, true);
    println!("EdgeFirst CameraFrame, 1080p RGBA, medians (target: within 1.2x of hwtensor's own):");
    println!(
        "  one host: by pid + fd numbers {by_reference:8.1} us, hwtensor blob by pidfd {blob:8.1} us: {:.2}x",
        by_reference / blob
    );
    println!("            (hwtensor's fd hand-off, which needs no Zenoh round: {local:.1} us)");
    println!(
        "  inline:   EdgeFirst data      {ef_inline:8.1} us, hwtensor inline blob {o_lat:8.1} us: {:.2}x",
        ef_inline / o_lat
    );
}
