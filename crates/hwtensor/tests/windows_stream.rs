//! The pooled channel on Windows: over a named pipe, a pool of sections lent once and frames as
//! ids after; back-pressure, sides that leave, a consumer in another process, hostile set-ups
//! (run under Wine in the test command's Windows leg).

#![cfg(windows)]

mod common;

use std::time::{Duration, Instant};

use hwtensor::handoff::{Pipe, PipeListener};
use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::{Error, Tensor, TensorDyn, TensorMemory};

const POOL: usize = 3;
const WAIT: Duration = Duration::from_secs(20);

use common::handles;

fn pool(len: usize) -> Vec<TensorDyn> {
    (0..POOL)
        .map(|_| TensorDyn::from(Tensor::<u8>::new(&[len], Some(TensorMemory::Shm)).unwrap()))
        .collect()
}

/// The byte at `i` of frame `seq`.
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as usize * 13 + i * 7) as u8
}

fn write_frame(t: &TensorDyn, seq: u64) {
    let t = t.as_tensor::<u8>().unwrap();
    for (i, b) in t.map_write().unwrap().iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
}

/// Whether `t` holds frame `seq`.
fn holds_frame(t: &TensorDyn, seq: u64) -> bool {
    let t = t.as_tensor::<u8>().unwrap();
    let m = t.map_read().unwrap();
    m.iter().enumerate().all(|(i, &b)| b == pattern(seq, i))
}

/// A connected pair of pipe ends in this process.
fn pipes(test: &str) -> (Pipe, Pipe) {
    let name = format!("hwtensor-stream-{test}-{}", std::process::id());
    let mut listener = PipeListener::bind(&name).unwrap();
    let client = std::thread::spawn(move || Pipe::connect(&name, WAIT).unwrap());
    let server = listener.accept(WAIT).unwrap();
    (server, client.join().unwrap())
}

/// A producer with one consumer attached (made on another thread, as set-up needs both).
fn connected(test: &str, len: usize) -> (Producer, Consumer) {
    let (a, b) = pipes(test);
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(pool(len)).unwrap();
    producer.attach(a).unwrap();
    (producer, consumer.join().unwrap())
}

#[test]
fn adding_a_section_after_attach_is_refused_on_windows_and_keeps_the_consumer() {
    let (a, b) = pipes("added");
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::with_room(pool(64), POOL + 1).unwrap();
    producer.attach(a).unwrap();
    let _consumer = consumer.join().unwrap();
    let err = producer
        .add(TensorDyn::from(
            Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("before consumers attach"), "{err}");
    assert_eq!(producer.consumers(), 1);
}

#[test]
fn frames_go_around_a_pool_of_sections_with_their_metadata_and_bytes() {
    let (mut producer, mut consumer) = connected("around", 4096);
    let frames = 50u64;
    let reader = std::thread::spawn(move || {
        for seq in 0..frames {
            let frame = consumer.recv(Wait::For(WAIT)).unwrap();
            assert_eq!(frame.meta().seq, seq);
            assert_eq!(frame.meta().payload(), &seq.to_le_bytes());
            assert_eq!(frame.tensor().memory(), TensorMemory::Shm);
            assert!(holds_frame(frame.tensor(), seq), "frame {seq}'s bytes");
        }
        consumer
    });
    for seq in 0..frames {
        let slot = producer.acquire(WAIT).unwrap();
        write_frame(producer.tensor(slot), seq);
        let meta = FrameMeta::new(seq, 0)
            .with_payload(&seq.to_le_bytes())
            .unwrap();
        producer.send(slot, meta).unwrap();
    }
    drop(reader.join().unwrap());
}

#[test]
fn a_consumer_that_holds_every_buffer_costs_the_producer_a_bounded_acquire() {
    let (mut producer, mut consumer) = connected("held", 64);
    for seq in 0..POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    let held: Vec<_> = (0..POOL)
        .map(|_| consumer.recv(Wait::For(WAIT)).unwrap())
        .collect();
    let started = Instant::now();
    let got = producer.acquire(Duration::from_millis(200));
    assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    producer.acquire(WAIT).unwrap();
}

#[test]
fn a_consumer_that_leaves_holding_frames_gives_its_buffers_back() {
    let (mut producer, mut consumer) = connected("leaves", 64);
    for seq in 0..POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    let held = consumer.recv(Wait::For(WAIT)).unwrap();
    drop(consumer); // its frame still holds the pipe: the producer is told all the same
    producer.acquire(WAIT).unwrap();
    assert_eq!(producer.consumers(), 0);
    drop(held);
}

#[test]
fn a_producer_that_leaves_ends_a_waiting_receive_with_peer_left() {
    let (producer, mut consumer) = connected("producer-leaves", 64);
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(producer);
    });
    let started = Instant::now();
    let err = consumer.recv(Wait::For(WAIT)).unwrap_err();
    assert!(matches!(err, Error::PeerLeft(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    dropper.join().unwrap();
}

#[test]
fn a_pool_of_heap_memory_is_refused_with_what_to_allocate() {
    let heap = vec![TensorDyn::from(
        Tensor::<u8>::new(&[16], Some(TensorMemory::Mem)).unwrap(),
    )];
    let err = Producer::new(heap).unwrap_err();
    assert!(err.to_string().contains("TensorMemory::Shm"), "{err}");
}

/// Writes `bytes` on `pipe` as a hostile producer would.
fn forge(pipe: &Pipe, bytes: &[u8]) {
    pipe.write_all(bytes, Instant::now() + WAIT).unwrap();
}

/// A set-up message as the channel writes it, naming handle `block` for the control block and
/// `events` for the two wake-up events and the "closed" one.
fn set_up(slots: u32, capacity: u32, flags: u32, block: u64, events: [u64; 3]) -> Vec<u8> {
    let mut m = b"HWTCHAN1".to_vec();
    for w in [2u32, slots, capacity, flags] {
        m.extend(w.to_le_bytes());
    }
    for v in std::iter::once(block).chain(events) {
        m.extend(v.to_le_bytes());
    }
    m
}

#[test]
fn hostile_set_ups_are_refused_by_what_is_wrong_and_leave_no_handle_behind() {
    // SAFETY: an unnamed event of our own, closed below.
    #[allow(unsafe_code)]
    let event = unsafe { windows::Win32::System::Threading::CreateEventW(None, true, false, None) }
        .unwrap();
    let ev = event.0 as u64;
    // A handle of this process that is not an event: this process, opened for waiting.
    // SAFETY: opening our own process; the handle is closed below.
    #[allow(unsafe_code)]
    let process = unsafe {
        windows::Win32::System::Threading::OpenProcess(
            windows::Win32::System::Threading::PROCESS_SYNCHRONIZE,
            false,
            std::process::id(),
        )
    }
    .unwrap();
    let not_event = process.0 as u64;
    let before = handles();
    let cases: [(Vec<u8>, &str); 5] = [
        (set_up(3, 4, 0, ev, [ev; 3]), "control block"),
        (
            set_up(3, 4, 0, 0x7ff0_0004, [ev; 3]),
            "cannot be duplicated",
        ),
        (set_up(3, 4, 1, ev, [ev; 3]), "1 handles where 2"),
        (set_up(0, 4, 0, ev, [ev; 3]), "pool of 0"),
        (set_up(3, 4, 0, ev, [ev, not_event, ev]), "not an event"),
    ];
    for (i, (message, why)) in cases.into_iter().enumerate() {
        let (a, b) = pipes(&format!("hostile-{i}"));
        forge(&a, &message);
        let err = Consumer::connect(b, WAIT).unwrap_err().to_string();
        assert!(err.contains(why), "{why}: {err}");
        drop(a);
    }
    let (a, b) = pipes("hostile-short");
    forge(&a, &set_up(3, 4, 0, ev, [ev; 3])[..10]);
    drop(a);
    let started = Instant::now();
    let err = Consumer::connect(b, WAIT).unwrap_err();
    assert!(matches!(err, Error::Handoff(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let (a, b) = pipes("hostile-silent");
    let got = Consumer::connect(b, Duration::from_millis(200));
    assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
    drop(a);
    assert_eq!(handles(), before, "a refused set-up left a handle open");
    // SAFETY: the two handles made above, closed once.
    #[allow(unsafe_code)]
    unsafe {
        let _ = windows::Win32::Foundation::CloseHandle(event);
        let _ = windows::Win32::Foundation::CloseHandle(process);
    }
}

/// The environment variable that makes this binary the consumer process: the pipe's name.
const CHILD: &str = "HWTENSOR_WINDOWS_STREAM_CHILD";
const TWO_PROCESSES: &str = "frames_cross_to_a_consumer_process_and_its_buffers_come_back";
/// Frames the two-process test sends: many times the pool, so every buffer goes round.
const CHILD_FRAMES: u64 = 40;

/// The consumer process: checks every frame's bytes and sequence, handing each back.
fn child(name: &str) {
    let pipe = Pipe::connect(name, WAIT).unwrap();
    let mut consumer = Consumer::connect(pipe, CONNECT_TIMEOUT).unwrap();
    for seq in 0..CHILD_FRAMES {
        let frame = consumer.recv(Wait::For(WAIT)).unwrap();
        assert_eq!(frame.meta().seq, seq);
        assert!(holds_frame(frame.tensor(), seq), "frame {seq}'s bytes");
    }
}

#[test]
fn frames_cross_to_a_consumer_process_and_its_buffers_come_back() {
    if let Ok(name) = std::env::var(CHILD) {
        return child(&name);
    }
    let (pipe, mut process) = common::spawn_pipe_peer(TWO_PROCESSES, CHILD, WAIT);
    let mut producer = Producer::new(pool(1 << 16)).unwrap();
    producer.attach(pipe).unwrap();
    for seq in 0..CHILD_FRAMES {
        let slot = producer.acquire(WAIT).unwrap();
        write_frame(producer.tensor(slot), seq);
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    assert!(
        process.wait().unwrap().success(),
        "the consumer process failed"
    );
    // Every frame was handed back before the consumer left: the whole pool is free.
    for _ in 0..POOL {
        producer.acquire(Duration::from_millis(100)).unwrap();
    }
}

/// The environment variable that makes this binary the consumer that dies holding frames.
const DYING_CHILD: &str = "HWTENSOR_WINDOWS_STREAM_DYING_CHILD";
const DIES: &str = "a_consumer_process_that_dies_holding_frames_gives_its_buffers_back";

#[test]
fn a_consumer_process_that_dies_holding_frames_gives_its_buffers_back() {
    if let Ok(name) = std::env::var(DYING_CHILD) {
        let pipe = Pipe::connect(&name, WAIT).unwrap();
        let mut consumer = Consumer::connect(pipe, CONNECT_TIMEOUT).unwrap();
        let held = consumer.recv(Wait::For(WAIT)).unwrap();
        std::mem::forget((held, consumer)); // nothing is handed back or said
        std::process::exit(0);
    }
    let name = format!("hwtensor-stream-dies-{}", std::process::id());
    let mut listener = PipeListener::bind(&name).unwrap();
    let mut process = std::process::Command::new(std::env::current_exe().unwrap())
        .args([DIES, "--exact", "--nocapture", "--test-threads=1"])
        .env(DYING_CHILD, &name)
        .spawn()
        .unwrap();
    let pipe = listener.accept(WAIT).unwrap();
    let mut producer = Producer::new(pool(64)).unwrap();
    producer.attach(pipe).unwrap();
    for seq in 0..POOL as u64 {
        let slot = producer.acquire(WAIT).unwrap();
        producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
    }
    assert!(process.wait().unwrap().success());
    let started = Instant::now();
    producer.acquire(WAIT).unwrap(); // its exit, not a timeout, frees the pool
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(producer.consumers(), 0);
}
