//! [`Subscriber`]: receives tensors published on a key, by fd from publishers on its host and
//! as inline bytes from the others, in the memory it asks for.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hwtensor::{TensorDyn, TensorMemory};
use uuid::Uuid;
use zenoh::sample::{Sample, SampleKind};
use zenoh::{Session, Wait};

use crate::info::{FrameInfo, INFO_LEN};
use crate::{host_id, socket_name, token_chunk, token_key, zenoh_err, Error, Result};

/// The host a subscriber announces when it takes no local delivery: never a real host id, so
/// publishers send it inline bytes.
const NO_LOCAL_HOST: &str = "remote";

/// How a subscriber behaves.
#[derive(Clone, Copy, Debug)]
pub struct SubscriberOptions {
    /// The memory received tensors are delivered in (`None`: as they arrive: the publisher's
    /// own buffer on one host, heap memory from another).
    pub memory: Option<TensorMemory>,
    /// Take frames from publishers on this host by fd hand-off.
    pub local_delivery: bool,
    /// Frames received and not yet taken by `recv`; beyond it new frames are dropped (and
    /// show as a gap in the sequence).
    pub queue: usize,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            memory: None,
            local_delivery: true,
            queue: 8,
        }
    }
}

/// One received frame.
#[derive(Debug)]
pub struct Received {
    /// The tensor, in the memory the subscriber asked for.
    pub tensor: TensorDyn,
    /// The publisher's sequence number.
    pub seq: u64,
    /// The publisher's `CLOCK_REALTIME` timestamp, in nanoseconds.
    pub timestamp_ns: u64,
    /// Who published it.
    pub publisher: Uuid,
    /// Frames of this publisher missed just before this one.
    pub gap: u64,
    /// Whether it came by fd hand-off (no copy) rather than as bytes.
    pub zero_copy: bool,
}

/// A sample's payload in one piece: the bytes an inline frame is read from in place.
struct Payload(zenoh::bytes::ZBytes);

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.0.slices().next().unwrap_or_default()
    }
}

/// What the inputs hand to `recv`.
enum Incoming {
    Remote(Sample),
    Local(FrameInfo, TensorDyn),
    Rejected(String),
}

/// Receives tensors published on one key expression.
pub struct Subscriber {
    rx: Receiver<Incoming>,
    /// Publishers on this host we read by fd, and their sockets (shut down on drop).
    local: Arc<Mutex<LocalPublishers>>,
    last: HashMap<Uuid, u64>,
    options: SubscriberOptions,
    dropped: u64,
    gaps: u64,
    _data: zenoh::pubsub::Subscriber<()>,
    _watch: Option<zenoh::pubsub::Subscriber<()>>,
    _token: zenoh::liveliness::LivelinessToken,
}

#[derive(Default)]
struct LocalPublishers {
    ids: HashSet<Uuid>,
    sockets: Vec<UnixStream>,
}

impl Subscriber {
    /// A subscriber of `key` on `session`.
    pub fn new(session: &Session, key: &str, options: SubscriberOptions) -> Result<Subscriber> {
        let (tx, rx) = sync_channel(options.queue.max(1));
        let data_tx = tx.clone();
        let data = session
            .declare_subscriber(key.to_string())
            .callback(move |sample| {
                // A full queue drops the frame: the sequence shows the gap.
                let _ = data_tx.try_send(Incoming::Remote(sample));
            })
            .wait()
            .map_err(zenoh_err)?;
        let local = Arc::new(Mutex::new(LocalPublishers::default()));
        let (watch, host) = match options.local_delivery {
            true => (
                Some(watch_publishers(session, key, tx, local.clone())?),
                host_id().simple().to_string(),
            ),
            false => (None, NO_LOCAL_HOST.to_string()),
        };
        let token = session
            .liveliness()
            .declare_token(token_key("sub", &host, Uuid::new_v4(), key))
            .wait()
            .map_err(zenoh_err)?;
        Ok(Subscriber {
            rx,
            local,
            last: HashMap::new(),
            options,
            dropped: 0,
            gaps: 0,
            _data: data,
            _watch: watch,
            _token: token,
        })
    }

    /// The next frame, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let incoming = match self.rx.recv_timeout(left) {
                Ok(i) => i,
                Err(RecvTimeoutError::Timeout) => return Err(Error::Timeout(timeout)),
                Err(RecvTimeoutError::Disconnected) => return Err(Error::Closed),
            };
            let (info, tensor, zero_copy) = match incoming {
                Incoming::Local(info, tensor) => (info, tensor, true),
                Incoming::Remote(sample) => match self.parse_remote(&sample) {
                    Ok(Some((info, tensor))) => (info, tensor, false),
                    Ok(None) => continue, // ours by fd already
                    Err(why) => {
                        self.drop_sample(&why);
                        continue;
                    }
                },
                Incoming::Rejected(why) => {
                    self.drop_sample(&why);
                    continue;
                }
            };
            let gap = match self.last.get(&info.publisher) {
                Some(&last) if info.seq <= last => {
                    self.drop_sample(&format!(
                        "frame {} of {} is not newer than {last}: stale",
                        info.seq, info.publisher
                    ));
                    continue;
                }
                Some(&last) => info.seq - last - 1,
                None => 0,
            };
            self.last.insert(info.publisher, info.seq);
            self.gaps += gap;
            return Ok(Received {
                tensor: self.in_memory(tensor)?,
                seq: info.seq,
                timestamp_ns: info.timestamp_ns,
                publisher: info.publisher,
                gap,
                zero_copy,
            });
        }
    }

    /// Samples dropped as malformed, hostile or stale.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Frames missed in all (gaps in the publishers' sequences).
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// How many publishers on this host hand frames to this subscriber by fd.
    pub fn local_publishers(&self) -> usize {
        self.local.lock().map_or(0, |l| l.ids.len())
    }

    fn drop_sample(&mut self, why: &str) {
        self.dropped += 1;
        log::warn!("hwtensor-zenoh: dropped a sample: {why}");
    }

    /// A Zenoh sample as a frame; `None` for one that reaches us by fd too.
    fn parse_remote(
        &self,
        sample: &Sample,
    ) -> std::result::Result<Option<(FrameInfo, TensorDyn)>, String> {
        if sample.kind() != SampleKind::Put {
            return Err("a delete on the key".into());
        }
        let record = sample
            .attachment()
            .ok_or("a sample without the hwtensor frame record")?;
        let info = FrameInfo::decode(&record.to_bytes())?;
        let by_fd = self
            .local
            .lock()
            .is_ok_and(|l| l.ids.contains(&info.publisher));
        if by_fd {
            return Ok(None);
        }
        let payload = sample.payload();
        // A payload in one piece is read where Zenoh received it; one in pieces is joined.
        let tensor = match payload.slices().count() {
            1 => hwtensor::blob::import_inline_from(Payload(payload.clone())),
            _ => hwtensor::blob::import_inline_from(payload.to_bytes().into_owned()),
        }
        .map_err(|e| format!("frame {} of {}: {e}", info.seq, info.publisher))?;
        Ok(Some((info, tensor)))
    }

    /// The tensor in the memory asked for: as it is, or copied into a new tensor there.
    fn in_memory(&self, tensor: TensorDyn) -> Result<TensorDyn> {
        match self.options.memory {
            Some(memory) if tensor.memory() != memory => Ok(tensor.to_memory(memory)?),
            _ => Ok(tensor),
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // Ends the readers of local publishers, which block on their sockets.
        if let Ok(l) = self.local.lock() {
            for s in &l.sockets {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// Connects to each live publisher of `key` on this host, reading its frames on a thread.
fn watch_publishers(
    session: &Session,
    key: &str,
    tx: SyncSender<Incoming>,
    local: Arc<Mutex<LocalPublishers>>,
) -> Result<zenoh::pubsub::Subscriber<()>> {
    let host = host_id().simple().to_string();
    session
        .liveliness()
        .declare_subscriber(format!("hwtensor-zenoh/pub/{host}/*/{key}"))
        .history(true)
        .callback(move |sample| {
            if sample.kind() != SampleKind::Put {
                return; // its socket closes: the reader ends by itself
            }
            let token = sample.key_expr().as_str();
            let Some(id) = token_chunk(token, 3).and_then(|c| Uuid::try_parse(c).ok()) else {
                return;
            };
            connect(id, tx.clone(), local.clone());
        })
        .wait()
        .map_err(zenoh_err)
}

/// Starts reading publisher `id`'s frames, unless already reading them.
fn connect(id: Uuid, tx: SyncSender<Incoming>, local: Arc<Mutex<LocalPublishers>>) {
    let Ok(mut l) = local.lock() else { return };
    if l.ids.contains(&id) {
        return;
    }
    let stream = SocketAddr::from_abstract_name(socket_name(id))
        .and_then(|a| UnixStream::connect_addr(&a))
        .and_then(|s| s.try_clone().map(|c| (s, c)));
    let (stream, kept) = match stream {
        Ok(pair) => pair,
        Err(e) => {
            log::warn!("hwtensor-zenoh: cannot reach local publisher {id} ({e}); its frames come as bytes only if it publishes them");
            return;
        }
    };
    l.ids.insert(id);
    l.sockets.push(kept);
    drop(l);
    let spawned = std::thread::Builder::new()
        .name("hwtensor-zenoh-local".into())
        .spawn(move || {
            read_local(stream, &tx);
            if let Ok(mut l) = local.lock() {
                l.ids.remove(&id);
            }
        });
    if let Err(e) = spawned {
        log::warn!("hwtensor-zenoh: cannot start a local reader: {e}");
    }
}

/// Reads frames from a local publisher until it goes away or sends garbage.
fn read_local(mut stream: UnixStream, tx: &SyncSender<Incoming>) {
    loop {
        let mut record = [0u8; INFO_LEN];
        if stream.read_exact(&mut record).is_err() {
            return; // the publisher left
        }
        let frame = FrameInfo::decode(&record).and_then(|info| {
            hwtensor::handoff::recv(&stream)
                .map(|t| (info, t))
                .map_err(|e| format!("frame {}: {e}", info.seq))
        });
        let (incoming, fatal) = match frame {
            Ok((info, tensor)) => (Incoming::Local(info, tensor), false),
            // Out of step with the publisher: nothing after this can be trusted.
            Err(why) => (Incoming::Rejected(format!("local publisher: {why}")), true),
        };
        // A full queue drops the frame (a gap), as for Zenoh's samples.
        let _ = tx.try_send(incoming);
        if fatal {
            return;
        }
    }
}
