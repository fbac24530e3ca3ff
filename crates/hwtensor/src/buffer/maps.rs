//! The map claims of one buffer: Rust's aliasing rules across every view of it in the process.
//!
//! A map of the whole buffer is one atomic operation (the hot path: a map of a 1080p frame is
//! tens of nanoseconds, and this is most of it). A map of a part (a view, a batch item) claims
//! its byte range, from its first element to the end of its last: two maps overlap exactly
//! when their ranges do, so disjoint parts (strips of an image tiled across threads, the items
//! of a batch) can be written at the same time, while any overlap with a write is refused.
//!
//! The word holds four counts: whole-buffer write (one bit), whole-buffer reads, part reads,
//! part writes. A whole write needs the word at zero; a whole read, no write of any kind; a
//! part read, no whole write; a part write, no whole map. Parts are then checked against each
//! other under a lock that only part maps take.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{Error, Result};

/// Bits of each count in the word: a million live maps of one kind.
const FIELD: u32 = 20;
const ONE_WHOLE_READ: u64 = 1;
const ONE_PART_READ: u64 = 1 << FIELD;
const ONE_PART_WRITE: u64 = 1 << (2 * FIELD);
const COUNT: u64 = (1 << FIELD) - 1;
/// A live write map of the whole buffer.
const WHOLE_WRITE: u64 = 1 << 63;

fn whole_reads(w: u64) -> u64 {
    w & COUNT
}
fn part_writes(w: u64) -> u64 {
    (w >> (2 * FIELD)) & COUNT
}

/// The claims of one buffer.
#[derive(Debug, Default)]
pub(crate) struct Maps {
    word: AtomicU64,
    /// Live part claims: byte range and whether it writes.
    parts: Mutex<Vec<(usize, usize, bool)>>,
}

/// What a claim covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// The whole buffer.
    Whole,
    /// Bytes `start..end`.
    Part(usize, usize),
}

/// A live claim; given back when dropped.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    maps: &'a Maps,
    span: Span,
    write: bool,
}

fn busy(held: &'static str) -> Error {
    Error::MapBusy { held }
}

impl Maps {
    /// Whether any map is live.
    pub(crate) fn any(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }

    /// Claims `span` for reading, or for writing with `write`.
    #[inline]
    pub(crate) fn claim(&self, span: Span, write: bool) -> Result<Claim<'_>> {
        match span {
            Span::Whole => self.claim_whole(write)?,
            Span::Part(start, end) => self.claim_part(start, end, write)?,
        }
        Ok(Claim {
            maps: self,
            span,
            write,
        })
    }

    #[inline]
    fn claim_whole(&self, write: bool) -> Result<()> {
        let word = &self.word;
        let swapped = if write {
            word.compare_exchange(0, WHOLE_WRITE, Ordering::Acquire, Ordering::Relaxed)
        } else {
            word.fetch_update(Ordering::Acquire, Ordering::Relaxed, |w| {
                (w & WHOLE_WRITE == 0 && part_writes(w) == 0 && whole_reads(w) < COUNT)
                    .then_some(w + ONE_WHOLE_READ)
            })
        };
        match swapped {
            Ok(_) => Ok(()),
            Err(w) if w & WHOLE_WRITE != 0 || part_writes(w) != 0 => Err(busy("for writing")),
            Err(_) => Err(busy("for reading")),
        }
    }

    fn claim_part(&self, start: usize, end: usize, write: bool) -> Result<()> {
        let one = if write { ONE_PART_WRITE } else { ONE_PART_READ };
        self.word
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |w| {
                let free = w & WHOLE_WRITE == 0 && (!write || whole_reads(w) == 0);
                let room = (w / one) & COUNT < COUNT;
                (free && room).then_some(w + one)
            })
            .map_err(|w| match w & WHOLE_WRITE != 0 {
                true => busy("for writing"),
                false => busy("for reading"),
            })?;
        let listed = self.parts.lock().map(|mut parts| {
            let clash = parts
                .iter()
                .find(|&&(s, e, w)| s < end && start < e && (w || write));
            match clash {
                Some(&(_, _, w)) => Err(busy(if w { "for writing" } else { "for reading" })),
                None => {
                    parts.push((start, end, write));
                    Ok(())
                }
            }
        });
        match listed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.word.fetch_sub(one, Ordering::Release);
                Err(e)
            }
            Err(_) => {
                self.word.fetch_sub(one, Ordering::Release);
                Err(Error::InvalidOperation(
                    "a map of this buffer panicked earlier".into(),
                ))
            }
        }
    }
}

impl Drop for Claim<'_> {
    /// Inlined into every map's end: a whole-buffer claim is given back with one atomic
    /// operation; parts, which take the lock, are a call.
    #[inline(always)]
    fn drop(&mut self) {
        let word = &self.maps.word;
        match (self.span, self.write) {
            (Span::Whole, true) => word.store(0, Ordering::Release),
            (Span::Whole, false) => {
                word.fetch_sub(ONE_WHOLE_READ, Ordering::Release);
            }
            (Span::Part(start, end), write) => self.maps.release_part(start, end, write),
        }
    }
}

impl Maps {
    fn release_part(&self, start: usize, end: usize, write: bool) {
        if let Ok(mut parts) = self.parts.lock() {
            if let Some(i) = parts.iter().position(|&p| p == (start, end, write)) {
                parts.swap_remove(i);
            }
        }
        let one = if write { ONE_PART_WRITE } else { ONE_PART_READ };
        self.word.fetch_sub(one, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_whole_write_excludes_everything_and_reads_share() {
        let m = Maps::default();
        let w = m.claim(Span::Whole, true).unwrap();
        assert!(m.claim(Span::Whole, false).is_err());
        assert!(m.claim(Span::Part(0, 4), false).is_err());
        drop(w);
        let r1 = m.claim(Span::Whole, false).unwrap();
        let r2 = m.claim(Span::Part(0, 4), false).unwrap();
        assert!(
            m.claim(Span::Part(8, 12), true).is_err(),
            "a whole read covers every part"
        );
        drop((r1, r2));
        assert!(!m.any());
    }

    #[test]
    fn strips_of_one_buffer_are_written_at_once_and_a_whole_map_waits_for_them() {
        let m = Maps::default();
        let top = m.claim(Span::Part(0, 100), true).unwrap();
        let bottom = m.claim(Span::Part(100, 200), true).unwrap();
        assert!(m.claim(Span::Whole, false).is_err());
        assert!(m.claim(Span::Part(50, 150), false).is_err());
        drop(top);
        assert!(m.claim(Span::Part(0, 100), false).is_ok());
        drop(bottom);
        assert!(m.claim(Span::Whole, true).is_ok());
    }

    proptest! {
        /// Whatever the sequence of claims and releases: a claim succeeds exactly when it
        /// overlaps no live claim that is a write (or when it reads and overlaps only reads);
        /// so no two overlapping maps with a write among them ever coexist.
        #[test]
        fn claims_succeed_exactly_when_they_alias_no_write(
            ops in prop::collection::vec((0usize..4, 0usize..64, 1usize..32, any::<bool>(), any::<bool>()), 1..60)
        ) {
            const LEN: usize = 64;
            let m = Maps::default();
            let mut live: Vec<(Claim<'_>, usize, usize, bool)> = Vec::new();
            for (kind, start, len, write, release) in ops {
                if release && !live.is_empty() {
                    live.remove(start % live.len());
                    continue;
                }
                let (s, e, span) = match kind {
                    0 => (0, LEN, Span::Whole),
                    _ => {
                        let s = start.min(LEN - 1);
                        let e = (s + len).min(LEN);
                        (s, e, Span::Part(s, e))
                    }
                };
                let clash = live.iter().any(|&(_, ls, le, lw)| ls < e && s < le && (lw || write));
                match m.claim(span, write) {
                    Ok(c) => {
                        prop_assert!(!clash, "{s}..{e} write {write} aliased a live claim");
                        live.push((c, s, e, write));
                    }
                    Err(_) => prop_assert!(clash, "{s}..{e} write {write} refused with no clash"),
                }
            }
            drop(live);
            prop_assert!(!m.any());
        }
    }
}
