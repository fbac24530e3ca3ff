//! `hwtensor demo`: a producer process streams 1080p RGBA frames in shared memory to a consumer
//! process over a Unix socket. The consumer maps each frame without copying it, verifies every
//! pixel, writes an acknowledgement over the same pixels and hands the frame back; the producer
//! verifies the acknowledgement, which it can only see if the memory is truly shared, and then
//! reuses the buffer for a later frame. With `--gpu` the frames are GPU tensors; with `--cuda`
//! the consumer is CUDA: it imports each GPU frame into CUDA and copies it into CUDA memory on
//! CUDA's copy engine (ordered behind the producer's upload by the timeline) before verifying.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hwtensor::handoff::{recv, send};
use hwtensor::{CpuAccess, PixelFormat, Tensor, TensorDyn, TensorMemory};

use super::monotonic_ns;
use super::pattern;
use crate::timing::{fmt, median, percentile};

const WIDTH: usize = 1920;
const HEIGHT: usize = 1080;
/// Buffers in flight: the producer fills one while the consumer holds another.
const POOL: usize = 3;
/// How long either side waits for the other before calling it dead.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes before each frame's blob: frame number (u64) and send time (u64, monotonic ns).
const PREAMBLE: usize = 16;

/// Where the demo's frames live.
fn frame_memory(gpu: bool) -> TensorMemory {
    if gpu {
        TensorMemory::Gpu
    } else {
        TensorMemory::Shm
    }
}

fn frame(memory: TensorMemory) -> hwtensor::Result<Tensor<u8>> {
    Tensor::<u8>::image(
        WIDTH,
        HEIGHT,
        PixelFormat::Rgba,
        Some(memory),
        CpuAccess::ReadWrite,
    )
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

pub fn producer(frames: u32, gpu: bool, cuda: bool) -> crate::Result {
    if cuda {
        hwtensor::cuda::device()?; // says why not before a consumer is started
    }
    let name = format!("hwtensor-demo-{}", std::process::id());
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
    let mut args = vec!["demo-consumer", "--socket", &name];
    if gpu {
        args.push("--gpu");
    }
    if cuda {
        args.push("--cuda");
    }
    let mut child = Command::new(std::env::current_exe()?).args(&args).spawn()?;
    let stream = accept(&listener, &mut child)?;
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    let memory = frame_memory(gpu);
    let pool = (0..POOL.min(frames.max(1) as usize))
        .map(|_| frame(memory))
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
    let mut round_trips = Vec::with_capacity(frames as usize);
    let mut latencies = Vec::with_capacity(frames as usize);
    for frame in 0..frames {
        let buffer = &pool[frame as usize % pool.len()];
        write_pattern(buffer, host.as_ref(), frame, pattern::pixel)?;
        let started = Instant::now();
        send_frame(&stream, frame, &buffer.clone().into())?;
        let (_, sent_at) = read_preamble(&stream)?.ok_or("the consumer hung up mid-stream")?;
        let back = recv(&stream)?;
        let first_map = back.as_tensor::<u8>()?.map_read()?.first().copied();
        latencies.push(Duration::from_nanos(monotonic_ns().saturating_sub(sent_at)));
        std::hint::black_box(first_map);
        round_trips.push(started.elapsed());
        check_ack(buffer, &back, frame, gpu)?;
        progress(frame, frames);
    }
    drop(stream);
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed ({status})").into());
    }
    latencies.sort_unstable();
    println!(
        "producer: every acknowledgement verified in the producer's own buffers; hand-off back \
         median {}, p99 {}; round trip with both sides' full-frame checks median {}",
        fmt(percentile(&latencies, 50)),
        fmt(percentile(&latencies, 99)),
        fmt(median(&mut round_trips)),
    );
    Ok(())
}

/// Sends the preamble (frame number, send time) and then the frame.
fn send_frame(stream: &UnixStream, frame: u32, tensor: &TensorDyn) -> crate::Result {
    let mut preamble = [0u8; PREAMBLE];
    preamble[..8].copy_from_slice(&(frame as u64).to_le_bytes());
    preamble[8..].copy_from_slice(&monotonic_ns().to_le_bytes());
    (&*stream).write_all(&preamble)?;
    send(stream, tensor)?;
    Ok(())
}

/// Reads a preamble: `None` when the peer closed the stream cleanly between frames.
fn read_preamble(stream: &UnixStream) -> crate::Result<Option<(u32, u64)>> {
    let mut preamble = [0u8; PREAMBLE];
    match (&*stream).read_exact(&mut preamble) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("waiting for the peer: {e}").into()),
    }
    let frame = u64::from_le_bytes(preamble[..8].try_into()?) as u32;
    Ok(Some((frame, u64::from_le_bytes(preamble[8..].try_into()?))))
}

/// Accepts the consumer's connection, or gives up when it dies or does not come.
fn accept(listener: &UnixListener, child: &mut Child) -> crate::Result<UnixStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + PEER_TIMEOUT;
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
            return Err(format!("the consumer did not connect within {PEER_TIMEOUT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn check_ack(sent: &Tensor<u8>, back: &TensorDyn, frame: u32, gpu: bool) -> crate::Result {
    // A GPU buffer's identity is per process where the driver's fds are anonymous (NVIDIA);
    // the acknowledgement in our own buffer is the proof there.
    if !gpu && back.identity() != sent.identity() {
        return Err(format!("frame {frame}: the consumer handed back a different buffer").into());
    }
    if let Some(i) = pattern::first_mismatch(sent.map_read()?.as_bytes(), frame, pattern::ack) {
        return Err(
            format!("frame {frame}: pixel {i} lacks the consumer's acknowledgement").into(),
        );
    }
    Ok(())
}

fn progress(frame: u32, frames: u32) {
    let step = (frames / 10).max(1);
    if frames > 1 && ((frame + 1).is_multiple_of(step) || frame + 1 == frames) {
        eprintln!("producer: {}/{frames} frames", frame + 1);
    }
}

pub fn consumer(socket: &str, gpu: bool, cuda: bool) -> crate::Result {
    let stream = UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket)?)?;
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    let mut latencies = Vec::new();
    // The producer's pool comes round again: holding the last few frames (as a consumer that
    // pipelines does) lets the library reuse their imports instead of importing each time.
    let mut held: std::collections::VecDeque<TensorDyn> =
        std::collections::VecDeque::with_capacity(POOL);
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
    while let Some((frame, sent_at)) = read_preamble(&stream)? {
        let received = recv(&stream)?;
        let tensor = received.as_tensor::<u8>()?;
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
        send_frame(&stream, frame, &received)?;
        if held.len() == POOL {
            held.pop_front();
        }
        held.push_back(received);
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
        "consumer: {} frame(s) {how} every pixel verified; hand-off latency \
         (send + receive + import{}) median {}, p99 {}",
        latencies.len(),
        if gpu { "" } else { " + first map" },
        fmt(percentile(&latencies, 50)),
        fmt(percentile(&latencies, 99)),
    );
    Ok(())
}
