//! [`Publisher`]: puts tensors on a key; hands them by fd to subscribers on its host.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use hwtensor::blob::Transport;
use hwtensor::handoff::{self, MID_MESSAGE_TIMEOUT};
use hwtensor::TensorDyn;
use uuid::Uuid;
use zenoh::sample::SampleKind;
use zenoh::{Session, Wait};

use crate::edgefirst::{self, Stamp};
use crate::info::FrameInfo;
use crate::{host_id, now_ns, socket_name, token_chunk, token_key, zenoh_err, Error, Result};

/// What a publisher puts in its Zenoh samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// hwtensor's own blob (the default): inline bytes, only while a subscriber on another
    /// host needs them; subscribers on this host take frames by fd hand-off.
    #[default]
    Hwtensor,
    /// EdgeFirst messages (edgefirst-schemas 4.x): `CameraFrame` for images, `TensorStamped`
    /// for plain tensors, put for every frame (EdgeFirst subscribers announce nothing), by
    /// reference on this host or inline. See the crate's EdgeFirst section. hwtensor
    /// subscribers on this host still take frames by fd hand-off.
    EdgeFirst,
}

/// Frames an EdgeFirst publisher keeps by default after publishing them by reference, so their
/// fd numbers stay open for subscribers: at 30 frames a second, a quarter of a second.
pub const DEFAULT_KEEP_FRAMES: usize = 8;

/// Buffers whose last frame a publisher remembers: a pool is a handful; a publisher of ever new
/// buffers (a decoder allocating per frame) starts over past this.
const MAX_TRACKED_BUFFERS: usize = 1024;

/// How a publisher behaves.
#[derive(Clone, Copy, Debug)]
pub struct PublisherOptions {
    /// Put inline bytes on Zenoh for every frame, even with no hwtensor subscriber on another
    /// host (for plain Zenoh subscribers of the key, which announce nothing).
    pub always_inline: bool,
    /// Hand frames by fd to hwtensor subscribers on this host.
    pub local_delivery: bool,
    /// What Zenoh does with a frame its queue cannot take: drop it (Zenoh's default, the
    /// subscriber sees a gap) or block the publisher until it can.
    pub congestion: zenoh::qos::CongestionControl,
    /// What the samples carry: hwtensor's blob or EdgeFirst messages.
    pub encoding: Encoding,
    /// With [`Encoding::EdgeFirst`]: how many frames published by reference the publisher
    /// holds (and so keeps their fds open) after it publishes them. A subscriber must take a
    /// frame's fds before this many newer frames are published.
    pub keep_frames: usize,
}

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            always_inline: false,
            local_delivery: true,
            congestion: zenoh::qos::CongestionControl::Drop,
            encoding: Encoding::Hwtensor,
            keep_frames: DEFAULT_KEEP_FRAMES,
        }
    }
}

/// Publishes tensors on one key expression.
pub struct Publisher {
    publisher: zenoh::pubsub::Publisher<'static>,
    /// Subscribers that need inline bytes (other hosts), by their liveliness key.
    remote: Arc<Mutex<HashSet<String>>>,
    /// Subscribers on this host, connected to the hand-off socket.
    local: Arc<Mutex<Vec<UnixStream>>>,
    accept: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    options: PublisherOptions,
    id: Uuid,
    seq: u64,
    /// EdgeFirst frames published by reference, held so their fd numbers stay open.
    kept: VecDeque<TensorDyn>,
    /// The last frame each buffer carried (by its identity and first byte): a frame in a
    /// buffer again tells subscribers which earlier frame it rewrote (`FrameInfo::reuses`).
    last_in_buffer: HashMap<(hwtensor::BufferIdentity, usize), u64>,
    /// EdgeFirst's `frame_id` of every frame.
    frame_id: String,
    // Dropped last: they announce the publisher and watch for subscribers.
    _watch: zenoh::pubsub::Subscriber<()>,
    _token: zenoh::liveliness::LivelinessToken,
}

impl Publisher {
    /// A publisher of `key` on `session`.
    pub fn new(session: &Session, key: &str, options: PublisherOptions) -> Result<Publisher> {
        let id = Uuid::new_v4();
        let host = host_id().simple().to_string();
        let publisher = session
            .declare_publisher(key.to_string())
            .congestion_control(options.congestion)
            .wait()
            .map_err(zenoh_err)?;
        let remote = Arc::new(Mutex::new(HashSet::new()));
        let watch = watch_subscribers(session, key, &host, remote.clone())?;
        let local = Arc::new(Mutex::new(Vec::new()));
        let accept = match options.local_delivery {
            true => Some(listen(id, local.clone())?),
            false => None,
        };
        let token = session
            .liveliness()
            .declare_token(token_key("pub", &host, id, key))
            .wait()
            .map_err(zenoh_err)?;
        Ok(Publisher {
            publisher,
            remote,
            local,
            accept,
            options,
            id,
            seq: 0,
            kept: VecDeque::new(),
            last_in_buffer: HashMap::new(),
            frame_id: String::new(),
            _watch: watch,
            _token: token,
        })
    }

    /// This publisher's id (new for each publisher: a restart is a new sequence).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// How many subscribers on this host take frames by fd.
    pub fn local_subscribers(&self) -> usize {
        self.local.lock().map_or(0, |l| l.len())
    }

    /// Sets the `frame_id` EdgeFirst messages carry (the coordinate frame, such as
    /// `"camera"`; empty by default).
    pub fn set_frame_id(&mut self, frame_id: impl Into<String>) {
        self.frame_id = frame_id.into();
    }

    /// Whether frames currently go out as inline bytes on Zenoh.
    pub fn publishes_inline(&self) -> bool {
        self.options.always_inline || self.remote.lock().is_ok_and(|r| !r.is_empty())
    }

    /// Publishes `tensor` as the next frame; returns its sequence number. Subscribers on this
    /// host get it by fd (they read the same memory: do not rewrite it while they may read);
    /// others get its bytes, read after its GPU completion.
    pub fn publish(&mut self, tensor: &TensorDyn) -> Result<u64> {
        self.seq += 1;
        let timestamp_ns = now_ns();
        let info = FrameInfo {
            seq: self.seq,
            timestamp_ns,
            publisher: self.id,
            host: host_id(),
            blocks: self.options.congestion == zenoh::qos::CongestionControl::Block,
            reuses: self.reuses(tensor),
        }
        .encode();
        if let Ok(mut local) = self.local.lock() {
            local.retain_mut(|s| match send_local(s, &info, tensor) {
                Ok(()) => true,
                Err(e) => {
                    log::info!("hwtensor-zenoh: a local subscriber went away: {e}");
                    false
                }
            });
        }
        if self.options.encoding == Encoding::EdgeFirst {
            self.put_edgefirst(tensor, &info, timestamp_ns)?;
        } else if self.publishes_inline() {
            let (blob, _) = hwtensor::blob::export(tensor, Transport::Inline)?;
            self.publisher
                .put(blob)
                .attachment(info.to_vec())
                .wait()
                .map_err(zenoh_err)?;
        }
        Ok(self.seq)
    }
}

impl Publisher {
    /// How many frames back `tensor`'s buffer last carried one (0: never, or further than the
    /// record says), noting this frame as its last.
    fn reuses(&mut self, tensor: &TensorDyn) -> u16 {
        if self.last_in_buffer.len() >= MAX_TRACKED_BUFFERS {
            self.last_in_buffer.clear(); // a producer of ever new buffers: nothing to say
        }
        let buffer = (tensor.identity(), tensor.byte_offset());
        match self.last_in_buffer.insert(buffer, self.seq) {
            Some(before) => u16::try_from(self.seq - before).unwrap_or(0),
            None => 0,
        }
    }

    /// Puts `tensor` as an EdgeFirst message: by reference unless a subscriber elsewhere needs
    /// the bytes, holding a frame sent by reference for `keep_frames` more frames.
    fn put_edgefirst(&mut self, tensor: &TensorDyn, info: &[u8], time_ns: u64) -> Result<()> {
        let by_reference = !self.publishes_inline();
        // A reader by reference takes the bytes as they are: pending GPU writes travel as the
        // message's `fence_fd` (where the device can export a sync_file; else they are waited
        // for here), kept open with the frame.
        let exported = match (by_reference, tensor.sync_file()) {
            (true, None) => tensor.export_sync_file()?,
            _ => None,
        };
        let fenced;
        let tensor = match exported {
            Some(fence) => {
                fenced = tensor.with_sync_file(fence);
                &fenced
            }
            None => tensor,
        };
        let stamp = Stamp {
            seq: self.seq,
            time_ns,
            frame_id: &self.frame_id,
        };
        let mut message = Vec::new();
        let schema = edgefirst::encode(tensor, by_reference, &stamp, &mut message)
            .map_err(Error::EdgeFirst)?;
        if by_reference {
            self.kept.push_back(tensor.clone());
            while self.kept.len() > self.options.keep_frames {
                self.kept.pop_front();
            }
        }
        self.publisher
            .put(message)
            .encoding(schema.encoding())
            .attachment(info.to_vec())
            .wait()
            .map_err(zenoh_err)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if let Some((thread, stop)) = self.accept.take() {
            stop.store(true, Ordering::SeqCst);
            // Wakes the accept loop, which sees the stop and returns. Without the wake-up
            // (no fd left to connect with) the thread is left to end at the next connection
            // rather than joined: a join would wait for ever.
            let woken = SocketAddr::from_abstract_name(socket_name(self.id))
                .and_then(|a| UnixStream::connect_addr(&a));
            if woken.is_ok() {
                let _ = thread.join();
            }
        }
    }
}

/// One frame to a subscriber on this host: the record, then the tensor by fd (an fd per plane
/// for an image in a buffer per plane; inline where its memory has no fd: heap).
fn send_local(s: &mut UnixStream, info: &[u8], tensor: &TensorDyn) -> hwtensor::Result<()> {
    s.write_all(info).map_err(|e| hwtensor::Error::Os {
        op: "sending a frame record",
        source: e,
    })?;
    match tensor.has_fds() {
        true => handoff::send(s, tensor),
        false => handoff::send_as(s, tensor, Transport::Inline),
    }
}

/// Keeps `remote` the set of live subscribers of `key` that need inline bytes: those on other
/// hosts, or that asked for no local delivery (they announce the host `remote`).
fn watch_subscribers(
    session: &Session,
    key: &str,
    host: &str,
    remote: Arc<Mutex<HashSet<String>>>,
) -> Result<zenoh::pubsub::Subscriber<()>> {
    let host = host.to_string();
    session
        .liveliness()
        .declare_subscriber(format!("hwtensor-zenoh/sub/*/*/{key}"))
        .history(true)
        .callback(move |sample| {
            let token = sample.key_expr().as_str().to_string();
            let elsewhere = token_chunk(&token, 2) != Some(host.as_str());
            let Ok(mut remote) = remote.lock() else {
                return;
            };
            match sample.kind() {
                SampleKind::Put if elsewhere => {
                    remote.insert(token);
                }
                SampleKind::Delete => {
                    remote.remove(&token);
                }
                SampleKind::Put => {}
            }
        })
        .wait()
        .map_err(zenoh_err)
}

/// Listens on the publisher's abstract socket; subscribers of this user that connect are
/// added to `local`. Others are refused: the socket hands out fds of the frames.
fn listen(
    id: Uuid,
    local: Arc<Mutex<Vec<UnixStream>>>,
) -> Result<(JoinHandle<()>, Arc<AtomicBool>)> {
    let addr = SocketAddr::from_abstract_name(socket_name(id)).map_err(tensor_io)?;
    let listener = UnixListener::bind_addr(&addr).map_err(tensor_io)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("hwtensor-zenoh-accept".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                if !crate::same_user(&stream) {
                    log::warn!("hwtensor-zenoh: refused a local subscriber of another user");
                    continue;
                }
                // A subscriber that stops reading holds a publish up for this long at most.
                let _ = stream.set_write_timeout(Some(MID_MESSAGE_TIMEOUT));
                if let Ok(mut l) = local.lock() {
                    l.push(stream);
                }
            }
        })
        .map_err(tensor_io)?;
    Ok((thread, stop))
}

fn tensor_io(e: std::io::Error) -> crate::Error {
    crate::Error::Tensor(hwtensor::Error::Os {
        op: "the local hand-off socket",
        source: e,
    })
}
