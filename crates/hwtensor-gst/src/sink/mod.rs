//! `hwtensorsink`: publishes each buffer on a hwtensor channel (see the crate docs).

use std::sync::LazyLock;

use gst::glib;
use gst::prelude::*;

mod adopt;
mod channel;
mod imp;
mod state;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "hwtensorsink",
        gst::DebugColorFlags::empty(),
        Some("hwtensor channel sink"),
    )
});

glib::wrapper! {
    /// The `hwtensorsink` element.
    pub struct HwtensorSink(ObjectSubclass<imp::HwtensorSink>) @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// What the sink does with a frame when consumers hold every buffer of the pool.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstHwtensorSinkWhenFull")]
pub enum WhenFull {
    /// Wait for a consumer to hand a buffer back, at most `timeout` ms, then fail.
    #[enum_value(name = "Block: wait for a buffer (at most timeout ms)", nick = "block")]
    Block = 0,
    /// Drop the new frame (counted in `dropped`): frames consumers hold, or have queued, are
    /// theirs until handed back, so the oldest cannot be taken away.
    #[enum_value(name = "Drop: drop the new frame", nick = "drop")]
    Drop = 1,
}

/// Which memory the channel's pool is made of.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstHwtensorSinkMemory")]
pub enum PoolMemory {
    /// Sealed shared memory (memfd): every machine has it, and CPU readers read it cached.
    #[enum_value(name = "Shm: sealed shared memory", nick = "shm")]
    Shm = 0,
    /// DMA-BUF from a DMA heap: what hardware upstream or downstream imports (v4l2src
    /// io-mode=dmabuf-import, encoders, displays). Refused where the machine has no DMA heap.
    #[enum_value(name = "DMA-BUF from a DMA heap", nick = "dmabuf")]
    DmaBuf = 1,
    /// DMA-BUF where the machine has a DMA heap, shared memory otherwise.
    #[enum_value(name = "Auto: DMA-BUF if a heap exists, else shm", nick = "auto")]
    Auto = 2,
}

/// Registers the element with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "hwtensorsink",
        gst::Rank::NONE,
        HwtensorSink::static_type(),
    )
}
