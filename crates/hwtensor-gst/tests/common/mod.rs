//! What the pipeline tests share: the plugin, gst-launch-1.0 children, socket names.

#![allow(dead_code)] // each test file uses a part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gst::prelude::*;

/// Registers the elements in this process (once).
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        gst::init().unwrap();
        gsthwtensor::plugin_register_static().unwrap();
    });
}

/// The folder holding the built plugin (`libgsthwtensor.so`), for gst-launch-1.0 children.
pub fn plugin_dir() -> PathBuf {
    // Test binaries live in target/<profile>/deps; the plugin in target/<profile>.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    assert!(
        dir.join("libgsthwtensor.so").exists(),
        "no libgsthwtensor.so in {}: build the plugin first (cargo build -p hwtensor-gst)",
        dir.display()
    );
    dir
}

/// A `gst-launch-1.0` (or other GStreamer tool) command that finds the plugin.
pub fn gst_tool(tool: &str) -> Command {
    let mut c = Command::new(tool);
    c.env("GST_PLUGIN_PATH", plugin_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A `gst-launch-1.0 -e` child running `pipeline`.
pub fn launch(pipeline: &str) -> Child {
    let mut c = gst_tool("gst-launch-1.0");
    c.arg("-q").args(pipeline.split_whitespace());
    c.spawn()
        .expect("gst-launch-1.0 runs (apt package gstreamer1.0-tools)")
}

/// Waits for `child` at most `limit`; kills it and fails the test past that.
pub fn wait_output(mut child: Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "a gst-launch-1.0 child ran past {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// An abstract socket name no other test (or test run) uses.
pub fn socket_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "@hwtensor-gst-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The message that ends `pipeline` (an error or end of stream), waited for at most `limit`.
pub fn ending(pipeline: &gst::Element, limit: Duration) -> gst::Message {
    pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_nseconds(limit.as_nanos() as u64),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .unwrap_or_else(|| panic!("the pipeline did not end within {limit:?}"))
}

/// Runs `pipeline` in this process to its end; the first error message fails the test.
pub fn run_to_eos(pipeline: &gst::Element, limit: Duration) {
    pipeline.set_state(gst::State::Playing).unwrap();
    let msg = ending(pipeline, limit);
    if let gst::MessageView::Error(e) = msg.view() {
        panic!("pipeline error: {} ({:?})", e.error(), e.debug());
    }
    pipeline.set_state(gst::State::Null).unwrap();
}

/// The bytes `videotestsrc` makes for `caps`: the reference each carried frame is compared with.
pub fn reference_frames(caps: &str, frames: u32) -> Vec<u8> {
    samples(&format!(
        "videotestsrc num-buffers={frames} pattern=ball ! {caps} ! appsink name=out sync=false"
    ))
    .iter()
    .flat_map(|s| s.buffer().unwrap().map_readable().unwrap().to_vec())
    .collect()
}

/// `pipeline` parsed, with its appsink named `out`.
pub fn with_appsink(pipeline: &str) -> (gst::Bin, gst_app::AppSink) {
    let pipeline = gst::parse::launch(pipeline)
        .unwrap()
        .downcast::<gst::Bin>()
        .unwrap();
    let sink = pipeline
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    (pipeline, sink)
}

/// Plays `pipeline` (with an appsink named `out`) to its end and returns each sample.
pub fn samples(pipeline: &str) -> Vec<gst::Sample> {
    samples_reading_meta(pipeline, false)
}

/// [`samples`], the appsink saying in its allocation answer that it reads `GstVideoMeta`
/// where `reads_meta` (as videoconvert and most elements do; appsink alone does not).
pub fn samples_reading_meta(pipeline: &str, reads_meta: bool) -> Vec<gst::Sample> {
    let (pipeline, sink) = with_appsink(pipeline);
    if reads_meta {
        let pad = sink.static_pad("sink").unwrap();
        pad.add_probe(gst::PadProbeType::QUERY_DOWNSTREAM, |_, info| {
            if let Some(gst::PadProbeData::Query(q)) = info.data.as_mut() {
                if let gst::QueryViewMut::Allocation(a) = q.view_mut() {
                    a.add_allocation_meta::<gst_video::VideoMeta>(None);
                }
            }
            gst::PadProbeReturn::Ok
        });
    }
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut all = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        all.push(sample);
    }
    pipeline.set_state(gst::State::Null).unwrap();
    all
}

/// The process GPU device, or `None` after printing `SKIPPED: <test> - <reason>`; a failure
/// instead under `HWTENSOR_TEST_REQUIRE_GPU=1` (lavapipe is a real device in CI).
pub fn gpu_or_skip(test: &str) -> Option<&'static hwtensor::gpu::GpuDevice> {
    match hwtensor::gpu::device() {
        Ok(d) => Some(d),
        Err(e) if std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("{test}: HWTENSOR_TEST_REQUIRE_GPU=1 but there is no GPU device: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {test} - {e}");
            None
        }
    }
}
