//! `hwtensorsrc`: attaches to a hwtensor channel and pushes each frame (see the crate docs).

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The `hwtensorsrc` element.
    pub struct HwtensorSrc(ObjectSubclass<imp::HwtensorSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers the element with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "hwtensorsrc",
        gst::Rank::NONE,
        HwtensorSrc::static_type(),
    )
}
