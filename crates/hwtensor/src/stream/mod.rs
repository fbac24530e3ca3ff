//! Pooled streaming between processes (Linux): after set-up, a frame travels as a buffer id
//! and its metadata through shared memory, not as a new fd to import and map.
//!
//! A [`Producer`] owns a pool of tensors (any memory with an fd: shm, DMA-BUF, GPU). Each
//! consumer that attaches over a connected Unix socket receives the pool once, by reference,
//! together with a control block (a sealed memfd holding two rings: frames forward, buffer ids
//! back). From then on [`Producer::send`] writes an entry into the consumer's ring (buffer id,
//! sequence, timestamp, the GPU completion value, a small payload), and dropping the consumer's
//! [`Frame`] writes the id back. A side that waits spins briefly and then sleeps on the socket;
//! the other side sends it a byte (never blocking) only when the sleeper said it sleeps, so a
//! busy receiver costs its peer nothing and a sleeping one one syscall.
//!
//! Failure is bounded: [`Consumer::connect`] takes a timeout for the whole set-up;
//! [`Producer::acquire`] and a timed [`Consumer::recv`] wait at most their timeouts whatever
//! the peer sends; [`Producer::acquire`] waits at most its timeout when consumers hold
//! every buffer; a consumer that dies (its socket hangs up) gives its buffers back; a producer
//! that dies leaves the frames a consumer holds valid (they are its own imports) and wakes the
//! consumer's receive with an error; a restarted consumer attaches again. Everything read from
//! the shared block or the socket is checked: an id out of range, an id the peer does not hold,
//! a replayed id, or a ring index past the end is an error, never a read outside a buffer.

mod ring;
mod setup;
mod wake;

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::blob::Transport;
use crate::gpu::{PeerTimeline, GPU_WAIT};
use crate::{handoff, Direction, Error, Result, TensorDyn, TensorMemory};

pub use ring::PAYLOAD_BYTES;
use ring::{Entry, Ring};
use wake::Woken;

/// How long a blocking receive or acquire spins before it sleeps: a frame that comes within it
/// costs no wake-up on either side. The spin yields the CPU at each turn: with fewer cores than
/// spinning threads (a woken producer lands on its consumer's core), a pure spin held the other
/// side off for the whole spin, and every frame took 21 us instead of 1-2 us.
const SPIN: Duration = Duration::from_micros(20);
/// The least a timed receive gives a frame's GPU completion once the frame is there, however
/// little of its timeout is left: a frame published just before the deadline with its copy
/// still running is not refused for that (a GPU copy of a 4K frame takes about a millisecond).
const COMPLETION_GRACE: Duration = Duration::from_millis(5);
/// How often a busy-polling receive looks at the socket for a producer that died.
const SPIN_LIVENESS: Duration = Duration::from_millis(1);

/// How a receive waits for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Spin on the ring, never sleeping (lowest latency; a core busy).
    Spin,
    /// Spin briefly, then sleep until a frame comes.
    Block,
    /// As `Block`, for at most this long (then `Error::Timeout`).
    For(Duration),
}

/// What travels with a frame besides its buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameMeta {
    /// The producer's sequence number.
    pub seq: u64,
    /// The producer's timestamp (nanoseconds; `CLOCK_MONOTONIC` is one clock for every process).
    pub timestamp_ns: u64,
    payload: [u8; PAYLOAD_BYTES],
    payload_len: u8,
}

impl FrameMeta {
    /// Metadata with a sequence number and a timestamp.
    pub fn new(seq: u64, timestamp_ns: u64) -> FrameMeta {
        FrameMeta {
            seq,
            timestamp_ns,
            ..FrameMeta::default()
        }
    }

    /// The same with a user payload of at most [`PAYLOAD_BYTES`] bytes.
    pub fn with_payload(mut self, payload: &[u8]) -> Result<FrameMeta> {
        if payload.len() > PAYLOAD_BYTES {
            return Err(Error::InvalidArgument(format!(
                "a frame payload holds {PAYLOAD_BYTES} bytes, not {}",
                payload.len()
            )));
        }
        self.payload[..payload.len()].copy_from_slice(payload);
        self.payload_len = payload.len() as u8;
        Ok(self)
    }

    /// The user payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload[..usize::from(self.payload_len)]
    }
}

/// A buffer of the producer's pool, acquired for writing and not yet sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(u32);

impl Slot {
    /// The buffer's index in the pool.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How long [`Consumer::connect`] waits for a whole set-up where its caller names no bound
/// (the C ABI's `hwt_consumer_connect`): a producer on the same machine sends its set-up and
/// pool in milliseconds, and one silent for this long has hung.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One consumer as the producer sees it.
#[derive(Debug)]
struct Attached {
    /// The set-up went here; then wake-ups both ways, and its hang-up says the consumer left.
    stream: UnixStream,
    ring: Ring,
    /// Which buffers this consumer holds.
    holds: Vec<bool>,
}

/// The sending side of a channel: a pool of buffers, lent to every attached consumer.
#[derive(Debug)]
pub struct Producer {
    pool: Vec<TensorDyn>,
    consumers: Vec<Attached>,
    /// How many consumers hold each buffer.
    out: Vec<u32>,
    /// The buffers acquired and not yet sent.
    acquired: Vec<bool>,
    scratch: Vec<u64>,
}

impl Producer {
    /// A producer over `pool`: tensors whose memory has an fd (shm, DMA-BUF, GPU), lent to
    /// consumers by reference.
    pub fn new(pool: Vec<TensorDyn>) -> Result<Producer> {
        let n = pool.len();
        if n == 0 || n > ring::MAX_CAPACITY as usize {
            return Err(Error::InvalidArgument(format!(
                "a channel's pool holds 1 to {} buffers, not {n}",
                ring::MAX_CAPACITY
            )));
        }
        if let Some(t) = pool.iter().find(|t| t.as_fd().is_none()) {
            return Err(Error::Unavailable {
                memory: t.memory(),
                reason: "a channel lends its buffers by fd; allocate the pool on shm, DMA-BUF or \
                         GPU memory"
                    .into(),
            });
        }
        Ok(Producer {
            pool,
            consumers: Vec::new(),
            out: vec![0; n],
            acquired: vec![false; n],
            scratch: Vec::new(),
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

    /// Attaches a consumer on a connected socket: sends the set-up and the pool.
    pub fn attach(&mut self, stream: UnixStream) -> Result<()> {
        let slots = self.pool.len() as u32;
        let ring = Ring::create(slots)?;
        let fence = match self.pool.iter().any(|t| t.memory() == TensorMemory::Gpu) {
            true => crate::gpu::device()?.fence_fd(),
            false => None,
        };
        setup::send(&stream, slots, ring.capacity(), ring.fd(), fence)?;
        for t in &self.pool {
            handoff::send_as(&stream, t, Transport::Reference)?;
        }
        self.consumers.push(Attached {
            stream,
            ring,
            holds: vec![false; self.pool.len()],
        });
        Ok(())
    }

    /// A free buffer to write the next frame into: one no consumer holds. Waits at most
    /// `timeout` while consumers hold every buffer (`Error::Timeout`).
    pub fn acquire(&mut self, timeout: Duration) -> Result<Slot> {
        let deadline = Instant::now() + timeout;
        let spin_until = Instant::now() + SPIN.min(timeout);
        loop {
            self.reclaim();
            if let Some(i) = (0..self.pool.len()).find(|&i| self.out[i] == 0 && !self.acquired[i]) {
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
        let completion = self.completion(i)?;
        let entry = Entry {
            slot: slot.0,
            payload_len: u32::from(meta.payload_len),
            seq: meta.seq,
            timestamp_ns: meta.timestamp_ns,
            completion,
            payload: meta.payload,
        };
        let mut broken = Vec::new();
        for (c, consumer) in self.consumers.iter_mut().enumerate() {
            match consumer.ring.push_frame(entry) {
                Ok(()) => {
                    consumer.holds[i] = true;
                    self.out[i] += 1;
                    if consumer.ring.peer_sleeps(true) {
                        wake::wake(consumer.stream.as_fd());
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
        Ok(())
    }

    /// The value consumers wait for before they read buffer `i`: its last device write, or 0
    /// when there is none or this device cannot export its fence (then the write is waited for
    /// here, so consumers read finished bytes).
    fn completion(&self, i: usize) -> Result<u64> {
        let last = self.pool[i].gpu_after(Direction::Read);
        if last == 0 {
            return Ok(0);
        }
        let completion = crate::gpu::device()?.peer_completion(last)?;
        Ok(completion.map_or(0, |(_, value)| value))
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
    fn detach(&mut self, c: usize) {
        let gone = self.consumers.swap_remove(c);
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
            let sockets: Vec<_> = self.consumers.iter().map(|c| c.stream.as_fd()).collect();
            wake::wait(&sockets, Some(deadline))?
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
            Woken::Timeout => Err(self.pool_held()),
        }
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

/// What a consumer shares with the frames it handed out: the way back.
#[derive(Debug)]
struct Back {
    ring: Arc<Ring>,
    /// The consumer's socket (a second handle to it): hand-backs wake the producer on it.
    socket: UnixStream,
    /// Which buffers this consumer holds (a replayed id from the producer is refused); also
    /// serialises hand-backs from frames dropped on several threads.
    holds: Mutex<Vec<bool>>,
}

impl Back {
    fn hand_back(&self, slot: u32) -> Result<()> {
        let mut holds = self
            .holds
            .lock()
            .map_err(|_| Error::InvalidOperation("a hand-back panicked earlier".into()))?;
        if let Some(h) = holds.get_mut(slot as usize) {
            *h = false;
        }
        self.ring.push_back(slot)?;
        if self.ring.peer_sleeps(false) {
            wake::wake(self.socket.as_fd());
        }
        Ok(())
    }
}

/// The receiving side of a channel. Dropping it shuts the connection down (the socket it was
/// given and every duplicate of it): the producer sees it leave even while frames are held.
pub struct Consumer {
    stream: UnixStream,
    ring: Arc<Ring>,
    pool: Vec<TensorDyn>,
    fence: Option<Arc<PeerTimeline>>,
    back: Arc<Back>,
}

/// A received frame: the pool's buffer and its metadata. Dropping it hands the buffer back.
#[derive(Debug)]
pub struct Frame {
    tensor: TensorDyn,
    meta: FrameMeta,
    slot: u32,
    back: Arc<Back>,
}

impl Frame {
    /// The frame's tensor (the consumer's import of the pool buffer).
    pub fn tensor(&self) -> &TensorDyn {
        &self.tensor
    }
    /// The frame's metadata.
    pub fn meta(&self) -> &FrameMeta {
        &self.meta
    }
    /// The buffer's index in the pool.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        // GPU work of ours still reading the buffer must end before the producer rewrites it.
        let ours = self.tensor.gpu_after(Direction::Write);
        if ours > 0 {
            let done = crate::gpu::device().and_then(|d| d.wait(ours, GPU_WAIT));
            if let Err(e) = done {
                log::error!(
                    "hwtensor: a frame's GPU work did not finish ({e}); buffer not handed back"
                );
                return;
            }
        }
        if let Err(e) = self.back.hand_back(self.slot) {
            log::warn!("hwtensor: handing a frame back failed: {e}");
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Frames still held keep a handle to the socket for their hand-backs: shutting it
        // down tells the producer now that this consumer is gone (their later hand-backs go
        // nowhere, harmlessly), as closing the last handle would.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("pool", &self.pool.len())
            .field("gpu_fence", &self.fence.is_some())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// Attaches to a producer on a connected socket: receives the set-up and imports the pool,
    /// all of it within `timeout` (a producer that is silent, or stalls mid-message, is
    /// `Error::Timeout` or `Error::Handoff` by then, whatever the socket's own timeouts and
    /// blocking mode; [`CONNECT_TIMEOUT`] is a sensible bound). GPU buffers are accepted from a
    /// producer of this user (as `handoff::recv` does).
    pub fn connect(stream: UnixStream, timeout: Duration) -> Result<Consumer> {
        let deadline = Instant::now() + timeout;
        let s = setup::recv(&stream, deadline)?;
        let ring = Arc::new(Ring::open(s.block, s.capacity)?);
        let fence = match s.fence {
            Some(fd) => Some(crate::gpu::device()?.peer_timeline(fd)?),
            None => None,
        };
        let pool = (0..s.slots)
            .map(|_| handoff::recv_by(&stream, deadline))
            .collect::<Result<Vec<_>>>()?;
        let socket = stream.try_clone().map_err(|source| Error::Os {
            op: "dup of the channel's socket",
            source,
        })?;
        let back = Arc::new(Back {
            ring: ring.clone(),
            socket,
            holds: Mutex::new(vec![false; pool.len()]),
        });
        Ok(Consumer {
            stream,
            ring,
            pool,
            fence,
            back,
        })
    }

    /// The pool's buffers, as this process imported them.
    pub fn pool(&self) -> &[TensorDyn] {
        &self.pool
    }

    /// The next frame, waiting as `wait` says. A producer that left is `Error::Handoff`; a
    /// frame naming a buffer out of the pool, or one this consumer still holds, is an error.
    pub fn recv(&mut self, wait: Wait) -> Result<Frame> {
        let started = Instant::now();
        let deadline = match wait {
            Wait::For(d) => Some(started + d),
            _ => None,
        };
        let mut checked = started;
        loop {
            if let Some(e) = self.ring.pop_frame()? {
                return self.frame(e, deadline);
            }
            let now = Instant::now();
            // Checked on every turn: a producer that keeps waking us with no frame is bounded.
            if deadline.is_some_and(|d| now >= d) {
                return Err(no_frame());
            }
            if wait == Wait::Spin || now < started + SPIN {
                if now >= checked + SPIN_LIVENESS {
                    self.check_producer()?;
                    checked = now;
                }
                std::thread::yield_now(); // see `SPIN`
                continue;
            }
            self.sleep(deadline)?;
        }
    }

    /// The frame of entry `e`, once its GPU completion is reached: waited for until the
    /// receive's deadline (at least [`COMPLETION_GRACE`]), else at most `GPU_WAIT`. A frame whose
    /// completion does not come is an error, and its buffer goes back.
    fn frame(&self, e: Entry, deadline: Option<Instant>) -> Result<Frame> {
        let i = e.slot as usize;
        let tensor = self.pool.get(i).cloned().ok_or_else(|| {
            Error::Handoff(format!(
                "the producer sent buffer {i} of a pool of {}",
                self.pool.len()
            ))
        })?;
        {
            let mut holds = self
                .back
                .holds
                .lock()
                .map_err(|_| Error::InvalidOperation("a hand-back panicked earlier".into()))?;
            if std::mem::replace(&mut holds[i], true) {
                return Err(Error::Handoff(format!(
                    "the producer sent buffer {i} again while this consumer holds it"
                )));
            }
        }
        let payload_len = u8::try_from(e.payload_len)
            .ok()
            .filter(|&n| usize::from(n) <= PAYLOAD_BYTES)
            .unwrap_or(0);
        let frame = Frame {
            tensor,
            meta: FrameMeta {
                seq: e.seq,
                timestamp_ns: e.timestamp_ns,
                payload: e.payload,
                payload_len,
            },
            slot: e.slot,
            back: self.back.clone(),
        };
        if e.completion > 0 {
            let fence = self.fence.as_ref().ok_or_else(|| {
                Error::Handoff(
                    "a frame with a GPU completion, but the producer sent no fence".into(),
                )
            })?;
            let bound = deadline.map_or(GPU_WAIT, |d| {
                d.saturating_duration_since(Instant::now())
                    .clamp(COMPLETION_GRACE, GPU_WAIT)
            });
            fence.wait(e.completion, bound)?;
        }
        Ok(frame)
    }

    /// Sleeps until the producer publishes, leaves, or the deadline passes.
    fn sleep(&self, deadline: Option<Instant>) -> Result<()> {
        self.ring.going_to_sleep(true);
        let woken = if self.ring.frame_ready() {
            Woken::Event
        } else {
            wake::wait(&[self.stream.as_fd()], deadline)?
        };
        self.ring.awake(true);
        match woken {
            Woken::Event => Ok(()),
            Woken::Left(_) => self.producer_left(),
            Woken::Timeout => Err(no_frame()),
        }
    }

    /// Errs when the producer's socket hung up.
    fn check_producer(&self) -> Result<()> {
        match wake::wait(&[self.stream.as_fd()], Some(Instant::now()))? {
            Woken::Left(_) => self.producer_left(),
            _ => Ok(()),
        }
    }

    fn producer_left(&self) -> Result<()> {
        if self.ring.frame_ready() {
            return Ok(()); // frames it sent before leaving are still delivered
        }
        Err(Error::Handoff(
            "the producer left (its socket hung up); frames received earlier stay valid".into(),
        ))
    }
}

fn no_frame() -> Error {
    Error::Timeout("no frame within the receive's timeout".into())
}

/// Entry points for the fuzz target (`crates/hwtensor/fuzz`, target `stream`), not API: what a
/// hostile peer controls, run through the code the channel runs.
#[doc(hidden)]
pub mod fuzzing {
    use super::ring::{Ring, MAX_CAPACITY};
    use super::setup;

    /// Parses `data` as a set-up message (its first byte picks how many fds came with it).
    pub fn setup_message(data: &[u8]) {
        let Some((&n, rest)) = data.split_first() else {
            return;
        };
        let mut msg = [0u8; setup::LEN];
        let take = rest.len().min(setup::LEN);
        msg[..take].copy_from_slice(&rest[..take]);
        let fds = (0..usize::from(n % 4))
            .filter_map(|_| rustix::pipe::pipe().ok().map(|(r, _)| r))
            .collect();
        if let Ok(s) = setup::parse(&msg, fds) {
            assert!(s.slots >= 1 && s.slots <= s.capacity && s.capacity <= MAX_CAPACITY);
        }
    }

    /// Writes `data` as words into a fresh control block, as a peer could, and reads it from
    /// both sides: nothing may panic, and no read may report more than the ring holds.
    pub fn control_block(data: &[u8]) {
        let Ok(producer) = Ring::create(4) else {
            return;
        };
        let Ok(fd) = producer.fd().try_clone_to_owned() else {
            return;
        };
        let Ok(consumer) = Ring::open(fd, producer.capacity()) else {
            return;
        };
        for chunk in data.chunks(9) {
            if let [at, word @ ..] = chunk {
                let mut w = [0u8; 8];
                w[..word.len()].copy_from_slice(word);
                producer.poke(usize::from(*at), u64::from_le_bytes(w));
            }
        }
        for _ in 0..8 {
            let _ = consumer.pop_frame();
        }
        let mut back = Vec::new();
        if producer.drain_back(&mut back).is_ok() {
            assert!(back.len() <= producer.capacity() as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;

    fn connected() -> (Producer, Consumer) {
        let (a, b) = UnixStream::pair().unwrap();
        let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
        let pool = (0..3)
            .map(|_| TensorDyn::from(Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap()))
            .collect();
        let mut producer = Producer::new(pool).unwrap();
        producer.attach(a).unwrap();
        (producer, consumer.join().unwrap())
    }

    #[test]
    fn a_consumer_that_hands_back_a_buffer_it_does_not_hold_is_detached() {
        let (mut producer, consumer) = connected();
        consumer.ring.push_back(1).unwrap(); // never received
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
        let (mut producer, consumer) = connected();
        consumer.ring.push_back(u64::MAX as u32).unwrap(); // out of the pool
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
    }

    #[test]
    fn a_consumer_that_hands_a_buffer_back_twice_is_detached_without_freeing_it_twice() {
        let (mut producer, mut consumer) = connected();
        let slot = producer.acquire(Duration::from_secs(1)).unwrap();
        producer.send(slot, FrameMeta::new(0, 0)).unwrap();
        let frame = consumer.recv(Wait::Block).unwrap();
        consumer.ring.push_back(frame.slot).unwrap(); // a replay before the real hand-back
        drop(frame);
        producer.reclaim();
        assert_eq!(producer.consumers(), 0);
        assert_eq!(producer.out, [0, 0, 0]);
    }

    #[test]
    fn a_frame_naming_a_buffer_outside_the_pool_is_an_error() {
        let (producer, mut consumer) = connected();
        let bogus = Entry {
            slot: 7,
            ..Entry::default()
        };
        producer.consumers[0].ring.push_frame(bogus).unwrap();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(err.to_string().contains("buffer 7 of a pool of 3"), "{err}");
    }

    #[test]
    fn a_frame_replaying_a_buffer_the_consumer_holds_is_an_error() {
        let (mut producer, mut consumer) = connected();
        let slot = producer.acquire(Duration::from_secs(1)).unwrap();
        producer.send(slot, FrameMeta::new(0, 0)).unwrap();
        let _held = consumer.recv(Wait::Block).unwrap();
        let replay = Entry {
            slot: slot.0,
            ..Entry::default()
        };
        producer.consumers[0].ring.push_frame(replay).unwrap();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(err.to_string().contains("again while"), "{err}");
    }

    #[test]
    fn sending_a_slot_that_was_not_acquired_is_refused() {
        let (mut producer, _consumer) = connected();
        let err = producer.send(Slot(0), FrameMeta::new(0, 0)).unwrap_err();
        assert!(err.to_string().contains("not acquired"), "{err}");
    }

    /// A second handle to the producer's end of consumer 0's socket, for a test to misbehave on.
    fn producer_end(producer: &Producer) -> UnixStream {
        producer.consumers[0].stream.try_clone().unwrap()
    }

    /// Runs `f` while a thread sends bytes on `socket` (ten seconds at most); returns what it
    /// returned and how long it took.
    fn while_flooded<T>(socket: UnixStream, f: impl FnOnce() -> T) -> (T, Duration) {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let flood = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(10);
            while !stopping.load(Relaxed) && Instant::now() < end {
                let _ = rustix::net::send(&socket, &[7; 64], rustix::net::SendFlags::DONTWAIT);
            }
        });
        let started = Instant::now();
        let got = f();
        let took = started.elapsed();
        stop.store(true, Relaxed);
        flood.join().unwrap();
        (got, took)
    }

    #[test]
    fn a_producer_that_keeps_waking_without_frames_cannot_hold_a_timed_receive_past_its_deadline() {
        let (producer, mut consumer) = connected();
        let (got, took) = while_flooded(producer_end(&producer), || {
            consumer.recv(Wait::For(Duration::from_millis(200)))
        });
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(took < Duration::from_secs(5), "returned after {took:?}");
    }

    #[test]
    fn a_consumer_that_keeps_waking_without_hand_backs_cannot_hold_acquire_past_its_timeout() {
        let (mut producer, consumer) = connected();
        for seq in 0..3 {
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
        }
        let socket = consumer.stream.try_clone().unwrap();
        let (got, took) = while_flooded(socket, || producer.acquire(Duration::from_millis(200)));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(took < Duration::from_secs(5), "returned after {took:?}");
    }

    #[test]
    fn a_hand_back_to_a_producer_that_never_reads_its_socket_does_not_block() {
        let (mut producer, mut consumer) = connected();
        // The producer says it sleeps (so every hand-back sends a wake-up) and reads nothing:
        // the consumer's end of the socket, blocking, is full.
        producer.consumers[0].ring.going_to_sleep(false);
        let full = rustix::net::SendFlags::DONTWAIT;
        while rustix::net::send(&consumer.stream, &[0; 4096], full).is_ok() {}
        for seq in 0..3 {
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
            drop(consumer.recv(Wait::Block).unwrap()); // hands back: returns
        }
    }

    #[test]
    fn a_producer_silent_after_its_set_up_is_a_connect_timeout() {
        let (a, b) = UnixStream::pair().unwrap();
        let ring = Ring::create(3).unwrap();
        setup::send(&a, 3, ring.capacity(), ring.fd(), None).unwrap();
        let started = Instant::now();
        let got = Consumer::connect(b, Duration::from_millis(200));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
