//! The elements with our own code on the other end: a Rust consumer of a channel that
//! hwtensorsink feeds, and hwtensorsrc fed by a Rust producer.

mod common;

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::str::FromStr;
use std::time::Duration;

use common::*;
use gst::prelude::*;
use gst_video::prelude::*;
use gsthwtensor::stamp::{monotonic_ns, RECEIVED_TIME_CAPS, SENT_TIME_CAPS};
use hwtensor::stream::{Consumer, Lending, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::stream::{FrameKind, Marker};
use hwtensor::{CpuAccess, DType, ImageSpec, PixelFormat, TensorDyn, TensorMemory};

const FRAMES: usize = 8;

fn abstract_addr(socket: &str) -> SocketAddr {
    SocketAddr::from_abstract_name(socket.trim_start_matches('@').as_bytes()).unwrap()
}

/// A fresh abstract socket name (`@...`, as hwtensorsrc's `socket` takes it) and a listener
/// on it, for a Rust producer.
fn listening() -> (String, UnixListener) {
    let socket = socket_name();
    let listener = UnixListener::bind_addr(&abstract_addr(&socket)).unwrap();
    (socket, listener)
}

/// A thread that consumes hwtensorsink's channel at `socket` until its end of stream and
/// returns what `each` made of every frame.
fn frames_until_eos<T: Send + 'static>(
    socket: &str,
    each: impl Fn(&hwtensor::stream::Frame, Marker) -> T + Send + 'static,
) -> std::thread::JoinHandle<Vec<T>> {
    let addr = abstract_addr(socket);
    std::thread::spawn(move || {
        let mut consumer = consumer_of(&addr);
        let mut got = Vec::new();
        loop {
            let frame = consumer.recv(Wait::For(Duration::from_secs(20))).unwrap();
            let marker = frame.meta().marker().unwrap();
            if marker.kind == FrameKind::EndOfStream {
                return got;
            }
            got.push(each(&frame, marker));
        }
    })
}

/// A consumer of the channel at `addr`, connecting again until hwtensorsink listens there.
fn consumer_of(addr: &SocketAddr) -> Consumer {
    let stream = loop {
        match UnixStream::connect_addr(addr) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    Consumer::connect(stream, CONNECT_TIMEOUT).unwrap()
}

#[test]
fn a_rust_consumer_reads_every_frame_hwtensorsink_publishes_then_its_end_of_stream() {
    init();
    let socket = socket_name();
    let caps = "video/x-raw,format=NV21,width=320,height=240";
    let producer = gst::parse::launch(&format!(
        "videotestsrc num-buffers={FRAMES} pattern=ball ! {caps} ! \
         hwtensorsink socket={socket} wait-for-consumer=true"
    ))
    .unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let reader = frames_until_eos(&socket, |frame, marker| {
        let t = frame.tensor();
        let info = t.image_info().unwrap();
        assert_eq!(
            (info.format, info.width, info.height),
            (PixelFormat::Nv21, 320, 240)
        );
        assert!(marker.pts_ns.is_some(), "the buffer's PTS travels");
        t.as_tensor::<u8>().unwrap().to_vec().unwrap()
    });
    run_to_eos(&producer, Duration::from_secs(60));
    let got = reader.join().unwrap().concat();
    assert!(
        got == reference_frames(caps, FRAMES as u32),
        "NV21 frames differ"
    );
}

/// A Rust producer of `count` frames of 64x48 `format` on `listener`, each filled with its
/// number, then end of stream. Four buffers: the appsink's queue and the sample the test
/// holds take two, and hwtensorsrc copies rather than lend the last one it has.
fn rust_producer(listener: UnixListener, format: PixelFormat, count: usize) {
    rust_producer_of(listener, format, TensorMemory::Shm, count)
}

/// [`rust_producer`] of BGRx frames on `memory`.
fn rust_producer_on(listener: UnixListener, memory: TensorMemory, count: usize) {
    rust_producer_of(listener, PixelFormat::Bgrx, memory, count)
}

fn rust_producer_of(
    listener: UnixListener,
    format: PixelFormat,
    memory: TensorMemory,
    count: usize,
) {
    let pool = (0..4)
        .map(|_| {
            TensorDyn::image(
                &ImageSpec::new(format, 64, 48),
                DType::U8,
                Some(memory),
                CpuAccess::ReadWrite,
            )
        })
        .collect::<hwtensor::Result<Vec<_>>>()
        .unwrap();
    let mut producer = Producer::new(pool).unwrap();
    let (stream, _) = listener.accept().unwrap();
    producer.attach(stream).unwrap();
    for i in 0..count {
        let slot = producer.acquire(Duration::from_secs(20)).unwrap();
        producer
            .tensor(slot)
            .as_tensor::<u8>()
            .unwrap()
            .map_write()
            .unwrap()
            .fill(i as u8);
        let marker = Marker {
            kind: FrameKind::Frame,
            pts_ns: Some(i as u64 * 1_000_000),
            duration_ns: Some(1_000_000),
        };
        producer.send(slot, marker.meta(i as u64)).unwrap();
    }
    end_of_stream(&mut producer);
}

/// Sends end of stream, then stays until the consumer has handed everything back: leaving
/// early is not end of stream.
fn end_of_stream(producer: &mut Producer) {
    let slot = producer.acquire(Duration::from_secs(20)).unwrap();
    producer
        .send(slot, Marker::of(FrameKind::EndOfStream).meta(0))
        .unwrap();
    let _ = producer.acquire(Duration::from_millis(200));
}

/// A 64x48 BGRx image in shared memory, rows `pitch` bytes apart (`None`: tight).
fn bgrx(pitch: Option<usize>) -> TensorDyn {
    let (w, h, f, d, m, a) = (
        64,
        48,
        PixelFormat::Bgrx,
        DType::U8,
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    );
    match pitch {
        Some(p) => TensorDyn::image(&ImageSpec::new(f, w, h).with_row_stride(p), d, m, a),
        None => TensorDyn::image(&ImageSpec::new(f, w, h), d, m, a),
    }
    .unwrap()
}

/// A playing `hwtensorsrc ! appsink` fed `count` BGRx frames by a Rust producer thread.
fn src_fed_by_rust_producer(
    count: usize,
) -> (std::thread::JoinHandle<()>, gst::Bin, gst_app::AppSink) {
    init();
    let (socket, listener) = listening();
    let producer = std::thread::spawn(move || rust_producer(listener, PixelFormat::Bgrx, count));
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false max-buffers=1"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    (producer, pipeline, sink)
}

#[test]
fn hwtensorsrc_fed_by_a_rust_producer_pushes_fd_memory_that_hands_each_frame_back() {
    // More frames than the pool holds: each must come back for the producer to go on.
    let count = 12;
    let (producer, pipeline, sink) = src_fed_by_rust_producer(count);
    let mut seen = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        let caps = sample.caps().unwrap().structure(0).unwrap().to_owned();
        assert_eq!(caps.get::<&str>("format").unwrap(), "BGRx");
        let buffer = sample.buffer().unwrap();
        let memory = buffer.peek_memory(0);
        assert!(
            memory.is_memory_type::<gst_allocators::FdMemory>(),
            "the frame's own fd memory, not a copy"
        );
        let bytes = buffer.map_readable().unwrap();
        assert_eq!(bytes.len(), 64 * 48 * 4);
        let first = bytes[0];
        assert!(bytes.iter().all(|&b| b == first), "frame {first} is torn");
        assert_eq!(
            buffer.pts(),
            Some(gst::ClockTime::from_mseconds(u64::from(first)))
        );
        seen.push(first);
    }
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    assert_eq!(seen, (0..count as u8).collect::<Vec<_>>());
}

/// A 640x480 NV12 image whose luma and chroma are each in a memfd of their own, as a
/// multi-planar camera's NV12M frames are (in DMA-BUFs).
fn nv12m_image() -> TensorDyn {
    let (w, h) = (640, 480);
    let plane = |len: usize| {
        let flags = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING;
        let fd = rustix::fs::memfd_create("plane", flags).unwrap();
        rustix::fs::ftruncate(&fd, len as u64).unwrap();
        hwtensor::PlaneFd::new(fd, 0, w)
    };
    let planes = vec![plane(w * h), plane(w * h / 2)];
    TensorDyn::image_from_planes(
        planes,
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        DType::U8,
        CpuAccess::ReadWrite,
    )
    .unwrap()
}

#[test]
fn hwtensorsrc_lends_frames_in_a_buffer_per_plane_as_a_memory_per_plane_without_a_copy() {
    init();
    let (socket, listener) = listening();
    let count = 12;
    let producer = std::thread::spawn(move || {
        let mut producer = Producer::new((0..4).map(|_| nv12m_image()).collect()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        producer.attach(stream).unwrap();
        for i in 0..count {
            let slot = producer.acquire(Duration::from_secs(20)).unwrap();
            let image = producer.tensor(slot).as_tensor::<u8>().unwrap();
            let mut map = image.map_write().unwrap();
            let (luma, chroma) = map.split_at_mut(640 * 480);
            luma.fill(i as u8);
            chroma.fill(200 - i as u8);
            drop(map);
            producer
                .send(slot, Marker::of(FrameKind::Frame).meta(i as u64))
                .unwrap();
        }
        end_of_stream(&mut producer);
    });
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc name=src socket={socket} is-live=false ! appsink name=out sync=false \
         max-buffers=1"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let (mut seen, mut lent) = (Vec::new(), 0);
    while let Ok(sample) = sink.pull_sample() {
        let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let buffer = sample.buffer().unwrap();
        // A lent frame is its own two fd memories; a copy (counted below) is one.
        if buffer.n_memory() == 2 {
            let fd_memory = |i| {
                let memory = buffer.peek_memory(i);
                memory.is_memory_type::<gst_allocators::FdMemory>()
            };
            assert!(fd_memory(0) && fd_memory(1), "a frame's own fd memories");
            lent += 1;
        }
        let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, &info).unwrap();
        let luma = frame.plane_data(0).unwrap();
        let chroma = frame.plane_data(1).unwrap();
        let first = luma[0];
        assert!(luma.iter().all(|&b| b == first), "frame {first}'s luma");
        assert!(
            chroma.iter().all(|&b| b == 200 - first),
            "frame {first}'s chroma"
        );
        seen.push(first);
    }
    let src = pipeline.by_name("src").unwrap();
    let copies = src.property::<u64>("copies");
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    assert_eq!(seen, (0..count as u8).collect::<Vec<_>>());
    // hwtensorsrc copies a frame rather than lend its producer's last free buffer: the rest
    // go downstream in their own memory.
    assert_eq!(lent + copies as usize, count, "every frame lent or copied");
    assert!(lent >= count / 2, "{lent} of {count} frames lent");
}

/// The time a buffer's `GstReferenceTimestampMeta` of `caps` (a `stamp` constant) holds, in ns.
fn stamp(buffer: &gst::BufferRef, caps: &str) -> Option<u64> {
    let caps = gst::Caps::new_empty_simple(caps);
    buffer
        .iter_meta::<gst::ReferenceTimestampMeta>()
        .find(|m| m.reference().can_intersect(&caps))
        .map(|m| m.timestamp().nseconds())
}

#[test]
fn each_buffer_of_hwtensorsrc_carries_when_its_frame_was_sent_and_when_it_was_received() {
    let count = 3;
    let started = monotonic_ns();
    let (producer, pipeline, sink) = src_fed_by_rust_producer(count);
    let mut seen = 0;
    while let Ok(sample) = sink.pull_sample() {
        let buffer = sample.buffer().unwrap();
        let sent = stamp(buffer, SENT_TIME_CAPS).expect("the send time");
        let received = stamp(buffer, RECEIVED_TIME_CAPS).expect("the receive time");
        assert!(
            started <= sent && sent <= received && received <= monotonic_ns(),
            "out of order: started {started}, sent {sent}, received {received}"
        );
        seen += 1;
    }
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    assert_eq!(seen, count);
}

#[test]
fn a_producer_that_changes_caps_is_followed_by_hwtensorsrc_renegotiating() {
    init();
    let socket = socket_name();
    let addr = abstract_addr(&socket);
    let listener = UnixListener::bind_addr(&addr).unwrap();
    let producer = std::thread::spawn(move || {
        let make = |format| {
            let pool = (0..2)
                .map(|_| {
                    TensorDyn::image(
                        &ImageSpec::new(format, 32, 16),
                        DType::U8,
                        Some(TensorMemory::Shm),
                        CpuAccess::ReadWrite,
                    )
                })
                .collect::<hwtensor::Result<Vec<_>>>()
                .unwrap();
            let mut p = Producer::new(pool).unwrap();
            p.attach(listener.accept().unwrap().0).unwrap();
            p
        };
        let mut first = make(PixelFormat::Rgba);
        let slot = first.acquire(Duration::from_secs(20)).unwrap();
        first
            .send(slot, Marker::of(FrameKind::Frame).meta(0))
            .unwrap();
        let slot = first.acquire(Duration::from_secs(20)).unwrap();
        first
            .send(slot, Marker::of(FrameKind::CapsChange).meta(1))
            .unwrap();
        let mut second = make(PixelFormat::Grey);
        drop(first);
        let slot = second.acquire(Duration::from_secs(20)).unwrap();
        second
            .send(slot, Marker::of(FrameKind::Frame).meta(2))
            .unwrap();
        let slot = second.acquire(Duration::from_secs(20)).unwrap();
        second
            .send(slot, Marker::of(FrameKind::EndOfStream).meta(3))
            .unwrap();
        let _ = second.acquire(Duration::from_millis(200));
    });
    // One frame on each channel of two buffers: holding every sample starves neither.
    let formats: Vec<String> = samples(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false"
    ))
    .iter()
    .map(|s| {
        s.caps()
            .unwrap()
            .structure(0)
            .unwrap()
            .get::<String>("format")
            .unwrap()
    })
    .collect();
    producer.join().unwrap();
    assert_eq!(formats, ["RGBA", "GRAY8"]);
}

#[test]
fn a_producer_whose_buffers_differ_is_refused_before_any_frame() {
    init();
    let (socket, listener) = listening();
    let producer = std::thread::spawn(move || {
        let image = |w| {
            TensorDyn::image(
                &ImageSpec::new(PixelFormat::Rgba, w, 16),
                DType::U8,
                Some(TensorMemory::Shm),
                CpuAccess::ReadWrite,
            )
            .unwrap()
        };
        // Caps say 64x16; the second buffer is 8x16, too small for them.
        let mut p = Producer::new(vec![image(64), image(8)]).unwrap();
        p.attach(listener.accept().unwrap().0).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let pipeline = gst::parse::launch(&format!("hwtensorsrc socket={socket} ! fakesink")).unwrap();
    let _ = pipeline.set_state(gst::State::Playing);
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(10));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("a mismatched pool must be refused, not streamed: {msg:?}")
    };
    assert!(
        e.error().to_string().contains("not all the same image"),
        "{}",
        e.error()
    );
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
}

/// A consumer of hwtensorsink's channel on `socket` that keeps every frame it receives.
fn hoarding_consumer(socket: &str) -> std::thread::JoinHandle<usize> {
    let addr = abstract_addr(socket);
    std::thread::spawn(move || {
        let mut consumer = consumer_of(&addr);
        let mut kept = Vec::new();
        while let Ok(frame) = consumer.recv(Wait::For(Duration::from_secs(2))) {
            kept.push(frame);
        }
        kept.len()
    })
}

#[test]
fn a_consumer_that_never_hands_back_costs_a_blocking_sink_its_timeout_and_an_error() {
    init();
    let socket = socket_name();
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=20 ! video/x-raw,format=GRAY8,width=64,height=48 ! \
         hwtensorsink socket={socket} wait-for-consumer=true pool-size=2 timeout=300"
    ))
    .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let hoarder = hoarding_consumer(&socket);
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(20));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("a sink whose buffers are all held cannot reach the end: {msg:?}");
    };
    let text = e.error().to_string();
    assert!(
        text.contains("held every buffer") && text.contains("pool-size"),
        "{text}"
    );
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(hoarder.join().unwrap(), 2, "the hoarder got the whole pool");
}

#[test]
fn a_sink_that_drops_when_full_keeps_going_and_counts_what_it_dropped() {
    init();
    let socket = socket_name();
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=20 ! video/x-raw,format=GRAY8,width=64,height=48 ! \
         hwtensorsink name=sink socket={socket} wait-for-consumer=true pool-size=2 when-full=drop"
    ))
    .unwrap()
    .downcast::<gst::Bin>()
    .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let hoarder = hoarding_consumer(&socket);
    run_to_eos(pipeline.upcast_ref(), Duration::from_secs(20));
    let sink = pipeline.by_name("sink").unwrap();
    assert_eq!(hoarder.join().unwrap(), 2);
    // 20 frames: two reached the hoarder, the end-of-stream marker found no buffer either.
    assert_eq!(sink.property::<u64>("dropped"), 18);
}

#[test]
fn gpu_frames_reach_downstream_as_system_memory_copies_through_the_cpu_map() {
    init();
    if gpu_or_skip("gpu_frames_reach_downstream_as_system_memory_copies_through_the_cpu_map")
        .is_none()
    {
        return;
    }
    let (socket, listener) = listening();
    let count = 5;
    let producer = std::thread::spawn(move || rust_producer_on(listener, TensorMemory::Gpu, count));
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc name=src socket={socket} is-live=false ! appsink name=out sync=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut seen = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        let buffer = sample.buffer().unwrap();
        let memory = buffer.peek_memory(0);
        assert!(
            !memory.is_memory_type::<gst_allocators::FdMemory>(),
            "a copy in system memory"
        );
        let bytes = buffer.map_readable().unwrap();
        let first = bytes[0];
        assert!(bytes.iter().all(|&b| b == first), "frame {first} is torn");
        seen.push(first);
    }
    let copies = pipeline.by_name("src").unwrap().property::<u64>("copies");
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    assert_eq!(seen, (0..count as u8).collect::<Vec<_>>());
    assert_eq!(
        copies, count as u64,
        "every GPU frame is copied, and counted"
    );
}

#[test]
fn a_caps_change_at_hwtensorsink_reaches_hwtensorsrc_which_renegotiates() {
    init();
    let socket = socket_name();
    let producer = gst::parse::launch(&format!(
        "appsrc name=in format=time ! hwtensorsink socket={socket} wait-for-consumer=true"
    ))
    .unwrap()
    .downcast::<gst::Bin>()
    .unwrap();
    let input = producer
        .by_name("in")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let consumer = std::thread::spawn(move || {
        samples(&format!(
            "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false"
        ))
        .iter()
        .map(|s| {
            let caps = s.caps().unwrap().structure(0).unwrap().to_owned();
            let first = s.buffer().unwrap().map_readable().unwrap()[0];
            (caps.get::<String>("format").unwrap(), first)
        })
        .collect::<Vec<_>>()
    });
    for (format, bytes_per_pixel, fill) in [("RGBA", 4, 1u8), ("GRAY8", 1, 2u8)] {
        let caps = gst::Caps::from_str(&format!(
            "video/x-raw,format={format},width=32,height=16,framerate=30/1"
        ))
        .unwrap();
        input.set_caps(Some(&caps));
        for i in 0..2u8 {
            let mut buffer =
                gst::Buffer::from_mut_slice(vec![fill + i * 10; 32 * 16 * bytes_per_pixel]);
            buffer
                .get_mut()
                .unwrap()
                .set_pts(gst::ClockTime::from_mseconds(u64::from(i)));
            input.push_buffer(buffer).unwrap();
        }
    }
    input.end_of_stream().unwrap();
    run_to_eos(producer.upcast_ref(), Duration::from_secs(30));
    let got = consumer.join().unwrap();
    let want: Vec<(String, u8)> = vec![
        ("RGBA".into(), 1),
        ("RGBA".into(), 11),
        ("GRAY8".into(), 2),
        ("GRAY8".into(), 12),
    ];
    assert_eq!(got, want);
}

/// The file an fd is: its device and inode.
fn file_of(t: &TensorDyn) -> (u64, u64) {
    file_at(t.as_fd().expect("a channel buffer has an fd"))
}

/// The files a channel buffer's planes are in: its one fd's, or each plane's.
fn files_of(t: &TensorDyn) -> Vec<(u64, u64)> {
    match t.plane_fds() {
        Some(planes) => planes.into_iter().map(|(fd, _)| file_at(fd)).collect(),
        None => vec![file_of(t)],
    }
}

/// The file `fd` is: its device and inode.
fn file_at(fd: std::os::fd::BorrowedFd<'_>) -> (u64, u64) {
    let st = rustix::fs::fstat(fd).unwrap();
    (st.st_dev, st.st_ino)
}

#[test]
fn hwtensorsink_adopts_upstreams_own_fd_buffers_and_relays_them_without_a_copy() {
    init();
    let (upstream, downstream) = (socket_name(), socket_name());
    let listener = UnixListener::bind_addr(&abstract_addr(&upstream)).unwrap();
    let count = 12;
    // Channel A: a Rust producer, paced so the relay hands each buffer on before the next
    // (hwtensorsrc copies a frame rather than lend its producer's last free buffer, and the
    // sink would then copy that copy).
    let (files_tx, files_rx) = std::sync::mpsc::channel();
    let producer = std::thread::spawn(move || {
        let pool = (0..8).map(|_| bgrx(None)).collect::<Vec<_>>();
        files_tx
            .send(pool.iter().map(file_of).collect::<Vec<_>>())
            .unwrap();
        let mut producer = Producer::new(pool).unwrap();
        producer.attach(listener.accept().unwrap().0).unwrap();
        for i in 0..count {
            let slot = producer.acquire(Duration::from_secs(20)).unwrap();
            let t = producer.tensor(slot).as_tensor::<u8>().unwrap();
            t.map_write().unwrap().fill(i as u8);
            producer
                .send(slot, Marker::of(FrameKind::Frame).meta(i as u64))
                .unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        end_of_stream(&mut producer);
    });
    // The relay: channel A's frames in, channel B out.
    let relay = gst::parse::launch(&format!(
        "hwtensorsrc socket={upstream} is-live=false ! \
         hwtensorsink name=sink socket={downstream} wait-for-consumer=true"
    ))
    .unwrap();
    relay.set_state(gst::State::Playing).unwrap();
    // Channel B's consumer: every frame's bytes, and which file it is.
    let reader = frames_until_eos(&downstream, |frame, _| {
        let bytes = frame.tensor().as_tensor::<u8>().unwrap().to_vec().unwrap();
        let first = bytes[0];
        assert!(bytes.iter().all(|&b| b == first), "frame {first} is torn");
        (first, file_of(frame.tensor()))
    });
    let files = files_rx.recv().unwrap();
    run_to_eos(&relay, Duration::from_secs(60));
    let copies = relay
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("sink")
        .unwrap()
        .property::<u64>("copies");
    relay.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    let seen = reader.join().unwrap();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        (0..count as u8).collect::<Vec<_>>()
    );
    assert_eq!(copies, 0, "every frame went out in channel A's own buffer");
    for (i, (_, file)) in seen.iter().enumerate() {
        assert!(
            files.contains(file),
            "frame {i} is not in one of channel A's buffers"
        );
    }
}

/// The row strides downstream of `hwtensorsrc` saw, and that every frame's pixels were right,
/// fed by a pool of two BGRx images that differ only in row stride (256 and 320 bytes), the
/// appsink reading `GstVideoMeta` or not.
fn strides_seen_by_downstream(reads_meta: bool) -> Vec<usize> {
    init();
    let (socket, listener) = listening();
    let frames = 4u8;
    let producer = std::thread::spawn(move || {
        // The second as a sink's adopted buffer can be: the same picture, rows padded by
        // upstream.
        let mut p = Producer::new(vec![bgrx(None), bgrx(Some(320))]).unwrap();
        p.attach(listener.accept().unwrap().0).unwrap();
        for i in 0..frames {
            let slot = p.acquire(Duration::from_secs(20)).unwrap();
            let t = p.tensor(slot).as_tensor::<u8>().unwrap();
            t.copy_from_flat(&vec![i + 1; t.len()]).unwrap();
            p.send(slot, Marker::of(FrameKind::Frame).meta(u64::from(i)))
                .unwrap();
        }
        end_of_stream(&mut p);
    });
    let got = samples_reading_meta(
        &format!("hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false"),
        reads_meta,
    );
    producer.join().unwrap();
    let mut strides = std::collections::BTreeSet::new();
    for (i, sample) in got.iter().enumerate() {
        let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let buffer = sample.buffer().unwrap();
        let has_meta = buffer.meta::<gst_video::VideoMeta>().is_some();
        let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, &info).unwrap();
        let stride = frame.plane_stride()[0] as usize;
        strides.insert(stride);
        // A downstream without GstVideoMeta reads a buffer by the caps alone: it must hold
        // the caps' whole frame.
        if !reads_meta {
            assert!(
                buffer.size() >= info.size(),
                "frame {i}: {} bytes",
                buffer.size()
            );
            assert_eq!(
                stride,
                info.stride()[0] as usize,
                "frame {i} (meta: {has_meta})"
            );
        }
        let data = frame.plane_data(0).unwrap();
        for row in 0..48 {
            let pixels = &data[row * stride..row * stride + 64 * 4];
            assert!(
                pixels.iter().all(|&b| b == i as u8 + 1),
                "frame {i} row {row} at stride {stride}: {:?}",
                &pixels[..8]
            );
        }
    }
    assert_eq!(got.len(), usize::from(frames));
    strides.into_iter().collect()
}

#[test]
fn a_pool_whose_images_differ_only_in_row_stride_streams_each_at_its_own() {
    assert_eq!(
        strides_seen_by_downstream(true),
        [256, 320],
        "frames came at both buffers' strides to a downstream reading GstVideoMeta"
    );
}

#[test]
fn a_downstream_without_video_meta_gets_every_frame_in_the_caps_layout() {
    assert_eq!(strides_seen_by_downstream(false), [256]);
}

#[test]
fn hwtensorsrc_lends_a_buffer_its_producer_added_after_it_attached() {
    init();
    let (socket, listener) = listening();
    let frames = 6u8;
    let producer = std::thread::spawn(move || {
        let mut p = Producer::with_room(vec![bgrx(None), bgrx(None)], 3).unwrap();
        p.attach(listener.accept().unwrap().0).unwrap();
        // Every other frame goes in the buffer added after attach (appsink holds its preroll
        // buffer a while: a single buffer would wait on it).
        let added = p.add(bgrx(None)).unwrap();
        for i in 0..frames {
            let slot = match i % 2 {
                0 => p
                    .acquire_slot(added, Duration::from_secs(20))
                    .map(|()| added),
                _ => p.acquire(Duration::from_secs(20)),
            };
            let slot = slot.unwrap();
            let t = p.tensor(slot).as_tensor::<u8>().unwrap();
            t.map_write().unwrap().fill(i + 1);
            p.send(slot, Marker::of(FrameKind::Frame).meta(u64::from(i)))
                .unwrap();
        }
        end_of_stream(&mut p);
    });
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false max-buffers=1 enable-last-sample=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut seen = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        let buffer = sample.buffer().unwrap();
        let bytes = buffer.map_readable().unwrap();
        assert!(bytes.iter().all(|&b| b == bytes[0]), "a torn frame");
        let lent = buffer
            .peek_memory(0)
            .is_memory_type::<gst_allocators::FdMemory>();
        // Frames 1, 3, 5 came in the added buffer: lent as its own fd memory. (One in the
        // pool's own buffers may be copied when lending it would leave the producer none.)
        if bytes[0] % 2 == 1 {
            assert!(lent, "frame {} in the added buffer was copied", bytes[0]);
        }
        seen.push(bytes[0]);
    }
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
    assert_eq!(seen, (1..=frames).collect::<Vec<_>>());
}

/// The V4L2 capture device called `name` (`/sys/class/video4linux/*/name`), if this machine
/// has it; else a printed skip, or a failure under `HWTENSOR_TEST_REQUIRE_V4L2=1` (the test
/// command's DMA-BUF leg sets it in `scripts/dma-vm`, whose kernel has two vivid cameras; our
/// machines have none). GStreamer's `v4l2src` must be here too.
fn camera_or_skip(test: &str, name: &str) -> Option<String> {
    init();
    let device = std::fs::read_dir("/sys/class/video4linux")
        .into_iter()
        .flatten()
        .flatten()
        .find(|node| {
            std::fs::read_to_string(node.path().join("name")).is_ok_and(|n| n.trim() == name)
        })
        .map(|node| format!("/dev/{}", node.file_name().to_string_lossy()));
    let why = match (&device, gst::ElementFactory::find("v4l2src")) {
        (_, None) => "no v4l2src (apt package gstreamer1.0-plugins-good)".to_string(),
        (None, _) => format!("no V4L2 camera called {name}"),
        (Some(_), Some(_)) => return device,
    };
    let required = std::env::var("HWTENSOR_TEST_REQUIRE_V4L2").is_ok_and(|v| v == "1");
    assert!(!required, "{test}: HWTENSOR_TEST_REQUIRE_V4L2=1 but {why}");
    eprintln!("SKIPPED: {test} - {why}");
    None
}

/// The file of a DMA-BUF memory (as `file_of` gives a channel buffer's), or `None` for memory
/// of another kind.
fn camera_file(memory: &gst::MemoryRef) -> Option<(u64, u64)> {
    let dmabuf = memory.downcast_memory_ref::<gst_allocators::DmaBufMemory>()?;
    // SAFETY: the memory owns the fd and outlives this borrow.
    #[allow(unsafe_code)]
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dmabuf.fd()) };
    Some(file_at(fd))
}

/// A frame's bytes, hashed: what the camera tests compare on both sides of the channel.
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Streams `count` frames of `caps` from v4l2src on `device` (its own buffers exported as
/// DMA-BUFs, `io-mode=dmabuf`) through hwtensorsink to a Rust consumer, and checks the path
/// the issue names for cameras: every buffer is DMA-BUF memory in `memories` pieces (one per
/// plane for a multi-planar camera), every frame's bytes arrive as the camera gave them, and
/// the sink adopts the buffers (no copy): the consumer maps the camera's own memory (its first
/// plane's file, not one of the sink's pool, which in `scripts/dma-vm` is DMA-BUF too).
fn camera_frames_arrive_in_the_cameras_own_memory(device: &str, caps: &str, memories: usize) {
    let socket = socket_name();
    let count = 20;
    let pipeline = gst::parse::launch(&format!(
        "v4l2src device={device} io-mode=dmabuf num-buffers={count} ! {caps},framerate=30/1 ! \
         hwtensorsink name=sink socket={socket} wait-for-consumer=true"
    ))
    .unwrap();
    let sink = pipeline
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("sink")
        .unwrap();
    // What the camera gave, frame by frame, read where the sink receives it: how many
    // memories, whether each is a DMA-BUF, and the bytes.
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = sent.clone();
    sink.static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(b) = info.buffer() {
                let files = (0..b.n_memory())
                    .map(|i| camera_file(b.peek_memory(i)))
                    .collect::<Vec<_>>();
                // Memory by memory: mapping a buffer of several whole would merge them into
                // one of system memory, which replaces the camera's in the buffer.
                let bytes: Vec<u8> = (0..b.n_memory())
                    .flat_map(|i| b.peek_memory(i).map_readable().unwrap().to_vec())
                    .collect();
                record.lock().unwrap().push((files, digest(&bytes)));
            }
            gst::PadProbeReturn::Ok
        });
    let reader = frames_until_eos(&socket, |frame, _| {
        let bytes = frame.tensor().as_tensor::<u8>().unwrap().to_vec().unwrap();
        (files_of(frame.tensor()), digest(&bytes))
    });
    run_to_eos(&pipeline, Duration::from_secs(120));
    let copies = sink.property::<u64>("copies");
    pipeline.set_state(gst::State::Null).unwrap();
    let got = reader.join().unwrap();
    let sent = sent.lock().unwrap();
    assert_eq!(got.len(), count, "every frame the camera gave arrived");
    for (i, (files, _)) in sent.iter().enumerate() {
        assert_eq!(files.len(), memories, "the camera's buffer {i}: {files:?}");
        assert!(
            files.iter().all(Option::is_some),
            "the camera's buffer {i} is not all DMA-BUF memory"
        );
    }
    for (i, (files, hash)) in got.iter().enumerate() {
        assert_eq!(*hash, sent[i].1, "frame {i}'s bytes");
        let camera: Vec<_> = sent[i].0.iter().flatten().copied().collect();
        assert_eq!(
            *files, camera,
            "frame {i} is not in the camera's own buffers"
        );
    }
    assert_eq!(copies, 0, "frames the sink copied");
}

#[test]
fn hwtensorsink_adopts_a_single_planar_cameras_dmabufs_and_its_consumer_reads_them() {
    let test = "hwtensorsink_adopts_a_single_planar_cameras_dmabufs_and_its_consumer_reads_them";
    if let Some(camera) = camera_or_skip(test, "vivid-000-vid-cap") {
        let caps = "video/x-raw,format=YUY2,width=640,height=480";
        camera_frames_arrive_in_the_cameras_own_memory(&camera, caps, 1);
    }
}

/// NV12M: luma and chroma each in a DMA-BUF of its own, which the channel hands off with an fd
/// per plane.
#[test]
fn hwtensorsink_adopts_a_multi_planar_cameras_buffer_per_plane_and_its_consumer_reads_them() {
    let test =
        "hwtensorsink_adopts_a_multi_planar_cameras_buffer_per_plane_and_its_consumer_reads_them";
    if let Some(camera) = camera_or_skip(test, "vivid-001-vid-cap") {
        let caps = "video/x-raw,format=NV12,width=640,height=480";
        camera_frames_arrive_in_the_cameras_own_memory(&camera, caps, 2);
    }
}

/// A buffer of `size` bytes of memfd memory (GStreamer fd memory) whose `GstVideoMeta` says
/// BGRx 64x48 at `stride`: upstream's word for a geometry the memory may not hold.
fn fd_buffer_with_meta(size: usize, stride: i32) -> gst::Buffer {
    let fd = rustix::fs::memfd_create("meta-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, size as u64).unwrap();
    fd_frame(&fd, size, stride, 0)
}

/// `appsrc ! hwtensorsink name=sink` (BGRx 64x48 at 30/1, `sink_props` added), playing: the
/// socket, the pipeline and its appsrc, for tests that bring upstream's own buffers.
fn appsrc_into_sink(sink_props: &str) -> (String, gst::Bin, gst_app::AppSrc) {
    init();
    let socket = socket_name();
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src format=time caps=video/x-raw,format=BGRx,width=64,height=48,\
         framerate=30/1 ! hwtensorsink name=sink socket={socket} wait-for-consumer=true \
         {sink_props}"
    ))
    .unwrap()
    .downcast::<gst::Bin>()
    .unwrap();
    let src = pipeline
        .by_name("src")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    (socket, pipeline, src)
}

#[test]
fn hwtensorsink_refuses_a_frame_whose_video_meta_reaches_past_its_fd_memory() {
    let (socket, pipeline, src) = appsrc_into_sink("");
    let reader = frames_until_eos(&socket, |_, _| ());
    // 12288 bytes hold the frame at rows of 256; rows of 1 MiB reach 47 MiB past them.
    src.push_buffer(fd_buffer_with_meta(64 * 48 * 4, 1 << 20))
        .unwrap();
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(20));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("a frame past its memory must end the stream with an error: {msg:?}");
    };
    let text = e.error().to_string();
    assert!(text.contains("reaches past the 12288 bytes"), "{text}");
    pipeline.set_state(gst::State::Null).unwrap();
    drop(reader); // its consumer sees the producer leave; not joined (it unwraps the error)
}

/// How many times the storm's producer attaches and leaves: enough to overflow the streaming
/// thread's stack when each reconnect nested a call (8581 nested frames crashed it).
const RECONNECT_STORM: usize = 10_000;

#[test]
fn hwtensorsrc_follows_a_storm_of_reconnects_without_growing_its_stack() {
    init();
    let (socket, listener) = listening();
    let storm = std::thread::spawn(move || {
        // Each round: a new channel whose only frame says "reconnect", left at once.
        for i in 0..RECONNECT_STORM {
            let mut producer = Producer::new(vec![bgrx(None)]).unwrap();
            producer.attach(listener.accept().unwrap().0).unwrap();
            let slot = producer.acquire(Duration::from_secs(20)).unwrap();
            producer
                .send(slot, Marker::of(FrameKind::CapsChange).meta(i as u64))
                .unwrap();
        }
        rust_producer(listener, PixelFormat::Bgrx, 1);
    });
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false max-buffers=1"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let sample = sink.try_pull_sample(gst::ClockTime::from_seconds(120));
    let frame = sample.expect("the frame after the storm reaches downstream");
    let bytes = frame.buffer().unwrap().map_readable().unwrap().to_vec();
    assert!(
        bytes.iter().all(|&b| b == 0),
        "the storm's last channel's frame 0"
    );
    run_to_eos(pipeline.upcast_ref(), Duration::from_secs(60));
    pipeline.set_state(gst::State::Null).unwrap();
    storm.join().unwrap();
}

#[test]
fn hwtensorsinks_consumers_read_only_unless_consumers_write_is_set() {
    init();
    for consumers_write in [false, true] {
        let socket = socket_name();
        let pipeline = gst::parse::launch(&format!(
            "videotestsrc num-buffers=1000 is-live=true ! \
             video/x-raw,format=GRAY8,width=64,height=48 ! \
             hwtensorsink name=sink socket={socket} consumers-write={consumers_write} \
             allow-uids=65534,65533"
        ))
        .unwrap()
        .downcast::<gst::Bin>()
        .unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let sink = pipeline.by_name("sink").unwrap();
        assert_eq!(sink.property::<String>("allow-uids"), "65534,65533");
        let addr = abstract_addr(&socket);
        let stream = loop {
            match UnixStream::connect_addr(&addr) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let asked = Consumer::connect_with(stream, CONNECT_TIMEOUT, Lending::Write);
        match consumers_write {
            true => assert_eq!(asked.unwrap().lending(), Lending::Write),
            false => {
                let err = asked.unwrap_err();
                assert!(matches!(err, hwtensor::Error::NotPermitted(_)), "{err:?}");
            }
        }
        let mut reader = consumer_of(&addr);
        let frame = reader.recv(Wait::For(Duration::from_secs(20))).unwrap();
        let t = frame.tensor().as_tensor::<u8>().unwrap();
        assert!(matches!(
            t.map_write(),
            Err(hwtensor::Error::AccessDenied { .. })
        ));
        drop(frame);
        pipeline.set_state(gst::State::Null).unwrap();
    }
}

/// Bytes between rows that are no pixel: what a reader with the wrong layout would see.
const ROW_PADDING: u8 = 0xee;

/// A buffer over a duplicate of memfd `fd` (every pixel byte `fill`, the padding after each
/// row [`ROW_PADDING`]), BGRx 64x48 at rows `stride` apart, as its `GstVideoMeta` says.
fn fd_frame(fd: &std::os::fd::OwnedFd, size: usize, stride: i32, fill: u8) -> gst::Buffer {
    use std::os::fd::IntoRawFd;
    let mut bytes = vec![ROW_PADDING; size];
    for row in bytes.chunks_mut(stride as usize).take(48) {
        let pixels = row.len().min(256);
        row[..pixels].fill(fill);
    }
    rustix::io::pwrite(fd, &bytes, 0).unwrap();
    let dup = fd.try_clone().unwrap();
    let allocator = gst_allocators::FdAllocator::new();
    // SAFETY: a duplicate of a memfd of `size` bytes, given to the memory, which closes it.
    #[allow(unsafe_code)]
    let memory =
        unsafe { allocator.alloc(dup.into_raw_fd(), size, gst_allocators::FdMemoryFlags::NONE) }
            .unwrap();
    let mut buffer = gst::Buffer::new();
    let b = buffer.get_mut().unwrap();
    b.append_memory(memory);
    b.set_pts(gst::ClockTime::ZERO);
    gst_video::VideoMeta::add_full(
        b,
        gst_video::VideoFrameFlags::empty(),
        gst_video::VideoFormat::Bgrx,
        64,
        48,
        &[0],
        &[stride],
    )
    .unwrap();
    buffer
}

/// Whether every pixel byte of the 64x48 BGRx image `t` (at its own row stride) is `value`.
fn image_is(t: &TensorDyn, value: u8) -> bool {
    let stride = t.image_info().unwrap().row_stride;
    let bytes = t.as_tensor::<u8>().unwrap().to_vec().unwrap();
    let rows = bytes.len().div_ceil(stride);
    rows >= 48
        && (0..48).all(|r| {
            let row = &bytes[r * stride..(r * stride + 256).min(bytes.len())];
            row.len() == 256 && row.iter().all(|&b| b == value)
        })
}

#[test]
fn the_same_fd_brought_again_with_another_row_stride_is_read_with_its_new_layout() {
    let (socket, pipeline, src) = appsrc_into_sink("");
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let reader = frames_until_eos(&socket, move |frame, _| {
        let t = frame.tensor();
        let seen = (image_is(t, 1), image_is(t, 2));
        seen_tx.send(()).unwrap();
        seen
    });
    let size = 320 * 48;
    let flags = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING;
    let fd = rustix::fs::memfd_create("layout-test", flags).unwrap();
    rustix::fs::ftruncate(&fd, size as u64).unwrap();
    src.push_buffer(fd_frame(&fd, size, 256, 1)).unwrap();
    seen_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    // Upstream rewrites its buffer (the consumer is done with it) at rows of 320 bytes.
    std::thread::sleep(Duration::from_millis(100));
    src.push_buffer(fd_frame(&fd, size, 320, 2)).unwrap();
    src.end_of_stream().unwrap();
    run_to_eos(pipeline.upcast_ref(), Duration::from_secs(20));
    let copies = pipeline.by_name("sink").unwrap().property::<u64>("copies");
    pipeline.set_state(gst::State::Null).unwrap();
    let seen = reader.join().unwrap();
    assert_eq!(seen, [(true, false), (false, true)]);
    // The first frame went out in upstream's own buffer; the second, whose layout that
    // buffer's slot does not describe, as a copy.
    assert_eq!(copies, 1);
}

/// `appsrc ! hwtensorsink` with `sink_props`, playing, and a memfd upstream brings again and
/// again as its own fd buffer, with a consumer attached that keeps every frame.
fn sink_fed_one_fd_buffer(sink_props: &str) -> (gst::Bin, gst_app::AppSrc, std::os::fd::OwnedFd) {
    let (socket, pipeline, src) = appsrc_into_sink(sink_props);
    drop(hoarding_consumer(&socket)); // it ends on its own, 2 s after the last frame
    let flags = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING;
    let fd = rustix::fs::memfd_create("held-test", flags).unwrap();
    rustix::fs::ftruncate(&fd, 64 * 48 * 4).unwrap();
    (pipeline, src, fd)
}

#[test]
fn a_sink_that_drops_when_full_drops_a_frame_in_an_adopted_buffer_a_consumer_still_holds() {
    let (pipeline, src, fd) = sink_fed_one_fd_buffer("when-full=drop");
    let sink = pipeline.by_name("sink").unwrap();
    src.push_buffer(fd_frame(&fd, 64 * 48 * 4, 256, 1)).unwrap();
    // The consumer keeps the first; the second, in the same buffer, must be dropped.
    src.push_buffer(fd_frame(&fd, 64 * 48 * 4, 256, 2)).unwrap();
    src.end_of_stream().unwrap();
    run_to_eos(pipeline.upcast_ref(), Duration::from_secs(20));
    assert_eq!(sink.property::<u64>("dropped"), 1);
    assert_eq!(sink.property::<u64>("copies"), 0);
    pipeline.set_state(gst::State::Null).unwrap();
}

#[test]
fn stopping_a_sink_that_waits_for_an_adopted_buffer_takes_milliseconds() {
    let (pipeline, src, fd) = sink_fed_one_fd_buffer("timeout=30000");
    let sink = pipeline.by_name("sink").unwrap();
    src.push_buffer(fd_frame(&fd, 64 * 48 * 4, 256, 1)).unwrap();
    src.push_buffer(fd_frame(&fd, 64 * 48 * 4, 256, 2)).unwrap();
    // The second frame waits (30 s at most) for the consumer that keeps the first.
    std::thread::sleep(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let _ = sink.property::<u32>("consumers");
    let read = started.elapsed();
    let started = std::time::Instant::now();
    pipeline.set_state(gst::State::Null).unwrap();
    let stopped = started.elapsed();
    println!("property read while waiting: {read:?}; set_state(NULL): {stopped:?}");
    assert!(
        read < Duration::from_millis(100),
        "a property read took {read:?}"
    );
    assert!(
        stopped < Duration::from_secs(1),
        "stopping took {stopped:?}"
    );
}

#[test]
fn stopping_a_source_that_reconnects_to_a_silent_producer_takes_milliseconds() {
    init();
    let (socket, listener) = listening();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let producer = std::thread::spawn(move || {
        let mut producer = Producer::new(vec![bgrx(None)]).unwrap();
        producer.attach(listener.accept().unwrap().0).unwrap();
        let slot = producer.acquire(Duration::from_secs(20)).unwrap();
        producer
            .send(slot, Marker::of(FrameKind::CapsChange).meta(0))
            .unwrap();
        // The source connects again; nothing answers (a sink without caps yet).
        held_tx.send(listener.accept().unwrap().0).unwrap();
    });
    let (pipeline, _sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} timeout=30000 is-live=false ! appsink name=out sync=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let _silent = held_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = std::time::Instant::now();
    pipeline.set_state(gst::State::Null).unwrap();
    let stopped = started.elapsed();
    println!("set_state(NULL) while reconnecting: {stopped:?}");
    assert!(
        stopped < Duration::from_secs(1),
        "stopping took {stopped:?}"
    );
    producer.join().unwrap();
}

#[test]
fn a_frame_in_an_added_buffer_of_another_picture_is_an_error_not_a_short_buffer() {
    init();
    let (socket, listener) = listening();
    let producer = std::thread::spawn(move || {
        let mut p = Producer::with_room(vec![bgrx(None), bgrx(None)], 3).unwrap();
        p.attach(listener.accept().unwrap().0).unwrap();
        let small = TensorDyn::image(
            &ImageSpec::new(PixelFormat::Bgrx, 8, 8),
            DType::U8,
            Some(TensorMemory::Shm),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        let slot = p.add(small).unwrap();
        p.acquire_slot(slot, Duration::from_secs(20)).unwrap();
        p.send(slot, Marker::of(FrameKind::Frame).meta(0)).unwrap();
        let _ = p.acquire(Duration::from_secs(2)); // stays until the source is done
    });
    let (pipeline, sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false"
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(20));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("a frame of another picture must end the stream with an error: {msg:?}");
    };
    let text = e.error().to_string();
    assert!(
        text.contains("8x8 bgrx in a channel of 64x48 bgrx"),
        "{text}"
    );
    assert!(
        sink.try_pull_sample(gst::ClockTime::ZERO).is_none(),
        "a buffer was pushed"
    );
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
}

#[test]
fn the_producers_frame_rate_and_colorimetry_cross_the_channel_into_hwtensorsrcs_caps() {
    init();
    let socket = socket_name();
    let producer = gst::parse::launch(&format!(
        "videotestsrc num-buffers=30 ! \
         video/x-raw,format=I420,width=64,height=48,framerate=30/1,colorimetry=bt709 ! \
         hwtensorsink socket={socket} wait-for-consumer=true"
    ))
    .unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    // An encoder or videorate needs the frame rate: a capsfilter asking for it negotiates.
    let got = samples(&format!(
        "hwtensorsrc socket={socket} is-live=false ! video/x-raw,framerate=30/1 ! \
         appsink name=out sync=false"
    ));
    run_to_eos(&producer, Duration::from_secs(20));
    producer.set_state(gst::State::Null).unwrap();
    assert!(!got.is_empty(), "no frame passed the capsfilter");
    let caps = got[0].caps().unwrap();
    let s = caps.structure(0).unwrap();
    assert_eq!(
        s.get::<gst::Fraction>("framerate").unwrap(),
        gst::Fraction::new(30, 1)
    );
    assert_eq!(s.get::<String>("colorimetry").unwrap(), "bt709");
}

#[test]
fn tiled_frames_are_refused_when_hwtensorsrc_negotiates_not_lent_as_linear() {
    init();
    let (socket, listener) = listening();
    let producer = std::thread::spawn(move || {
        // Intel's Y-tiling: the buffer holds tiles, not rows.
        let tiled = bgrx(None)
            .with_drm_modifier(hwtensor::DrmModifier(0x0100_0000_0000_0002))
            .unwrap();
        let mut p = Producer::new(vec![tiled]).unwrap();
        p.attach(listener.accept().unwrap().0).unwrap();
        let _ = p.acquire(Duration::from_secs(2));
    });
    let (pipeline, _sink) = with_appsink(&format!(
        "hwtensorsrc socket={socket} is-live=false ! appsink name=out sync=false"
    ));
    let _ = pipeline.set_state(gst::State::Playing);
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(20));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("tiled frames must be refused: {msg:?}");
    };
    let text = e.error().to_string();
    assert!(text.contains("tiled") && text.contains("linear"), "{text}");
    pipeline.set_state(gst::State::Null).unwrap();
    producer.join().unwrap();
}
