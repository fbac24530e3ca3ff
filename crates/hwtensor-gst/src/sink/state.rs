//! The sink's state: the channel of the current caps, the consumers waiting for one, the frame
//! count. One type with methods, behind one lock (`Hub::state`), in the shape of
//! gst-plugins-rs's `generic/inter`: the element, its buffer pool and its accept thread ask
//! the state to do things and never edit its fields, so what must change together (a slot
//! sent and marked held, a channel replaced and its consumers told) changes together.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use hwtensor::stream::{FrameKind, Marker, Producer, Slot};

use super::adopt::Adopted;
use super::CAT;
use crate::caps::Geometry;
use crate::slots::SlotPool;

/// The channel of the current caps.
pub(super) struct Channel {
    producer: Producer,
    geometry: Geometry,
    info: gst_video::VideoInfo,
    pool: SlotPool,
    /// Slots sent since GStreamer last lent their buffer: consumers hold them now.
    sent: Vec<bool>,
    /// Which channel this is: a buffer of a replaced channel's pool that comes back late
    /// must not touch the slots of the new one.
    generation: u64,
    /// Upstream's own fd buffers this channel took in (see `adopt`).
    adopted: Adopted,
}

impl Channel {
    /// A channel of `producer` over `pool` for frames of `geometry`.
    pub(super) fn new(
        producer: Producer,
        geometry: Geometry,
        info: gst_video::VideoInfo,
        pool: SlotPool,
        generation: u64,
    ) -> Channel {
        Channel {
            sent: vec![false; pool.slots()],
            producer,
            geometry,
            info,
            pool,
            generation,
            adopted: Adopted::default(),
        }
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes a free slot, waiting at most `step` for a consumer to hand one back.
    pub(super) fn acquire(&mut self, step: Duration) -> hwtensor::Result<usize> {
        self.producer.acquire(step).map(|slot| slot.index())
    }

    /// Takes the adopted buffer's `slot` once consumers handed it back (a timeout: not yet).
    pub(super) fn acquire_adopted(&mut self, slot: Slot) -> hwtensor::Result<()> {
        self.adopted.release_returned(&mut self.producer);
        self.producer.acquire_slot(slot, Duration::ZERO)
    }

    /// GStreamer gave slot `index`'s buffer back: a slot lent and never rendered goes back to
    /// the channel; a sent one is the consumers' until they hand it back.
    pub(super) fn buffer_returned(&mut self, index: usize) {
        if !std::mem::take(&mut self.sent[index]) {
            self.release(index);
        }
    }

    /// Gives slot `index` back to the free list.
    pub(super) fn release(&mut self, index: usize) {
        if let Some(slot) = self.producer.slot(index) {
            self.producer.release(slot);
        }
    }

    /// Sends a frame of `kind` (end of stream, caps change) to the consumers, waiting for a
    /// free buffer at most `timeout`.
    fn say(&mut self, kind: FrameKind, timeout: Duration) {
        if self.producer.consumers() == 0 {
            return;
        }
        let sent = self
            .producer
            .acquire(timeout)
            .and_then(|slot| self.producer.send(slot, Marker::of(kind).meta(u64::MAX)));
        if let Err(e) = sent {
            gst::warning!(CAT, "telling consumers of {kind:?}: {e}");
        }
    }
}

/// Where a frame upstream rendered goes ([`State::route`]).
pub(super) enum Route {
    /// It is in slot `index` of the channel's pool (`intact`: in the slot's own memory,
    /// else upstream put a copy in its place and the frame is copied into the slot).
    Slot { index: usize, intact: bool },
    /// Nobody consumes: nothing to do.
    Nobody,
    /// Upstream's own fd buffer, taken in as `slot` of channel `generation`.
    Adopted { slot: Slot, generation: u64 },
    /// Into a free slot by a copy, for the reason given.
    Copy(String),
}

/// Why a frame was not published ([`State::publish`]).
pub(super) enum NotPublished {
    /// The element has no channel (no caps yet, or stopped).
    NoChannel,
    /// The slot is not one of the channel's.
    NoSlot,
    /// Copying the frame into the slot failed.
    Copy(String),
    /// The channel refused the frame.
    Send(String),
}

/// The sink's state, behind `Hub::state`.
#[derive(Default)]
pub(super) struct State {
    channel: Option<Channel>,
    /// Consumers that connected before there were caps to make a channel for.
    waiting: Vec<UnixStream>,
    seq: u64,
    generations: u64,
}

impl State {
    /// Whether the current channel carries frames of `geometry`.
    pub(super) fn carries(&self, geometry: &Geometry) -> bool {
        self.channel
            .as_ref()
            .is_some_and(|ch| ch.geometry == *geometry)
    }

    /// Ends the current channel, telling its consumers (within `timeout`) to connect again.
    pub(super) fn close(&mut self, timeout: Duration) {
        if let Some(mut old) = self.channel.take() {
            old.say(FrameKind::CapsChange, timeout);
        }
    }

    /// The generation the next channel is: one past every channel before.
    pub(super) fn next_generation(&mut self) -> u64 {
        self.generations += 1;
        self.generations
    }

    /// Attaches the consumers that waited for a channel to `producer`; the refusals.
    pub(super) fn attach_waiting(&mut self, producer: &mut Producer) -> Vec<hwtensor::Error> {
        self.waiting
            .drain(..)
            .filter_map(|stream| producer.attach(stream).err())
            .collect()
    }

    /// Makes `channel` the current one.
    pub(super) fn open(&mut self, channel: Channel) {
        self.channel = Some(channel);
    }

    /// The element stops: consumers see the producer leave; waiting ones are let go.
    pub(super) fn stop(&mut self) {
        self.channel = None;
        self.waiting.clear();
    }

    /// Consumers attached to the current channel.
    pub(super) fn consumers(&self) -> usize {
        self.channel
            .as_ref()
            .map_or(0, |ch| ch.producer.consumers())
    }

    /// The current channel.
    pub(super) fn current(&mut self) -> Option<&mut Channel> {
        self.channel.as_mut()
    }

    /// The current channel if it is channel `generation`.
    pub(super) fn channel_of(&mut self, generation: u64) -> Option<&mut Channel> {
        self.channel
            .as_mut()
            .filter(|ch| ch.generation == generation)
    }

    /// A consumer connected: attached to the current channel, or kept until there is one.
    pub(super) fn connect(&mut self, stream: UnixStream) -> hwtensor::Result<()> {
        match self.channel.as_mut() {
            Some(ch) => ch.producer.attach(stream),
            None => {
                self.waiting.push(stream);
                Ok(())
            }
        }
    }

    /// Gives upstream back the adopted buffers consumers handed back.
    pub(super) fn release_returned(&mut self) {
        if let Some(ch) = self.channel.as_mut() {
            ch.adopted.release_returned(&mut ch.producer);
        }
    }

    /// What an allocation query is answered with: the pool, its buffers' size and count.
    pub(super) fn allocation(&self) -> Option<(SlotPool, usize, u32)> {
        let ch = self.channel.as_ref()?;
        let size = ch.pool.slot_size().unwrap_or(ch.info.size());
        Some((ch.pool.clone(), size, ch.sent.len() as u32))
    }

    /// Where a frame upstream rendered in `buffer` goes.
    pub(super) fn route(&mut self, buffer: &gst::Buffer) -> Option<Route> {
        let ch = self.channel.as_mut()?;
        if let Some((index, intact)) = ch.pool.slot_of(buffer) {
            return Some(Route::Slot { index, intact });
        }
        if ch.producer.consumers() == 0 {
            return Some(Route::Nobody);
        }
        ch.adopted.release_returned(&mut ch.producer);
        let adopted = ch
            .adopted
            .slot_for(&mut ch.producer, &ch.geometry, &ch.info, buffer);
        Some(match adopted {
            Ok(slot) => Route::Adopted {
                slot,
                generation: ch.generation,
            },
            Err(why) => Route::Copy(why),
        })
    }

    /// Sends slot `index` of the current channel to its consumers, first copying the frame of
    /// `copy` into it when upstream wrote it elsewhere. On failure the slot stays acquired:
    /// the caller gives it back as the slot's origin says (see `release`, `buffer_returned`).
    pub(super) fn publish(
        &mut self,
        index: usize,
        copy: Option<&gst::BufferRef>,
        marker: Marker,
    ) -> Result<(), NotPublished> {
        let seq = self.seq;
        let ch = self.channel.as_mut().ok_or(NotPublished::NoChannel)?;
        let slot = ch.producer.slot(index).ok_or(NotPublished::NoSlot)?;
        if let Some(buffer) = copy {
            let tensor = ch.producer.tensor(slot).clone();
            crate::copy::into_slot(buffer, &ch.info, &tensor)
                .map_err(|e| NotPublished::Copy(e.to_string()))?;
        }
        ch.producer
            .send(slot, marker.meta(seq))
            .map_err(|e| NotPublished::Send(e.to_string()))?;
        self.seq += 1;
        Ok(())
    }

    /// Gives slot `index` of the current channel back to the free list (a frame for it that
    /// did not go out).
    pub(super) fn release(&mut self, index: usize) {
        if let Some(ch) = self.channel.as_mut() {
            ch.release(index);
        }
    }

    /// Slot `index`, lent to GStreamer and rendered, is the consumers' now.
    pub(super) fn sent_from_pool(&mut self, index: usize) {
        if let Some(ch) = self.channel.as_mut() {
            ch.sent[index] = true;
        }
    }

    /// Adopted `slot` went out: upstream's `buffer` is held until consumers hand it back.
    pub(super) fn hold_adopted(&mut self, slot: Slot, buffer: gst::Buffer) {
        if let Some(ch) = self.channel.as_mut() {
            ch.adopted.hold(slot, buffer);
        }
    }

    /// Tells the consumers the stream ended.
    pub(super) fn end_of_stream(&mut self, timeout: Duration) {
        if let Some(ch) = self.channel.as_mut() {
            ch.say(FrameKind::EndOfStream, timeout);
        }
    }
}
