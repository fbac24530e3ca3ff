//! The README's Zenoh program: a publisher and a subscriber on one key, each in its own Zenoh
//! session (two peers on loopback here; two hosts or two processes in a deployment). On one
//! host a frame goes by fd hand-off, so no bytes are copied; to another host it goes inline.
//! Run: `cargo run -p hwtensor-zenoh --example quickstart`.

use std::time::{Duration, Instant};

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, Wait};
use hwtensor_zenoh::{peer_config, Publisher, Subscriber};

/// Where the publisher's session listens and the subscriber's connects.
const ENDPOINT: &str = "tcp/127.0.0.1:7457";
const WAIT: Duration = Duration::from_secs(10);

fn main() -> hwtensor_zenoh::Result<()> {
    // Zenoh's own errors convert with `?` into this crate's.
    let publishing = zenoh::open(peer_config(ENDPOINT, true)?).wait()?;
    let subscribing = zenoh::open(peer_config(ENDPOINT, false)?).wait()?;
    let mut publisher = Publisher::new(&publishing, "camera/front", Default::default())?;
    let mut subscriber = Subscriber::new(&subscribing, "camera/front", Default::default())?;

    // A frame published before anyone listens is not kept: wait for the subscriber.
    let started = Instant::now();
    while publisher.local_subscribers() == 0 && started.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let frame = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 640, 480),
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )?;
    frame.map_write()?.fill(42);
    let seq = publisher.publish(&TensorDyn::from(frame))?;

    let received = subscriber.recv(WAIT)?;
    let pixels = received.tensor.as_tensor::<u8>()?.map_read()?;
    println!(
        "frame {seq} received as frame {}, without a copy: {}, pixels right: {}",
        received.seq,
        received.zero_copy,
        pixels.iter().all(|&b| b == 42)
    );
    Ok(())
}
