//! The README's first Rust program: allocate a frame in shared memory, write it through a map,
//! hand it to another process over a Unix socket and read it there, without a copy.
//! Run: `cargo run -p hwtensor --example quickstart`.

use std::os::unix::net::UnixStream;

use hwtensor::{handoff, CpuAccess, ImageSpec, PixelFormat, Tensor, TensorDyn, TensorMemory};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let frame = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 640, 480),
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )?;
    frame.map_write()?.fill(42);

    let (here, there) = UnixStream::pair()?;
    // The consumer: a child process in a real pipeline; a thread here, with its own import.
    let consumer = std::thread::spawn(move || -> hwtensor::Result<bool> {
        let received = handoff::recv(&there)?;
        let pixels = received.as_tensor::<u8>()?.map_read()?;
        Ok(pixels.iter().all(|&b| b == 42))
    });
    handoff::send(&here, &TensorDyn::from(frame))?;
    let seen = consumer.join().map_err(|_| "the consumer panicked")??;
    println!("the consumer saw the producer's pixels: {seen}");
    Ok(())
}
