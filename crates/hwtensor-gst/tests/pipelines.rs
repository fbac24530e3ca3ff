//! hwtensorsink and hwtensorsrc in real pipelines: GStreamer 1.22 on both sides of a channel,
//! two processes, every frame's bytes compared with what the source made.

mod common;

use std::time::Duration;

use common::*;
use std::str::FromStr;

use gst::prelude::*;

/// Enough frames that the pool of three is reused several times.
const FRAMES: u32 = 10;
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn gst_inspect_lists_both_elements() {
    let out = gst_tool("gst-inspect-1.0")
        .arg("hwtensor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("hwtensorsink") && text.contains("hwtensorsrc"),
        "{text}"
    );
}

/// Publishes `FRAMES` frames of `caps` from this process through hwtensorsink to a
/// gst-launch-1.0 child reading them with hwtensorsrc into a file; returns what the child
/// wrote and the sink's copy counter.
fn across_processes(caps: &str) -> (Vec<u8>, u64) {
    across_processes_via(caps, "")
}

/// [`across_processes`] with `between` (elements and `!`s) before the sink.
fn across_processes_via(caps: &str, between: &str) -> (Vec<u8>, u64) {
    init();
    let socket = socket_name();
    let out = std::env::temp_dir().join(format!("{}.raw", socket.trim_start_matches('@')));
    let producer = gst::parse::launch(&format!(
        "videotestsrc num-buffers={FRAMES} pattern=ball ! {caps} ! {between} \
         hwtensorsink name=sink socket={socket} wait-for-consumer=true"
    ))
    .unwrap()
    .downcast::<gst::Bin>()
    .unwrap();
    let sink = producer.by_name("sink").unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let consumer = launch(&format!(
        "hwtensorsrc socket={socket} is-live=false ! filesink location={}",
        out.display()
    ));
    let bytes = consumed(producer.upcast_ref(), consumer, &out);
    (bytes, sink.property::<u64>("copies"))
}

/// Runs `producer` to its end, waits for `consumer` (writing into `out`) to succeed, and
/// returns what it wrote (the file removed).
fn consumed(
    producer: &gst::Element,
    consumer: std::process::Child,
    out: &std::path::Path,
) -> Vec<u8> {
    run_to_eos(producer, LIMIT);
    let done = wait_output(consumer, LIMIT);
    assert!(
        done.status.success(),
        "the consumer failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let bytes = std::fs::read(out).unwrap();
    std::fs::remove_file(out).unwrap();
    bytes
}

/// Carries `caps` across two processes and checks every byte and that nothing was copied.
fn carried_zero_copy(caps: &str) {
    let (got, copies) = across_processes(caps);
    assert!(
        got == reference_frames(caps, FRAMES),
        "{caps}: frames differ"
    );
    assert_eq!(
        copies, 0,
        "{caps}: videotestsrc wrote into the channel's own pool"
    );
}

#[test]
fn i420_720p_crosses_two_processes_byte_for_byte_without_a_copy() {
    carried_zero_copy("video/x-raw,format=I420,width=1280,height=720");
}

#[test]
fn nv12_1080p_crosses_two_processes_byte_for_byte_without_a_copy() {
    carried_zero_copy("video/x-raw,format=NV12,width=1920,height=1080");
}

#[test]
fn rgba_1366x768_crosses_two_processes_byte_for_byte_without_a_copy() {
    carried_zero_copy("video/x-raw,format=RGBA,width=1366,height=768");
}

#[test]
fn uyvy_vga_crosses_two_processes_byte_for_byte_without_a_copy() {
    carried_zero_copy("video/x-raw,format=UYVY,width=640,height=480");
}

/// GStreamer's default I420 layout at 1364x768: chroma rows padded to 684 bytes.
const GST_1364: I420Layout = I420Layout {
    luma: 1364,
    chroma: 684,
    luma_rows: 768,
};

#[test]
fn i420_at_1364_pixels_keeps_gstreamers_padded_chroma_rows_without_a_copy() {
    // GStreamer pads I420 rows to 4 bytes: at 1364 pixels its chroma rows are 684 bytes apart
    // where half the luma stride is 682. The channel's images take that chroma stride, so even
    // an element that ignores GstVideoMeta writes where consumers read. (Rows are compared
    // without their padding, which no one writes.)
    let caps = "video/x-raw,format=I420,width=1364,height=768";
    let (got, copies) = across_processes(caps);
    assert_eq!(copies, 0);
    assert_same_i420(&got, caps, (1364, 768), &GST_1364, &GST_1364);
}

/// An I420 layout: luma stride, chroma stride, and the rows the luma plane takes (GStreamer
/// rounds an odd height up for it).
struct I420Layout {
    luma: usize,
    chroma: usize,
    luma_rows: usize,
}

impl I420Layout {
    fn frame_bytes(&self, h: usize) -> usize {
        self.luma * self.luma_rows + 2 * self.chroma * h.div_ceil(2)
    }
}

/// Checks every row of every plane of `got` (frames in `ours`) against the frames GStreamer
/// makes for `caps` (in `theirs`), `w` x `h` pixels.
fn assert_same_i420(
    got: &[u8],
    caps: &str,
    (w, h): (usize, usize),
    ours: &I420Layout,
    theirs: &I420Layout,
) {
    let want = reference_frames(caps, FRAMES);
    let (a_len, b_len) = (ours.frame_bytes(h), theirs.frame_bytes(h));
    assert_eq!(got.len(), a_len * FRAMES as usize);
    for f in 0..FRAMES as usize {
        let (a, b) = (&got[f * a_len..][..a_len], &want[f * b_len..][..b_len]);
        for y in 0..h {
            assert!(
                a[y * ours.luma..][..w] == b[y * theirs.luma..][..w],
                "frame {f}: luma row {y}"
            );
        }
        let rows = h.div_ceil(2);
        for plane in 0..2 {
            let at_a = ours.luma * ours.luma_rows + plane * ours.chroma * rows;
            let at_b = theirs.luma * theirs.luma_rows + plane * theirs.chroma * rows;
            for y in 0..rows {
                let same =
                    a[at_a + y * ours.chroma..][..w / 2] == b[at_b + y * theirs.chroma..][..w / 2];
                assert!(same, "frame {f}: chroma plane {plane} row {y}");
            }
        }
    }
}

#[test]
fn a_layout_unlike_gstreamers_default_is_written_through_video_meta_without_a_copy() {
    // 1364x767: GStreamer's I420 puts the chroma planes after 768 luma rows (it rounds an odd
    // height up), hwtensor after 767, with tight 682-byte chroma rows. videotestsrc asks for
    // GstVideoMeta, so it takes the pool and writes the channel's layout itself. filesink
    // reads no GstVideoMeta: hwtensorsrc hands it each frame copied into the caps' own layout
    // (a buffer at the channel's would be 2046 bytes short of what the caps promise).
    let caps = "video/x-raw,format=I420,width=1364,height=767";
    let (got, copies) = across_processes(caps);
    assert_eq!(copies, 0);
    let theirs = I420Layout {
        luma: 1364,
        chroma: 684,
        luma_rows: 768,
    };
    assert_same_i420(&got, caps, (1364, 767), &theirs, &theirs);
}

#[test]
fn a_frame_upstream_made_in_its_own_memory_is_copied_once_and_counted() {
    // identity drop-allocation keeps the sink's pool from upstream: every frame is copied,
    // plane by plane, into the channel's buffers.
    let caps = "video/x-raw,format=I420,width=1364,height=768";
    let (got, copies) = across_processes_via(caps, "identity drop-allocation=true !");
    assert_eq!(copies, u64::from(FRAMES));
    assert_same_i420(&got, caps, (1364, 768), &GST_1364, &GST_1364);
}

#[test]
fn a_pool_laid_out_unlike_gstreamers_default_refuses_a_user_without_video_meta() {
    init();
    // An odd height: GStreamer rounds I420's luma plane up to an even row count, hwtensor does
    // not, so the channel's layout is its own and only a user of GstVideoMeta can write it.
    let caps = gst::Caps::from_str("video/x-raw,format=I420,width=1364,height=767,framerate=30/1")
        .unwrap();
    let sink = gst::ElementFactory::make("hwtensorsink")
        .property("socket", socket_name())
        .build()
        .unwrap();
    sink.set_state(gst::State::Paused)
        .unwrap_or_else(|_| panic!("sink starts"));
    let mut query = gst::query::Allocation::new(Some(&caps), true);
    assert!(sink.static_pad("sink").unwrap().query(&mut query));
    let (pool, size, min, max) = query.allocation_pools().into_iter().next().unwrap();
    let pool = pool.expect("the sink offers its pool");
    let mut config = pool.config();
    config.set_params(Some(&caps), size, min, max);
    assert!(
        pool.set_config(config).is_err(),
        "no GstVideoMeta asked for"
    );
    let mut config = pool.config();
    config.set_params(Some(&caps), size, min, max);
    config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
    assert!(pool.set_config(config).is_ok());
    sink.set_state(gst::State::Null).unwrap();
}

#[test]
fn caps_the_channel_cannot_carry_are_refused_at_negotiation_naming_the_format() {
    init();
    let err = gst::parse::launch(&format!(
        "videotestsrc num-buffers=1 ! video/x-raw,format=AYUV ! hwtensorsink socket={}",
        socket_name()
    ))
    .unwrap_err();
    assert!(err.to_string().contains("AYUV"), "{err}");
}

#[test]
fn a_producer_killed_mid_stream_ends_the_consumer_with_an_error_that_says_so() {
    init();
    let socket = socket_name();
    let mut producer = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,format=I420,width=320,height=240,framerate=60/1 ! \
         hwtensorsink socket={socket}"
    ));
    let consumer = gst::parse::launch(&format!(
        "hwtensorsrc name=src socket={socket} timeout=20000 ! fakesink"
    ))
    .unwrap()
    .downcast::<gst::Bin>()
    .unwrap();
    let src = consumer.by_name("src").unwrap();
    consumer.set_state(gst::State::Playing).unwrap();
    let bus = consumer.bus().unwrap();
    let started = std::time::Instant::now();
    while src.property::<u64>("frames") < 5 {
        assert!(started.elapsed() < LIMIT, "no frames came");
        if let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
            panic!("{m:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    producer.kill().unwrap();
    producer.wait().unwrap();
    // The consumer ends within 10 s of its producer's death.
    let msg = ending(consumer.upcast_ref(), Duration::from_secs(10));
    let gst::MessageView::Error(e) = msg.view() else {
        panic!("a killed producer must not look like end of stream: {msg:?}");
    };
    assert!(
        e.error().to_string().contains("producer left"),
        "{}",
        e.error()
    );
    consumer.set_state(gst::State::Null).unwrap();
}

#[test]
fn a_consumer_started_before_its_producer_waits_for_it_and_gets_every_frame() {
    init();
    let socket = socket_name();
    let out = std::env::temp_dir().join(format!("{}.raw", socket.trim_start_matches('@')));
    let consumer = launch(&format!(
        "hwtensorsrc socket={socket} is-live=false ! filesink location={}",
        out.display()
    ));
    std::thread::sleep(Duration::from_millis(300));
    let caps = "video/x-raw,format=GRAY8,width=64,height=48";
    let producer = gst::parse::launch(&format!(
        "videotestsrc num-buffers={FRAMES} pattern=ball ! {caps} ! \
         hwtensorsink socket={socket} wait-for-consumer=true"
    ))
    .unwrap();
    assert!(consumed(&producer, consumer, &out) == reference_frames(caps, FRAMES));
}

#[test]
fn a_dmabuf_pool_is_made_where_a_dma_heap_exists_and_refused_by_name_where_not() {
    init();
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=2 ! video/x-raw,format=NV12,width=64,height=48 ! \
         hwtensorsink socket={} memory=dmabuf",
        socket_name()
    ))
    .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let msg = ending(pipeline.upcast_ref(), Duration::from_secs(20));
    let heap = std::path::Path::new("/dev/dma_heap").exists();
    match msg.view() {
        gst::MessageView::Eos(_) => assert!(heap, "a DMA-BUF pool without a DMA heap"),
        gst::MessageView::Error(e) => {
            assert!(!heap, "{}", e.error());
            let text = e.error().to_string().to_lowercase();
            assert!(text.contains("dma"), "{text}");
        }
        _ => unreachable!(),
    }
    pipeline.set_state(gst::State::Null).unwrap();
}

#[test]
fn an_auto_pool_falls_back_to_shared_memory_and_carries_frames() {
    init();
    let socket = socket_name();
    let caps = "video/x-raw,format=NV12,width=64,height=48";
    let out = std::env::temp_dir().join(format!("{}.raw", socket.trim_start_matches('@')));
    let producer = gst::parse::launch(&format!(
        "videotestsrc num-buffers={FRAMES} pattern=ball ! {caps} ! \
         hwtensorsink socket={socket} memory=auto wait-for-consumer=true"
    ))
    .unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let consumer = launch(&format!(
        "hwtensorsrc socket={socket} is-live=false ! filesink location={} buffer-mode=unbuffered",
        out.display()
    ));
    assert!(consumed(&producer, consumer, &out) == reference_frames(caps, FRAMES));
}
