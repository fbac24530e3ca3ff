//! A frame's hand-back follows the consumer's GPU use of it: the buffer goes back to the
//! producer only once that use completes, and dropping the frame never waits for it. A binary
//! of its own: the pending use is a timeline value no other test may complete early.

#![cfg(target_os = "linux")]

mod common;

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use hwtensor::stream::{testing, Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::{Error, Tensor, TensorDyn, TensorMemory};

const WAIT: Duration = Duration::from_secs(5);
/// How long the producer is given to (wrongly) get the buffer back early.
const TOO_EARLY: Duration = Duration::from_millis(100);
/// A drop that takes this long waited for the GPU (the old hand-back waited up to 10 s).
const DROP_BOUND: Duration = Duration::from_secs(1);

#[test]
fn a_frame_goes_back_once_the_consumers_gpu_use_completes_and_its_drop_does_not_wait() {
    let Some(device) = common::device_or_skip(test_name!()) else {
        return;
    };
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let buffer = Tensor::<u8>::new(&[4096], Some(TensorMemory::Gpu)).unwrap();
    let mut producer = Producer::new(vec![TensorDyn::from(buffer)]).unwrap();
    producer.attach(a).unwrap();
    let mut consumer = consumer.join().unwrap();
    let slot = producer.acquire(WAIT).unwrap();
    producer.send(slot, FrameMeta::new(0, 0)).unwrap();
    let frame = consumer.recv(Wait::For(WAIT)).unwrap();
    // The consumer's GPU read of the frame, still pending: its value is allocated and not
    // yet submitted.
    let pending = device.signal_deferred().unwrap();
    testing::record_gpu_read(frame.tensor(), pending);
    let dropped = Instant::now();
    drop(frame);
    assert!(
        dropped.elapsed() < DROP_BOUND,
        "dropping the frame waited for its GPU use"
    );
    assert!(
        matches!(producer.acquire(TOO_EARLY), Err(Error::Timeout(_))),
        "the producer got the buffer back while the consumer's GPU use of it was pending"
    );
    device.flush().unwrap(); // the use completes
    assert_eq!(producer.acquire(WAIT).unwrap(), slot);
}
