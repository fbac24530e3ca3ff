//! [`Subscriber`]: receives tensors published on a key, by fd from publishers on its host and
//! as inline bytes from the others, in the memory it asks for.

use std::collections::HashMap;
use std::collections::HashSet;
use std::io::Read;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hwtensor::handoff::MID_MESSAGE_TIMEOUT;
use hwtensor::{TensorDyn, TensorMemory};
use uuid::Uuid;
use zenoh::sample::{Sample, SampleKind};
use zenoh::{Session, Wait};

use crate::edgefirst;
use crate::info::{FrameInfo, INFO_LEN};
use crate::sequence::{Sequences, Verdict};
use crate::{host_id, socket_name, token_chunk, token_key, zenoh_err, Error, Result};

/// The host a subscriber announces when it takes no local delivery: never a real host id, so
/// publishers send it inline bytes.
const NO_LOCAL_HOST: &str = "remote";

/// Publishers on this host read by fd at once, each with a socket and a thread: more than a
/// host runs on one key, and a bound on what announced tokens can make us hold (liveliness
/// tokens are unauthenticated).
pub const MAX_LOCAL_PUBLISHERS: usize = 64;

/// How a subscriber behaves.
#[derive(Clone, Copy, Debug)]
pub struct SubscriberOptions {
    /// The memory received tensors are delivered in (`None`: as they arrive: the publisher's
    /// own buffer on one host, heap memory from another).
    pub memory: Option<TensorMemory>,
    /// Take frames from publishers on this host by fd hand-off.
    pub local_delivery: bool,
    /// Frames received and not yet taken by `recv`. Beyond it a frame is dropped (counted at
    /// once by [`Subscriber::overflowed`], and later as a gap in the sequence), except one
    /// from a publisher on this host that blocks (`CongestionControl::Block`): its reader
    /// waits for room, and the publisher with it.
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
    /// An EdgeFirst message's `frame_id` (empty for hwtensor's own frames).
    pub frame_id: String,
}

/// A frame read from a Zenoh sample: its record, tensor, whether it came without a copy, and
/// an EdgeFirst `frame_id`.
type Remote = (FrameInfo, TensorDyn, bool, String);

/// The Zenoh encoding of CDR, before any `;schema`.
const CDR: &str = "application/cdr";

/// Whether a sample says it carries CDR (EdgeFirst's messages do; hwtensor's blobs do not).
fn is_cdr(sample: &Sample) -> bool {
    let name: std::borrow::Cow<'_, str> = sample.encoding().into();
    name.starts_with(CDR)
}

/// The id that stands for a publisher of EdgeFirst's own on `key`: one per key and frame id
/// (its messages name no publisher; a pid is 0 for inline frames).
fn foreign_publisher(key: &str, frame_id: &str) -> Uuid {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (key, frame_id).hash(&mut h);
    Uuid::from_u64_pair(h.finish(), u64::MAX)
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
    /// A sample, with its frame record as the arrival read it (`None`: it carries none).
    Remote(Sample, Option<std::result::Result<FrameInfo, String>>),
    Local(FrameInfo, TensorDyn),
    Rejected(String),
}

/// Receives tensors published on one key expression.
pub struct Subscriber {
    rx: Receiver<Incoming>,
    /// Publishers on this host we read by fd, and their sockets (shut down on drop).
    local: Arc<Mutex<LocalPublishers>>,
    sequences: Sequences,
    options: SubscriberOptions,
    dropped: u64,
    /// Why the last dropped sample was.
    last_drop: Option<String>,
    gaps: u64,
    /// Frames by reference whose buffer the publisher had rewritten before `recv` came to them.
    rewritten: u64,
    /// Frames whose buffers newer frames rewrote, as the newer ones arrived.
    overwritten: Overwritten,
    /// Frames of bare EdgeFirst `Tensor` messages, which carry no sequence number.
    bare_seq: u64,
    overflowed: Arc<AtomicU64>,
    _data: zenoh::pubsub::Subscriber<()>,
    _watch: Option<zenoh::pubsub::Subscriber<()>>,
    _token: zenoh::liveliness::LivelinessToken,
}

/// The publishers on this host being read, each by its socket (a second handle, to shut down).
#[derive(Default)]
struct LocalPublishers {
    readers: HashMap<Uuid, UnixStream>,
}

impl LocalPublishers {
    /// Stops reading publisher `id` (its token went, or its reader ended).
    fn forget(&mut self, id: &Uuid) {
        if let Some(s) = self.readers.remove(id) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Subscriber {
    /// A subscriber of `key` on `session`.
    pub fn new(session: &Session, key: &str, options: SubscriberOptions) -> Result<Subscriber> {
        let (tx, rx) = sync_channel(options.queue.max(1));
        let overflowed = Arc::new(AtomicU64::new(0));
        let overwritten = Overwritten::default();
        let data_tx = tx.clone();
        let data_overflowed = overflowed.clone();
        let data_overwritten = overwritten.clone();
        let data = session
            .declare_subscriber(key.to_string())
            .callback(move |sample| {
                // Read once, here: what it says it rewrote must be known before `recv`
                // reaches the older frame.
                let record = sample
                    .attachment()
                    .map(|r| FrameInfo::decode(&r.to_bytes()));
                if let Some(Ok(info)) = &record {
                    data_overwritten.note(info);
                }
                // A full queue drops the frame: counted now, and the sequence shows the gap.
                offer(&data_tx, Incoming::Remote(sample, record), &data_overflowed);
            })
            .wait()
            .map_err(zenoh_err)?;
        let local = Arc::new(Mutex::new(LocalPublishers::default()));
        let (watch, host) = match options.local_delivery {
            true => (
                Some(watch_publishers(
                    session,
                    key,
                    Inbox {
                        tx,
                        overflowed: overflowed.clone(),
                        overwritten: overwritten.clone(),
                    },
                    local.clone(),
                )?),
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
            sequences: Sequences::default(),
            options,
            dropped: 0,
            last_drop: None,
            gaps: 0,
            rewritten: 0,
            overwritten,
            bare_seq: 0,
            overflowed,
            _data: data,
            _watch: watch,
            _token: token,
        })
    }

    /// The next frame, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Received> {
        let deadline = hwtensor::time::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let incoming = match self.rx.recv_timeout(left) {
                Ok(i) => i,
                Err(RecvTimeoutError::Timeout) => return Err(Error::Timeout(timeout)),
                Err(RecvTimeoutError::Disconnected) => return Err(Error::Closed),
            };
            let (info, tensor, zero_copy, frame_id) = match incoming {
                Incoming::Local(info, tensor) => {
                    // Heap memory has no fd: it came over the socket as bytes.
                    let by_fd = tensor.memory() != TensorMemory::Mem;
                    (info, tensor, by_fd, String::new())
                }
                Incoming::Remote(sample, record) => {
                    match self.parse_remote(&sample, record, deadline) {
                        Ok(Some(frame)) => frame,
                        Ok(None) => continue, // ours by fd already
                        Err(why) => {
                            self.drop_sample(&why);
                            continue;
                        }
                    }
                }
                Incoming::Rejected(why) => {
                    self.drop_sample(&why);
                    continue;
                }
            };
            let gap = match self.sequences.accept(info.publisher, info.seq) {
                Verdict::Stale { last } => {
                    self.drop_sample(&format!(
                        "frame {} of {} is not newer than {last}: stale",
                        info.seq, info.publisher
                    ));
                    continue;
                }
                Verdict::Next { gap } => gap,
                Verdict::New => 0,
            };
            self.gaps = self.gaps.saturating_add(gap);
            if self.overwritten.take(info.publisher, info.seq) && zero_copy {
                self.rewritten = self.rewritten.saturating_add(1);
                self.drop_sample(&format!(
                    "frame {} of {} was rewritten by a newer frame before this subscriber read \
                     it: its buffer holds the newer frame (the publisher's pool is smaller than \
                     this subscriber's lag)",
                    info.seq, info.publisher
                ));
                continue;
            }
            return Ok(Received {
                tensor: self.in_memory(tensor)?,
                seq: info.seq,
                timestamp_ns: info.timestamp_ns,
                publisher: info.publisher,
                gap,
                zero_copy,
                frame_id,
            });
        }
    }

    /// Samples dropped as malformed, hostile or stale (and those of [`Subscriber::rewritten`]).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Frames by reference dropped because the publisher had already written a newer frame
    /// into their buffer when `recv` came to them (its record says which frame it rewrote):
    /// the subscriber lags more frames behind than the publisher has buffers. A rewrite after
    /// `recv` returned a frame cannot be seen: keep the publisher's pool larger than the lag.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Why the last sample was dropped (`storage_kind: says shm, but the fd holds dmabuf
    /// memory`), `None` while none was: a subscriber that drops every sample says why here,
    /// not only to a logger.
    pub fn last_drop_reason(&self) -> Option<&str> {
        self.last_drop.as_deref()
    }

    /// Frames missed in all (gaps in the publishers' sequences, seen when a later frame
    /// comes; a sequence that starts anew after a jump counts none).
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// Frames that arrived and were dropped because the queue was full, counted as they are
    /// dropped (those after the last frame received included).
    pub fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }

    /// How many publishers on this host hand frames to this subscriber by fd.
    pub fn local_publishers(&self) -> usize {
        self.local.lock().map_or(0, |l| l.readers.len())
    }

    fn drop_sample(&mut self, why: &str) {
        self.dropped = self.dropped.saturating_add(1);
        self.last_drop = Some(why.to_string());
        log::warn!("hwtensor-zenoh: dropped a sample: {why}");
    }

    /// A Zenoh sample as a frame (its record, tensor, whether it came without a copy, and an
    /// EdgeFirst `frame_id`); `None` for one that reaches us by fd too. A sample without
    /// hwtensor's frame record is read as an EdgeFirst message.
    fn parse_remote(
        &mut self,
        sample: &Sample,
        record: Option<std::result::Result<FrameInfo, String>>,
        deadline: Instant,
    ) -> std::result::Result<Option<Remote>, String> {
        if sample.kind() != SampleKind::Put {
            return Err("a delete on the key".into());
        }
        let payload = sample.payload();
        let Some(record) = record else {
            return self.parse_edgefirst(sample, None, deadline).map(Some);
        };
        let info = record?;
        let by_fd = self
            .local
            .lock()
            .is_ok_and(|l| l.readers.contains_key(&info.publisher));
        if by_fd {
            return Ok(None);
        }
        if is_cdr(sample) {
            return self.parse_edgefirst(sample, Some(info), deadline).map(Some);
        }
        // A payload in one piece is read where Zenoh received it; one in pieces is joined.
        let tensor = match payload.slices().count() {
            1 => hwtensor::blob::import_inline_from(Payload(payload.clone())),
            _ => hwtensor::blob::import_inline_from(payload.to_bytes().into_owned()),
        }
        .map_err(|e| format!("frame {} of {}: {e}", info.seq, info.publisher))?;
        Ok(Some((info, tensor, false, String::new())))
    }

    /// An EdgeFirst message as a frame. Without hwtensor's record (a publisher of EdgeFirst's
    /// own), the message's sequence number and stamp stand in for it, and its publisher is
    /// told apart by key and pid.
    fn parse_edgefirst(
        &mut self,
        sample: &Sample,
        info: Option<FrameInfo>,
        deadline: Instant,
    ) -> std::result::Result<Remote, String> {
        let bytes = sample.payload().to_bytes();
        let fence_wait = deadline.saturating_duration_since(Instant::now());
        let decoded = edgefirst::decode::decode(&bytes, fence_wait)?;
        let zero_copy = matches!(
            decoded.tensor.memory(),
            TensorMemory::Shm | TensorMemory::DmaBuf
        );
        let info = info.unwrap_or_else(|| {
            self.bare_seq += 1;
            FrameInfo {
                seq: decoded.seq.unwrap_or(self.bare_seq),
                timestamp_ns: decoded.time_ns,
                publisher: foreign_publisher(sample.key_expr().as_str(), &decoded.frame_id),
                host: Uuid::nil(),
                blocks: false,
                reuses: 0, // EdgeFirst's own publishers do not say
            }
        });
        Ok((info, decoded.tensor, zero_copy, decoded.frame_id))
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
        if let Ok(mut l) = self.local.lock() {
            for (_, s) in l.readers.drain() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// Where the readers put what they receive: the queue `recv` takes from, the count of frames it
/// had no room for, and the frames newer arrivals say were rewritten.
#[derive(Clone)]
struct Inbox {
    tx: SyncSender<Incoming>,
    overflowed: Arc<AtomicU64>,
    overwritten: Overwritten,
}

/// Frames (publisher, sequence) whose buffer a newer frame of the same publisher rewrote, noted
/// as the newer frame arrives (before `recv` reaches the older one, which by reference would
/// then read the newer one's bytes). Shared by the arrival paths and `recv`.
#[derive(Clone, Default)]
struct Overwritten(Arc<Mutex<HashSet<(Uuid, u64)>>>);

/// Frames noted as rewritten at most: beyond it (frames that never reach `recv`, inline ones)
/// the notes start over, and a rewrite may go unseen.
const MAX_OVERWRITTEN: usize = 4096;

impl Overwritten {
    /// Notes what `record` (a frame's record, as it arrives) says it rewrote.
    fn note(&self, record: &FrameInfo) {
        let (Some(older), Ok(mut set)) = (record.rewrites(), self.0.lock()) else {
            return;
        };
        if set.len() >= MAX_OVERWRITTEN {
            set.clear();
        }
        set.insert((record.publisher, older));
    }

    /// Whether frame `seq` of `publisher` was rewritten (forgetting the note).
    fn take(&self, publisher: Uuid, seq: u64) -> bool {
        self.0.lock().is_ok_and(|mut s| s.remove(&(publisher, seq)))
    }
}

/// Puts `incoming` in the queue, or drops and counts it when the queue is full.
fn offer(tx: &SyncSender<Incoming>, incoming: Incoming, overflowed: &AtomicU64) {
    if let Err(std::sync::mpsc::TrySendError::Full(_)) = tx.try_send(incoming) {
        overflowed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Connects to each live publisher of `key` on this host, reading its frames on a thread, and
/// stops reading one whose token goes.
fn watch_publishers(
    session: &Session,
    key: &str,
    inbox: Inbox,
    local: Arc<Mutex<LocalPublishers>>,
) -> Result<zenoh::pubsub::Subscriber<()>> {
    let host = host_id().simple().to_string();
    session
        .liveliness()
        .declare_subscriber(format!("hwtensor-zenoh/pub/{host}/*/{key}"))
        .history(true)
        .callback(move |sample| {
            let token = sample.key_expr().as_str();
            let Some(id) = token_chunk(token, 3).and_then(|c| Uuid::try_parse(c).ok()) else {
                return;
            };
            match sample.kind() {
                SampleKind::Put => connect(id, inbox.clone(), local.clone()),
                SampleKind::Delete => {
                    if let Ok(mut l) = local.lock() {
                        l.forget(&id);
                    }
                }
            }
        })
        .wait()
        .map_err(zenoh_err)
}

/// Starts reading publisher `id`'s frames, unless already reading them or at the bound. Only a
/// publisher of this user is read (the publisher refuses other users' subscribers likewise).
fn connect(id: Uuid, inbox: Inbox, local: Arc<Mutex<LocalPublishers>>) {
    let Ok(mut l) = local.lock() else { return };
    if l.readers.contains_key(&id) {
        return;
    }
    if l.readers.len() >= MAX_LOCAL_PUBLISHERS {
        log::warn!(
            "hwtensor-zenoh: already reading {MAX_LOCAL_PUBLISHERS} local publishers; not {id}"
        );
        return;
    }
    let stream = SocketAddr::from_abstract_name(socket_name(id))
        .and_then(|a| UnixStream::connect_addr(&a))
        .and_then(|s| {
            // A publisher that stops mid-frame holds its reader this long at most.
            s.set_read_timeout(Some(MID_MESSAGE_TIMEOUT))?;
            s.try_clone().map(|c| (s, c))
        });
    let (stream, kept) = match stream {
        Ok(pair) => pair,
        Err(e) => {
            log::warn!("hwtensor-zenoh: cannot reach local publisher {id} ({e}); its frames come as bytes only if it publishes them");
            return;
        }
    };
    if !crate::same_user(&stream) {
        log::warn!("hwtensor-zenoh: local publisher {id} runs as another user; not read");
        return;
    }
    l.readers.insert(id, kept);
    drop(l);
    let reader_local = local.clone();
    let spawned = std::thread::Builder::new()
        .name("hwtensor-zenoh-local".into())
        .spawn(move || {
            read_local(stream, &inbox);
            if let Ok(mut l) = reader_local.lock() {
                l.forget(&id);
            }
        });
    if let Err(e) = spawned {
        log::warn!("hwtensor-zenoh: cannot start a local reader: {e}");
        if let Ok(mut l) = local.lock() {
            l.forget(&id);
        }
    }
}

/// Reads frames from a local publisher until it goes away, sends garbage or stalls mid-frame.
/// Between frames it may be silent as long as it likes (its token going ends the read).
fn read_local(mut stream: UnixStream, inbox: &Inbox) {
    loop {
        if !matches!(readable(&stream), Ok(true)) {
            return;
        }
        let mut record = [0u8; INFO_LEN];
        if stream.read_exact(&mut record).is_err() {
            return; // the publisher left, or stalled mid-record
        }
        let frame = FrameInfo::decode(&record).and_then(|info| {
            hwtensor::handoff::recv(&stream)
                .map(|t| (info, t))
                .map_err(|e| format!("frame {}: {e}", info.seq))
        });
        if let Ok((info, _)) = &frame {
            inbox.overwritten.note(info);
        }
        match frame {
            // A publisher that blocks for a slow subscriber is waited for: the queue has room
            // when `recv` takes a frame, and a dropped subscriber ends the wait.
            Ok((info, tensor)) if info.blocks => {
                if inbox.tx.send(Incoming::Local(info, tensor)).is_err() {
                    return;
                }
            }
            Ok((info, tensor)) => {
                offer(&inbox.tx, Incoming::Local(info, tensor), &inbox.overflowed)
            }
            // Out of step with the publisher: nothing after this can be trusted.
            Err(why) => {
                offer(
                    &inbox.tx,
                    Incoming::Rejected(format!("local publisher: {why}")),
                    &inbox.overflowed,
                );
                return;
            }
        }
    }
}

/// Waits, with no bound, until the publisher's socket has a byte or hangs up (an idle
/// publisher is not a broken one; a shut-down socket wakes the wait).
fn readable(stream: &UnixStream) -> std::io::Result<bool> {
    let mut fds = [rustix::event::PollFd::new(
        stream,
        rustix::event::PollFlags::IN,
    )];
    loop {
        match rustix::event::poll(&mut fds, None) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
