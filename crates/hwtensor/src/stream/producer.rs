//! The sending side of a channel: the pool, the consumers attached to it, and which of them
//! holds which buffer.

use std::time::{Duration, Instant};

use super::access::{self, Access, Lending, Peer};
use super::info::{self, MAX_STREAM_INFO};
use super::os::{self, Conn, Link};
use super::ring::{self, Entry, Ring};
use super::setup::Refusal;
use super::{FrameMeta, Woken, SPIN};
use crate::{Error, Result, TensorDyn};

/// A buffer of the producer's pool, acquired for writing and not yet sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(u32);

impl Slot {
    /// The buffer's index in the pool.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One consumer as the producer sees it.
#[derive(Debug)]
struct Attached {
    /// The connection the set-up went over; then wake-ups both ways, and word that the
    /// consumer left.
    conn: Conn,
    ring: Ring,
    /// Which buffers this consumer holds.
    holds: Vec<bool>,
    /// How the pool is lent to it.
    lending: Lending,
    /// It runs as the producer's user.
    own_user: bool,
}

/// The sending side of a channel: a pool of buffers, lent to every attached consumer.
#[derive(Debug)]
pub struct Producer {
    pool: Vec<TensorDyn>,
    /// The most buffers the pool may grow to ([`Producer::with_room`]): every consumer's ring
    /// is made for that many.
    room: usize,
    consumers: Vec<Attached>,
    /// How many consumers hold each buffer.
    out: Vec<u32>,
    /// The buffers acquired and not yet sent.
    acquired: Vec<bool>,
    /// How many buffers the pool was made with: those after them came by [`Producer::add`],
    /// and are acquired only by name ([`Producer::acquire_slot`]).
    made_with: usize,
    scratch: Vec<u64>,
    /// Who may attach, and who may write.
    access: Access,
    /// Consumers refused by the attach policy so far.
    refused: u64,
    /// The stream's description, sent to each consumer at attach ([`Producer::set_stream_info`]).
    info: Vec<u8>,
}

impl Producer {
    /// A producer over `pool`: tensors a consumer can import by reference (Linux: memory with
    /// an fd: shm, DMA-BUF, GPU; Windows: shm sections), lent to consumers.
    pub fn new(pool: Vec<TensorDyn>) -> Result<Producer> {
        let room = pool.len();
        Producer::with_room(pool, room)
    }

    /// A producer over `pool` that may grow to `room` buffers with [`Producer::add`], after
    /// consumers attached (a GStreamer sink adopting upstream's own buffers as they come).
    pub fn with_room(pool: Vec<TensorDyn>, room: usize) -> Result<Producer> {
        let n = pool.len();
        let most = ring::MAX_CAPACITY as usize;
        if n == 0 || n > most || room < n || room > most {
            return Err(Error::InvalidArgument(format!(
                "a channel's pool holds 1 to {most} buffers and room for at most {most}, not \
                 {n} with room for {room}"
            )));
        }
        for (i, t) in pool.iter().enumerate() {
            os::lendable(t)?;
            refuse_if_pooled(&pool[..i], t)?;
        }
        Ok(Producer {
            pool,
            room,
            consumers: Vec::new(),
            out: vec![0; n],
            acquired: vec![false; n],
            made_with: n,
            scratch: Vec::new(),
            access: Access::default(),
            refused: 0,
            info: Vec::new(),
        })
    }

    /// The slot of pool buffer `index`, if the pool has one (for callers that keep indices, as
    /// the C ABI does; `send` still refuses a slot that was not acquired).
    pub fn slot(&self, index: usize) -> Option<Slot> {
        (index < self.pool.len()).then_some(Slot(index as u32))
    }

    /// The pool's buffer behind `slot`.
    pub fn tensor(&self, slot: Slot) -> &TensorDyn {
        &self.pool[slot.index()]
    }

    /// Consumers attached now.
    pub fn consumers(&self) -> usize {
        self.consumers.len()
    }

    /// Sets who may attach and who may write the pool (default: [`Access::default`], this
    /// process's user attaches, and every consumer reads only). Applies to consumers that
    /// attach from now on.
    pub fn set_access(&mut self, access: Access) {
        self.access = access;
    }

    /// The attach policy in force.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Sets the stream's description (at most [`MAX_STREAM_INFO`] bytes of the caller's own
    /// format: a GStreamer sink puts its caps here, so a source downstream carries the frame
    /// rate and colorimetry on), which each consumer attaching from now on receives with the
    /// pool ([`super::Consumer::stream_info`]). Empty: none.
    pub fn set_stream_info(&mut self, info: &[u8]) -> Result<()> {
        if info.len() > MAX_STREAM_INFO {
            return Err(Error::InvalidArgument(format!(
                "a stream description holds at most {MAX_STREAM_INFO} bytes, not {}",
                info.len()
            )));
        }
        self.info = info.to_vec();
        Ok(())
    }

    /// How many consumers the attach policy refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Attaches a consumer on a connected socket (a named pipe on Windows): asks the kernel
    /// who the peer is, and sends the set-up and the pool as the attach policy says (read-only
    /// unless the peer may write), or a refusal the consumer reads as `Error::NotPermitted`
    /// (so is the error here; [`Producer::refused`] counts them). Never waits for the consumer:
    /// what it sends waits in the socket.
    pub fn attach(&mut self, stream: Link) -> Result<()> {
        os::room_for_consumer(self.consumers.len())?;
        let peer = os::peer(&stream)?;
        let read_only_lendable = os::read_only_lendable(&self.pool);
        let lending = match access::verdict(&self.access, &peer, read_only_lendable) {
            Ok(lending) => lending,
            Err(refusal) => return Err(self.refuse(stream, refusal, &peer)),
        };
        if lending == Lending::Read && !peer.own_user {
            if let Err(e) = os::guard_from_other_users(&self.pool) {
                self.tell_refused(stream, Refusal::CannotLendReadOnly);
                return Err(e);
            }
        }
        let ring = Ring::create(self.room as u32)?;
        let has_info = !self.info.is_empty();
        let conn = os::send_setup(
            stream,
            ring.capacity(),
            ring.block(),
            &self.pool,
            lending,
            has_info,
        )?;
        for t in &self.pool {
            os::lend(&conn, t, lending)?;
        }
        if has_info {
            info::send(os::link(&conn), &self.info)?;
        }
        self.consumers.push(Attached {
            conn,
            ring,
            holds: vec![false; self.pool.len()],
            lending,
            own_user: peer.own_user,
        });
        Ok(())
    }

    /// Counts a refused consumer and tells it why on `stream` (best effort: it may be gone).
    fn tell_refused(&mut self, stream: Link, refusal: Refusal) {
        self.refused += 1;
        if let Err(e) = os::refuse(stream, refusal) {
            log::warn!("hwtensor: telling a refused consumer so failed: {e}");
        }
    }

    /// Refuses the consumer `peer` on `stream`: tells it why, counts it, and returns the error
    /// (which names the peer's user, for the operator who may admit it).
    fn refuse(&mut self, stream: Link, refusal: Refusal, peer: &Peer) -> Error {
        self.tell_refused(stream, refusal);
        let who = peer
            .uid
            .map_or("a consumer".into(), |u| format!("a consumer of uid {u}"));
        let advice = match refusal {
            Refusal::NotAdmitted => "[[admit_peer]]",
            _ => "[[grant_write]]",
        };
        let error = Error::NotPermitted(format!("refused {who} ({refusal:?}); {advice}"));
        log::warn!("hwtensor: {error}");
        error
    }

    /// Adds `tensor` to the pool, past what consumers received at attach: each attached
    /// consumer is sent it now (a consumer that cannot take it is detached), and one that
    /// attaches later gets it with the rest. Refused past the room the producer was made with,
    /// for GPU or CUDA memory added to a pool without any (its frames' completions need the
    /// fence, which only such a pool sends at set-up), and on Windows (not yet: its hand-off
    /// waits for the receiver).
    pub fn add(&mut self, tensor: TensorDyn) -> Result<Slot> {
        os::can_add()?;
        if self.pool.len() >= self.room {
            return Err(Error::InvalidOperation(format!(
                "the pool holds {} buffers, all the room it was made with \
                 (Producer::with_room)",
                self.pool.len()
            )));
        }
        os::lendable(&tensor)?;
        refuse_if_pooled(&self.pool, &tensor)?;
        if os::needs_fence(std::slice::from_ref(&tensor)) && !os::needs_fence(&self.pool) {
            return Err(Error::InvalidArgument(format!(
                "{} memory cannot join a pool without GPU or CUDA buffers: its completions \
                 need the fence, which this channel's set-up did not send",
                tensor.memory()
            )));
        }
        self.refuse_if_unlendable(&tensor)?;
        let mut broken = Vec::new();
        for (c, consumer) in self.consumers.iter().enumerate() {
            let sent = os::lend(&consumer.conn, &tensor, consumer.lending);
            if let Err(e) = sent {
                log::warn!("hwtensor: detaching a consumer: sending it an added buffer: {e}");
                broken.push(c);
            }
        }
        self.pool.push(tensor);
        self.out.push(0);
        self.acquired.push(false);
        for consumer in &mut self.consumers {
            consumer.holds.push(false);
        }
        for c in broken.into_iter().rev() {
            self.detach(c);
        }
        Ok(Slot((self.pool.len() - 1) as u32))
    }

    /// Refuses an added `tensor` that an attached consumer may not get: memory that cannot be
    /// lent read-only, with a reading consumer of another user attached (or shared memory
    /// whose mode cannot be guarded from it).
    fn refuse_if_unlendable(&self, tensor: &TensorDyn) -> Result<()> {
        let one = std::slice::from_ref(tensor);
        let strangers = self
            .consumers
            .iter()
            .any(|c| c.lending == Lending::Read && !c.own_user);
        if !strangers {
            return Ok(());
        }
        if !os::read_only_lendable(one) {
            return Err(Error::NotPermitted(format!(
                "{} memory cannot be lent read-only, and a reading consumer of another user is \
                 attached",
                tensor.memory()
            )));
        }
        os::guard_from_other_users(one)
    }

    /// A free buffer to write the next frame into: one no consumer holds (of the pool it was
    /// made with: an added buffer is acquired by name). Waits at most `timeout` while
    /// consumers hold every buffer (`Error::Timeout`).
    pub fn acquire(&mut self, timeout: Duration) -> Result<Slot> {
        self.acquire_where(timeout, |p, i| i < p.made_with)
    }

    /// Acquires `slot` (an added buffer, typically: its memory is the adder's) once no
    /// consumer holds it, waiting at most `timeout` (`Error::Timeout`). A slot already
    /// acquired is refused.
    pub fn acquire_slot(&mut self, slot: Slot, timeout: Duration) -> Result<()> {
        let i = slot.index();
        if self.acquired.get(i) != Some(&false) {
            return Err(Error::InvalidOperation(format!(
                "slot {i} is acquired already, or not in the pool"
            )));
        }
        self.acquire_where(timeout, |_, j| j == i).map(|_| ())
    }

    /// Whether a consumer holds `slot` now (hand-backs that came are taken in first).
    pub fn is_held(&mut self, slot: Slot) -> bool {
        self.reclaim();
        self.out.get(slot.index()).is_some_and(|&n| n > 0)
    }

    /// The first free slot `eligible` accepts, acquired, waiting as [`Producer::acquire`] does.
    fn acquire_where(
        &mut self,
        timeout: Duration,
        eligible: impl Fn(&Producer, usize) -> bool,
    ) -> Result<Slot> {
        let deadline = crate::time::deadline_after(timeout);
        let spin_until = crate::time::deadline_after(SPIN.min(timeout));
        loop {
            self.reclaim();
            let free = |i: &usize| self.out[*i] == 0 && !self.acquired[*i] && eligible(self, *i);
            if let Some(i) = (0..self.pool.len()).find(free) {
                self.acquired[i] = true;
                return Ok(Slot(i as u32));
            }
            if Instant::now() < spin_until {
                std::thread::yield_now(); // see `SPIN`
                continue;
            }
            self.sleep_until_handed_back(deadline)?;
        }
    }

    /// Gives back a slot acquired and not sent.
    pub fn release(&mut self, slot: Slot) {
        if let Some(a) = self.acquired.get_mut(slot.index()) {
            *a = false;
        }
    }

    /// Sends the frame in `slot` (acquired, and written) to every attached consumer. A GPU
    /// tensor's last write travels as its completion: consumers wait for it before they read.
    pub fn send(&mut self, slot: Slot, meta: FrameMeta) -> Result<()> {
        let i = slot.index();
        if !self.acquired.get(i).copied().unwrap_or(false) {
            return Err(Error::InvalidOperation(format!(
                "slot {i} was not acquired (or was sent already)"
            )));
        }
        self.acquired[i] = false;
        let completion = os::completion(&self.pool[i])?;
        let entry = Entry {
            slot: slot.0,
            payload_len: u32::from(meta.payload_len),
            seq: meta.seq,
            timestamp_ns: meta.timestamp_ns,
            completion,
            payload: meta.payload,
        };
        let mut broken = Vec::new();
        let mut woke = false;
        for (c, consumer) in self.consumers.iter_mut().enumerate() {
            match consumer.ring.push_frame(entry) {
                Ok(()) => {
                    consumer.holds[i] = true;
                    self.out[i] += 1;
                    if consumer.ring.peer_sleeps(true) {
                        os::wake(&consumer.conn);
                        woke = true;
                    }
                }
                Err(e) => {
                    log::warn!("hwtensor: detaching a consumer: {e}");
                    broken.push(c);
                }
            }
        }
        for c in broken.into_iter().rev() {
            self.detach(c);
        }
        if woke {
            // The kernel tends to wake a consumer on the waker's core; a producer that goes on
            // working (writing its next frame) then holds it off. Yielding once lets it run:
            // 1080p frames paced at 5 ms on 2 cores reached a sleeping consumer in 19 us
            // instead of 113 us (`hwtensor-gst`'s elements_bench). Costs one syscall per wake.
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Takes back the ids consumers handed back, checking each: an id out of range or one the
    /// consumer does not hold detaches that consumer (a broken or hostile peer).
    fn reclaim(&mut self) {
        let mut broken = Vec::new();
        for (c, consumer) in self.consumers.iter_mut().enumerate() {
            self.scratch.clear();
            let drained = consumer.ring.drain_back(&mut self.scratch);
            let bad = drained.err().map(|e| e.to_string()).or_else(|| {
                self.scratch.iter().find_map(|&id| {
                    let held = usize::try_from(id)
                        .ok()
                        .and_then(|i| consumer.holds.get_mut(i))
                        .filter(|h| **h);
                    match held {
                        Some(h) => {
                            *h = false;
                            self.out[id as usize] -= 1;
                            None
                        }
                        None => Some(format!(
                            "it handed back buffer {id}, which it does not hold"
                        )),
                    }
                })
            });
            if let Some(why) = bad {
                log::warn!("hwtensor: detaching a consumer: {why}");
                broken.push(c);
            }
        }
        for c in broken.into_iter().rev() {
            self.detach(c);
        }
    }

    /// Forgets consumer `c`: every buffer it held is free again (its imports stay its own).
    /// It is told so, not only disconnected: the caller may hold another handle to its socket,
    /// and the consumer must see the producer leave all the same.
    fn detach(&mut self, c: usize) {
        let gone = self.consumers.swap_remove(c);
        os::leave(&gone.conn);
        for (i, held) in gone.holds.iter().enumerate() {
            if *held {
                self.out[i] -= 1;
            }
        }
    }

    /// Sleeps until a consumer hands a buffer back or leaves, or the deadline passes.
    fn sleep_until_handed_back(&mut self, deadline: Instant) -> Result<()> {
        for c in &self.consumers {
            c.ring.going_to_sleep(false);
        }
        // Re-checked after the flags are up: a hand-back just before them is not missed.
        let pending = self.consumers.iter().any(|c| c.ring.back_pending());
        let woken = if pending {
            Woken::Event
        } else {
            let conns: Vec<&Conn> = self.consumers.iter().map(|c| &c.conn).collect();
            os::wait(&conns, Some(deadline))?
        };
        for c in &self.consumers {
            c.ring.awake(false);
        }
        match woken {
            // A consumer that sends wake-ups without handing anything back is bounded here.
            Woken::Event if Instant::now() >= deadline => Err(self.pool_held()),
            Woken::Event => Ok(()),
            Woken::Left(c) => {
                log::info!("hwtensor: a consumer left; its buffers are free again");
                self.detach(c);
                Ok(())
            }
            Woken::Message(c) => {
                log::warn!("hwtensor: detaching a consumer: it sent bytes that are no wake-ups");
                self.detach(c);
                Ok(())
            }
            Woken::Timeout => Err(self.pool_held()),
        }
    }
}

/// Refuses `t` when its buffer is in `pool` already (the same buffer from the same byte):
/// two slots over one frame would let the producer rewrite a frame a consumer still reads
/// through the other slot. Frames at different offsets of one buffer stay distinct.
fn refuse_if_pooled(pool: &[TensorDyn], t: &TensorDyn) -> Result<()> {
    let at = (t.identity(), t.byte_offset());
    match pool
        .iter()
        .position(|p| (p.identity(), p.byte_offset()) == at)
    {
        Some(i) => Err(Error::InvalidArgument(format!(
            "this buffer is in the pool already (slot {i}): a pool's buffers must be distinct, \
             or two slots would share one buffer"
        ))),
        None => Ok(()),
    }
}

impl Producer {
    fn pool_held(&self) -> Error {
        Error::Timeout(format!(
            "consumers hold all {} buffers of the pool",
            self.pool.len()
        ))
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // `attach` took a handle to each socket, but the caller may keep its own (Python's
        // `socket` object does): shutting the connection down tells every consumer now that
        // the producer left, as closing the last handle would.
        for c in &self.consumers {
            os::leave(&c.conn);
        }
    }
}

#[cfg(target_os = "linux")]
impl Producer {
    /// Consumer `c`'s ring, for a test or the fuzz target to play a hostile producer on.
    pub(super) fn ring_of(&self, c: usize) -> &Ring {
        &self.consumers[c].ring
    }
}

#[cfg(all(test, target_os = "linux"))]
impl Producer {
    /// The producer's end of consumer `c`'s socket, for a test to misbehave on.
    pub(super) fn socket_of(&self, c: usize) -> Link {
        self.consumers[c].conn.try_clone().unwrap()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::test_support::{buffer, connected, connected_with_room, while_flooded};
    use super::super::{Consumer, Wait, CONNECT_TIMEOUT};
    use super::*;

    #[test]
    fn adding_past_the_room_the_producer_was_made_with_is_refused() {
        let (mut producer, _consumer) = connected();
        let err = producer.add(buffer()).unwrap_err();
        assert!(err.to_string().contains("Producer::with_room"), "{err}");
        assert!(Producer::with_room(vec![buffer(), buffer()], 1).is_err());
    }

    #[test]
    fn a_buffer_already_in_the_pool_is_refused_at_creation_and_when_added() {
        let one = buffer();
        let err = Producer::new(vec![one.clone(), buffer(), one.clone()]).unwrap_err();
        assert!(
            err.to_string().contains("in the pool already (slot 0)"),
            "{err}"
        );
        let (mut producer, _consumer) = connected_with_room(5);
        let added = buffer();
        producer.add(added.clone()).unwrap();
        let again = producer.add(added).unwrap_err();
        assert!(
            again.to_string().contains("in the pool already (slot 3)"),
            "{again}"
        );
        let pooled = producer.tensor(Slot(1)).clone();
        assert!(producer.add(pooled).is_err());
        assert_eq!(producer.out.len(), 4);
    }

    #[test]
    fn a_consumer_that_attaches_after_an_addition_receives_the_grown_pool() {
        let (mut producer, _first) = connected_with_room(4);
        producer.add(buffer()).unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let late = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
        producer.attach(a).unwrap();
        assert_eq!(late.join().unwrap().pool().len(), 4);
        assert_eq!(producer.out.len(), 4);
    }

    #[test]
    fn a_consumer_that_sends_bytes_that_are_no_wake_ups_is_detached() {
        let (mut producer, consumer) = connected();
        for seq in 0..3 {
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        }
        rustix::net::send(consumer.socket(), b"HWTB", rustix::net::SendFlags::empty()).unwrap();
        // The consumer holds every buffer; its message detaches it, which frees them.
        producer.acquire(Duration::from_secs(5)).unwrap();
        assert_eq!(producer.consumers(), 0);
    }

    #[test]
    fn a_consumer_that_hands_back_a_buffer_it_does_not_hold_is_detached() {
        let (mut producer, consumer) = connected();
        consumer.ring().push_back(1).unwrap(); // never received
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
        let (mut producer, consumer) = connected();
        consumer.ring().push_back(u64::MAX as u32).unwrap(); // out of the pool
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
    }

    #[test]
    fn a_consumer_that_hands_a_buffer_back_twice_is_detached_without_freeing_it_twice() {
        let (mut producer, mut consumer) = connected();
        let slot = producer.acquire(Duration::from_secs(1)).unwrap();
        producer.send(slot, FrameMeta::new(0, 0)).unwrap();
        let frame = consumer.recv(Wait::Block).unwrap();
        consumer.ring().push_back(slot.0).unwrap(); // a replay before the real hand-back
        drop(frame);
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
        assert_eq!(producer.out, [0, 0, 0]);
    }

    #[test]
    fn sending_a_slot_that_was_not_acquired_is_refused() {
        let (mut producer, _consumer) = connected();
        let err = producer.send(Slot(0), FrameMeta::new(0, 0)).unwrap_err();
        assert!(err.to_string().contains("not acquired"), "{err}");
    }

    #[test]
    fn a_consumer_that_keeps_waking_without_hand_backs_cannot_hold_acquire_past_its_timeout() {
        let (mut producer, consumer) = connected();
        for seq in 0..3 {
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        }
        let socket = consumer.socket();
        let (got, took) = while_flooded(socket, || producer.acquire(Duration::from_millis(200)));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(took < Duration::from_secs(5), "returned after {took:?}");
    }
}
