//! The source's state: the consumer of the channel, the pool over its buffers, the frames
//! downstream holds.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;
use hwtensor::stream::{Consumer, Frame, Wait};
use hwtensor::{TensorDyn, TensorMemory};

use crate::props;
use crate::slots::{Lender, Lent, Side, SlotPool};
use crate::socket::Address;
use hwtensor::stream::FrameKind;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "hwtensorsrc",
        gst::DebugColorFlags::empty(),
        Some("hwtensor channel source"),
    )
});

/// How long the source keeps trying to reach a producer (one not started yet, or one
/// replacing its channel) before it fails.
const DEFAULT_TIMEOUT_MS: u32 = 10_000;
/// One step of a wait for a frame: `unlock` (a flush, a state change) is seen within it. The
/// wait sleeps at once (`Wait::Sleep`): video frames come milliseconds apart, so the channel's
/// short spin would find nothing and cost some 20 us of CPU per frame.
const RECV_STEP: Duration = Duration::from_millis(20);
/// Pause between attempts to connect to a producer that is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_millis(20);

#[derive(Clone, Debug)]
struct Settings {
    socket: String,
    timeout: Duration,
    is_live: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            socket: String::new(),
            timeout: Duration::from_millis(u64::from(DEFAULT_TIMEOUT_MS)),
            is_live: true,
        }
    }
}

/// The frames whose buffers are downstream, by slot: a buffer's return to the pool drops
/// its frame, which hands the slot back to the producer.
#[derive(Default)]
struct Downstream(Mutex<Held>);

#[derive(Default)]
struct Held {
    /// The slot the next acquire from the pool lends.
    next: Option<usize>,
    frames: Vec<Option<Frame>>,
}

impl Downstream {
    fn new(slots: usize) -> Downstream {
        let frames = (0..slots).map(|_| None).collect();
        Downstream(Mutex::new(Held { next: None, frames }))
    }

    /// Slots the pool lends now.
    fn len(&self) -> usize {
        self.0.lock().unwrap().frames.len()
    }

    /// One more slot, the pool's newest.
    fn grow(&self) {
        self.0.lock().unwrap().frames.push(None);
    }

    /// Keeps `frame` for the buffer the pool lends next, unless its buffer is not one of the
    /// pool's (yet), or lending it would leave the producer no buffer at all.
    fn lend(&self, frame: Frame) -> Lending {
        let mut held = self.0.lock().unwrap();
        let slot = frame.slot();
        if slot >= held.frames.len() {
            return Lending::NotOurs(frame);
        }
        let out = held.frames.iter().flatten().count();
        if out + 1 >= held.frames.len() {
            return Lending::Copy(frame);
        }
        held.next = Some(slot);
        held.frames[slot] = Some(frame);
        Lending::Lent
    }
}

/// What became of a frame offered to the pool.
enum Lending {
    /// Kept: the pool lends its slot's buffer next.
    Lent,
    /// Back, to be copied: lending it would leave the producer none.
    Copy(Frame),
    /// Back: its buffer has no slot of the pool (the producer added it after we attached).
    NotOurs(Frame),
}

struct SrcLender(Arc<Downstream>);

impl Lender for SrcLender {
    fn next_slot(&self, _flushing: &AtomicBool) -> Result<Lent, gst::FlowError> {
        let slot = self.0 .0.lock().unwrap().next.take();
        slot.map(Lent::Slot).ok_or(gst::FlowError::Error)
    }

    fn returned(&self, slot: usize) {
        let frame = self
            .0
             .0
            .lock()
            .unwrap()
            .frames
            .get_mut(slot)
            .and_then(Option::take);
        drop(frame); // hands the slot back, outside the lock
    }

    fn unusable(&self, slot: usize) {
        // Cannot happen: the producer resends a slot only once we handed it back.
        gst::error!(CAT, "slot {slot} came again while its buffer is out");
    }
}

/// The channel as this source receives it.
struct Receiving {
    consumer: Consumer,
    caps: gst::Caps,
    /// The caps' video info, read once: a downstream without `GstVideoMeta` needs each frame
    /// in its default layout.
    info: gst_video::VideoInfo,
    /// What each slot's frames are to the caps, judged at its first frame (not on every one:
    /// this is the source's per-frame path).
    fits: Vec<Option<Fit>>,
    /// `None` for GPU frames, which downstream gets as system-memory copies.
    pool: Option<(SlotPool, Arc<Downstream>)>,
}

#[derive(Default)]
pub struct HwtensorSrc {
    settings: Mutex<Settings>,
    receiving: Mutex<Option<Receiving>>,
    unlocked: AtomicBool,
    /// `is-live`, read on every frame without the settings lock.
    live: AtomicBool,
    /// Whether downstream reads `GstVideoMeta` (its allocation query says so): without it,
    /// every buffer must be in the caps' default layout.
    downstream_meta: AtomicBool,
    copies: AtomicU64,
    frames: AtomicU64,
}

impl HwtensorSrc {
    fn address(&self) -> Result<Address, gst::ErrorMessage> {
        let socket = self.settings.lock().unwrap().socket.clone();
        Address::from_property(&socket)
            .map_err(|why| gst::error_msg!(gst::ResourceError::Settings, ("{why}")))
    }

    /// Connects to the producer, retrying while none listens, within the timeout.
    fn connect(&self) -> Result<Receiving, gst::ErrorMessage> {
        let address = self.address()?;
        let timeout = self.settings.lock().unwrap().timeout;
        let deadline = hwtensor::time::deadline_after(timeout);
        let stream = loop {
            match address.connect() {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(gst::error_msg!(
                        gst::ResourceError::OpenRead,
                        ("no producer listens on {address} after {timeout:?}: {e}")
                    ))
                }
                Err(_) if self.unlocked.load(Ordering::SeqCst) => {
                    return Err(gst::error_msg!(
                        gst::ResourceError::OpenRead,
                        ("interrupted")
                    ))
                }
                Err(_) => std::thread::sleep(CONNECT_RETRY),
            }
        };
        self.await_set_up(&stream, &address, deadline)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let consumer = Consumer::connect(stream, left.max(hwtensor::stream::CONNECT_TIMEOUT))
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("attaching to {address}: {e}")
                )
            })?;
        let caps = one_caps(consumer.pool())
            .map(|caps| with_stream_fields(caps, consumer.stream_info()))
            .map_err(|e| gst::error_msg!(gst::StreamError::Format, ("{e}")))?;
        let pool = match consumer.pool()[0].memory() {
            TensorMemory::Gpu | TensorMemory::Cuda => None,
            _ => Some(
                lend(consumer.pool(), &caps)
                    .map_err(|e| gst::error_msg!(gst::ResourceError::OpenRead, ("{e}")))?,
            ),
        };
        gst::info!(CAT, imp = self, "attached to {address}: {caps}");
        let info = gst_video::VideoInfo::from_caps(&caps).map_err(|_| {
            gst::error_msg!(gst::CoreError::Negotiation, ("caps without video info"))
        })?;
        Ok(Receiving {
            consumer,
            caps,
            info,
            fits: Vec::new(),
            pool,
        })
    }

    /// Waits for the producer's first bytes on `stream` in steps of [`RECV_STEP`], giving up
    /// when the element stops (a sink that has no caps yet keeps a consumer waiting; stopping
    /// the pipeline meanwhile took up to the whole timeout) or at `deadline`.
    fn await_set_up(
        &self,
        stream: &std::os::unix::net::UnixStream,
        address: &Address,
        deadline: Instant,
    ) -> Result<(), gst::ErrorMessage> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        // RECV_STEP is under a second: its nanoseconds are the whole of it.
        let step = Timespec {
            tv_sec: 0,
            tv_nsec: RECV_STEP.subsec_nanos().into(),
        };
        loop {
            if self.unlocked.load(Ordering::SeqCst) {
                return Err(gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("interrupted")
                ));
            }
            let mut fds = [PollFd::new(stream, PollFlags::IN)];
            match poll(&mut fds, Some(&step)) {
                Ok(n) if n > 0 => return Ok(()),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(gst::error_msg!(
                        gst::ResourceError::OpenRead,
                        ("waiting for {address}: {e}")
                    ))
                }
            }
            if Instant::now() >= deadline {
                return Err(gst::error_msg!(
                    gst::ResourceError::OpenRead,
                    ("{address} accepted but sent no set-up in time")
                ));
            }
        }
    }

    /// The next frame of the channel, or why the stream ends.
    fn next_frame(&self, r: &mut Receiving) -> Result<Frame, gst::FlowError> {
        loop {
            if self.unlocked.load(Ordering::SeqCst) {
                return Err(gst::FlowError::Flushing);
            }
            match r.consumer.recv(Wait::Sleep(RECV_STEP)) {
                Ok(frame) => return Ok(frame),
                Err(hwtensor::Error::Timeout(_)) => continue,
                Err(hwtensor::Error::PeerLeft(why)) => {
                    gst::element_imp_error!(
                        self,
                        gst::ResourceError::Read,
                        ("the producer left the channel before the end of the stream: {why}")
                    );
                    return Err(gst::FlowError::Error);
                }
                Err(e) => {
                    gst::element_imp_error!(self, gst::ResourceError::Read, ("{e}"));
                    return Err(gst::FlowError::Error);
                }
            }
        }
    }

    /// The buffer downstream gets for `frame`: the slot's own buffer, or a copy of a GPU frame.
    /// Never a buffer that does not hold what the caps say: a frame of another picture than the
    /// channel's is an error (a producer changes pictures by reconnecting), and a frame at a
    /// layout downstream cannot read (no `GstVideoMeta` there) is copied into the caps' own.
    fn buffer_of(&self, r: &mut Receiving, frame: Frame) -> Result<gst::Buffer, gst::FlowError> {
        match r.fit(frame.slot(), frame.tensor()) {
            Fit::OtherPicture => {
                let (got, want) = (describe(frame.tensor()), describe(&r.consumer.pool()[0]));
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Format,
                    ("the producer sent a frame of {got} in a channel of {want}; a producer \
                      that changes pictures reconnects")
                );
                return Err(gst::FlowError::Error);
            }
            Fit::OtherLayout if !self.downstream_meta.load(Ordering::Relaxed) => {
                let buffer =
                    crate::copy::out_of_in_layout(frame.tensor(), &r.info).map_err(|e| {
                        gst::element_imp_error!(self, gst::ResourceError::Read, ("{e}"));
                        gst::FlowError::Error
                    })?;
                self.copies.fetch_add(1, Ordering::Relaxed);
                return Ok(buffer);
            }
            Fit::Caps | Fit::OtherLayout => {}
        }
        // Lending the last slot downstream would leave the producer none to write into until
        // downstream lets go (filesink batches small buffers, a queue holds many): that frame
        // is copied and handed back at once, as v4l2src does when its pool runs low.
        let frame = match &r.pool {
            Some((pool, downstream)) => {
                let mut lending = downstream.lend(frame);
                if let Lending::NotOurs(frame) = lending {
                    self.take_added(r, pool, downstream);
                    lending = downstream.lend(frame);
                }
                match lending {
                    Lending::Lent => return pool.acquire_buffer(None),
                    Lending::Copy(frame) | Lending::NotOurs(frame) => frame,
                }
            }
            None => frame,
        };
        let buffer = crate::copy::out_of(frame.tensor()).map_err(|e| {
            gst::element_imp_error!(self, gst::ResourceError::Read, ("{e}"));
            gst::FlowError::Error
        })?;
        self.copies.fetch_add(1, Ordering::Relaxed);
        Ok(buffer)
    }

    /// Makes buffers of the pool for the buffers the producer added since (a sink adopting
    /// upstream's own buffers, `Producer::add`), those of the negotiated picture; a frame in
    /// one that is not stays a copy.
    fn take_added(&self, r: &Receiving, pool: &SlotPool, downstream: &Downstream) {
        let channel = r.consumer.pool();
        while downstream.len() < channel.len() {
            let t = &channel[downstream.len()];
            if picture(t) != picture(&channel[0]) {
                return;
            }
            match pool.add_slot(t.clone()) {
                Ok(_) => downstream.grow(),
                Err(e) => {
                    gst::warning!(CAT, imp = self, "an added buffer stays copied: {e}");
                    return;
                }
            }
        }
    }
}

/// The caps of a channel's images. One caps for every frame: a pool whose images differ
/// would hand downstream buffers smaller than the caps say (a broken or hostile producer).
/// Their layouts may differ (each slot's buffer carries its own `GstVideoMeta`): a sink that
/// adopted upstream's buffers lends them beside its own, at upstream's strides, on shm or
/// DMA-BUF.
fn one_caps(pool: &[TensorDyn]) -> Result<gst::Caps, String> {
    let first = pool.first().ok_or("the channel has no buffers")?;
    let same = |t: &TensorDyn| picture(t) == picture(first);
    if !pool.iter().all(same) {
        return Err(
            "the producer's buffers are not all the same image; hwtensorsrc needs one caps".into(),
        );
    }
    crate::caps::caps_of(first)
}

/// The caps' fields that describe the stream rather than its pictures: what the producer's own
/// caps carry on, where the pool does not say them.
const STREAM_FIELDS: &[&str] = &[
    "framerate",
    "pixel-aspect-ratio",
    "interlace-mode",
    "colorimetry",
    "chroma-site",
    "multiview-mode",
    "multiview-flags",
];

/// `caps` (made from the pool: format and size, frame rate unknown) with the stream fields of
/// the producer's own caps, where its stream description is caps of the same picture
/// (`hwtensorsink` sends its caps; another producer may send nothing, or anything, which is
/// then left out).
fn with_stream_fields(mut caps: gst::Caps, info: &[u8]) -> gst::Caps {
    let theirs = std::str::from_utf8(info)
        .ok()
        .and_then(|s| gst::Caps::from_str(s).ok());
    let Some(theirs) = theirs else {
        return caps;
    };
    let (Some(s), Some(ours)) = (theirs.structure(0), caps.structure(0)) else {
        return caps;
    };
    let field = |st: &gst::StructureRef, f: &str| st.value(f).ok().and_then(|v| v.serialize().ok());
    let same_picture = ["format", "width", "height"]
        .into_iter()
        .all(|f| field(s, f) == field(ours, f));
    if s.name() != ours.name() || !same_picture {
        return caps;
    }
    let fields: Vec<(&str, gst::glib::SendValue)> = STREAM_FIELDS
        .iter()
        .filter_map(|&f| s.value(f).ok().map(|v| (f, v.clone())))
        .collect();
    if let Some(out) = caps.make_mut().structure_mut(0) {
        for (f, v) in fields {
            out.set_value(f, v);
        }
    }
    caps
}

/// What buffers of one caps share: the picture, the element type, and whether the memory is
/// the device's (lent downstream as copies) or the host's (lent as fd memory at any layout).
/// What a slot's frames are to the negotiated caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fit {
    /// The caps' picture in their default layout: any downstream reads it.
    Caps,
    /// The caps' picture in a layout of its own: for a downstream that reads `GstVideoMeta`.
    OtherLayout,
    /// Another picture (a buffer the producer added for one): never pushed under these caps.
    OtherPicture,
}

impl Receiving {
    /// What slot `slot`'s frames (`t`) are to the caps, judged once per slot.
    fn fit(&mut self, slot: usize, t: &TensorDyn) -> Fit {
        if let Some(Some(fit)) = self.fits.get(slot) {
            return *fit;
        }
        let fit = if picture(t) != picture(&self.consumer.pool()[0]) {
            Fit::OtherPicture
        } else if crate::copy::in_default_layout(t, &self.info) {
            Fit::Caps
        } else {
            Fit::OtherLayout
        };
        if self.fits.len() <= slot {
            self.fits.resize(slot + 1, None);
        }
        self.fits[slot] = Some(fit);
        fit
    }
}

/// The picture of `t` in words ("64x48 BGRx"), for errors.
fn describe(t: &TensorDyn) -> String {
    match t.image_info() {
        Some(i) => format!("{}x{} {}", i.width, i.height, i.format),
        None => format!("a plain {:?} tensor", t.shape()),
    }
}

fn picture(t: &TensorDyn) -> impl PartialEq {
    let on_device = matches!(t.memory(), TensorMemory::Gpu | TensorMemory::Cuda);
    let image = t
        .image_info()
        .map(|i| (i.format, i.width, i.height, i.modifier));
    (image, t.dtype(), on_device)
}

/// A pool lending the channel's buffers downstream, active for `caps`.
fn lend(pool: &[TensorDyn], caps: &gst::Caps) -> Result<(SlotPool, Arc<Downstream>), String> {
    let downstream = Arc::new(Downstream::new(pool.len()));
    let lender = Box::new(SrcLender(downstream.clone()));
    let slots = SlotPool::new(pool.to_vec(), lender, Side::Source)?;
    slots.activate(caps)?;
    Ok((slots, downstream))
}

#[glib::object_subclass]
impl ObjectSubclass for HwtensorSrc {
    const NAME: &'static str = "GstHwtensorSrc";
    type Type = super::HwtensorSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for HwtensorSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                props::socket("The producer's socket: a path, or @name for an abstract socket"),
                props::timeout(
                    "Milliseconds to wait for a producer to listen and attach",
                    DEFAULT_TIMEOUT_MS,
                ),
                glib::ParamSpecBoolean::builder("is-live")
                    .nick("Is live")
                    .blurb("Act as a live source: frames are timestamped on arrival")
                    .default_value(true)
                    .mutable_ready()
                    .build(),
                props::counter(
                    "copies",
                    "Copies",
                    "Frames copied into system memory: GPU frames, and frames that came while \
                     downstream held every other buffer",
                ),
                props::counter("frames", "Frames", "Frames pushed"),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = self.settings.lock().unwrap();
        match pspec.name() {
            "socket" => s.socket = props::socket_of(value),
            "timeout" => s.timeout = props::millis_of(value),
            "is-live" => {
                s.is_live = value.get().unwrap();
                self.live.store(s.is_live, Ordering::Relaxed);
                self.obj().set_live(s.is_live);
                self.obj().set_do_timestamp(s.is_live);
            }
            other => unreachable!("no writable property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = self.settings.lock().unwrap();
        match pspec.name() {
            "socket" => props::socket_value(&s.socket),
            "timeout" => props::millis_value(s.timeout),
            "is-live" => s.is_live.to_value(),
            "copies" => self.copies.load(Ordering::Relaxed).to_value(),
            "frames" => self.frames.load(Ordering::Relaxed).to_value(),
            other => unreachable!("no property {other}"),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.set_format(gst::Format::Time);
        obj.set_live(true);
        obj.set_do_timestamp(true);
        self.live.store(true, Ordering::Relaxed);
    }
}

impl GstObjectImpl for HwtensorSrc {}

impl ElementImpl for HwtensorSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "hwtensor channel source",
                "Source/Video",
                "Attaches to a hwtensor channel and pushes each frame as a buffer whose fd \
                 memory is the frame's own (shared memory or DMA-BUF, with GstVideoMeta); the \
                 buffer's last unref hands the frame back. GPU frames come as system-memory \
                 copies through the CPU map: GStreamer 1.22's CUDA and Vulkan memory cannot \
                 import external memory.",
                "The hwtensor developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &crate::caps::template(),
            )
            .unwrap()]
        });
        TEMPLATES.as_ref()
    }
}

impl BaseSrcImpl for HwtensorSrc {
    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let reads_meta = query
            .find_allocation_meta::<gst_video::VideoMeta>()
            .is_some();
        self.downstream_meta.store(reads_meta, Ordering::Relaxed);
        self.parent_decide_allocation(query)
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let r = self.connect()?;
        *self.receiving.lock().unwrap() = Some(r);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        self.receiving.lock().unwrap().take();
        Ok(())
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let caps = match self.receiving.lock().unwrap().as_ref() {
            Some(r) => r.caps.clone(),
            None => crate::caps::template(),
        };
        Some(match filter {
            Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
            None => caps,
        })
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.unlocked.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.unlocked.store(false, Ordering::SeqCst);
        Ok(())
    }
}

impl PushSrcImpl for HwtensorSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        // A loop, not a call of itself per reconnect: a producer that attaches and leaves
        // thousands of times a second nested `create` until the stack overflowed (SIGSEGV).
        loop {
            let mut guard = self.receiving.lock().unwrap();
            let r = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
            let frame = self.next_frame(r)?;
            let received = crate::stamp::monotonic_ns();
            let marker = match frame.meta().marker() {
                Ok(marker) => marker,
                Err(e) => {
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Decode,
                        ("{}; is the producer newer?", e)
                    );
                    return Err(gst::FlowError::Error);
                }
            };
            match marker.kind {
                FrameKind::EndOfStream => return Err(gst::FlowError::Eos),
                FrameKind::CapsChange => {
                    drop(frame);
                    *r = self.connect().map_err(|e| {
                        self.post_error_message(e);
                        gst::FlowError::Error
                    })?;
                    let caps = r.caps.clone();
                    drop(guard);
                    self.obj()
                        .set_caps(&caps)
                        .map_err(|_| gst::FlowError::NotNegotiated)?;
                    continue; // the frame after the new caps, from the new channel
                }
                FrameKind::Frame => {}
            }
            let sent = frame.meta().timestamp_ns;
            let mut buffer = self.buffer_of(r, frame)?;
            let b = buffer.get_mut().ok_or(gst::FlowError::Error)?;
            crate::stamp::stamp(b, sent, received);
            if !self.live.load(Ordering::Relaxed) {
                b.set_pts(marker.pts_ns.map(gst::ClockTime::from_nseconds));
                b.set_duration(marker.duration_ns.map(gst::ClockTime::from_nseconds));
            }
            self.frames.fetch_add(1, Ordering::Relaxed);
            return Ok(CreateSuccess::NewBuffer(buffer));
        }
    }
}
