//! What the elements add to a frame on its way through GStreamer. The payload's marker (end of
//! stream, caps change, PTS and duration) is the core's contract,
//! [`hwtensor::stream::Marker`], which any Rust, C or Python consumer reads; this module keeps
//! what only GStreamer has: on the way out of the channel, `hwtensorsrc` stamps each buffer
//! with when the frame was sent and when it was received ([`SENT_TIME_CAPS`],
//! [`RECEIVED_TIME_CAPS`], [`stamp`]).

use std::sync::LazyLock;

/// The caps of the `GstReferenceTimestampMeta` that `hwtensorsrc` puts on each buffer: the
/// time the producer sent the frame, on `CLOCK_MONOTONIC` (one clock for every process of the
/// machine), so a pipeline can measure how long the frame took to reach it.
pub const SENT_TIME_CAPS: &str = "timestamp/x-hwtensor-monotonic";

/// The caps of the second `GstReferenceTimestampMeta` on each buffer of `hwtensorsrc`: when it
/// received the frame from the channel, on the same clock. Its distance from the send time is
/// the channel's part of the latency, and from there to a downstream element the pipeline's,
/// both of the same frame: a split a noisy machine skews far less than a comparison of separate
/// runs.
pub const RECEIVED_TIME_CAPS: &str = "timestamp/x-hwtensor-received";

/// The two stamp caps as caps objects. One object each for the process: a stamp this process
/// added refers to it, so [`is_stamp`] knows one by a pointer comparison.
static SENT_TIME: LazyLock<gst::Caps> =
    LazyLock::new(|| gst::Caps::new_empty_simple(SENT_TIME_CAPS));
static RECEIVED_TIME: LazyLock<gst::Caps> =
    LazyLock::new(|| gst::Caps::new_empty_simple(RECEIVED_TIME_CAPS));

/// Puts the send and receive times (ns, `CLOCK_MONOTONIC`) on `buffer` as the two
/// `GstReferenceTimestampMeta` above: the buffer's own stamps are set where it kept them
/// from its last frame (hwtensorsrc's slot buffers do, see `slots::Side::Source`), the others
/// added. Adding both anew took some 0.3 us a frame (allocating two metas, two caps refs),
/// a fifth of the source's part of a frame's latency (`elements_bench`, 2026-12-06).
#[allow(unsafe_code)] // writes the timestamp of a meta of a buffer we hold mutably
pub fn stamp(buffer: &mut gst::BufferRef, sent: u64, received: u64) {
    let [sent_caps, received_caps] = stamp_caps();
    let mut times = [(sent_caps, Some(sent)), (received_caps, Some(received))];
    for mut meta in buffer.iter_meta_mut::<gst::ReferenceTimestampMeta>() {
        let reference = meta.reference().as_ptr();
        let Some((_, at)) = times.iter_mut().find(|(c, _)| c.as_ptr() == reference) else {
            continue;
        };
        if let Some(at) = at.take() {
            // SAFETY: `meta` is a GstReferenceTimestampMeta of a buffer borrowed mutably here;
            // its timestamp is a plain field no other reference reads meanwhile.
            unsafe { (*meta.as_mut_ptr()).timestamp = at };
        }
    }
    for (caps, at) in times {
        if let Some(at) = at {
            let at = gst::ClockTime::from_nseconds(at);
            gst::ReferenceTimestampMeta::add(buffer, caps, at, gst::ClockTime::NONE);
        }
    }
}

/// Whether `meta` is one of the stamps [`stamp`] put on a buffer in this process.
pub fn is_stamp(meta: &gst::ReferenceTimestampMeta) -> bool {
    let reference = meta.reference().as_ptr();
    stamp_caps().iter().any(|c| c.as_ptr() == reference)
}

/// The send and receive stamps' caps objects.
fn stamp_caps() -> [&'static gst::Caps; 2] {
    [&SENT_TIME, &RECEIVED_TIME]
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the machine, as the channel's
/// timestamps are documented to be (the core's [`hwtensor::time::monotonic_ns`], kept here
/// under its old name for the elements' users).
pub use hwtensor::time::monotonic_ns;
