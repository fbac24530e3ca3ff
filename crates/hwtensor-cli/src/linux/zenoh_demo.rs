//! `hwtensor demo --zenoh`: a publisher process streams 1080p RGBA frames over Zenoh on
//! loopback (`tcp/127.0.0.1`, no scouting) to a subscriber process, which verifies every pixel
//! and counts sequence gaps. On one host the frames go by fd hand-off; with `--inline` the
//! subscriber takes no local delivery, so they travel as bytes, as to another host.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use hwtensor::{CpuAccess, PixelFormat, Tensor, TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, qos::CongestionControl, Wait};
use hwtensor_zenoh::{Publisher, PublisherOptions, Subscriber, SubscriberOptions};

use super::pattern;
use crate::timing::{fmt, percentile};

const KEY: &str = "hwtensor/demo/frames";
const WIDTH: usize = 1920;
const HEIGHT: usize = 1080;
/// How long either side waits for the other.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames in flight: the publisher keeps this many buffers, so a frame the subscriber reads
/// by fd is not rewritten under it.
const POOL: usize = 4;

/// A loopback peer session: listening on `port`, or connecting to it.
fn session(port: u16, listen: bool) -> crate::Result<zenoh::Session> {
    let config = hwtensor_zenoh::peer_config(&format!("tcp/127.0.0.1:{port}"), listen)?;
    zenoh::open(config).wait().map_err(|e| e.to_string().into())
}

/// The publisher: starts the subscriber process and streams `frames` frames to it.
pub fn publisher(frames: u32, inline: bool) -> crate::Result {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let session = session(port, true)?;
    let options = PublisherOptions {
        congestion: CongestionControl::Block,
        ..PublisherOptions::default()
    };
    let mut publisher = Publisher::new(&session, KEY, options)?;
    let mut args = vec![
        "demo-zenoh-subscriber".to_string(),
        "--port".into(),
        port.to_string(),
    ];
    args.extend(["--frames".into(), frames.to_string()]);
    if inline {
        args.push("--inline".into());
    }
    let mut child = Command::new(std::env::current_exe()?).args(&args).spawn()?;
    let started = Instant::now();
    while publisher.local_subscribers() == 0 && !publisher.publishes_inline() {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the subscriber exited before subscribing ({status})").into());
        }
        if started.elapsed() > PEER_TIMEOUT {
            let _ = child.kill();
            return Err("the subscriber did not subscribe in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let how = if inline {
        "as inline bytes (as to another host)"
    } else {
        "by fd hand-off (one host)"
    };
    println!("publisher: {frames} frame(s) of {WIDTH}x{HEIGHT} RGBA on {KEY:?}, {how}");
    let pool = (0..POOL)
        .map(|_| {
            Tensor::<u8>::image(
                WIDTH,
                HEIGHT,
                PixelFormat::Rgba,
                Some(TensorMemory::Shm),
                CpuAccess::ReadWrite,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for n in 0..frames {
        let t = &pool[n as usize % POOL];
        pattern::fill(t.map_write()?.as_bytes_mut(), n, pattern::pixel);
        publisher.publish(&TensorDyn::from(t.clone()))?;
        // A camera's pace: the subscriber checks a frame before the buffer comes round again.
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the subscriber failed ({status})").into());
    }
    Ok(())
}

/// The subscriber process: every frame's pixels verified, gaps counted.
pub fn subscriber(port: u16, frames: u32, inline: bool) -> crate::Result {
    let session = session(port, false)?;
    let options = SubscriberOptions {
        local_delivery: !inline,
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&session, KEY, options)?;
    let mut ages = Vec::new();
    let mut last = 0;
    while last < u64::from(frames) {
        let r = subscriber.recv(PEER_TIMEOUT)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        ages.push(Duration::from_nanos(
            (now.as_nanos() as u64).saturating_sub(r.timestamp_ns),
        ));
        let frame = (r.seq - 1) as u32;
        let t = r.tensor.as_tensor::<u8>()?;
        if let Some(i) = pattern::first_mismatch(t.map_read()?.as_bytes(), frame, pattern::pixel) {
            return Err(format!("frame {frame}: pixel {i} is not what the publisher wrote").into());
        }
        last = r.seq;
    }
    ages.sort_unstable();
    println!(
        "subscriber: {} frame(s) received, every pixel verified, {} gap(s), {} dropped sample(s); \
         frame age at receipt median {}, p99 {}",
        ages.len(),
        subscriber.gaps(),
        subscriber.dropped(),
        fmt(percentile(&ages, 50)),
        fmt(percentile(&ages, 99)),
    );
    Ok(())
}
