//! hwtensor-zenoh against plain Zenoh, side by side in one run, on loopback:
//!
//!     cargo run --release -p hwtensor-zenoh --example bench
//!
//! - 1080p RGBA across "hosts" (a subscriber that takes no local delivery): latency (one frame
//!   in flight) and frames per second (publishing back to back, congestion control `Block`)
//!   through hwtensor-zenoh, and the same bytes put with plain Zenoh (copied out of the tensor,
//!   as a user would) and taken out of the sample.
//! - One host, the fd hand-off: latency of 360p and of 4K frames (the ratio should be ~1).

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hwtensor::{Tensor, TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, qos::CongestionControl, Wait};
use hwtensor_zenoh::{Publisher, PublisherOptions, Subscriber, SubscriberOptions};

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
    let publisher = a
        .declare_publisher(key)
        .congestion_control(CongestionControl::Block)
        .wait()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let _sub = b
        .declare_subscriber(key)
        .callback(move |s| {
            let _ = tx.send(s);
        })
        .wait()
        .unwrap();
    let ready = Instant::now();
    while !publisher.matching_status().wait().unwrap().matching() {
        assert!(ready.elapsed() < WAIT, "no subscriber");
        std::thread::sleep(Duration::from_millis(5));
    }
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
}
