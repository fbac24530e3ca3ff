//! The properties both elements share, made and read one way: the socket, a timeout in
//! milliseconds, and the read-only counters.

use std::time::Duration;

use gst::glib;
use gst::prelude::*;

/// The `socket` property: a path, or `@name` for an abstract socket.
pub(crate) fn socket(blurb: &str) -> glib::ParamSpec {
    glib::ParamSpecString::builder("socket")
        .nick("Socket")
        .blurb(blurb)
        .mutable_ready()
        .build()
}

/// A timeout property in milliseconds.
pub(crate) fn timeout(blurb: &str, default_ms: u32) -> glib::ParamSpec {
    glib::ParamSpecUInt::builder("timeout")
        .nick("Timeout")
        .blurb(blurb)
        .minimum(1)
        .default_value(default_ms)
        .mutable_ready()
        .build()
}

/// A read-only counter.
pub(crate) fn counter(name: &str, nick: &str, blurb: &str) -> glib::ParamSpec {
    glib::ParamSpecUInt64::builder(name)
        .nick(nick)
        .blurb(blurb)
        .read_only()
        .build()
}

/// The socket a `socket` value sets (empty when unset).
pub(crate) fn socket_of(value: &glib::Value) -> String {
    value
        .get::<Option<String>>()
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The `socket` value of `socket` (none when empty).
pub(crate) fn socket_value(socket: &str) -> glib::Value {
    Some(socket).filter(|v| !v.is_empty()).to_value()
}

/// The duration a `timeout` value sets.
pub(crate) fn millis_of(value: &glib::Value) -> Duration {
    Duration::from_millis(u64::from(value.get::<u32>().unwrap_or(1)))
}

/// The `timeout` value of `d`.
pub(crate) fn millis_value(d: Duration) -> glib::Value {
    (u32::try_from(d.as_millis()).unwrap_or(u32::MAX)).to_value()
}
