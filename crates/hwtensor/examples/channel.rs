//! A producer and a consumer as two programs: `cargo run -p hwtensor --example channel --
//! producer @name` in one terminal, `... -- consumer @name` in another (both default to
//! `@hwtensor-example-rust`). The producer lends a pool of three 640x480 RGBA shared-memory
//! frames to the consumer that connects and sends 30 frames, each filled with its number; the
//! consumer checks every byte. Only processes of the producer's user attach, and they read
//! only (`Producer::set_access` widens it).

use std::time::Duration;

use hwtensor::stream::{connect, Consumer, FrameMeta, Listener, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::{CpuAccess, DType, ImageSpec, PixelFormat, TensorDyn, TensorMemory};

const FRAMES: u64 = 30;
const WAIT: Duration = Duration::from_secs(10);
/// How often the consumer tries to connect before the producer listens, 100 ms apart.
const CONNECT_TRIES: u32 = 100;

fn producer(address: &str) -> hwtensor::Result<()> {
    let frame = || {
        let (f, d, m, a) = (
            PixelFormat::Rgba,
            DType::U8,
            Some(TensorMemory::Shm),
            CpuAccess::ReadWrite,
        );
        TensorDyn::image(&ImageSpec::new(f, 640, 480), d, m, a)
    };
    let mut producer = Producer::new(vec![frame()?, frame()?, frame()?])?;
    let listener = Listener::bind(address)?;
    producer.attach(listener.accept(WAIT)?)?;
    for seq in 0..FRAMES {
        let slot = producer.acquire(WAIT)?;
        producer
            .tensor(slot)
            .as_tensor::<u8>()?
            .map_write()?
            .fill(seq as u8);
        producer.send(slot, FrameMeta::new(seq, hwtensor::time::monotonic_ns()))?;
    }
    // Stays until the consumer handed every frame back.
    for _ in 0..3 {
        let slot = producer.acquire(WAIT)?;
        producer.release(slot);
    }
    println!("producer: sent {FRAMES} frames to {address}");
    Ok(())
}

fn consumer(address: &str) -> hwtensor::Result<()> {
    let mut tries = 0;
    let stream = loop {
        match connect(address) {
            Ok(s) => break s,
            Err(e) if tries >= CONNECT_TRIES => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
        tries += 1;
    };
    let mut consumer = Consumer::connect(stream, CONNECT_TIMEOUT)?;
    let mut wrong = 0;
    for _ in 0..FRAMES {
        let frame = consumer.recv(Wait::For(WAIT))?;
        let seq = frame.meta().seq;
        let t = frame.tensor().as_tensor::<u8>()?;
        wrong += t.map_read()?.iter().filter(|&&b| b != seq as u8).count();
    }
    println!("consumer: {FRAMES} frames from {address}, {wrong} wrong bytes");
    match wrong {
        0 => Ok(()),
        n => Err(hwtensor::Error::InvalidOperation(format!(
            "{n} bytes were wrong"
        ))),
    }
}

fn main() -> hwtensor::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let address = args.get(2).map_or("@hwtensor-example-rust", String::as_str);
    match args.get(1).map(String::as_str) {
        Some("producer") => producer(address),
        Some("consumer") => consumer(address),
        _ => Err(hwtensor::Error::InvalidArgument(
            "usage: channel producer|consumer [ADDRESS]".into(),
        )),
    }
}
