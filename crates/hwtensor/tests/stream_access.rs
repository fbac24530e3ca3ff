//! Who may attach to a channel, and what a reading consumer can do to the frames: the attach
//! policy checked on the peer's credentials, and shared memory lent read-only.
//!
//! The tests with a consumer of another user run it as `nobody` (uid 65534), which needs
//! root (CI runs as root); elsewhere they print `SKIPPED`, and fail under
//! `HWTENSOR_TEST_REQUIRE_ROOT=1`.

#![cfg(target_os = "linux")]
// The write attempts map the consumer's fd by hand.
#![allow(unsafe_code)]

mod common;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use hwtensor::stream::{Access, Consumer, FrameMeta, Lending, Listener, Peers, Producer, Wait};
use hwtensor::{Error, Tensor, TensorDyn, TensorMemory};

const WAIT: Duration = Duration::from_secs(5);
const BYTES: usize = 1 << 16;
/// The user the other-user consumer runs as.
const NOBODY: u32 = 65534;
/// The environment variable that makes this binary a consumer process: `role:fd`.
const PEER: &str = "HWTENSOR_TEST_ACCESS_PEER";
/// What every byte of a frame the producer sends holds.
const FRAME_BYTE: u8 = 0x77;

/// Exit statuses of the consumer process: what it saw.
mod seen {
    /// Refused by the producer's attach policy, with the words a user reads.
    pub const REFUSED: i32 = 10;
    /// Attached and read the frame; every way to write it was refused.
    pub const READ_ONLY: i32 = 11;
    /// Attached and could write the frame in some way (the failure this file exists for).
    pub const COULD_WRITE: i32 = 12;
    /// Refused: the pool's memory cannot be lent read-only.
    pub const NOT_LENDABLE: i32 = 13;
    /// Anything else.
    pub const OTHER: i32 = 20;
}

fn shm_pool(n: usize) -> Vec<TensorDyn> {
    (0..n)
        .map(|_| TensorDyn::from(Tensor::<u8>::new(&[BYTES], Some(TensorMemory::Shm)).unwrap()))
        .collect()
}

/// Whether this process may start a consumer as another user; prints the skip where not.
fn root_or_skip(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    let why = "a consumer of another user needs root to start";
    if std::env::var("HWTENSOR_TEST_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
        panic!("{test}: {why}");
    }
    println!("SKIPPED: {test} - {why}");
    false
}

/// Runs this binary again as `nobody`, in consumer role `role`, connecting to a listener of
/// ours by its abstract name (as a stranger on the machine would: a socket pair's credentials
/// are its maker's, whoever holds the other end later). Returns the accepted connection.
fn spawn_stranger(test: &str, role: &str) -> (UnixStream, Child) {
    let name = format!("@hwtensor-access-{}-{role}", std::process::id());
    let listener = Listener::bind(&name).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(PEER, format!("{role}:{name}"))
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    (listener.accept(WAIT).unwrap(), child)
}

/// Every way a consumer could write the bytes behind `fd` that must fail on a read-only
/// lending: a writable shared map, `write`, and a writable reopen through `/proc/self/fd`.
/// Returns the first that worked.
fn a_way_to_write(fd: BorrowedFd<'_>) -> Option<&'static str> {
    use rustix::mm::{MapFlags, ProtFlags};
    // SAFETY: a fresh mapping the kernel places; unmapped at once if it is made.
    let mapped = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            BYTES,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    };
    if let Ok(p) = mapped {
        // SAFETY: the mapping just made, BYTES long.
        unsafe { rustix::mm::munmap(p, BYTES).unwrap() };
        return Some("mmap(PROT_WRITE, MAP_SHARED)");
    }
    if rustix::io::pwrite(fd, &[0x99], 0).is_ok() {
        return Some("pwrite");
    }
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let rw = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
    if rustix::fs::open(path.as_str(), rw, rustix::fs::Mode::empty()).is_ok() {
        return Some("open(/proc/self/fd/N, O_RDWR)");
    }
    None
}

/// The consumer process: connects, and exits with what it saw.
fn consumer_process(spec: &str) -> ! {
    let (role, address) = spec.split_once(':').unwrap();
    let stream = hwtensor::stream::connect(address).unwrap();
    let code = match Consumer::connect(stream, WAIT) {
        Err(Error::NotPermitted(why)) if why.contains("does not admit") => seen::REFUSED,
        Err(Error::NotPermitted(why)) if why.contains("cannot be lent read-only") => {
            seen::NOT_LENDABLE
        }
        Err(e) => {
            eprintln!("consumer ({role}): {e}");
            seen::OTHER
        }
        Ok(mut consumer) => {
            let frame = consumer.recv(Wait::For(WAIT)).unwrap();
            let t = frame.tensor().as_tensor::<u8>().unwrap();
            assert!(t.map_read().unwrap().iter().all(|&b| b == FRAME_BYTE));
            let refused = matches!(t.map_write(), Err(Error::AccessDenied { .. }));
            match (refused, a_way_to_write(t.as_fd().unwrap())) {
                (true, None) => seen::READ_ONLY,
                (_, way) => {
                    eprintln!("consumer ({role}): could write the frame: {way:?}");
                    seen::COULD_WRITE
                }
            }
        }
    };
    std::process::exit(code)
}

/// Sends one frame of [`FRAME_BYTE`]s on `producer`.
fn send_frame(producer: &mut Producer) {
    let slot = producer.acquire(WAIT).unwrap();
    let t = producer.tensor(slot).as_tensor::<u8>().unwrap();
    t.map_write().unwrap().fill(FRAME_BYTE);
    producer.send(slot, FrameMeta::new(1, 0)).unwrap();
}

fn status(child: &mut Child) -> Option<i32> {
    child.wait().unwrap().code()
}

#[test]
fn a_consumer_of_another_user_is_refused_by_default_and_the_producer_counts_it() {
    if let Ok(spec) = std::env::var(PEER) {
        consumer_process(&spec);
    }
    let test = "a_consumer_of_another_user_is_refused_by_default_and_the_producer_counts_it";
    if !root_or_skip(test) {
        return;
    }
    let (a, mut child) = spawn_stranger(test, "default");
    let mut producer = Producer::new(shm_pool(2)).unwrap();
    let err = producer.attach(a).unwrap_err();
    assert!(matches!(err, Error::NotPermitted(_)), "{err:?}");
    assert!(
        err.to_string().contains("uid 65534"),
        "the error names who: {err}"
    );
    assert!(
        err.to_string().contains("with_uid"),
        "and how to admit them: {err}"
    );
    assert_eq!((producer.refused(), producer.consumers()), (1, 0));
    assert_eq!(status(&mut child), Some(seen::REFUSED));
}

#[test]
fn a_consumer_of_another_user_admitted_by_uid_reads_and_cannot_write_the_frames() {
    if let Ok(spec) = std::env::var(PEER) {
        consumer_process(&spec);
    }
    let test = "a_consumer_of_another_user_admitted_by_uid_reads_and_cannot_write_the_frames";
    if !root_or_skip(test) {
        return;
    }
    let (a, mut child) = spawn_stranger(test, "admitted");
    let mut producer = Producer::new(shm_pool(2)).unwrap();
    producer.set_access(Access::default().with_attach(Peers::own_user().with_uid(NOBODY)));
    producer.attach(a).unwrap();
    send_frame(&mut producer);
    assert_eq!(status(&mut child), Some(seen::READ_ONLY));
    for t in (0..2).map(|i| producer.tensor(producer.slot(i).unwrap()).clone()) {
        let t = t.as_tensor::<u8>().unwrap();
        let first = t.map_read().unwrap()[0];
        assert!(
            first == 0 || first == FRAME_BYTE,
            "a buffer was written: {first:#x}"
        );
    }
}

#[test]
fn gpu_memory_is_refused_to_a_reading_consumer_of_another_user_with_the_reason() {
    if let Ok(spec) = std::env::var(PEER) {
        consumer_process(&spec);
    }
    let test = "gpu_memory_is_refused_to_a_reading_consumer_of_another_user_with_the_reason";
    if common::device_or_skip(test).is_none() || !root_or_skip(test) {
        return;
    }
    let (a, mut child) = spawn_stranger(test, "gpu");
    let gpu = Tensor::<u8>::new(&[BYTES], Some(TensorMemory::Gpu)).unwrap();
    let mut producer = Producer::new(vec![TensorDyn::from(gpu)]).unwrap();
    producer.set_access(Access::default().with_attach(Peers::any()));
    let err = producer.attach(a).unwrap_err();
    assert!(matches!(err, Error::NotPermitted(_)), "{err:?}");
    assert_eq!(producer.refused(), 1);
    assert_eq!(status(&mut child), Some(seen::NOT_LENDABLE));
}

#[test]
fn a_reading_consumer_of_this_user_gets_an_fd_it_cannot_map_or_write() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut producer = Producer::new(shm_pool(2)).unwrap();
    // Attach first, connect after, on one thread: attach never waits for the consumer.
    producer.attach(a).unwrap();
    let mut consumer = Consumer::connect(b, WAIT).unwrap();
    assert_eq!(consumer.lending(), Lending::Read);
    send_frame(&mut producer);
    let frame = consumer.recv(Wait::For(WAIT)).unwrap();
    let t = frame.tensor().as_tensor::<u8>().unwrap();
    let err = t.map_write().unwrap_err();
    assert!(matches!(err, Error::AccessDenied { .. }), "{err:?}");
    let fd = t.as_fd().unwrap();
    let mode = rustix::fs::fcntl_getfl(fd).unwrap() & rustix::fs::OFlags::ACCMODE;
    assert_eq!(mode, rustix::fs::OFlags::RDONLY);
    let way = a_way_to_write(fd);
    // The producer's own user may reopen the memory writable (it could write the producer's
    // memory through /proc/<pid>/mem as well): only the map and the write are refused.
    assert!(
        way.is_none() || way == Some("open(/proc/self/fd/N, O_RDWR)"),
        "{way:?}"
    );
}

#[test]
fn a_consumer_that_asks_to_write_is_refused_unless_the_policy_lets_it() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut producer = Producer::new(shm_pool(2)).unwrap();
    producer.attach(a).unwrap();
    let err = Consumer::connect_with(b, WAIT, Lending::Write).unwrap_err();
    assert!(matches!(err, Error::NotPermitted(_)), "{err:?}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(err.to_string().contains("with_writers"), "{err}");

    let (a, b) = UnixStream::pair().unwrap();
    producer.set_access(Access::default().with_writers(Peers::own_user()));
    producer.attach(a).unwrap();
    let mut writer = Consumer::connect_with(b, WAIT, Lending::Write).unwrap();
    assert_eq!(writer.lending(), Lending::Write);
    send_frame(&mut producer);
    let frame = writer.recv(Wait::For(WAIT)).unwrap();
    let slot = frame.slot();
    frame
        .tensor()
        .as_tensor::<u8>()
        .unwrap()
        .map_write()
        .unwrap()[0] = 0x99;
    drop(frame);
    let back = producer.tensor(producer.slot(slot).unwrap());
    assert_eq!(back.as_tensor::<u8>().unwrap().map_read().unwrap()[0], 0x99);
}

#[test]
fn a_reading_consumer_admitted_as_a_writer_still_maps_read_only() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut producer = Producer::new(shm_pool(2)).unwrap();
    producer.set_access(Access::default().with_writers(Peers::own_user()));
    producer.attach(a).unwrap();
    let mut consumer = Consumer::connect(b, WAIT).unwrap();
    send_frame(&mut producer);
    let frame = consumer.recv(Wait::For(WAIT)).unwrap();
    let t = frame.tensor().as_tensor::<u8>().unwrap();
    assert!(matches!(t.map_write(), Err(Error::AccessDenied { .. })));
}
