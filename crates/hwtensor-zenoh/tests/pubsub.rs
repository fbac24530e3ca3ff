//! Publishers and subscribers on loopback (`tcp/127.0.0.1`, no scouting): frames on one host by
//! fd, across "hosts" (a subscriber that takes no local delivery) as inline bytes, in two
//! processes, and hostile samples on the key.

#![cfg(target_os = "linux")]

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorDyn, TensorMemory};
use hwtensor_zenoh::zenoh::{self, Wait};
use hwtensor_zenoh::{
    Encoding, FrameInfo, Publisher, PublisherOptions, Received, Subscriber, SubscriberOptions,
};

const WAIT: Duration = Duration::from_secs(10);
const W: usize = 1920;
const H: usize = 1080;

/// A free loopback port (bound and let go: the session binds it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A peer session that listens on `port`, or connects to it.
fn session(port: u16, listen: bool) -> zenoh::Session {
    let endpoint = format!("tcp/127.0.0.1:{port}");
    zenoh::open(hwtensor_zenoh::peer_config(&endpoint, listen).unwrap())
        .wait()
        .unwrap()
}

/// A publisher that waits rather than drops when Zenoh's queue is full: these tests count
/// every frame, and a loaded machine (CI's two cores) fills the queue with 8 MB frames.
fn every_frame() -> PublisherOptions {
    PublisherOptions {
        congestion: zenoh::qos::CongestionControl::Block,
        ..PublisherOptions::default()
    }
}

fn pixel(seq: u64, i: usize) -> [u8; 4] {
    ((seq as u32).wrapping_mul(0x9e37_79b1) ^ i as u32).to_le_bytes()
}

/// A 1080p RGBA frame of `seq`'s pattern.
fn frame(seq: u64, memory: TensorMemory) -> TensorDyn {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, W, H),
        Some(memory),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    for (i, px) in t.map_write().unwrap().chunks_exact_mut(4).enumerate() {
        px.copy_from_slice(&pixel(seq, i));
    }
    t.into()
}

/// The first pixel of a received frame that is not its pattern.
fn first_wrong(r: &Received) -> Option<usize> {
    let t = r.tensor.as_tensor::<u8>().unwrap();
    let m = t.map_read().unwrap();
    m.chunks_exact(4)
        .enumerate()
        .position(|(i, px)| px != pixel(r.seq, i))
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < WAIT,
            "{what} did not happen within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether DMA-BUF frames can be made here (a dma-heap: `scripts/dma-vm` has one, as camera
/// boards do); else a printed skip, or a failure under `HWTENSOR_TEST_REQUIRE_DMABUF=1`.
fn dma_heap_or_skip(test: &str) -> bool {
    let Some(why) = TensorMemory::DmaBuf.unavailable_reason() else {
        return true;
    };
    let required = std::env::var("HWTENSOR_TEST_REQUIRE_DMABUF").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: HWTENSOR_TEST_REQUIRE_DMABUF=1 but {why}"
    );
    eprintln!("SKIPPED: {test} - {why}");
    false
}

#[test]
fn on_one_host_frames_go_by_fd_and_no_bytes_go_to_zenoh() {
    frames_go_by_fd(TensorMemory::Shm);
}

#[test]
fn on_one_host_dmabuf_frames_go_by_fd_and_arrive_as_dmabufs() {
    if dma_heap_or_skip("on_one_host_dmabuf_frames_go_by_fd_and_arrive_as_dmabufs") {
        frames_go_by_fd(TensorMemory::DmaBuf);
    }
}

/// A publisher and a subscriber of `key` in two sessions of this host, connected by their
/// local socket; the sessions go with them, to outlive both.
fn on_one_host(key: &str) -> (Publisher, Subscriber, [zenoh::Session; 2]) {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let publisher = Publisher::new(&a, key, every_frame()).unwrap();
    let subscriber = Subscriber::new(&b, key, SubscriberOptions::default()).unwrap();
    wait_until("the local connection", || {
        publisher.local_subscribers() == 1
    });
    (publisher, subscriber, [a, b])
}

/// Frames of `memory` on one host: each goes by fd, arrives in the same memory, zero-copy.
fn frames_go_by_fd(memory: TensorMemory) {
    let (mut publisher, mut subscriber, _sessions) = on_one_host("test/one-host");
    assert!(!publisher.publishes_inline(), "no subscriber elsewhere");
    for _ in 0..10 {
        let seq = publisher.publish(&frame(0, memory)).unwrap();
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!((r.seq, r.gap, r.zero_copy), (seq, 0, true));
        assert_eq!(r.publisher, publisher.id());
        assert_eq!(r.tensor.memory(), memory);
        assert_eq!(subscriber.local_publishers(), 1);
    }
    assert_eq!(subscriber.dropped(), 0);
}

/// A 640x480 NV12 frame of `seq`'s pattern with luma and chroma each in a memfd of its own, as
/// a multi-planar camera gives (in DMA-BUFs).
fn nv12m_frame(seq: u64) -> TensorDyn {
    let (w, h) = (640, 480);
    let plane = |len: usize| {
        let buffer = Tensor::<u8>::new(&[len], Some(TensorMemory::Shm)).unwrap();
        hwtensor::PlaneFd::new(buffer.clone_fd().unwrap(), 0, w)
    };
    let planes = vec![plane(w * h), plane(w * h / 2)];
    let t = Tensor::<u8>::image_from_planes(
        planes,
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    for (i, b) in t.map_write().unwrap().iter_mut().enumerate() {
        *b = pixel(seq, i)[0];
    }
    t.into()
}

#[test]
fn on_one_host_a_heap_frame_comes_as_bytes_and_says_it_was_not_zero_copy() {
    let (mut publisher, mut subscriber, _sessions) = on_one_host("test/heap");
    let sent = frame(3, TensorMemory::Mem);
    let seq = publisher.publish(&sent).unwrap();
    let r = subscriber.recv(WAIT).unwrap();
    assert_eq!((r.seq, r.zero_copy), (seq, false));
    let bytes = |t: &TensorDyn| t.as_tensor::<u8>().unwrap().to_vec().unwrap();
    assert_eq!(bytes(&r.tensor), bytes(&sent));
}

#[test]
fn on_one_host_an_image_in_a_buffer_per_plane_goes_with_an_fd_per_plane() {
    let (mut publisher, mut subscriber, _sessions) = on_one_host("test/planes");
    for n in 0..3 {
        let sent = nv12m_frame(n);
        let seq = publisher.publish(&sent).unwrap();
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!((r.seq, r.gap), (seq, 0));
        let planes = r
            .tensor
            .plane_fds()
            .expect("by an fd per plane, not inline");
        assert_eq!(planes.len(), 2);
        let got = r.tensor.as_tensor::<u8>().unwrap().to_vec().unwrap();
        assert_eq!(got, sent.as_tensor::<u8>().unwrap().to_vec().unwrap());
    }
}

#[test]
fn across_hosts_frames_travel_inline_into_the_memory_asked_for_with_every_pixel() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let mut publisher = Publisher::new(&a, "test/remote", every_frame()).unwrap();
    let options = SubscriberOptions {
        memory: Some(TensorMemory::Shm),
        local_delivery: false, // as a subscriber on another host is
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, "test/remote", options).unwrap();
    wait_until("the remote subscriber's announcement", || {
        publisher.publishes_inline()
    });
    for n in 1..=8u64 {
        let seq = publisher.publish(&frame(n, TensorMemory::Mem)).unwrap();
        assert_eq!(seq, n);
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!((r.seq, r.gap, r.zero_copy), (n, 0, false));
        assert_eq!(r.tensor.memory(), TensorMemory::Shm);
        let info = r
            .tensor
            .image_info()
            .expect("the image description travels");
        assert_eq!(
            (info.width, info.height, info.format),
            (W, H, PixelFormat::Rgba)
        );
        assert_eq!(first_wrong(&r), None, "frame {n}");
    }
    assert_eq!((subscriber.gaps(), subscriber.dropped()), (0, 0));
}

#[test]
fn hostile_and_stale_samples_on_the_key_are_dropped_and_counted() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let key = "test/hostile";
    let options = SubscriberOptions {
        local_delivery: false,
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, key, options).unwrap();
    let raw = a.declare_publisher(key).wait().unwrap();
    wait_until("the raw publisher's match", || {
        raw.matching_status().wait().unwrap().matching()
    });
    let fake = FrameInfo {
        seq: 1,
        timestamp_ns: 0,
        publisher: uuid::Uuid::new_v4(),
        host: uuid::Uuid::new_v4(),
        blocks: false,
        reuses: 0,
    };
    let small: TensorDyn = Tensor::<u16>::new(&[64], Some(TensorMemory::Mem))
        .unwrap()
        .into();
    let (blob, _) = hwtensor::blob::export(&small, hwtensor::blob::Transport::Inline).unwrap();
    let record = fake.encode().to_vec();
    raw.put(blob.clone()).wait().unwrap(); // no frame record
    raw.put(blob.clone())
        .attachment(vec![7u8; 56])
        .wait()
        .unwrap(); // a bad record
    raw.put(b"not a blob".to_vec())
        .attachment(record.clone())
        .wait()
        .unwrap();
    raw.put(blob[..blob.len() - 3].to_vec())
        .attachment(record.clone())
        .wait()
        .unwrap();
    raw.put(blob.clone())
        .attachment(record.clone())
        .wait()
        .unwrap(); // the one good frame
    raw.put(blob.clone()).attachment(record).wait().unwrap(); // replayed: stale
    let r = subscriber.recv(WAIT).unwrap();
    assert_eq!((r.seq, r.publisher), (1, fake.publisher));
    assert_eq!(r.tensor.shape(), &[64]);
    assert!(matches!(
        subscriber.recv(Duration::from_millis(300)),
        Err(hwtensor_zenoh::Error::Timeout(_))
    ));
    assert_eq!(subscriber.dropped(), 5);
    let why = subscriber.last_drop_reason().unwrap_or_default();
    assert!(
        why.contains("not newer than"),
        "the replay's drop says why: {why}"
    );
}

#[test]
fn a_restarted_publisher_is_a_new_sequence_and_gaps_are_counted() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let options = SubscriberOptions {
        queue: 1, // frames beyond one waiting are dropped: gaps
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, "test/restart", options).unwrap();
    let small = || -> TensorDyn {
        Tensor::<u8>::new(&[4096], Some(TensorMemory::Shm))
            .unwrap()
            .into()
    };
    // A publisher that drops for a slow subscriber (one that blocks is waited for: below).
    let mut first = Publisher::new(&a, "test/restart", PublisherOptions::default()).unwrap();
    wait_until("the first publisher's connection", || {
        first.local_subscribers() == 1
    });
    for _ in 0..4 {
        first.publish(&small()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300)); // the reader queues 1, drops 2..4
    assert_eq!(subscriber.overflowed(), 3, "counted as they were dropped");
    assert_eq!(subscriber.recv(WAIT).unwrap().seq, 1);
    first.publish(&small()).unwrap();
    let r = subscriber.recv(WAIT).unwrap();
    assert_eq!((r.seq, r.gap), (5, 3));
    drop(first);
    let mut second = Publisher::new(&a, "test/restart", PublisherOptions::default()).unwrap();
    wait_until("the second publisher's connection", || {
        second.local_subscribers() == 1
    });
    second.publish(&small()).unwrap();
    let r = subscriber.recv(WAIT).unwrap();
    assert_eq!((r.seq, r.gap, r.publisher), (1, 0, second.id()));
    assert_eq!(subscriber.gaps(), 3);
}

fn small() -> TensorDyn {
    Tensor::<u8>::new(&[4096], Some(TensorMemory::Shm))
        .unwrap()
        .into()
}

#[test]
fn a_slow_subscriber_on_one_host_loses_no_frame_of_a_publisher_that_blocks() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let options = SubscriberOptions {
        queue: 1,
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, "test/slow", options).unwrap();
    let mut publisher = Publisher::new(&a, "test/slow", every_frame()).unwrap();
    wait_until("the local connection", || {
        publisher.local_subscribers() == 1
    });
    for _ in 0..6 {
        publisher.publish(&small()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300)); // a subscriber busy elsewhere
    for seq in 1..=6 {
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!((r.seq, r.gap), (seq, 0));
    }
    assert_eq!((subscriber.gaps(), subscriber.overflowed()), (0, 0));
}

#[test]
fn a_forged_sample_naming_a_publisher_with_a_huge_sequence_does_not_silence_it() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let key = "test/forged";
    let options = SubscriberOptions {
        local_delivery: false,
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, key, options).unwrap();
    let mut publisher = Publisher::new(&a, key, every_frame()).unwrap();
    wait_until("the subscriber's token", || publisher.publishes_inline());
    publisher.publish(&small()).unwrap();
    assert_eq!(subscriber.recv(WAIT).unwrap().seq, 1);
    let forger = a.declare_publisher(key).wait().unwrap();
    let forged = FrameInfo {
        seq: u64::MAX - 1,
        timestamp_ns: 0,
        publisher: publisher.id(),
        host: uuid::Uuid::new_v4(),
        blocks: false,
        reuses: 0,
    };
    let (blob, _) = hwtensor::blob::export(&small(), hwtensor::blob::Transport::Inline).unwrap();
    forger
        .put(blob)
        .attachment(forged.encode().to_vec())
        .wait()
        .unwrap();
    assert_eq!(subscriber.recv(WAIT).unwrap().seq, u64::MAX - 1);
    for seq in 2..=4 {
        publisher.publish(&small()).unwrap();
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!(r.seq, seq, "the genuine frames pass again");
    }
    assert!(
        subscriber.gaps() < 1 << 21,
        "a jump is a new sequence, not 2^64 gaps"
    );
}

/// Publishers after the first in the restart test: a leak of one fd each shows this many.
const LEAK_WOULD_SHOW: usize = 19;

/// Open fds of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_local_publisher_that_goes_takes_its_socket_and_reader_with_it() {
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let subscriber = Subscriber::new(&b, "test/restarts", SubscriberOptions::default()).unwrap();
    let mut after_first = None;
    for _ in 0..=LEAK_WOULD_SHOW {
        let publisher = Publisher::new(&a, "test/restarts", every_frame()).unwrap();
        wait_until("the local connection", || {
            publisher.local_subscribers() == 1
        });
        drop(publisher);
        wait_until("the reader's end", || subscriber.local_publishers() == 0);
        after_first.get_or_insert_with(open_fds);
    }
    let grown = open_fds().saturating_sub(after_first.unwrap());
    // A socket or reader kept per publisher would show 19 or more; the other tests of this
    // binary run beside this one and hold a few fds of their own for a moment (3 were seen).
    assert!(
        grown < LEAK_WOULD_SHOW / 2,
        "{grown} fds more after {LEAK_WOULD_SHOW} more publishers came and went"
    );
}

#[test]
fn forged_publisher_tokens_hold_at_most_the_bound_and_are_let_go_with_their_tokens() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let key = "test/forged-tokens";
    let subscriber = Subscriber::new(&b, key, SubscriberOptions::default()).unwrap();
    let host = hwtensor_zenoh::host_id().simple().to_string();
    let before = open_fds();
    // Tokens that look like local publishers, each with a socket that takes connections and
    // never sends a frame.
    let forged: Vec<_> = (0..hwtensor_zenoh::MAX_LOCAL_PUBLISHERS + 16)
        .map(|_| {
            let id = uuid::Uuid::new_v4();
            let name = format!("hwtensor-zenoh-{}", id.simple());
            let listener =
                UnixListener::bind_addr(&SocketAddr::from_abstract_name(name).unwrap()).unwrap();
            let token = format!("hwtensor-zenoh/pub/{host}/{}/{key}", id.simple());
            (
                listener,
                a.liveliness().declare_token(token).wait().unwrap(),
            )
        })
        .collect();
    wait_until("readers of the forged publishers", || {
        subscriber.local_publishers() == hwtensor_zenoh::MAX_LOCAL_PUBLISHERS
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        subscriber.local_publishers(),
        hwtensor_zenoh::MAX_LOCAL_PUBLISHERS
    );
    drop(forged);
    wait_until("the readers' end", || subscriber.local_publishers() == 0);
    wait_until("their sockets closed", || open_fds() <= before + 2);
}

/// The environment variable that makes this binary the subscriber process.
const CHILD: &str = "HWTENSOR_ZENOH_TEST_CHILD";
const ACROSS: &str = "a_subscriber_process_verifies_every_1080p_frame_both_ways";
const ACROSS_FRAMES: u64 = 12;

fn subscriber_process(args: &str) {
    let (port, local) = args.split_once(',').unwrap();
    let b = session(port.parse().unwrap(), false);
    let options = SubscriberOptions {
        local_delivery: local == "local",
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, "test/process", options).unwrap();
    for n in 1..=ACROSS_FRAMES {
        let r = subscriber.recv(WAIT).unwrap();
        assert_eq!(r.seq, n);
        assert_eq!(r.zero_copy, local == "local");
        assert_eq!(first_wrong(&r), None, "frame {n}");
    }
    assert_eq!((subscriber.gaps(), subscriber.dropped()), (0, 0));
}

#[test]
fn a_subscriber_process_verifies_every_1080p_frame_both_ways() {
    if let Ok(args) = std::env::var(CHILD) {
        return subscriber_process(&args);
    }
    for how in ["local", "inline"] {
        let port = free_port();
        let a = session(port, true);
        let mut publisher = Publisher::new(&a, "test/process", every_frame()).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([ACROSS, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{port},{how}"))
            .spawn()
            .unwrap();
        wait_until("the subscriber process", || {
            publisher.local_subscribers() == 1 || publisher.publishes_inline()
        });
        for n in 1..=ACROSS_FRAMES {
            publisher.publish(&frame(n, TensorMemory::Shm)).unwrap();
            std::thread::sleep(Duration::from_millis(20)); // a camera's pace, not a flood
        }
        assert!(
            child.wait().unwrap().success(),
            "the {how} subscriber failed"
        );
    }
}

#[test]
fn a_dropped_subscriber_stops_the_bytes_and_a_late_one_gets_only_new_frames() {
    let port = free_port();
    let a = session(port, true);
    let mut publisher = Publisher::new(&a, "test/late", every_frame()).unwrap();
    let remote = SubscriberOptions {
        local_delivery: false,
        ..SubscriberOptions::default()
    };
    let small = || -> TensorDyn {
        Tensor::<u32>::new(&[256], Some(TensorMemory::Mem))
            .unwrap()
            .into()
    };
    {
        let b = session(port, false);
        let mut first = Subscriber::new(&b, "test/late", remote).unwrap();
        wait_until("the first subscriber", || publisher.publishes_inline());
        publisher.publish(&small()).unwrap();
        assert_eq!(first.recv(WAIT).unwrap().seq, 1);
        b.close().wait().unwrap(); // the connection drops with the session
    }
    wait_until("the publisher to see it gone", || {
        !publisher.publishes_inline()
    });
    publisher.publish(&small()).unwrap(); // seq 2: no one to send bytes to
    let c = session(port, false);
    let mut late = Subscriber::new(&c, "test/late", remote).unwrap();
    wait_until("the late subscriber", || publisher.publishes_inline());
    publisher.publish(&small()).unwrap();
    let r = late.recv(WAIT).unwrap();
    assert_eq!(
        (r.seq, r.gap),
        (3, 0),
        "a late subscriber starts at the next frame"
    );
    assert!(matches!(
        late.recv(Duration::from_millis(200)),
        Err(hwtensor_zenoh::Error::Timeout(_))
    ));
}

/// The environment variable that makes this binary the EdgeFirst subscriber process, and the
/// one that names the memory its frames are in.
const EDGEFIRST_CHILD: &str = "HWTENSOR_ZENOH_TEST_EDGEFIRST_CHILD";
const EDGEFIRST_MEMORY: &str = "HWTENSOR_ZENOH_TEST_EDGEFIRST_MEMORY";
const EDGEFIRST_ACROSS: &str =
    "a_plain_zenoh_process_imports_camera_frames_another_publishes_by_pidfd";
const EDGEFIRST_DMABUF_ACROSS: &str =
    "a_plain_zenoh_process_imports_dmabuf_camera_frames_another_publishes_by_pidfd";
const EDGEFIRST_READY: &str = "test/edgefirst-ready";

/// A plain Zenoh subscriber, as an EdgeFirst node is: each message read with the schema crate
/// and imported by `edgefirst::decode`, which takes the fds with pidfd_getfd.
fn edgefirst_subscriber_process(port: &str) {
    use edgefirst_schemas::edgefirst_msgs::CameraFrame;
    let memory = match std::env::var(EDGEFIRST_MEMORY).as_deref() {
        Ok("dmabuf") => TensorMemory::DmaBuf,
        _ => TensorMemory::Shm,
    };
    let b = session(port.parse().unwrap(), false);
    let samples = b.declare_subscriber("test/edgefirst").wait().unwrap();
    let _ready = b
        .liveliness()
        .declare_token(EDGEFIRST_READY)
        .wait()
        .unwrap();
    for n in 1..=ACROSS_FRAMES {
        let sample = samples.recv_timeout(WAIT).unwrap().expect("a CameraFrame");
        let bytes = sample.payload().to_bytes();
        let message = CameraFrame::from_cdr(&bytes[..]).unwrap();
        assert_eq!((message.seq(), message.frame_id()), (n, "front"));
        assert_eq!(message.tensor().format(), "rgba8");
        assert_eq!(message.tensor().pid(), std::os::unix::process::parent_id());
        let d = hwtensor_zenoh::edgefirst::decode(&bytes).unwrap();
        assert_eq!(d.tensor.memory(), memory);
        let r = Received {
            tensor: d.tensor,
            seq: n,
            timestamp_ns: d.time_ns,
            publisher: uuid::Uuid::nil(),
            gap: 0,
            zero_copy: true,
            frame_id: d.frame_id,
        };
        assert_eq!(first_wrong(&r), None, "frame {n}");
    }
}

#[test]
fn a_plain_zenoh_process_imports_camera_frames_another_publishes_by_pidfd() {
    if let Ok(port) = std::env::var(EDGEFIRST_CHILD) {
        return edgefirst_subscriber_process(&port);
    }
    edgefirst_frames_across(EDGEFIRST_ACROSS, TensorMemory::Shm);
}

/// The same with DMA-BUF frames, as a camera board's EdgeFirst nodes share them.
#[test]
fn a_plain_zenoh_process_imports_dmabuf_camera_frames_another_publishes_by_pidfd() {
    if let Ok(port) = std::env::var(EDGEFIRST_CHILD) {
        return edgefirst_subscriber_process(&port);
    }
    if dma_heap_or_skip(EDGEFIRST_DMABUF_ACROSS) {
        edgefirst_frames_across(EDGEFIRST_DMABUF_ACROSS, TensorMemory::DmaBuf);
    }
}

/// The publishing side of `test`: EdgeFirst `CameraFrame`s of `memory` to a plain Zenoh
/// subscriber process, which imports each by pidfd and checks every pixel.
fn edgefirst_frames_across(test: &str, memory: TensorMemory) {
    let port = free_port();
    let a = session(port, true);
    let options = PublisherOptions {
        encoding: Encoding::EdgeFirst,
        ..every_frame()
    };
    let mut publisher = Publisher::new(&a, "test/edgefirst", options).unwrap();
    publisher.set_frame_id("front");
    // Each frame its own buffer, held by the test: the subscriber reads them in its own time.
    // Written before the subscriber starts its bounded wait for the first: on a slow machine
    // (QEMU's emulator in `scripts/dma-vm`) writing them took longer than that wait.
    let frames: Vec<_> = (1..=ACROSS_FRAMES).map(|n| frame(n, memory)).collect();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(EDGEFIRST_CHILD, port.to_string())
        .env(EDGEFIRST_MEMORY, memory.to_string())
        .spawn()
        .unwrap();
    wait_until("the EdgeFirst subscriber process", || {
        a.liveliness()
            .get(EDGEFIRST_READY)
            .timeout(Duration::from_millis(200))
            .wait()
            .is_ok_and(|r| r.recv().is_ok())
    });
    // The token says the child declared its subscriber, not that this session routes to it
    // yet: under QEMU's emulator (`scripts/dma-vm`) frame 1 was once published before it did
    // and never reached the child. A publisher of the key matches once the route exists.
    let route = a.declare_publisher("test/edgefirst").wait().unwrap();
    wait_until("the EdgeFirst subscriber's route", || {
        route.matching_status().wait().is_ok_and(|m| m.matching())
    });
    for f in &frames {
        publisher.publish(f).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.wait().unwrap().success(),
        "the EdgeFirst subscriber failed"
    );
}

#[test]
fn a_hwtensor_subscriber_takes_edgefirst_frames_of_a_foreign_publisher_and_drops_hostile_ones() {
    use edgefirst_schemas::edgefirst_msgs::CameraFrame;
    use edgefirst_schemas::tensor::{TensorFields, TensorPlaneView};
    use std::os::fd::AsRawFd;
    let port = free_port();
    let (a, b) = (session(port, true), session(port, false));
    let key = "test/edgefirst-foreign";
    let options = SubscriberOptions {
        queue: 64, // every hostile message waits its turn, to be counted
        ..SubscriberOptions::default()
    };
    let mut subscriber = Subscriber::new(&b, key, options).unwrap();
    let camera = frame(5, TensorMemory::Shm);
    let fd = camera.as_fd().unwrap().as_raw_fd() as i64;
    let message = |seq: u64, handle: i64| {
        let planes = [TensorPlaneView {
            handle,
            offset: 0,
            stride: (W * 4) as u64,
            size: (W * H * 4) as u64,
            used: (W * H * 4) as u64,
            modifier: 0,
            handle_bytes: &[],
            data: &[],
        }];
        let fields = TensorFields {
            storage_kind: 1,
            pid: std::process::id(),
            shape: &[H as u64, W as u64, 4],
            format: "rgba8".into(),
            planes: &planes,
            ..TensorFields::default()
        };
        CameraFrame::builder()
            .seq(seq)
            .frame_id("left")
            .tensor(&fields)
            .build()
            .unwrap()
            .to_cdr()
    };
    let put = a.declare_publisher(key).wait().unwrap();
    let before = open_fds();
    const HOSTILE: u64 = 20;
    for _ in 0..HOSTILE {
        put.put(message(5, 999_999)).wait().unwrap(); // an fd the publisher does not have
        put.put(b"not a message".to_vec()).wait().unwrap();
    }
    put.put(message(5, fd)).wait().unwrap();
    let r = subscriber.recv(WAIT).unwrap();
    assert_eq!((r.seq, r.frame_id.as_str(), r.zero_copy), (5, "left", true));
    assert_eq!(r.tensor.identity(), camera.identity());
    assert_eq!(first_wrong(&r), None);
    assert_eq!(subscriber.dropped(), 2 * HOSTILE);
    drop(r);
    // Other tests of this binary open fds meanwhile: a leak would be one per message.
    wait_until("the frame's fds closed", || open_fds() <= before + 2);
}

/// The publisher's Zenoh access control as a deployment writes it: every peer may announce
/// subscribers and liveliness, but frames (`put` on the key) go out only to the peer whose
/// Zenoh id is `reader`. (With TLS, `cert_common_names` names subjects the same way.)
fn access_control(key: &str, reader: &str) -> String {
    format!(
        r#"{{
          enabled: true,
          default_permission: "deny",
          rules: [
            {{ id: "announce", permission: "allow", flows: ["ingress", "egress"],
               messages: ["declare_subscriber", "liveliness_token",
                          "declare_liveliness_subscriber", "liveliness_query", "reply"],
               key_exprs: ["**"] }},
            {{ id: "frames", permission: "allow", flows: ["egress"], messages: ["put"],
               key_exprs: ["{key}"] }},
          ],
          subjects: [
            {{ id: "reader", zids: ["{reader}"] }},
            {{ id: "anyone", link_protocols: ["tcp"] }},
          ],
          policies: [
            {{ rules: ["announce"], subjects: ["anyone"] }},
            {{ rules: ["frames"], subjects: ["reader"] }},
          ],
        }}"#
    )
}

/// A peer session with Zenoh id `zid` (hex) that listens on `port` or connects to it, with
/// `acl` as its access control where given.
fn session_as(port: u16, listen: bool, zid: &str, acl: Option<&str>) -> zenoh::Session {
    let endpoint = format!("tcp/127.0.0.1:{port}");
    let mut c = hwtensor_zenoh::peer_config(&endpoint, listen).unwrap();
    c.insert_json5("id", &format!("\"{zid}\"")).unwrap();
    if let Some(acl) = acl {
        c.insert_json5("access_control", acl).unwrap();
    }
    zenoh::open(c).wait().unwrap()
}

#[test]
fn zenoh_access_control_decides_which_host_receives_the_frames() {
    let port = free_port();
    let key = "test/acl";
    let (reader_id, stranger_id) = ("b0b0b0b0", "c0c0c0c0");
    let acl = access_control(key, reader_id);
    let a = session_as(port, true, "a0a0a0a0", Some(&acl));
    let (b, c) = (
        session_as(port, false, reader_id, None),
        session_as(port, false, stranger_id, None),
    );
    let inline = || SubscriberOptions {
        local_delivery: false, // as subscribers on other hosts are
        ..SubscriberOptions::default()
    };
    let mut reader = Subscriber::new(&b, key, inline()).unwrap();
    let mut stranger = Subscriber::new(&c, key, inline()).unwrap();
    let mut publisher = Publisher::new(&a, key, every_frame()).unwrap();
    wait_until("the subscribers' announcements", || {
        publisher.publishes_inline()
    });
    std::thread::sleep(Duration::from_millis(300)); // both routes in place
    for n in 1..=3u64 {
        publisher.publish(&frame(n, TensorMemory::Mem)).unwrap();
        let r = reader.recv(WAIT).unwrap();
        assert_eq!(r.seq, n);
        assert_eq!(first_wrong(&r), None, "frame {n}");
    }
    let got = stranger.recv(Duration::from_millis(500));
    assert!(
        matches!(got, Err(hwtensor_zenoh::Error::Timeout(_))),
        "the host the policy leaves out received a frame: {:?}",
        got.map(|r| r.seq)
    );
}

#[test]
fn frames_whose_buffer_the_publisher_rewrote_before_the_subscriber_read_them_are_dropped_and_counted(
) {
    let (mut publisher, mut subscriber, _sessions) = on_one_host("test/rewritten");
    // A pool of two buffers, six frames published before the subscriber reads any: frames
    // 1-4's buffers hold frames 5 and 6 by the time it does.
    let pool = [frame(0, TensorMemory::Shm), frame(0, TensorMemory::Shm)];
    for n in 1..=6u64 {
        let t = &pool[(n as usize - 1) % 2];
        for (i, px) in t
            .as_tensor::<u8>()
            .unwrap()
            .map_write()
            .unwrap()
            .chunks_exact_mut(4)
            .enumerate()
        {
            px.copy_from_slice(&pixel(n, i));
        }
        assert_eq!(publisher.publish(t).unwrap(), n);
    }
    // The subscriber's reader takes each frame off its socket as it comes; give it the time
    // to (a rewrite noted only after `recv` reached the older frame cannot be seen).
    std::thread::sleep(Duration::from_millis(500));
    let mut got = Vec::new();
    while let Ok(r) = subscriber.recv(Duration::from_millis(500)) {
        assert_eq!(
            first_wrong(&r),
            None,
            "frame {} was delivered with another's bytes",
            r.seq
        );
        got.push(r.seq);
    }
    assert_eq!(got, [5, 6]);
    assert_eq!(subscriber.rewritten(), 4);
    let why = subscriber.last_drop_reason().unwrap_or_default();
    assert!(why.contains("rewritten by a newer frame"), "{why}");
}
