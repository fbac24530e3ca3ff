//! The sink element: its properties, caps, allocation answer and rendering.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;
use hwtensor::stream::{Access, Peers, Producer};

use super::adopt::ADOPT_ROOM;
use super::channel::{accept_loop, pool_tensor, Hub, Listening, NoBuffer, SinkLender, POLL};
use super::state::{Channel, NotPublished, Route, State};
use super::{PoolMemory, WhenFull, CAT};
use crate::caps;
use crate::props;
use crate::slots::{Side, SlotPool};
use crate::socket::Address;
use hwtensor::stream::{FrameKind, Marker};

/// Three buffers: one being written, one in flight, one being read.
const DEFAULT_POOL_SIZE: u32 = 3;
/// The most a pool may hold: the channel's ring capacity.
const MAX_POOL_SIZE: u32 = 64;
/// How long `when-full=block` waits for a consumer to hand a buffer back.
const DEFAULT_TIMEOUT_MS: u32 = 5000;

#[derive(Clone, Debug)]
struct Settings {
    socket: String,
    pool_size: u32,
    memory: PoolMemory,
    flow: Flow,
    /// Consumers admitted besides this process's user (`allow-uids`, `allow-gids`,
    /// `allow-anyone`), and whether they may write the pool (`consumers-write`).
    allow_uids: Vec<u32>,
    allow_gids: Vec<u32>,
    allow_anyone: bool,
    consumers_write: bool,
}

impl Settings {
    /// The channel's attach policy these properties say.
    fn access(&self) -> Access {
        let mut who = if self.allow_anyone {
            Peers::any()
        } else {
            Peers::own_user()
        };
        for &u in &self.allow_uids {
            who = who.with_uid(u);
        }
        for &g in &self.allow_gids {
            who = who.with_gid(g);
        }
        let access = Access::default().with_attach(who.clone());
        match self.consumers_write {
            true => access.with_writers(who),
            false => access,
        }
    }
}

/// A list of ids as the property reads back ("1001,1002").
fn ids_value(ids: &[u32]) -> glib::Value {
    let text: Vec<String> = ids.iter().map(u32::to_string).collect();
    text.join(",").to_value()
}

/// The ids of a comma-separated list ("1001,1002"; empty: none), or what is wrong with it.
fn id_list(text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| format!("{t:?} is not a numeric id"))
        })
        .collect()
}

/// The settings each frame reads: copied out of the lock, nothing allocated per frame.
#[derive(Clone, Copy, Debug)]
struct Flow {
    wait_for_consumer: bool,
    when_full: WhenFull,
    timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            socket: String::new(),
            pool_size: DEFAULT_POOL_SIZE,
            memory: PoolMemory::Shm,
            flow: Flow {
                wait_for_consumer: false,
                when_full: WhenFull::Block,
                timeout: Duration::from_millis(u64::from(DEFAULT_TIMEOUT_MS)),
            },
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            allow_anyone: false,
            consumers_write: false,
        }
    }
}

#[derive(Default)]
pub struct HwtensorSink {
    settings: Mutex<Settings>,
    hub: Arc<Hub>,
    listening: Mutex<Option<Listening>>,
    copies: AtomicU64,
    dropped: AtomicU64,
    frames: AtomicU64,
    told_of_copies: AtomicBool,
}

impl HwtensorSink {
    /// Makes the channel for `caps` unless the current one carries them; the consumers of a
    /// channel being replaced are told to connect again.
    fn ensure_channel(&self, caps: &gst::CapsRef) -> Result<(), String> {
        let (geometry, info) = caps::geometry(caps)?;
        let settings = self.settings.lock().unwrap().clone();
        let mut s = self.hub.state();
        if s.carries(&geometry) {
            return Ok(());
        }
        s.close(settings.flow.timeout);
        let tensors = (0..settings.pool_size)
            .map(|_| pool_tensor(&geometry, settings.memory))
            .collect::<hwtensor::Result<Vec<_>>>()
            .map_err(|e| format!("allocating the channel's pool: {e}"))?;
        let room = tensors.len() + ADOPT_ROOM;
        let mut producer = Producer::with_room(tensors.clone(), room).map_err(|e| e.to_string())?;
        producer.set_access(settings.access());
        // The caps travel to each consumer: a source downstream takes the frame rate and the
        // colorimetry on from them (a capsfilter or encoder there needs the frame rate).
        producer
            .set_stream_info(caps.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        for e in s.attach_waiting(&mut producer) {
            self.hub.count_refusal(&e);
            gst::warning!(CAT, imp = self, "a consumer could not attach: {e}");
        }
        let generation = s.next_generation();
        let lender = SinkLender {
            hub: Arc::downgrade(&self.hub),
            element: self.obj().downgrade(),
            generation,
            when_full: settings.flow.when_full,
            timeout: settings.flow.timeout,
        };
        let pool = SlotPool::new(tensors, Box::new(lender), Side::Sink)?;
        if geometry.gst_stride.is_none() {
            pool.require_video_meta();
        }
        s.open(Channel::new(producer, geometry, info, pool, generation));
        gst::info!(CAT, imp = self, "channel for {caps}");
        Ok(())
    }

    fn wait_for_consumer(&self) -> Result<(), gst::FlowError> {
        loop {
            if self.hub.unlocked.load(Ordering::SeqCst) {
                return Err(gst::FlowError::Flushing);
            }
            if self.hub.state().consumers() > 0 {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }

    /// Publishes a frame upstream wrote into memory that is not the channel's: one copy.
    fn render_copy(
        &self,
        buffer: &gst::BufferRef,
        marker: Marker,
        flow: Flow,
    ) -> Result<(), gst::FlowError> {
        let never = AtomicBool::new(false);
        let acquired = self.hub.acquire(flow.when_full, flow.timeout, &never, None);
        let Some(index) = self.buffer_for_frame(acquired)? else {
            return Ok(()); // dropped
        };
        let mut s = self.hub.state();
        let published = self.publish(&mut s, index, Some(buffer), marker);
        // A frame that could not go out leaves its slot free again.
        if published.is_err() {
            s.release(index);
        }
        published
    }

    /// What a wait for a buffer to publish a frame in came to: the buffer, `None` for a frame
    /// dropped (counted), or the flow error (an element error posted for a failure).
    fn buffer_for_frame<T>(
        &self,
        acquired: Result<Option<T>, NoBuffer>,
    ) -> Result<Option<T>, gst::FlowError> {
        match acquired {
            Ok(Some(got)) => Ok(Some(got)),
            Ok(None) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            Err(NoBuffer::Flushing) => Err(gst::FlowError::Flushing),
            Err(NoBuffer::Failed(why)) => {
                gst::element_imp_error!(self, gst::ResourceError::Write, ("{why}"));
                Err(gst::FlowError::Error)
            }
        }
    }

    /// Publishes a frame upstream wrote into its own fd buffer, adopted as `slot` of channel
    /// `generation`: no copy; upstream's buffer is held until consumers hand the slot back.
    /// Upstream had this buffer back, so its consumers had handed the slot back, unless one
    /// keeps frames: then the frame waits as `when-full` says (dropped, or at most the
    /// timeout), never holding the sink's lock (a state change ends the wait at once).
    fn render_adopted(
        &self,
        slot: hwtensor::stream::Slot,
        generation: u64,
        buffer: &gst::Buffer,
        marker: Marker,
        flow: Flow,
    ) -> Result<(), gst::FlowError> {
        let acquired = self
            .hub
            .acquire_adopted(slot, generation, flow.when_full, flow.timeout);
        if self.buffer_for_frame(acquired)?.is_none() {
            return Ok(()); // dropped
        }
        let mut s = self.hub.state();
        let published = self.publish(&mut s, slot.index(), None, marker);
        match &published {
            Ok(()) => s.hold_adopted(slot, buffer.clone()),
            Err(_) => s.release(slot.index()),
        }
        published
    }

    /// Sends slot `index` of the current channel to its consumers (the state's `publish`),
    /// counting a copy and posting an element error for a failure.
    fn publish(
        &self,
        s: &mut State,
        index: usize,
        copy: Option<&gst::BufferRef>,
        marker: Marker,
    ) -> Result<(), gst::FlowError> {
        let published = s.publish(index, copy, marker);
        if copy.is_some() && matches!(published, Ok(()) | Err(NotPublished::Send(_))) {
            self.counted_copy();
        }
        published.map_err(|why| match why {
            NotPublished::NoChannel => gst::FlowError::NotNegotiated,
            NotPublished::NoSlot => gst::FlowError::Error,
            NotPublished::Copy(e) => {
                gst::element_imp_error!(self, gst::StreamError::Format, ("{e}"));
                gst::FlowError::Error
            }
            NotPublished::Send(e) => {
                gst::element_imp_error!(self, gst::ResourceError::Write, ("{e}"));
                gst::FlowError::Error
            }
        })
    }
}

impl HwtensorSink {
    /// Counts a copied frame, and says once why frames are copied.
    fn counted_copy(&self) {
        if !self.told_of_copies.swap(true, Ordering::Relaxed) {
            gst::warning!(
                CAT,
                imp = self,
                "upstream writes into its own memory, not fd memory the channel can adopt, so \
                 each frame is copied once into the channel; let it use this sink's pool \
                 (answered in the allocation query) to avoid the copy"
            );
        }
        self.copies.fetch_add(1, Ordering::Relaxed);
    }
}

#[glib::object_subclass]
impl ObjectSubclass for HwtensorSink {
    const NAME: &'static str = "GstHwtensorSink";
    type Type = super::HwtensorSink;
    type ParentType = gst_base::BaseSink;
}

impl ObjectImpl for HwtensorSink {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                props::socket("Where consumers connect: a socket path, or @name for an abstract socket"),
                glib::ParamSpecUInt::builder("pool-size")
                    .nick("Pool size")
                    .blurb("Buffers in the channel's pool")
                    .minimum(1)
                    .maximum(MAX_POOL_SIZE)
                    .default_value(DEFAULT_POOL_SIZE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("memory", PoolMemory::Shm)
                    .nick("Memory")
                    .blurb("What the channel's buffers are: shm, dmabuf (for hardware importers), or auto")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("wait-for-consumer")
                    .nick("Wait for consumer")
                    .blurb("Hold the first frame until a consumer attaches")
                    .default_value(false)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("when-full", WhenFull::Block)
                    .nick("When full")
                    .blurb("What to do with a frame when consumers hold every buffer")
                    .mutable_ready()
                    .build(),
                props::timeout(
                    "Milliseconds when-full=block waits for a buffer before failing",
                    DEFAULT_TIMEOUT_MS,
                ),
                props::counter(
                    "copies",
                    "Copies",
                    "Frames copied into the channel because upstream wrote elsewhere",
                ),
                props::counter(
                    "dropped",
                    "Dropped",
                    "Frames dropped because consumers held every buffer",
                ),
                props::counter("frames", "Frames", "Frames published"),
                glib::ParamSpecString::builder("allow-uids")
                    .nick("Allow uids")
                    .blurb("Comma-separated users whose consumers may attach, besides this process's own")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("allow-gids")
                    .nick("Allow gids")
                    .blurb("Comma-separated primary groups whose consumers may attach")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("allow-anyone")
                    .nick("Allow anyone")
                    .blurb("Let a consumer of any user attach (an abstract socket has no permissions)")
                    .default_value(false)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("consumers-write")
                    .nick("Consumers write")
                    .blurb("Let admitted consumers that ask to write the pool do so (default: read-only)")
                    .default_value(false)
                    .mutable_ready()
                    .build(),
                props::counter(
                    "refused",
                    "Refused",
                    "Consumers the attach policy refused",
                ),
                glib::ParamSpecUInt::builder("consumers")
                    .nick("Consumers")
                    .blurb("Consumers attached now")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = self.settings.lock().unwrap();
        match pspec.name() {
            "socket" => s.socket = props::socket_of(value),
            "pool-size" => s.pool_size = value.get().unwrap(),
            "memory" => s.memory = value.get().unwrap(),
            "wait-for-consumer" => s.flow.wait_for_consumer = value.get().unwrap(),
            "when-full" => s.flow.when_full = value.get().unwrap(),
            "timeout" => s.flow.timeout = props::millis_of(value),
            "allow-uids" | "allow-gids" => {
                let text = value.get::<Option<String>>().unwrap().unwrap_or_default();
                match id_list(&text) {
                    Ok(ids) if pspec.name() == "allow-uids" => s.allow_uids = ids,
                    Ok(ids) => s.allow_gids = ids,
                    Err(why) => gst::error!(CAT, imp = self, "{}: {why}; kept", pspec.name()),
                }
            }
            "allow-anyone" => s.allow_anyone = value.get().unwrap(),
            "consumers-write" => s.consumers_write = value.get().unwrap(),
            other => unreachable!("no writable property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = self.settings.lock().unwrap();
        match pspec.name() {
            "socket" => props::socket_value(&s.socket),
            "pool-size" => s.pool_size.to_value(),
            "memory" => s.memory.to_value(),
            "wait-for-consumer" => s.flow.wait_for_consumer.to_value(),
            "when-full" => s.flow.when_full.to_value(),
            "timeout" => props::millis_value(s.flow.timeout),
            "allow-uids" => ids_value(&s.allow_uids),
            "allow-gids" => ids_value(&s.allow_gids),
            "allow-anyone" => s.allow_anyone.to_value(),
            "consumers-write" => s.consumers_write.to_value(),
            "refused" => self.hub.refused.load(Ordering::Relaxed).to_value(),
            "copies" => self.copies.load(Ordering::Relaxed).to_value(),
            "dropped" => self.dropped.load(Ordering::Relaxed).to_value(),
            "frames" => self.frames.load(Ordering::Relaxed).to_value(),
            "consumers" => (self.hub.state().consumers() as u32).to_value(),
            other => unreachable!("no property {other}"),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        // A sink that keeps the last buffer would hold a slot the channel has handed on.
        self.obj().set_enable_last_sample(false);
        self.obj().set_sync(false);
    }
}

impl GstObjectImpl for HwtensorSink {}

impl ElementImpl for HwtensorSink {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "hwtensor channel sink",
                "Sink/Video",
                "Publishes video frames on a hwtensor channel: a pool of shared buffers lent \
                 once to each consumer process, then each frame an id. Upstream writes into the \
                 pool itself when it takes this sink's buffer pool; its own fd buffers (DMA-BUF, \
                 memfds) are added to the channel as they first come, not copied.",
                "The hwtensor developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "sink",
                gst::PadDirection::Sink,
                gst::PadPresence::Always,
                &caps::template(),
            )
            .unwrap()]
        });
        TEMPLATES.as_ref()
    }
}

impl BaseSinkImpl for HwtensorSink {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let socket = self.settings.lock().unwrap().socket.clone();
        let address = Address::from_property(&socket)
            .map_err(|why| gst::error_msg!(gst::ResourceError::Settings, ("{why}")))?;
        let listener = address
            .bind()
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenWrite,
                    ("listening on {address}: {e}")
                )
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (hub, flag) = (Arc::downgrade(&self.hub), stop.clone());
        let thread = std::thread::Builder::new()
            .name("hwtensorsink-accept".into())
            .spawn(move || accept_loop(listener, hub, flag))
            .map_err(|e| gst::error_msg!(gst::ResourceError::OpenWrite, ("{e}")))?;
        *self.listening.lock().unwrap() = Some(Listening {
            address,
            stop,
            thread: Some(thread),
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        self.listening.lock().unwrap().take();
        self.hub.state().stop();
        Ok(())
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        self.ensure_channel(caps).map_err(|e| {
            gst::element_imp_error!(self, gst::StreamError::Format, ("{e}"));
            gst::loggable_error!(CAT, "{e}")
        })
    }

    fn propose_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let (caps, _need_pool) = query.get_owned();
        let caps =
            caps.ok_or_else(|| gst::loggable_error!(CAT, "allocation query without caps"))?;
        self.ensure_channel(&caps)
            .map_err(|e| gst::loggable_error!(CAT, "{e}"))?;
        // Made just now, unless the element stopped meanwhile.
        let (pool, size, n) = self
            .hub
            .state()
            .allocation()
            .ok_or_else(|| gst::loggable_error!(CAT, "the sink stopped"))?;
        // Where the channel's layout is not GStreamer's default for these caps, the pool
        // refuses a configuration without GstVideoMeta (see `SlotPool::require_video_meta`).
        query.add_allocation_pool(Some(&pool), size as u32, n, n);
        query.add_allocation_meta::<gst_video::VideoMeta>(None);
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let flow = self.settings.lock().unwrap().flow;
        if flow.wait_for_consumer {
            self.wait_for_consumer()?;
        }
        let marker = Marker {
            kind: FrameKind::Frame,
            pts_ns: buffer.pts().map(|t| t.nseconds()),
            duration_ns: buffer.duration().map(|t| t.nseconds()),
        };
        let mut s = self.hub.state();
        match s.route(buffer).ok_or(gst::FlowError::NotNegotiated)? {
            // Our own buffer; if upstream put a copy in place of the slot's memory, the frame
            // is in that copy and goes into the slot first.
            Route::Slot { index, intact } => {
                let copy = (!intact).then_some(buffer.as_ref());
                self.publish(&mut s, index, copy, marker)?;
                s.sent_from_pool(index);
            }
            Route::Nobody => {} // nobody to copy for
            Route::Adopted { slot, generation } => {
                drop(s);
                self.render_adopted(slot, generation, buffer, marker, flow)?;
            }
            Route::Copy(why) => {
                gst::debug!(CAT, imp = self, "upstream's buffer not adopted: {why}");
                drop(s);
                self.render_copy(buffer, marker, flow)?;
            }
        }
        self.frames.fetch_add(1, Ordering::Relaxed);
        Ok(gst::FlowSuccess::Ok)
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            let timeout = self.settings.lock().unwrap().flow.timeout;
            self.hub.state().end_of_stream(timeout);
        }
        self.parent_event(event)
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.hub.unlocked.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.hub.unlocked.store(false, Ordering::SeqCst);
        Ok(())
    }
}
