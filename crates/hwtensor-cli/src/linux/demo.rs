//! `hwtensor demo`: a producer process streams 1080p RGBA frames in shared memory to a consumer
//! process through the pooled channel (`hwtensor::stream`: the pool is lent once over a Unix
//! socket, then each frame is a buffer id in shared memory). The consumer maps each frame
//! without copying it, verifies every pixel, writes an acknowledgement over the same pixels and
//! hands the frame back; the producer verifies the acknowledgement when the buffer comes back,
//! which it can only see if the memory is truly shared, and then reuses the buffer. With `--gpu` the frames are GPU tensors; with `--cuda`
//! the consumer is CUDA: it imports each GPU frame into CUDA and copies it into CUDA memory on
//! CUDA's copy engine (ordered behind the producer's upload by the timeline) before verifying.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hwtensor::stream::{Access, Consumer, FrameMeta, Lending, Peers, Producer, Wait};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

use super::monotonic_ns;
use crate::pattern::{self, frame, HEIGHT, WIDTH};
use crate::timing::{fmt, median, percentile};

/// Buffers in flight: the producer fills one while the consumer holds another.
const POOL: usize = 3;
/// How long either side waits for the other before calling it dead.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the producer waits for the consumer program to connect: longer than a frame's
/// wait, since a consumer starts from nothing (Python importing NumPy took over 10 s in the
/// test command's emulated VM, and the demo then failed a consumer that was fine). A consumer
/// that dies meanwhile is seen at once, so a long wait costs nothing when it fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the demo's frames live.
fn frame_memory(gpu: bool) -> TensorMemory {
    if gpu {
        TensorMemory::Gpu
    } else {
        TensorMemory::Shm
    }
}

/// Writes `f`'s pattern for `frame` into `target`: directly into shared memory, or composed in
/// host memory and uploaded into GPU memory (as a camera frame would arrive).
fn write_pattern(
    target: &Tensor<u8>,
    host: Option<&Tensor<u8>>,
    frame: u32,
    f: fn(u32, usize) -> [u8; 4],
) -> crate::Result {
    match host {
        Some(host) => {
            pattern::fill(host.map_write()?.as_bytes_mut(), frame, f);
            target.copy_from(host)?;
        }
        None => pattern::fill(target.map_write()?.as_bytes_mut(), frame, f),
    }
    Ok(())
}

pub fn producer(frames: u32, gpu: bool, cuda: bool, consumer: Option<&str>) -> crate::Result {
    if cuda {
        hwtensor::cuda::device()?; // says why not before a consumer is started
    }
    let name = format!("hwtensor-demo-{}", std::process::id());
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
    let mut args = vec!["--socket", &name];
    if gpu {
        args.push("--gpu");
    }
    if cuda {
        args.push("--cuda");
    }
    let mut child = match consumer {
        // Another program speaking the channel (the Python example): the same arguments.
        Some(program) => Command::new("sh")
            .arg("-c")
            .arg(format!("{program} {}", args.join(" ")))
            .spawn()?,
        None => Command::new(std::env::current_exe()?)
            .arg("demo-consumer")
            .args(&args)
            .spawn()?,
    };
    let stream = accept(&listener, &mut child)?;
    let memory = frame_memory(gpu);
    let pool = (0..POOL.min(frames.max(1) as usize))
        .map(|_| frame(memory).map(TensorDyn::from))
        .collect::<Result<Vec<_>, _>>()?;
    let host = if gpu {
        Some(frame(TensorMemory::Mem)?)
    } else {
        None
    };
    println!(
        "producer: {frames} frame(s) of {WIDTH}x{HEIGHT} RGBA through {} {memory} buffers",
        pool.len()
    );
    let mut producer = Producer::new(pool)?;
    // The consumer answers in the frame itself: this user may write the pool.
    producer.set_access(Access::default().with_writers(Peers::own_user()));
    producer.attach(stream)?;
    // Which frame each buffer carried last: its acknowledgement is checked when it comes back.
    let mut carried: Vec<Option<u32>> = vec![None; POOL];
    let mut round_trips = Vec::with_capacity(frames as usize);
    for frame in 0..frames {
        let started = Instant::now();
        let slot = producer.acquire(PEER_TIMEOUT)?;
        pattern::check_ack_of(&producer, slot, &mut carried)?;
        let buffer = producer.tensor(slot).as_tensor::<u8>()?;
        write_pattern(buffer, host.as_ref(), frame, pattern::pixel)?;
        producer.send(slot, FrameMeta::new(u64::from(frame), monotonic_ns()))?;
        carried[slot.index()] = Some(frame);
        round_trips.push(started.elapsed());
        pattern::progress(frame, frames);
    }
    // Every buffer back: the last acknowledgements checked.
    let back: Vec<_> = (0..POOL.min(frames.max(1) as usize))
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
    println!(
        "producer: every acknowledgement verified in the producer's own buffers; acquire + \
         write + send median {}",
        fmt(median(&mut round_trips)),
    );
    Ok(())
}

/// Accepts the consumer's connection, or gives up when it dies or does not come.
fn accept(listener: &UnixListener, child: &mut Child) -> crate::Result<UnixStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("the consumer exited before connecting ({status})").into());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("the consumer did not connect within {CONNECT_TIMEOUT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn consumer(socket: &str, gpu: bool, cuda: bool) -> crate::Result {
    let stream = UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket)?)?;
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    let timeout = hwtensor::stream::CONNECT_TIMEOUT;
    let mut consumer = Consumer::connect_with(stream, timeout, Lending::Write)?;
    let mut latencies = Vec::new();
    // On the GPU: a second tensor the consumer's own device work writes into (GPU memory, or
    // CUDA memory for a CUDA consumer), and host memory to compose the acknowledgement in.
    let work_memory = if cuda {
        TensorMemory::Cuda
    } else {
        TensorMemory::Gpu
    };
    let (work, host) = if gpu {
        (Some(frame(work_memory)?), Some(frame(TensorMemory::Mem)?))
    } else {
        (None, None)
    };
    loop {
        let received = match consumer.recv(Wait::For(PEER_TIMEOUT)) {
            Ok(f) => f,
            // The producer leaves once it has every acknowledgement: the end of the stream.
            Err(hwtensor::Error::PeerLeft(_)) => break,
            Err(e) => return Err(e.into()),
        };
        let frame = received.meta().seq as u32;
        let sent_at = received.meta().timestamp_ns;
        let tensor = received.tensor().as_tensor::<u8>()?;
        let checked = match &work {
            Some(work) => {
                latencies.push(Duration::from_nanos(monotonic_ns().saturating_sub(sent_at)));
                work.copy_from(tensor)?; // GPU work on the imported tensor, ordered behind the producer
                work.map_read()?.as_bytes().to_vec()
            }
            None => {
                let map = tensor.map_read()?;
                latencies.push(Duration::from_nanos(monotonic_ns().saturating_sub(sent_at)));
                map.as_bytes().to_vec()
            }
        };
        if let Some(i) = pattern::first_mismatch(&checked, frame, pattern::pixel) {
            return Err(format!(
                "consumer: frame {frame}: pixel {i} is not what the producer wrote"
            )
            .into());
        }
        write_pattern(tensor, host.as_ref(), frame, pattern::ack)?;
        drop(received); // hands the buffer back (after our GPU work on it, where there is some)
    }
    latencies.sort_unstable();
    let how = if cuda {
        "imported into CUDA without a copy, copied by CUDA into CUDA memory,"
    } else if gpu {
        "imported on the GPU without a copy, copied on the GPU,"
    } else {
        "mapped without a copy,"
    };
    println!(
        "consumer: {} frame(s) {how} every pixel verified; frame age at receipt (from send, \
         waiting behind the frame being checked included{}) median {}, p99 {}",
        latencies.len(),
        if gpu { "" } else { "; + first map" },
        fmt(percentile(&latencies, 50)),
        fmt(percentile(&latencies, 99)),
    );
    Ok(())
}
