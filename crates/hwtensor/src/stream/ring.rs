//! The shared-memory control block of a channel: two single-producer single-consumer rings
//! (frames forward, slot ids back) and the sleep flags of the wake-up protocol.
//!
//! Every word is read and written through atomics, so a peer that scribbles over the block
//! cannot cause undefined behaviour here, only wrong values, and every value read is checked
//! (indices against the ring, slot ids against the pool) before it is used.

// The block's words are atomics over a shared mapping: the one place this module needs unsafe.
#![allow(unsafe_code)]

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::os::{block_error, Block, BlockHandle};
use crate::{Error, Result};

/// "HWTRING1": what the block starts with.
const MAGIC: u64 = u64::from_le_bytes(*b"HWTRING1");
/// The layout's version: a peer of another layout is refused at set-up. 2: wake-ups on the
/// socket, no eventfds in the set-up message.
pub(crate) const VERSION: u32 = 2;
/// One cache line per hot word, so the two sides do not false-share.
const LINE: usize = 64;
/// Words of one forward entry: slot and payload length, sequence, timestamp, completion, payload.
const ENTRY_WORDS: usize = 8;
/// Bytes of the user payload a frame carries.
pub const PAYLOAD_BYTES: usize = 32;

/// Byte offsets of the block's words.
mod at {
    use super::LINE;
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const CAPACITY: usize = 12;
    pub const FWD_HEAD: usize = LINE;
    pub const FWD_TAIL: usize = 2 * LINE;
    pub const BACK_HEAD: usize = 3 * LINE;
    pub const BACK_TAIL: usize = 4 * LINE;
    pub const CONSUMER_SLEEPING: usize = 5 * LINE;
    pub const PRODUCER_SLEEPING: usize = 6 * LINE;
    pub const ENTRIES: usize = 7 * LINE;
}

/// One frame as it travels forward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    pub slot: u32,
    pub payload_len: u32,
    pub seq: u64,
    pub timestamp_ns: u64,
    pub completion: u64,
    pub payload: [u8; PAYLOAD_BYTES],
}

impl Entry {
    fn to_words(self) -> [u64; ENTRY_WORDS] {
        let mut w = [0u64; ENTRY_WORDS];
        w[0] = u64::from(self.slot) | u64::from(self.payload_len) << 32;
        w[1] = self.seq;
        w[2] = self.timestamp_ns;
        w[3] = self.completion;
        for (i, chunk) in self.payload.chunks_exact(8).enumerate() {
            w[4 + i] = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        }
        w
    }

    fn from_words(w: [u64; ENTRY_WORDS]) -> Entry {
        let mut payload = [0u8; PAYLOAD_BYTES];
        for (i, chunk) in payload.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&w[4 + i].to_le_bytes());
        }
        Entry {
            slot: w[0] as u32,
            payload_len: (w[0] >> 32) as u32,
            seq: w[1],
            timestamp_ns: w[2],
            completion: w[3],
            payload,
        }
    }
}

/// Bytes of a block whose rings hold `capacity` entries each.
fn block_len(capacity: u32) -> usize {
    let capacity = capacity as usize;
    at::ENTRIES + capacity * ENTRY_WORDS * 8 + capacity * 8
}

/// The mapped control block.
#[derive(Debug)]
pub(crate) struct Ring {
    map: Block,
    capacity: u32,
}

impl Ring {
    /// A new block (the producer's) whose rings hold `capacity` entries, a power of two.
    pub(crate) fn create(capacity: u32) -> Result<Ring> {
        let capacity = capacity.max(1).next_power_of_two();
        let len = block_len(capacity);
        let map = Block::create(len)?;
        let ring = Ring { map, capacity };
        ring.word64(at::MAGIC).store(MAGIC, Ordering::Relaxed);
        ring.word32(at::VERSION).store(VERSION, Ordering::Relaxed);
        ring.word32(at::CAPACITY).store(capacity, Ordering::Release);
        Ok(ring)
    }

    /// The producer's block as the consumer maps it (at least as large as `capacity` entries
    /// need, and writable: `Block::open`), its header checked.
    pub(crate) fn open(handle: BlockHandle, capacity: u32) -> Result<Ring> {
        if capacity == 0 || !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
            return Err(block_error(format!("claims {capacity} entries a ring")));
        }
        let map = Block::open(handle, block_len(capacity))?;
        let ring = Ring { map, capacity };
        let (magic, version) = (
            ring.word64(at::MAGIC).load(Ordering::Relaxed),
            ring.word32(at::VERSION).load(Ordering::Relaxed),
        );
        if magic != MAGIC || version != VERSION {
            return Err(block_error(format!("is not a version {VERSION} ring")));
        }
        Ok(ring)
    }

    /// The mapped block, to send to the consumer.
    pub(crate) fn block(&self) -> &Block {
        &self.map
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    fn word64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= self.map.len());
        // SAFETY: inside the mapping (offsets come from `at` and the checked capacity), aligned
        // (the mapping is page-aligned, offsets are multiples of 8), and only ever accessed
        // atomically, here and by the peer.
        unsafe { &*self.map.ptr().add(offset).cast::<AtomicU64>() }
    }

    fn word32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= self.map.len());
        // SAFETY: as for `word64`, with 4-byte alignment.
        unsafe { &*self.map.ptr().add(offset).cast::<AtomicU32>() }
    }

    fn entry_word(&self, index: u64, word: usize) -> &AtomicU64 {
        let i = (index % u64::from(self.capacity)) as usize;
        self.word64(at::ENTRIES + (i * ENTRY_WORDS + word) * 8)
    }

    fn back_word(&self, index: u64) -> &AtomicU64 {
        let i = (index % u64::from(self.capacity)) as usize;
        self.word64(at::ENTRIES + self.capacity as usize * ENTRY_WORDS * 8 + i * 8)
    }

    /// Publishes a frame (producer). Err when the consumer's side of the ring is full, which an
    /// honest consumer never lets happen (at most a pool's worth of frames are out).
    pub(crate) fn push_frame(&self, e: Entry) -> Result<()> {
        let head = self.word64(at::FWD_HEAD).load(Ordering::Relaxed);
        let tail = self.word64(at::FWD_TAIL).load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= u64::from(self.capacity) {
            return Err(Error::Handoff(
                "the consumer's frame ring is full (it stopped reading)".into(),
            ));
        }
        for (w, v) in e.to_words().into_iter().enumerate() {
            self.entry_word(head, w).store(v, Ordering::Relaxed);
        }
        self.word64(at::FWD_HEAD)
            .store(head.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// The next frame (consumer), if one was published. A head the producer moved further than
    /// the ring holds is an error (a hostile or broken peer).
    pub(crate) fn pop_frame(&self) -> Result<Option<Entry>> {
        let next = self.peek_frame()?;
        if next.is_some() {
            self.skip_frame();
        }
        Ok(next)
    }

    /// The next frame (consumer), left in the ring: a receive that must first take a buffer
    /// the frame names, and runs out of time doing so, finds the frame there next time.
    pub(crate) fn peek_frame(&self) -> Result<Option<Entry>> {
        let tail = self.word64(at::FWD_TAIL).load(Ordering::Relaxed);
        let head = self.word64(at::FWD_HEAD).load(Ordering::Acquire);
        let ready = head.wrapping_sub(tail);
        if ready == 0 {
            return Ok(None);
        }
        if ready > u64::from(self.capacity) {
            return Err(Error::Handoff(format!(
                "the producer's ring index is {ready} entries ahead of a {}-entry ring",
                self.capacity
            )));
        }
        let words: [u64; ENTRY_WORDS] =
            std::array::from_fn(|w| self.entry_word(tail, w).load(Ordering::Relaxed));
        Ok(Some(Entry::from_words(words)))
    }

    /// Moves past the frame [`Ring::peek_frame`] returned (consumer; only after it returned one).
    pub(crate) fn skip_frame(&self) {
        let tail = self.word64(at::FWD_TAIL).load(Ordering::Relaxed);
        self.word64(at::FWD_TAIL)
            .store(tail.wrapping_add(1), Ordering::Release);
    }

    /// Whether a frame waits (consumer).
    pub(crate) fn frame_ready(&self) -> bool {
        self.word64(at::FWD_HEAD).load(Ordering::Acquire)
            != self.word64(at::FWD_TAIL).load(Ordering::Relaxed)
    }

    /// Writes `value` into word `index` (modulo the block) as a peer could: for the fuzz target.
    pub(crate) fn poke(&self, index: usize, value: u64) {
        let words = block_len(self.capacity) / 8;
        self.word64((index % words) * 8)
            .store(value, Ordering::Relaxed);
    }

    /// Whether ids were handed back and not yet drained (producer).
    pub(crate) fn back_pending(&self) -> bool {
        self.word64(at::BACK_HEAD).load(Ordering::Acquire)
            != self.word64(at::BACK_TAIL).load(Ordering::Relaxed)
    }

    /// Hands a slot back (consumer; callers serialise).
    pub(crate) fn push_back(&self, slot: u32) -> Result<()> {
        let head = self.word64(at::BACK_HEAD).load(Ordering::Relaxed);
        let tail = self.word64(at::BACK_TAIL).load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= u64::from(self.capacity) {
            return Err(Error::Handoff(
                "the producer's hand-back ring is full (it stopped reading)".into(),
            ));
        }
        self.back_word(head)
            .store(u64::from(slot), Ordering::Relaxed);
        self.word64(at::BACK_HEAD)
            .store(head.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Every slot id handed back since the last call (producer), unchecked: the caller checks
    /// each against what this consumer holds. A head past the ring is an error.
    pub(crate) fn drain_back(&self, into: &mut Vec<u64>) -> Result<()> {
        let tail = self.word64(at::BACK_TAIL).load(Ordering::Relaxed);
        let head = self.word64(at::BACK_HEAD).load(Ordering::Acquire);
        let ready = head.wrapping_sub(tail);
        if ready > u64::from(self.capacity) {
            return Err(Error::Handoff(format!(
                "the consumer's hand-back index is {ready} entries ahead of a {}-entry ring",
                self.capacity
            )));
        }
        into.extend(
            (0..ready).map(|i| self.back_word(tail.wrapping_add(i)).load(Ordering::Relaxed)),
        );
        self.word64(at::BACK_TAIL).store(head, Ordering::Release);
        Ok(())
    }

    /// The flag a side raises before it sleeps, and the other checks after it publishes.
    fn sleeping(&self, consumer: bool) -> &AtomicU32 {
        self.word32(if consumer {
            at::CONSUMER_SLEEPING
        } else {
            at::PRODUCER_SLEEPING
        })
    }

    /// Raises this side's sleep flag; the caller re-checks its ring after this, then sleeps.
    /// SeqCst pairs with `peer_sleeps`: either the publisher sees the flag, or the sleeper sees
    /// the publication (no lost wake-up).
    pub(crate) fn going_to_sleep(&self, consumer: bool) {
        self.sleeping(consumer).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Lowers this side's sleep flag.
    pub(crate) fn awake(&self, consumer: bool) {
        self.sleeping(consumer).store(0, Ordering::Relaxed);
    }

    /// Whether the other side sleeps (after a publication): then it needs a wake-up.
    pub(crate) fn peer_sleeps(&self, peer_is_consumer: bool) -> bool {
        fence(Ordering::SeqCst);
        self.sleeping(peer_is_consumer).load(Ordering::SeqCst) != 0
    }
}

/// The largest ring a peer may announce: a pool is a handful of buffers.
pub(crate) const MAX_CAPACITY: u32 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(capacity: u32) -> (Ring, Ring) {
        let producer = Ring::create(capacity).unwrap();
        let handle = producer.block().share().unwrap();
        let consumer = Ring::open(handle, producer.capacity()).unwrap();
        (producer, consumer)
    }

    #[test]
    fn frames_and_slots_cross_the_block_in_order_with_their_metadata() {
        let (p, c) = pair(3);
        assert_eq!(p.capacity(), 4);
        for i in 0..4u32 {
            let mut e = Entry {
                slot: i,
                payload_len: 3,
                seq: u64::from(i) + 100,
                timestamp_ns: 7,
                completion: 9,
                ..Entry::default()
            };
            e.payload[..3].copy_from_slice(b"abc");
            p.push_frame(e).unwrap();
        }
        assert!(
            p.push_frame(Entry::default()).is_err(),
            "a full ring refuses"
        );
        for i in 0..4u32 {
            let e = c.pop_frame().unwrap().unwrap();
            assert_eq!(
                (e.slot, e.seq, &e.payload[..3]),
                (i, u64::from(i) + 100, &b"abc"[..])
            );
        }
        assert_eq!(c.pop_frame().unwrap(), None);
        c.push_back(2).unwrap();
        c.push_back(0).unwrap();
        let mut back = Vec::new();
        p.drain_back(&mut back).unwrap();
        assert_eq!(back, [2, 0]);
    }

    #[test]
    fn a_head_moved_past_the_ring_is_an_error_not_a_read_outside_it() {
        let (p, c) = pair(2);
        p.word64(at::FWD_HEAD).store(1_000_000, Ordering::Release);
        assert!(c.pop_frame().is_err());
        c.word64(at::BACK_HEAD).store(u64::MAX, Ordering::Release);
        assert!(p.drain_back(&mut Vec::new()).is_err());
    }

    proptest::proptest! {
        /// A peer may write any value into any word of the block: reading never panics, never
        /// reports more entries than the ring holds, and never leaves it.
        #[test]
        fn any_words_a_peer_writes_are_read_safely(
            writes in proptest::collection::vec((0usize..64, proptest::prelude::any::<u64>()), 0..32),
        ) {
            let (p, c) = pair(4);
            let words = block_len(4) / 8;
            for (w, v) in writes {
                p.word64((w % words) * 8).store(v, Ordering::Relaxed);
            }
            for _ in 0..8 {
                if let Ok(Some(e)) = c.pop_frame() {
                    let _ = e.slot; // any value: the consumer checks it against its pool
                }
            }
            let mut back = Vec::new();
            if p.drain_back(&mut back).is_ok() {
                proptest::prop_assert!(back.len() <= 4);
            }
        }
    }

    #[test]
    fn a_block_that_is_too_small_or_not_a_ring_is_refused() {
        let small = Block::create(64).unwrap().share().unwrap();
        assert!(Ring::open(small, 4).is_err());
        let junk = Block::create(block_len(4)).unwrap().share().unwrap();
        let err = Ring::open(junk, 4).unwrap_err();
        assert!(err.to_string().contains("not a version"), "{err}");
        let p = Ring::create(4).unwrap();
        for capacity in [0, 3, MAX_CAPACITY * 2] {
            let handle = p.block().share().unwrap();
            assert!(Ring::open(handle, capacity).is_err(), "{capacity}");
        }
    }
}
