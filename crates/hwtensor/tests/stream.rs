//! The pooled channel: frames around a pool with their metadata, back-pressure, consumers and
//! producers that leave, re-attaching, GPU frames, and a consumer in another process.

#![cfg(target_os = "linux")]
// The consumer process takes its socket from an inherited fd number.
#![allow(unsafe_code)]

mod common;

use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use hwtensor::stream::{
    Access, Consumer, FrameMeta, Lending, Peers, Producer, Wait, CONNECT_TIMEOUT,
};
use hwtensor::{Error, Tensor, TensorDyn, TensorMemory};

const POOL: usize = 3;
const WAIT: Duration = Duration::from_secs(5);

fn pool(memory: TensorMemory, len: usize) -> Vec<TensorDyn> {
    (0..POOL)
        .map(|_| TensorDyn::from(Tensor::<u8>::new(&[len], Some(memory)).unwrap()))
        .collect()
}

/// The byte at `i` of frame `seq`.
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as usize * 13 + i * 7) as u8
}

fn write_frame(t: &TensorDyn, seq: u64) {
    let t = t.as_tensor::<u8>().unwrap();
    let mut m = t.map_write().unwrap();
    for (i, b) in m.iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
}

/// A producer with one consumer attached (the consumer made on another thread, as set-up
/// needs both sides).
fn connected(memory: TensorMemory, len: usize) -> (Producer, Consumer) {
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(pool(memory, len)).unwrap();
    producer.attach(a).unwrap();
    (producer, consumer.join().unwrap())
}

#[test]
fn frames_go_around_a_pool_of_three_with_their_metadata_and_bytes() {
    let (mut producer, mut consumer) = connected(TensorMemory::Shm, 4096);
    let frames = 100u64;
    let reader = std::thread::spawn(move || {
        for seq in 0..frames {
            let frame = consumer.recv(Wait::Block).unwrap();
            assert_eq!(frame.meta().seq, seq);
            assert_eq!(frame.meta().payload(), &seq.to_le_bytes());
            let t = frame.tensor().as_tensor::<u8>().unwrap();
            let bad = t
                .map_read()
                .unwrap()
                .iter()
                .enumerate()
                .position(|(i, b)| *b != pattern(seq, i));
            assert_eq!(bad, None, "frame {seq}");
        }
    });
    for seq in 0..frames {
        let slot = producer.acquire(WAIT).unwrap();
        write_frame(producer.tensor(slot), seq);
        let meta = FrameMeta::new(seq, 0)
            .with_payload(&seq.to_le_bytes())
            .unwrap();
        producer.send(slot, meta).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn a_producer_whose_consumer_holds_every_buffer_times_out_then_gets_one_back() {
    let (mut producer, mut consumer) = connected(TensorMemory::Shm, 64);
    for seq in 0..POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    let mut held: Vec<_> = (0..POOL)
        .map(|_| consumer.recv(Wait::Block).unwrap())
        .collect();
    let started = Instant::now();
    let err = producer.acquire(Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let returned = held.remove(1).slot();
    assert_eq!(producer.acquire(WAIT).unwrap().index(), returned);
}

#[test]
fn a_consumer_that_leaves_gives_its_buffers_back() {
    let (mut producer, mut consumer) = connected(TensorMemory::Shm, 64);
    for seq in 0..POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    let held: Vec<_> = (0..POOL)
        .map(|_| consumer.recv(Wait::Block).unwrap())
        .collect();
    std::mem::forget(held); // a crash: nothing handed back
    drop(consumer);
    let slot = producer.acquire(WAIT).unwrap();
    assert!(slot.index() < POOL);
    assert_eq!(producer.consumers(), 0);
}

#[test]
fn a_producer_that_leaves_wakes_a_blocked_receive_with_an_error_and_held_frames_stay_valid() {
    let (mut producer, mut consumer) = connected(TensorMemory::Shm, 4096);
    let slot = producer.acquire(WAIT).unwrap();
    write_frame(producer.tensor(slot), 7);
    producer.send(slot, FrameMeta::new(7, 0)).unwrap();
    let held = consumer.recv(Wait::Block).unwrap();
    let leaving = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(producer);
    });
    let started = Instant::now();
    let err = consumer.recv(Wait::Block).unwrap_err();
    assert!(matches!(err, Error::PeerLeft(_)), "{err}");
    assert!(err.to_string().contains("producer left"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the receive hung"
    );
    leaving.join().unwrap();
    let t = held.tensor().as_tensor::<u8>().unwrap();
    assert_eq!(t.map_read().unwrap()[100], pattern(7, 100));
    let err = consumer.recv(Wait::Spin).unwrap_err();
    assert!(matches!(err, Error::PeerLeft(_)), "{err}");
    assert!(err.to_string().contains("producer left"), "{err}");
}

#[test]
fn a_timed_receive_without_frames_times_out() {
    let (_producer, mut consumer) = connected(TensorMemory::Shm, 64);
    let err = consumer
        .recv(Wait::For(Duration::from_millis(30)))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
}

#[test]
fn a_restarted_consumer_attaches_again_and_receives() {
    let (mut producer, consumer) = connected(TensorMemory::Shm, 64);
    drop(consumer);
    let (a, b) = UnixStream::pair().unwrap();
    let again = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    producer.attach(a).unwrap();
    let mut again = again.join().unwrap();
    // The first consumer's departure is noticed as buffers are needed.
    for seq in 0..2 * POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        assert_eq!(again.recv(Wait::Block).unwrap().meta().seq, seq);
    }
}

#[test]
fn two_consumers_each_get_every_frame_and_a_buffer_is_free_once_both_hand_it_back() {
    let (a1, b1) = UnixStream::pair().unwrap();
    let (a2, b2) = UnixStream::pair().unwrap();
    let first = std::thread::spawn(move || Consumer::connect(b1, CONNECT_TIMEOUT).unwrap());
    let second = std::thread::spawn(move || Consumer::connect(b2, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(pool(TensorMemory::Shm, 64)).unwrap();
    producer.attach(a1).unwrap();
    producer.attach(a2).unwrap();
    let (mut first, mut second) = (first.join().unwrap(), second.join().unwrap());
    let slot = producer.acquire(WAIT).unwrap();
    producer.send(slot, FrameMeta::new(1, 0)).unwrap();
    let (f1, f2) = (
        first.recv(Wait::Block).unwrap(),
        second.recv(Wait::Block).unwrap(),
    );
    assert_eq!((f1.meta().seq, f2.meta().seq), (1, 1));
    drop(f1);
    // The other buffers are free; this one is not until the second consumer lets go.
    let others: Vec<_> = (0..POOL - 1)
        .map(|_| producer.acquire(WAIT).unwrap())
        .collect();
    assert!(others.iter().all(|s| s.index() != slot.index()));
    assert!(producer.acquire(Duration::from_millis(30)).is_err());
    drop(f2);
    assert_eq!(producer.acquire(WAIT).unwrap().index(), slot.index());
}

#[test]
fn a_pool_without_fds_is_refused_with_the_reason() {
    let heap = vec![TensorDyn::from(
        Tensor::<u8>::new(&[64], Some(TensorMemory::Mem)).unwrap(),
    )];
    let err = Producer::new(heap).unwrap_err();
    assert!(err.to_string().contains("by fd"), "{err}");
    assert!(Producer::new(Vec::new()).is_err());
    let err = FrameMeta::default().with_payload(&[0; 33]).unwrap_err();
    assert!(err.to_string().contains("32 bytes"), "{err}");
}

#[test]
fn gpu_frames_arrive_after_their_writes_complete() {
    if common::device_or_skip(test_name!()).is_none() {
        return;
    }
    let (mut producer, mut consumer) = connected(TensorMemory::Gpu, 1 << 16);
    let staging = Tensor::<u8>::new(&[1 << 16], Some(TensorMemory::Mem)).unwrap();
    for seq in 0..10u64 {
        let slot = producer.acquire(WAIT).unwrap();
        write_frame(&TensorDyn::from(staging.clone()), seq);
        let gpu = producer.tensor(slot).as_tensor::<u8>().unwrap();
        gpu.copy_from(&staging).unwrap(); // a GPU copy: the frame's last write
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        let frame = consumer.recv(Wait::Block).unwrap();
        let got = frame.tensor().as_tensor::<u8>().unwrap().to_vec().unwrap();
        let bad = got
            .iter()
            .enumerate()
            .position(|(i, b)| *b != pattern(seq, i));
        assert_eq!(bad, None, "GPU frame {seq}");
    }
}

/// The environment variable that makes this binary the consumer process.
const PEER: &str = "HWTENSOR_TEST_STREAM_PEER";
const ACROSS: &str = "a_consumer_in_another_process_verifies_every_1080p_frame";
const FRAME_BYTES: usize = 1920 * 1080 * 4;
const ACROSS_FRAMES: u64 = 60;

/// Runs `test` of this binary again as a peer process, its end of a socket pair named by the
/// environment variable `env`; returns our end and the process.
fn spawn_peer(test: &str, env: &str) -> (UnixStream, std::process::Child) {
    use std::os::fd::AsRawFd;
    let (a, b) = UnixStream::pair().unwrap();
    let keep = rustix::io::dup(&b).unwrap(); // without CLOEXEC: the child's end
    let child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env, keep.as_raw_fd().to_string())
        .spawn()
        .unwrap();
    (a, child)
}

/// The consumer process: every frame checked, its checksum sent back as the exit status.
fn consumer_process(fd: &str) {
    use std::os::fd::FromRawFd;
    let raw: i32 = fd.parse().unwrap();
    // SAFETY: the socket the parent left open for us, ours alone.
    let stream = unsafe { UnixStream::from_raw_fd(raw) };
    let mut consumer = Consumer::connect(stream, CONNECT_TIMEOUT).unwrap();
    for seq in 0..ACROSS_FRAMES {
        let frame = consumer.recv(Wait::For(WAIT)).unwrap();
        assert_eq!(frame.meta().seq, seq);
        let t = frame.tensor().as_tensor::<u8>().unwrap();
        let m = t.map_read().unwrap();
        let bad = (0..FRAME_BYTES)
            .step_by(4093)
            .find(|&i| m[i] != pattern(seq, i));
        assert_eq!(bad, None, "frame {seq}");
        assert_eq!(m[FRAME_BYTES - 1], pattern(seq, FRAME_BYTES - 1));
    }
}

#[test]
fn a_consumer_in_another_process_verifies_every_1080p_frame() {
    if let Ok(fd) = std::env::var(PEER) {
        return consumer_process(&fd);
    }
    let (a, mut child) = spawn_peer(ACROSS, PEER);
    let mut producer = Producer::new(pool(TensorMemory::Shm, FRAME_BYTES)).unwrap();
    producer.attach(a).unwrap();
    for seq in 0..ACROSS_FRAMES {
        let slot = producer.acquire(WAIT).unwrap();
        write_frame(producer.tensor(slot), seq);
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    assert!(
        child.wait().unwrap().success(),
        "the consumer process failed"
    );
}

/// The environment variable that makes this binary the consumer process of GPU frames.
const GPU_PEER: &str = "HWTENSOR_TEST_STREAM_GPU_PEER";
const GPU_ACROSS: &str = "gpu_frames_read_and_acknowledged_through_cpu_maps_across_processes";
/// The same for DMA-BUF frames.
const DMABUF_PEER: &str = "HWTENSOR_TEST_STREAM_DMABUF_PEER";
const DMABUF_ACROSS: &str = "dmabuf_frames_read_and_acknowledged_through_cpu_maps_across_processes";
const ACK_FRAME_BYTES: usize = 1 << 16;
/// Four rounds of the pool: every buffer comes back written by the other process.
const ACK_FRAMES: u64 = 4 * POOL as u64;

/// The consumer's acknowledgement of frame `seq` at byte `i`.
fn ack(seq: u64, i: usize) -> u8 {
    !pattern(seq, i)
}

fn first_mismatch(t: &TensorDyn, f: impl Fn(usize) -> u8) -> Option<usize> {
    let t = t.as_tensor::<u8>().unwrap();
    let m = t.map_read().unwrap();
    (0..m.len()).find(|&i| m[i] != f(i))
}

/// The consumer process: reads each frame, in its own import of `memory`, and writes its
/// acknowledgement, both through CPU maps (GPU frames staged on NVIDIA, and in CI under
/// HWTENSOR_GPU_STAGING=1; DMA-BUF frames bracketed by `DMA_BUF_IOCTL_SYNC`).
fn ack_consumer_process(fd: &str, memory: TensorMemory) {
    use std::os::fd::FromRawFd;
    let raw: i32 = fd.parse().unwrap();
    // SAFETY: the socket the parent left open for us, ours alone.
    let stream = unsafe { UnixStream::from_raw_fd(raw) };
    let mut consumer = Consumer::connect_with(stream, CONNECT_TIMEOUT, Lending::Write).unwrap();
    for seq in 0..ACK_FRAMES {
        let frame = consumer.recv(Wait::For(WAIT)).unwrap();
        assert_eq!(frame.tensor().memory(), memory, "frame {seq}");
        let bad = first_mismatch(frame.tensor(), |i| pattern(seq, i));
        assert_eq!(bad, None, "frame {seq}: the consumer read stale bytes");
        write_with(frame.tensor(), |i| ack(seq, i));
    }
}

fn write_with(t: &TensorDyn, f: impl Fn(usize) -> u8) {
    let t = t.as_tensor::<u8>().unwrap();
    let mut m = t.map_write().unwrap();
    for (i, b) in m.iter_mut().enumerate() {
        *b = f(i);
    }
}

/// The producer's side of `test`: frames of a `memory` pool to the consumer process, each
/// buffer checked for the consumer's acknowledgement when it comes back.
fn acknowledged_across_processes(test: &str, peer_env: &str, memory: TensorMemory) {
    let (a, mut child) = spawn_peer(test, peer_env);
    let mut producer = Producer::new(pool(memory, ACK_FRAME_BYTES)).unwrap();
    producer.set_access(Access::default().with_writers(Peers::own_user()));
    producer.attach(a).unwrap();
    let mut carried = [None; POOL];
    for seq in 0..ACK_FRAMES {
        let slot = producer.acquire(WAIT).unwrap();
        if let Some(previous) = carried[slot.index()] {
            let bad = first_mismatch(producer.tensor(slot), |i| ack(previous, i));
            assert_eq!(
                bad, None,
                "frame {previous}: the producer missed the acknowledgement"
            );
        }
        write_frame(producer.tensor(slot), seq);
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        carried[slot.index()] = Some(seq);
    }
    for _ in 0..POOL {
        let slot = producer.acquire(WAIT).unwrap();
        let previous = carried[slot.index()].unwrap();
        assert_eq!(
            first_mismatch(producer.tensor(slot), |i| ack(previous, i)),
            None
        );
    }
    drop(producer);
    assert!(
        child.wait().unwrap().success(),
        "the consumer process failed"
    );
}

/// Each side's CPU map must see the other process's last write, though this process's own
/// staging copy of the buffer is from before it: the copy of a shared buffer is never trusted.
#[test]
fn gpu_frames_read_and_acknowledged_through_cpu_maps_across_processes() {
    if let Ok(fd) = std::env::var(GPU_PEER) {
        return ack_consumer_process(&fd, TensorMemory::Gpu);
    }
    if common::device_or_skip(GPU_ACROSS).is_none() {
        return;
    }
    acknowledged_across_processes(GPU_ACROSS, GPU_PEER, TensorMemory::Gpu);
}

/// The same over real DMA-BUFs from the dma-heap (in `scripts/dma-vm`): the consumer imports
/// each as a DMA-BUF, and both sides' maps bracket their accesses.
#[test]
fn dmabuf_frames_read_and_acknowledged_through_cpu_maps_across_processes() {
    if let Ok(fd) = std::env::var(DMABUF_PEER) {
        return ack_consumer_process(&fd, TensorMemory::DmaBuf);
    }
    if !common::dma_heap_or_skip(DMABUF_ACROSS) {
        return;
    }
    acknowledged_across_processes(DMABUF_ACROSS, DMABUF_PEER, TensorMemory::DmaBuf);
}
