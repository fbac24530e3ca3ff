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
//! A producer made [`Producer::with_room`] may [`Producer::add`] buffers after consumers
//! attached (Linux): each is handed to every consumer at once, and a consumer takes it before
//! the first frame that names it (a GStreamer sink adopting upstream's own buffers as they
//! come). On the socket, wake-ups are single bytes no hand-off starts with, so a drain takes
//! them and leaves a hand-off whole.
//!
//! Failure is bounded: [`Consumer::connect`] takes a timeout for the whole set-up;
//! [`Producer::acquire`] and a timed [`Consumer::recv`] wait at most their timeouts whatever
//! the peer sends; [`Producer::acquire`] waits at most its timeout when consumers hold
//! every buffer; a consumer that dies (its socket hangs up) gives its buffers back; a producer
//! that dies leaves the frames a consumer holds valid (they are its own imports) and wakes the
//! consumer's receive with an error; a restarted consumer attaches again. Everything read from
//! the shared block or the socket is checked: an id out of range, an id the peer does not hold,
//! a replayed id, or a ring index past the end is an error, never a read outside a buffer.
//!
//! # Example
//!
//! A producer with a pool of three shared-memory frames and one consumer (a thread here; a
//! process that got the other end of the socket in a pipeline):
//!
//! ```
//! use std::os::unix::net::UnixStream;
//! use std::time::Duration;
//! use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
//! use hwtensor::{Tensor, TensorDyn, TensorMemory};
//!
//! let (producer_end, consumer_end) = UnixStream::pair()?;
//! let consumer = std::thread::spawn(move || -> hwtensor::Result<u8> {
//!     let mut consumer = Consumer::connect(consumer_end, CONNECT_TIMEOUT)?;
//!     let frame = consumer.recv(Wait::For(Duration::from_secs(5)))?;
//!     let first = frame.tensor().as_tensor::<u8>()?.map_read()?[0];
//!     Ok(first) // dropping the frame hands its buffer back
//! });
//! let pool = (0..3)
//!     .map(|_| Tensor::<u8>::new(&[1024], Some(TensorMemory::Shm)).map(TensorDyn::from))
//!     .collect::<hwtensor::Result<Vec<_>>>()?;
//! let mut producer = Producer::new(pool)?;
//! producer.attach(producer_end)?; // the pool goes once, by fd
//! let slot = producer.acquire(Duration::from_secs(1))?;
//! producer.tensor(slot).as_tensor::<u8>()?.map_write()?.fill(5);
//! producer.send(slot, FrameMeta::new(0, 0))?; // then each frame is a buffer id
//! assert_eq!(consumer.join().unwrap()?, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod access;
mod consumer;
mod info;
mod marker;
#[cfg(target_os = "linux")]
#[path = "linux/mod.rs"]
mod os;
#[cfg(windows)]
#[path = "windows/mod.rs"]
mod os;
mod producer;
mod ring;
mod setup;

pub use access::{Access, Lending, Peers};
pub use consumer::{Consumer, Frame, Wait, CONNECT_TIMEOUT};
pub use info::MAX_STREAM_INFO;
pub use marker::{FrameKind, Marker, MARKER_BYTES};
pub use os::{connect, Link, Listener};
pub use producer::{Producer, Slot};
pub use ring::PAYLOAD_BYTES;

use std::time::Duration;

use crate::{Error, Result};

/// How long a blocking receive or acquire spins before it sleeps: a frame that comes within it
/// costs no wake-up on either side. The spin yields the CPU at each turn: with fewer cores than
/// spinning threads (a woken producer lands on its consumer's core), a pure spin held the other
/// side off for the whole spin, and every frame took 21 us instead of 1-2 us.
const SPIN: Duration = Duration::from_micros(20);

/// What ended a wait for the peer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A peer sent wake-ups (now drained).
    Event,
    /// The connection to peer `n` (its index in the wait) hung up or failed: the peer left.
    Left(usize),
    /// Peer `n` sent a message, not a wake-up: a consumer reads it as a buffer the producer
    /// added; a producer, to whom consumers send only wake-ups, detaches that consumer.
    #[cfg_attr(windows, allow(dead_code))] // Windows wakes by events: its pipe has no wake-ups
    Message(usize),
    /// The deadline passed.
    Timeout,
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

/// Hooks for the channel's integration tests, not API: GPU use a test cannot otherwise leave
/// pending (lavapipe runs each submission inside `vkQueueSubmit`).
#[doc(hidden)]
#[cfg(target_os = "linux")]
pub mod testing {
    use crate::TensorDyn;

    /// Records that device work completing at timeline `value` reads `t`'s GPU buffer, as a
    /// consumer's GPU copy of a frame does.
    pub fn record_gpu_read(t: &TensorDyn, value: u64) {
        each_tensor!(t, t => t.buffer.record_device_use(value, false))
    }
}

/// Entry points for the fuzz target (`crates/hwtensor/fuzz`, target `stream`), not API: what a
/// hostile peer controls, run through the code the channel runs.
#[doc(hidden)]
pub mod fuzzing {
    use super::ring::{Ring, MAX_CAPACITY};
    use super::setup;

    /// Parses `data` as a set-up message (its first byte picks how many handles came with it).
    pub fn setup_message(data: &[u8]) {
        let Some((&n, rest)) = data.split_first() else {
            return;
        };
        let mut msg = [0u8; setup::LEN];
        let take = rest.len().min(setup::LEN);
        msg[..take].copy_from_slice(&rest[..take]);
        if let Ok(s) = setup::parse(&msg, vec![(); usize::from(n % 4)]) {
            assert!(s.slots >= 1 && s.slots <= s.capacity && s.capacity <= MAX_CAPACITY);
        }
    }

    /// Plays `data` as a producer that grows its pool, honestly and not, against a consumer:
    /// buffers added and frames sent in them, frames naming any slot, bytes that start like a
    /// hand-off and stop, wake-ups, consumers that hand back what they do not hold. Nothing may
    /// panic; a receive ends by its deadline (plus the time one hand-off takes); the consumer's
    /// pool never passes its ring.
    #[cfg(target_os = "linux")]
    pub fn growth(data: &[u8]) {
        use std::time::{Duration, Instant};

        use super::ring::Entry;
        use super::{Consumer, FrameMeta, Producer, Wait};
        use crate::{Tensor, TensorDyn, TensorMemory};

        /// A receive's timeout in the target: short, so a run tries many messages.
        const RECV: Duration = Duration::from_millis(2);
        /// How long past its deadline a receive may end: one legitimate hand-off's import.
        const LATE: Duration = Duration::from_millis(500);

        let Some((&room, ops)) = data.split_first() else {
            return;
        };
        let buffer = || Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).map(TensorDyn::from);
        let Ok(pool) = (0..2).map(|_| buffer()).collect::<crate::Result<Vec<_>>>() else {
            return;
        };
        let Ok(mut producer) = Producer::with_room(pool, 2 + usize::from(room % 7)) else {
            return;
        };
        let Ok((ours, theirs)) = std::os::unix::net::UnixStream::pair() else {
            return;
        };
        let Ok(raw) = ours.try_clone() else { return };
        if producer.attach(ours).is_err() {
            return;
        }
        let Ok(mut consumer) = Consumer::connect(theirs, Duration::from_secs(1)) else {
            return;
        };
        let capacity = producer.ring_of(0).capacity() as usize;
        let mut held = Vec::new();
        for pair in ops.chunks(2) {
            let (op, arg) = (pair[0], pair.get(1).copied().unwrap_or(0));
            match op % 7 {
                0 => {
                    if let Ok(t) = buffer() {
                        let _ = producer.add(t);
                    }
                }
                1 => {
                    if let Some(slot) = producer.slot(usize::from(arg)) {
                        if producer.acquire_slot(slot, Duration::ZERO).is_ok() {
                            let _ = producer.send(slot, FrameMeta::new(u64::from(arg), 0));
                        }
                    }
                }
                2 => {
                    if producer.consumers() > 0 {
                        let entry = Entry {
                            slot: u32::from(arg),
                            ..Entry::default()
                        };
                        let _ = producer.ring_of(0).push_frame(entry);
                    }
                }
                3 => {
                    // The start of a hand-off (the blob's magic) and `arg` bytes of anything.
                    let mut bytes = b"HWTB".to_vec();
                    bytes.extend(std::iter::repeat_n(arg, usize::from(arg % 64)));
                    let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
                    let _ = rustix::net::send(&raw, &bytes, flags);
                }
                4 => {
                    let wakes = [super::os::WAKE_BYTE; 8];
                    let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
                    let _ = rustix::net::send(&raw, &wakes, flags);
                }
                5 => {
                    let started = Instant::now();
                    let got = consumer.recv(Wait::For(RECV));
                    assert!(
                        started.elapsed() < RECV + LATE,
                        "a receive ran past its deadline"
                    );
                    match got {
                        Ok(frame) if arg % 2 == 0 => held.push(frame),
                        _ => {}
                    }
                }
                _ => {
                    if arg % 2 == 0 {
                        held.clear(); // hands them back
                    } else if let Some(slot) = producer.slot(usize::from(arg)) {
                        let _ = producer.is_held(slot);
                    }
                }
            }
            assert!(
                consumer.pool().len() <= capacity,
                "the pool passed its ring"
            );
        }
    }

    /// Writes `data` as words into a fresh control block, as a peer could, and reads it from
    /// both sides: nothing may panic, and no read may report more than the ring holds.
    pub fn control_block(data: &[u8]) {
        let Ok(producer) = Ring::create(4) else {
            return;
        };
        let Ok(handle) = producer.block().share() else {
            return;
        };
        let Ok(consumer) = Ring::open(handle, producer.capacity()) else {
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

/// What the producer's and the consumer's tests share: a connected pair, and a peer that floods.
#[cfg(all(test, target_os = "linux"))]
mod test_support {
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{Consumer, Producer, CONNECT_TIMEOUT};
    use crate::{Tensor, TensorDyn, TensorMemory};

    /// How long a flooding peer goes on at most, should the code under test never return.
    const FLOOD_LIMIT: Duration = Duration::from_secs(10);

    /// A producer over a pool of three shm buffers with one consumer attached.
    pub(super) fn connected() -> (Producer, Consumer) {
        connected_with_room(3)
    }

    /// A 64-byte shm buffer.
    pub(super) fn buffer() -> TensorDyn {
        TensorDyn::from(Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap())
    }

    /// As [`connected`], the pool made with room for `room` buffers.
    pub(super) fn connected_with_room(room: usize) -> (Producer, Consumer) {
        let (a, b) = UnixStream::pair().unwrap();
        let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
        let pool = (0..3).map(|_| buffer()).collect();
        let mut producer = Producer::with_room(pool, room).unwrap();
        producer.attach(a).unwrap();
        (producer, consumer.join().unwrap())
    }

    /// Runs `f` while a thread sends wake-ups on `socket`; returns what it returned and how
    /// long it took.
    pub(super) fn while_flooded<T>(socket: UnixStream, f: impl FnOnce() -> T) -> (T, Duration) {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let flood = std::thread::spawn(move || {
            let end = Instant::now() + FLOOD_LIMIT;
            let wakes = [super::os::WAKE_BYTE; 64];
            while !stopping.load(Relaxed) && Instant::now() < end {
                let _ = rustix::net::send(&socket, &wakes, rustix::net::SendFlags::DONTWAIT);
            }
        });
        let started = Instant::now();
        let got = f();
        let took = started.elapsed();
        stop.store(true, Relaxed);
        flood.join().unwrap();
        (got, took)
    }
}
