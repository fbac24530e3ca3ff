//! hwtensor tensors across machines, over [Zenoh](https://zenoh.io) (1.x, pinned).
//!
//! A [`Publisher`] puts tensors on a key expression; a [`Subscriber`] receives them as hwtensor
//! tensors in the memory it asks for, with the publisher's sequence number and timestamp.
//!
//! - **Across hosts** a frame is an inline blob (description and bytes, the same wire format as
//!   everywhere in hwtensor, images with strides and planes and quantization included) in a
//!   Zenoh sample, with a 56-byte frame record as its attachment. GPU tensors are read after
//!   their completion.
//! - **On one host** (same boot and network namespace) the frame goes by hwtensor's own fd
//!   hand-off on an abstract Unix socket the publisher announces through a Zenoh liveliness
//!   token: no bytes are copied, so latency does not grow with frame size. Zenoh's own
//!   shared-memory API is marked unstable and turns buffers back into bytes at the host
//!   boundary; hwtensor's hand-off also carries GPU memory and its completion.
//!   The publisher puts inline bytes on Zenoh only while a subscriber on another host (or one
//!   that asked for no local delivery) is alive, so a one-host pipeline moves no frame bytes.
//!
//! - **EdgeFirst messages** ([`Encoding::EdgeFirst`]; see [`edgefirst`]): `CameraFrame` and
//!   `TensorStamped` of edgefirst-schemas 4.x, by the publisher's pid and fd numbers on one host
//!   or inline, so EdgeFirst perception services and hwtensor programs read each other's
//!   frames. The subscriber reads them from any publisher.
//!
//! The subscriber's code is the same either way. Samples are parsed as hostile input: a
//! malformed or truncated one is dropped with a logged reason and counted
//! ([`Subscriber::dropped`]). A frame whose sequence number is a little behind the last one from
//! its publisher is stale and dropped; a jump far ahead or behind starts a new sequence, so no
//! forged sample can silence a publisher; a restarted publisher is a new publisher. What a
//! subscriber holds for its peers is bounded: the sequences of 1024 publishers, the sockets and
//! threads of [`MAX_LOCAL_PUBLISHERS`] local ones, each released when its token goes. Sessions,
//! modes and endpoints are Zenoh's own [`zenoh::Config`].
//!
//! Linux only (the one-host path passes fds).
//!
//! # Example
//!
//! Open a Zenoh session as Zenoh does ([`zenoh::open`] with a [`zenoh::Config`];
//! [`peer_config`] writes the common explicit one), then publish or subscribe on a key. Zenoh's
//! own errors convert into [`Error`] with `?`. `examples/quickstart.rs` is this program with
//! both sides (`cargo run -p hwtensor-zenoh --example quickstart`, run in CI).
//!
//! ```no_run
//! use std::time::Duration;
//! use hwtensor::{Tensor, TensorDyn, TensorMemory};
//! use hwtensor_zenoh::zenoh::{self, Wait};
//! use hwtensor_zenoh::{peer_config, Publisher, Subscriber};
//!
//! # fn main() -> hwtensor_zenoh::Result<()> {
//! let session = zenoh::open(peer_config("tcp/127.0.0.1:7447", true)?).wait()?;
//! let mut publisher = Publisher::new(&session, "camera/front", Default::default())?;
//! let frame = Tensor::<u8>::new(&[480, 640, 4], Some(TensorMemory::Shm))?;
//! publisher.publish(&TensorDyn::from(frame))?; // to a subscriber on this host: by fd
//!
//! // In the subscribing process, on a session of its own:
//! let mut subscriber = Subscriber::new(&session, "camera/front", Default::default())?;
//! let received = subscriber.recv(Duration::from_secs(1))?;
//! println!("frame {} ({} bytes), zero-copy: {}", received.seq, received.tensor.buffer_len(), received.zero_copy);
//! # Ok(())
//! # }
//! ```
#![cfg(target_os = "linux")]

pub mod edgefirst;
mod host;
mod info;
mod publisher;
mod sequence;
mod subscriber;

pub use host::host_id;
pub use info::{FrameInfo, INFO_LEN};
pub use publisher::{Encoding, Publisher, PublisherOptions, DEFAULT_KEEP_FRAMES};
pub use subscriber::{Received, Subscriber, SubscriberOptions, MAX_LOCAL_PUBLISHERS};
pub use zenoh;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Zenoh refused or failed (its message).
    #[error("zenoh: {0}")]
    Zenoh(String),
    /// hwtensor refused or failed.
    #[error(transparent)]
    Tensor(#[from] hwtensor::Error),
    /// No frame came within the receive's timeout.
    #[error("no frame within {0:?}")]
    Timeout(std::time::Duration),
    /// A tensor has no EdgeFirst message form (the reason).
    #[error("EdgeFirst message: {0}")]
    EdgeFirst(String),
    /// The subscriber's inputs are gone (its session closed).
    #[error("the subscriber is closed")]
    Closed,
}

/// Zenoh's own errors (`zenoh::open(..).wait()`, a declaration) convert with `?`: Zenoh's error
/// type is a boxed `dyn Error + Send + Sync`, which `?` cannot turn into a `Box<dyn Error>` of
/// a caller's `main`, so a program written against this crate's [`Result`] needs no `map_err`.
impl From<zenoh::Error> for Error {
    fn from(e: zenoh::Error) -> Self {
        Error::Zenoh(e.to_string())
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

/// A Zenoh peer configuration that listens on (or connects to) one `endpoint`, such as
/// `tcp/127.0.0.1:7447`, with multicast scouting off: the explicit set-up of tests, demos and
/// fixed deployments. Anything else is Zenoh's own [`zenoh::Config`].
pub fn peer_config(endpoint: &str, listen: bool) -> Result<zenoh::Config> {
    let mut c = zenoh::Config::default();
    let side = if listen {
        "listen/endpoints"
    } else {
        "connect/endpoints"
    };
    c.insert_json5("mode", "\"peer\"").map_err(zenoh_err)?;
    c.insert_json5(side, &format!("[\"{endpoint}\"]"))
        .map_err(zenoh_err)?;
    c.insert_json5("scouting/multicast/enabled", "false")
        .map_err(zenoh_err)?;
    Ok(c)
}

/// A Zenoh error as ours.
pub(crate) fn zenoh_err(e: impl std::fmt::Display) -> Error {
    Error::Zenoh(e.to_string())
}

/// The liveliness key of a publisher or subscriber of `key`: `hwtensor-zenoh/<role>/<host>/
/// <id>/<key>`, so each side finds the other's by key intersection.
pub(crate) fn token_key(role: &str, host: &str, id: uuid::Uuid, key: &str) -> String {
    format!("hwtensor-zenoh/{role}/{host}/{}/{key}", id.simple())
}

/// The chunk of a token key at `index` (0 is `hwtensor-zenoh`).
pub(crate) fn token_chunk(token: &str, index: usize) -> Option<&str> {
    token.split('/').nth(index)
}

/// The abstract socket a publisher hands frames out on.
pub(crate) fn socket_name(publisher: uuid::Uuid) -> String {
    format!("hwtensor-zenoh-{}", publisher.simple())
}

/// Whether the process on the other end of `stream` runs as this process's effective user.
pub(crate) fn same_user(stream: &std::os::unix::net::UnixStream) -> bool {
    rustix::net::sockopt::socket_peercred(stream).is_ok_and(|c| c.uid == rustix::process::geteuid())
}

/// `CLOCK_REALTIME` in nanoseconds: comparable across hosts with synchronised clocks.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
