//! `hwtensor demo` on Windows: a producer process hands 1080p RGBA frames in shared memory
//! (sections) to a consumer process over a named pipe (`hwtensor::handoff`: each frame's
//! section goes by handle, no pixel is copied). The consumer verifies every pixel, writes an
//! acknowledgement over the same pixels and says so; the producer then finds the
//! acknowledgement in its own buffer, which it can only see if the memory is truly shared.
//! GPU frames cross by `Tensor::share_gpu` instead, and the pooled channel is Linux's: `--gpu`,
//! `--cuda` and `--consumer` say so.

use std::process::Command;
use std::time::{Duration, Instant};

use hwtensor::blob::Transport;
use hwtensor::handoff::{self, Pipe, PipeListener};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

use crate::pattern::{self, frame, HEIGHT, WIDTH};
use crate::timing::{fmt, median};

/// Buffers the producer cycles through.
const POOL: usize = 3;
/// How long either side waits for the other before calling it dead.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// The consumer's word that a frame is checked and acknowledged: a one-byte inline tensor.
fn done() -> hwtensor::Result<TensorDyn> {
    Tensor::<u8>::new(&[1], Some(TensorMemory::Mem)).map(TensorDyn::from)
}

pub fn producer(frames: u32, gpu: bool, cuda: bool, consumer: Option<&str>) -> crate::Result {
    if gpu || cuda || consumer.is_some() {
        return Err(
            "on Windows the demo hands shared-memory frames over a named pipe; GPU \
                    frames cross by Tensor::share_gpu, and --gpu, --cuda and --consumer are \
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
    let pool = (0..POOL)
        .map(|_| frame(TensorMemory::Shm))
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "producer: {frames} frame(s) of {WIDTH}x{HEIGHT} RGBA in {POOL} shared-memory sections, \
         by handle over a named pipe"
    );
    let mut round_trips = Vec::with_capacity(frames as usize);
    for n in 0..frames {
        let buffer = &pool[n as usize % POOL];
        pattern::fill(buffer.map_write()?.as_bytes_mut(), n, pattern::pixel);
        let started = Instant::now();
        handoff::send(&pipe, &TensorDyn::from(buffer.clone()))?;
        handoff::recv(&pipe, PEER_TIMEOUT)?; // the consumer's "done"
        round_trips.push(started.elapsed());
        let ack = pattern::first_mismatch(buffer.map_read()?.as_bytes(), n, pattern::ack);
        if let Some(i) = ack {
            return Err(
                format!("frame {n}: pixel {i} lacks the consumer's acknowledgement").into(),
            );
        }
    }
    drop(pipe); // the consumer's next receive ends its loop
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed ({status})").into());
    }
    println!(
        "producer: every acknowledgement verified in the producer's own sections; send + \
         consumer's check + answer median {}",
        fmt(median(&mut round_trips)),
    );
    Ok(())
}

pub fn consumer(socket: &str, gpu: bool, cuda: bool) -> crate::Result {
    if gpu || cuda {
        return Err("the Windows demo carries shared-memory frames only".into());
    }
    let pipe = Pipe::connect(socket, PEER_TIMEOUT)?;
    let mut n = 0u32;
    let mut checks = Vec::new();
    loop {
        let received = match handoff::recv(&pipe, PEER_TIMEOUT) {
            Ok(t) => t,
            // The producer leaves once it has every acknowledgement: the end of the stream.
            Err(hwtensor::Error::PeerLeft(_)) => break,
            Err(e) => return Err(e.into()),
        };
        let started = Instant::now();
        let t = received.as_tensor::<u8>()?;
        if let Some(i) = pattern::first_mismatch(t.map_read()?.as_bytes(), n, pattern::pixel) {
            return Err(
                format!("consumer: frame {n}: pixel {i} is not what the producer wrote").into(),
            );
        }
        pattern::fill(t.map_write()?.as_bytes_mut(), n, pattern::ack);
        checks.push(started.elapsed());
        handoff::send_as(&pipe, &done()?, Transport::Inline)?;
        n += 1;
    }
    println!(
        "consumer: {n} frame(s) mapped without a copy (their sections duplicated out of the \
         producer), every pixel verified and acknowledged in place; check + acknowledge median {}",
        fmt(median(&mut checks)),
    );
    Ok(())
}
