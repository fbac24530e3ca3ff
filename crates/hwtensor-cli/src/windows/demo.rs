//! `hwtensor demo` on Windows: the Linux demo's producer and consumer over the pooled channel
//! (`hwtensor::stream`) on a named pipe. The pool of 1080p RGBA frames in shared memory
//! (sections) is lent once, then each frame is a buffer id in a shared ring. The consumer maps
//! each frame without a copy, verifies every pixel, writes an acknowledgement over the same
//! pixels and hands the frame back; the producer verifies the acknowledgement when the buffer
//! comes back, which it can only see if the memory is truly shared. GPU frames cross by
//! `Tensor::share_gpu` instead: `--gpu`, `--cuda` and `--consumer` are Linux's.

use std::process::Command;
use std::time::Duration;

use hwtensor::handoff::{Pipe, PipeListener};
use hwtensor::stream::{
    Access, Consumer, FrameMeta, Lending, Peers, Producer, Wait, CONNECT_TIMEOUT,
};
use hwtensor::{TensorDyn, TensorMemory};

use super::monotonic_ns;
use crate::pattern::{self, frame, HEIGHT, WIDTH};
use crate::timing::{fmt, percentile};

/// Buffers in flight: the producer fills one while the consumer holds another.
const POOL: usize = 3;
/// How long either side waits for the other before calling it dead.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

pub fn producer(frames: u32, gpu: bool, cuda: bool, consumer: Option<&str>) -> crate::Result {
    if gpu || cuda || consumer.is_some() {
        return Err(
            "on Windows the demo streams shared-memory frames through the channel on a named \
             pipe; GPU frames cross by Tensor::share_gpu, and --gpu, --cuda and --consumer are \
             Linux's"
                .into(),
        );
    }
    let name = format!("hwtensor-demo-{}", std::process::id());
    let mut listener = PipeListener::bind(&name)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["demo-consumer", "--socket", &name])
        .spawn()?;
    let pipe = match listener.accept(PEER_TIMEOUT) {
        Ok(p) => p,
        Err(e) => {
            let _ = child.kill();
            return Err(format!("the consumer did not connect: {e}").into());
        }
    };
    let slots = POOL.min(frames.max(1) as usize);
    let pool = (0..slots)
        .map(|_| frame(TensorMemory::Shm).map(TensorDyn::from))
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "producer: {frames} frame(s) of {WIDTH}x{HEIGHT} RGBA through {slots} shared-memory \
         sections, lent once over a named pipe"
    );
    let mut producer = Producer::new(pool)?;
    // The consumer answers in the frame itself: this user may write the pool.
    producer.set_access(Access::default().with_writers(Peers::own_user()));
    producer.attach(pipe)?;
    // Which frame each buffer carried last: its acknowledgement is checked when it comes back.
    let mut carried: Vec<Option<u32>> = vec![None; slots];
    for frame in 0..frames {
        let slot = producer.acquire(PEER_TIMEOUT)?;
        pattern::check_ack_of(&producer, slot, &mut carried)?;
        let buffer = producer.tensor(slot).as_tensor::<u8>()?;
        pattern::fill(buffer.map_write()?.as_bytes_mut(), frame, pattern::pixel);
        producer.send(slot, FrameMeta::new(u64::from(frame), monotonic_ns()))?;
        carried[slot.index()] = Some(frame);
        pattern::progress(frame, frames);
    }
    // Every buffer back: the last acknowledgements checked.
    let back: Vec<_> = (0..slots)
        .map(|_| producer.acquire(PEER_TIMEOUT))
        .collect::<Result<_, _>>()?;
    for slot in back {
        pattern::check_ack_of(&producer, slot, &mut carried)?;
    }
    drop(producer); // the consumer's next receive ends its loop
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed ({status})").into());
    }
    println!("producer: every acknowledgement verified in the producer's own sections");
    Ok(())
}

pub fn consumer(socket: &str, gpu: bool, cuda: bool) -> crate::Result {
    if gpu || cuda {
        return Err("the Windows demo carries shared-memory frames only".into());
    }
    let pipe = Pipe::connect(socket, PEER_TIMEOUT)?;
    let mut consumer = Consumer::connect_with(pipe, CONNECT_TIMEOUT, Lending::Write)?;
    let mut latencies = Vec::new();
    loop {
        let received = match consumer.recv(Wait::For(PEER_TIMEOUT)) {
            Ok(f) => f,
            // The producer leaves once it has every acknowledgement: the end of the stream.
            Err(hwtensor::Error::PeerLeft(_)) => break,
            Err(e) => return Err(e.into()),
        };
        let frame = received.meta().seq as u32;
        let tensor = received.tensor().as_tensor::<u8>()?;
        let map = tensor.map_read()?;
        let age = monotonic_ns().saturating_sub(received.meta().timestamp_ns);
        latencies.push(Duration::from_nanos(age));
        if let Some(i) = pattern::first_mismatch(map.as_bytes(), frame, pattern::pixel) {
            return Err(format!(
                "consumer: frame {frame}: pixel {i} is not what the producer wrote"
            )
            .into());
        }
        drop(map);
        pattern::fill(tensor.map_write()?.as_bytes_mut(), frame, pattern::ack);
        drop(received); // hands the buffer back
    }
    latencies.sort_unstable();
    println!(
        "consumer: {} frame(s) mapped without a copy (sections duplicated out of the producer \
         once), every pixel verified and acknowledged in place; frame age at receipt (from \
         send, waiting behind the frame being checked included; + first map) median {}, p99 {}",
        latencies.len(),
        fmt(percentile(&latencies, 50)),
        fmt(percentile(&latencies, 99)),
    );
    Ok(())
}
