//! `hwtensorsink`: publishes each buffer on a hwtensor channel (see the crate docs).

use gst::glib;
use gst::prelude::*;

mod imp;

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

/// Registers the element with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "hwtensorsink",
        gst::Rank::NONE,
        HwtensorSink::static_type(),
    )
}
