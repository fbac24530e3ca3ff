//! `hwtensor demo --zenoh`: a publisher process streams 1080p RGBA frames over Zenoh on
//! loopback (`tcp/127.0.0.1`, no scouting) to a subscriber process, which verifies every pixel
//! and counts sequence gaps. On one host the frames go by fd hand-off; with `--inline` the
//! subscriber takes no local delivery, so they travel as bytes, as to another host.
//!
//! With `--edgefirst` the publisher puts EdgeFirst `CameraFrame` messages (this process's pid
//! and fd numbers; inline data with `--inline`), and the subscriber is a plain Zenoh
//! subscriber, as an EdgeFirst node is: it reads each message with the schema crate, takes the
//! fds with pidfd_getfd (through `hwtensor_zenoh::edgefirst::decode`) and verifies every pixel.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use hwtensor::{TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, qos::CongestionControl, Wait};
use hwtensor_zenoh::{Encoding, Publisher, PublisherOptions, Subscriber, SubscriberOptions};

use crate::pattern::{self, HEIGHT, WIDTH};
use crate::timing::{fmt, percentile};

const KEY: &str = "hwtensor/demo/frames";
/// How long either side waits for the other.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames in flight: the publisher keeps this many buffers, so a frame the subscriber reads
/// by fd is not rewritten under it.
const POOL: usize = 4;
/// The liveliness token the EdgeFirst subscriber declares once it listens (a plain Zenoh
/// subscriber announces nothing the publisher could wait for).
const EDGEFIRST_READY: &str = "hwtensor/demo/edgefirst-subscriber";

/// A loopback peer session: listening on `port`, or connecting to it.
fn session(port: u16, listen: bool) -> crate::Result<zenoh::Session> {
    let config = hwtensor_zenoh::peer_config(&format!("tcp/127.0.0.1:{port}"), listen)?;
    zenoh::open(config).wait().map_err(|e| e.to_string().into())
}

/// The publisher: starts the subscriber process and streams `frames` frames to it.
pub fn publisher(frames: u32, inline: bool, edgefirst: bool) -> crate::Result {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let session = session(port, true)?;
    let options = PublisherOptions {
        congestion: CongestionControl::Block,
        encoding: match edgefirst {
            true => Encoding::EdgeFirst,
            false => Encoding::Hwtensor,
        },
        always_inline: edgefirst && inline,
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
    if edgefirst {
        args.push("--edgefirst".into());
        publisher.set_frame_id("camera");
    }
    let mut child = Command::new(std::env::current_exe()?).args(&args).spawn()?;
    let started = Instant::now();
    let subscribed = |p: &Publisher| match edgefirst {
        true => edgefirst_listening(&session),
        false => p.local_subscribers() > 0 || p.publishes_inline(),
    };
    while !subscribed(&publisher) {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the subscriber exited before subscribing ({status})").into());
        }
        if started.elapsed() > PEER_TIMEOUT {
            let _ = child.kill();
            return Err("the subscriber did not subscribe in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let how = match (edgefirst, inline) {
        (true, true) => "as EdgeFirst CameraFrames with inline data",
        (true, false) => "as EdgeFirst CameraFrames by pid and fd numbers",
        (false, true) => "as inline bytes (as to another host)",
        (false, false) => "by fd hand-off (one host)",
    };
    println!("publisher: {frames} frame(s) of {WIDTH}x{HEIGHT} RGBA on {KEY:?}, {how}");
    let pool = (0..POOL)
        .map(|_| pattern::frame(TensorMemory::Shm))
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

/// Whether the EdgeFirst subscriber has announced that it listens.
fn edgefirst_listening(session: &zenoh::Session) -> bool {
    session
        .liveliness()
        .get(EDGEFIRST_READY)
        .timeout(Duration::from_millis(200))
        .wait()
        .is_ok_and(|replies| replies.recv().is_ok())
}

/// The EdgeFirst subscriber process: a plain Zenoh subscriber that reads each `CameraFrame`
/// with the schema crate, imports it through hwtensor (pidfd_getfd for frames by reference)
/// and verifies every pixel.
pub fn edgefirst_subscriber(port: u16, frames: u32) -> crate::Result {
    use edgefirst_schemas::edgefirst_msgs::CameraFrame;
    let session = session(port, false)?;
    let samples = session
        .declare_subscriber(KEY)
        .wait()
        .map_err(hwtensor_zenoh::Error::from)?;
    let _ready = session
        .liveliness()
        .declare_token(EDGEFIRST_READY)
        .wait()
        .map_err(hwtensor_zenoh::Error::from)?;
    let (mut received, mut by_reference) = (0u32, 0u32);
    let mut ages = Vec::new();
    while received < frames {
        let sample = samples
            .recv_timeout(PEER_TIMEOUT)
            .map_err(hwtensor_zenoh::Error::from)?
            .ok_or("no CameraFrame within the timeout")?;
        let bytes = sample.payload().to_bytes();
        let message =
            CameraFrame::from_cdr(&bytes[..]).map_err(|e| format!("not a CameraFrame: {e:?}"))?;
        let tensor = message.tensor();
        if (tensor.format(), tensor.shape_at(0), tensor.shape_at(1))
            != ("rgba8", Some(HEIGHT as u64), Some(WIDTH as u64))
        {
            return Err(format!(
                "an unexpected frame: {} {:?}",
                tensor.format(),
                tensor.shape_at(0)
            )
            .into());
        }
        by_reference += u32::from(tensor.pid() != 0);
        let decoded = hwtensor_zenoh::edgefirst::decode(&bytes)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        ages.push(Duration::from_nanos(
            (now.as_nanos() as u64).saturating_sub(decoded.time_ns),
        ));
        let frame = (message.seq() - 1) as u32;
        let t = decoded.tensor.as_tensor::<u8>()?;
        if let Some(i) = pattern::first_mismatch(t.map_read()?.as_bytes(), frame, pattern::pixel) {
            return Err(format!("frame {frame}: pixel {i} is not what the publisher wrote").into());
        }
        received += 1;
    }
    ages.sort_unstable();
    println!(
        "subscriber: {received} CameraFrame(s) read with edgefirst-schemas, {by_reference} by \
         pid and fd numbers (pidfd_getfd), every pixel verified; frame age at receipt median {}, \
         p99 {}",
        fmt(percentile(&ages, 50)),
        fmt(percentile(&ages, 99)),
    );
    Ok(())
}
