//! GStreamer elements for hwtensor's pooled channel (`hwtensor::stream`), so camera and video
//! pipelines hand frames to other processes -- another pipeline, or a Rust, C or Python
//! consumer -- without copies.
//!
//! - **`hwtensorsink`** publishes each buffer on a channel listening at `socket` (a path, or
//!   `@name` for an abstract socket). It answers the allocation query with a pool whose
//!   buffers are the channel's own shared-memory buffers, so upstream (videotestsrc,
//!   videoconvert, decoders) writes straight into the memory consumers read. The channel's
//!   images take GStreamer's default layout for the caps, each plane's stride included (I420
//!   at 1364 pixels: 684-byte chroma rows); where hwtensor cannot lay an image out that way
//!   (I420 of odd height, whose luma plane GStreamer rounds up to an even row count), only
//!   upstream that writes through `GstVideoMeta` may take the pool. A frame upstream brings in
//!   its own fd memory (DMA-BUF from v4l2src or a decoder, another channel's memfds) is adopted:
//!   imported once, added to the channel, then sent by id with no copy, upstream's buffer held
//!   until consumers hand it back, also when it is one fd memory per plane (NV12M from a
//!   multi-planar camera: the channel hands it off with an fd per plane). A frame in neither is
//!   copied once, counted in the `copies` property. End of stream and a
//!   change of caps reach consumers as frames of their own ([`hwtensor::stream::Marker`]). Properties: `socket`,
//!   `pool-size`, `memory` (shm, or DMA-BUF for hardware upstream such as v4l2src
//!   `io-mode=dmabuf-import`), `wait-for-consumer`, `when-full` (block or drop), `timeout`; counters
//!   `copies`, `dropped`, `frames`, `consumers`.
//! - **`hwtensorsrc`** attaches to a channel and pushes each frame as a buffer whose fd memory
//!   *is* the frame (fd memory over the shm or DMA-BUF fd, with `GstVideoMeta`); the buffer's
//!   last unref hands the frame back; a frame in a buffer per plane (an adopted NV12M camera
//!   frame) is a memory per plane. A channel that grows after attach (a sink adopting
//!   upstream's buffers) is followed: each added buffer of the same picture is lent as well.
//!   A producer that leaves without end of stream ends the stream with an element error that
//!   says so. GPU frames come as system-memory copies
//!   through the CPU map (GStreamer 1.22's CUDA and Vulkan memory cannot import external
//!   memory). Properties: `socket`, `timeout`, `is-live`; counters `copies`, `frames`.
//!
//! ```text
//! GST_PLUGIN_PATH=target/release gst-launch-1.0 videotestsrc ! video/x-raw,format=I420 ! hwtensorsink socket=@cam
//! GST_PLUGIN_PATH=target/release gst-launch-1.0 hwtensorsrc socket=@cam ! videoconvert ! autovideosink
//! ```
//!
//! A consumer in Rust connects to the same socket with
//! `hwtensor::stream::Consumer::connect(UnixStream::connect(...)?, CONNECT_TIMEOUT)` and reads
//! each frame's [`hwtensor::stream::Marker`] from its payload.

pub mod caps;
mod copy;
mod props;
pub mod sink;
pub mod slots;
pub mod socket;
pub mod source;
pub mod stamp;

/// Entry points for the fuzz target (`crates/hwtensor-gst/fuzz`), not API: what upstream
/// controls in a frame the sink copies, run through the code the sink runs.
#[doc(hidden)]
pub mod fuzzing {
    /// Copies the frame of `buffer` (its `GstVideoMeta` as upstream wrote it) into the image
    /// `slot`, as `hwtensorsink` does for a frame in memory that is not the channel's.
    pub fn into_slot(
        buffer: &gst::BufferRef,
        info: &gst_video::VideoInfo,
        slot: &hwtensor::TensorDyn,
    ) -> Result<(), String> {
        crate::copy::into_slot(buffer, info, slot)
    }
}

use gst::glib;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    sink::register(plugin)?;
    source::register(plugin)
}

/// The plugin's entry points: the descriptor `gst-launch-1.0` loads, and
/// `plugin_register_static` for programs (and tests) that link the elements in.
#[allow(unsafe_code, missing_docs)] // the plugin descriptor GStreamer reads
mod plugin {
    use super::plugin_init;
    gst::plugin_define!(
        hwtensor,
        env!("CARGO_PKG_DESCRIPTION"),
        plugin_init,
        env!("CARGO_PKG_VERSION"),
        "MIT/X11",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_NAME"),
        "https://github.com/hwtensor/hwtensor"
    );
}

pub use plugin::plugin_register_static;
