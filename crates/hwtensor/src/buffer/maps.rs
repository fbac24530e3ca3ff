//! The map claims of one buffer: Rust's aliasing rules across every view of it in the process.
//!
//! A map of the whole buffer is one atomic operation (the hot path: a map of a 1080p frame is
//! tens of nanoseconds, and this is most of it). A map of a part (a view, a batch item) claims
//! its footprint: the rows of bytes its elements occupy (a crop of an image is its rows of
//! pixels, `stride` apart, not the parent's pixels between them). Two maps overlap exactly when
//! their footprints share a byte, so disjoint parts (strips or tiles of an image written from
//! threads, the items of a batch) can be written at the same time, while any overlap with a
//! write is refused.
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
    /// Live part claims.
    parts: Mutex<Parts>,
}

/// The live part claims of a buffer, each under an id its claim keeps (so the claim stays two
/// words: it travels inside every map, and a map is returned through memory).
#[derive(Debug, Default)]
struct Parts {
    next_id: u64,
    live: Vec<Part>,
}

/// One live part claim.
#[derive(Debug)]
struct Part {
    id: u64,
    footprint: Footprint,
    write: bool,
}

/// What a claim covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// The whole buffer.
    Whole,
    /// Part of it.
    Part(Footprint),
}

/// The bytes a part of a buffer occupies: `rows` runs of `run` bytes, `stride` apart, the first
/// at `start`. A contiguous range is one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Footprint {
    start: usize,
    run: usize,
    stride: usize,
    rows: usize,
}

impl Footprint {
    /// Bytes `start..end`.
    pub(crate) fn range(start: usize, end: usize) -> Footprint {
        Footprint {
            start,
            run: end - start,
            stride: 0,
            rows: 1,
        }
    }

    /// The footprint of a tensor's elements at byte `offset` of its buffer (`extent` bytes from
    /// the first to the end of the last): its runs when they form rows of one stride (an image
    /// crop, a batch item), else the whole range (a claim may only be wider than the elements).
    pub(crate) fn of(
        shape: &[usize],
        strides: &[usize],
        elem: usize,
        offset: usize,
        extent: usize,
    ) -> Footprint {
        let whole_range = Footprint::range(offset, offset + extent);
        if extent == 0 {
            return whole_range;
        }
        let (run, outer) = crate::geometry::contiguous_tail(shape, strides, elem);
        let mut spread = (0..outer).filter(|&d| shape[d] > 1);
        match (spread.next(), spread.next()) {
            (Some(d), None) if strides[d] > 0 => Footprint {
                start: offset,
                run,
                stride: strides[d],
                rows: shape[d],
            },
            _ => whole_range,
        }
    }

    fn end(&self) -> usize {
        self.start + (self.rows - 1) * self.stride + self.run
    }

    /// Whether a row of this footprint shares a byte with `x..y`.
    fn meets_range(&self, x: usize, y: usize) -> bool {
        if self.run == 0 || x >= y || y <= self.start || x >= self.end() {
            return false;
        }
        if self.rows == 1 {
            return true; // inside the bounds checked above
        }
        // Rows k with start + k * stride < y and start + k * stride + run > x.
        let last = ((y - 1 - self.start) / self.stride).min(self.rows - 1);
        let first = (x + 1)
            .saturating_sub(self.start + self.run)
            .div_ceil(self.stride);
        first <= last
    }

    /// Whether the two footprints share a byte.
    fn overlaps(&self, other: &Footprint) -> bool {
        if self.run == 0 || other.run == 0 {
            return false;
        }
        if !(self.start < other.end() && other.start < self.end()) {
            return false;
        }
        if self.rows == 1 {
            return other.meets_range(self.start, self.end());
        }
        if other.rows == 1 {
            return self.meets_range(other.start, other.end());
        }
        let p = self.stride;
        let (xa, xb) = (self.start % p, other.start % p);
        if other.stride == p && xa + self.run <= p && xb + other.run <= p {
            // Tiles of one image: rows and columns must both meet.
            let (ya, yb) = (self.start / p, other.start / p);
            return ya < yb + other.rows
                && yb < ya + self.rows
                && xa < xb + other.run
                && xb < xa + self.run;
        }
        // Different strides (or rows that wrap a stride): row by row.
        let (few, many) = if self.rows <= other.rows {
            (self, other)
        } else {
            (other, self)
        };
        (0..few.rows).any(|k| {
            let at = few.start + k * few.stride;
            many.meets_range(at, at + few.run)
        })
    }
}

/// A live claim; given back when dropped.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    maps: &'a Maps,
    held: Held,
}

/// What a claim holds.
#[derive(Clone, Copy, Debug)]
enum Held {
    WholeRead,
    WholeWrite,
    /// The part listed under `id`.
    Part {
        id: u64,
        write: bool,
    },
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
    #[inline(always)] // every map's path; a call here cost the C ABI's map 7 ns
    pub(crate) fn claim(&self, span: Span, write: bool) -> Result<Claim<'_>> {
        let held = match (span, write) {
            (Span::Whole, _) => {
                self.claim_whole(write)?;
                if write {
                    Held::WholeWrite
                } else {
                    Held::WholeRead
                }
            }
            (Span::Part(footprint), _) => Held::Part {
                id: self.claim_part(footprint, write)?,
                write,
            },
        };
        Ok(Claim { maps: self, held })
    }

    #[inline(always)]
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

    /// Lists a part claim; its id.
    fn claim_part(&self, footprint: Footprint, write: bool) -> Result<u64> {
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
                .live
                .iter()
                .find(|p| (p.write || write) && p.footprint.overlaps(&footprint));
            match clash {
                Some(p) => Err(busy(if p.write {
                    "for writing"
                } else {
                    "for reading"
                })),
                None => {
                    let id = parts.next_id;
                    parts.next_id += 1;
                    parts.live.push(Part {
                        id,
                        footprint,
                        write,
                    });
                    Ok(id)
                }
            }
        });
        match listed {
            Ok(Ok(id)) => Ok(id),
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
        match self.held {
            Held::WholeWrite => word.store(0, Ordering::Release),
            Held::WholeRead => {
                word.fetch_sub(ONE_WHOLE_READ, Ordering::Release);
            }
            Held::Part { id, write } => self.maps.release_part(id, write),
        }
    }
}

impl Maps {
    fn release_part(&self, id: u64, write: bool) {
        if let Ok(mut parts) = self.parts.lock() {
            if let Some(i) = parts.live.iter().position(|p| p.id == id) {
                parts.live.swap_remove(i);
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
        assert!(m.claim(Span::Part(Footprint::range(0, 4)), false).is_err());
        drop(w);
        let r1 = m.claim(Span::Whole, false).unwrap();
        let r2 = m.claim(Span::Part(Footprint::range(0, 4)), false).unwrap();
        assert!(
            m.claim(Span::Part(Footprint::range(8, 12)), true).is_err(),
            "a whole read covers every part"
        );
        drop((r1, r2));
        assert!(!m.any());
    }

    #[test]
    fn strips_of_one_buffer_are_written_at_once_and_a_whole_map_waits_for_them() {
        let m = Maps::default();
        let top = m.claim(Span::Part(Footprint::range(0, 100)), true).unwrap();
        let bottom = m
            .claim(Span::Part(Footprint::range(100, 200)), true)
            .unwrap();
        assert!(m.claim(Span::Whole, false).is_err());
        assert!(m
            .claim(Span::Part(Footprint::range(50, 150)), false)
            .is_err());
        drop(top);
        assert!(m.claim(Span::Part(Footprint::range(0, 100)), false).is_ok());
        drop(bottom);
        assert!(m.claim(Span::Whole, true).is_ok());
    }

    /// The bytes a footprint covers, one by one.
    fn bytes(f: &Footprint) -> std::collections::BTreeSet<usize> {
        (0..f.rows)
            .flat_map(|k| (0..f.run).map(move |i| f.start + k * f.stride + i))
            .collect()
    }

    #[test]
    fn side_by_side_crops_of_one_image_do_not_overlap_and_a_crop_across_them_does() {
        // An 8-pixel-wide RGBA image, 32 bytes a row: the left and right halves of rows 0..4.
        let left = Footprint::of(&[4, 4, 4], &[32, 4, 1], 1, 0, 3 * 32 + 16);
        let right = Footprint::of(&[4, 4, 4], &[32, 4, 1], 1, 16, 3 * 32 + 16);
        assert_eq!((left.rows, left.run, left.stride), (4, 16, 32));
        assert!(!left.overlaps(&right) && !right.overlaps(&left));
        let middle = Footprint::of(&[2, 4, 4], &[32, 4, 1], 1, 32 + 8, 32 + 16);
        assert!(middle.overlaps(&left) && middle.overlaps(&right));
        let m = Maps::default();
        let _l = m.claim(Span::Part(left), true).unwrap();
        let _r = m.claim(Span::Part(right), true).unwrap();
        assert!(m.claim(Span::Part(middle), false).is_err());
    }

    #[test]
    fn a_tensor_whose_runs_form_no_single_stride_claims_its_whole_range() {
        // Two images of a batch, each cropped: runs at two strides.
        let f = Footprint::of(&[2, 2, 3], &[100, 10, 1], 1, 5, 100 + 10 + 3);
        assert_eq!(f, Footprint::range(5, 5 + 113));
        let tight = Footprint::of(&[3, 4], &[4, 1], 1, 8, 12);
        assert_eq!(tight, Footprint::range(8, 20), "contiguous: one run");
    }

    fn footprint() -> impl Strategy<Value = Footprint> {
        (0usize..96, 1usize..24, 1usize..40, 1usize..6).prop_map(|(start, run, stride, rows)| {
            if rows == 1 {
                Footprint::range(start, start + run)
            } else {
                Footprint {
                    start,
                    run,
                    stride,
                    rows,
                }
            }
        })
    }

    proptest! {
        /// Two footprints overlap exactly when they share a byte.
        #[test]
        fn footprints_overlap_exactly_when_they_share_a_byte(a in footprint(), b in footprint()) {
            let shared = !bytes(&a).is_disjoint(&bytes(&b));
            prop_assert_eq!(a.overlaps(&b), shared, "{:?} {:?}", a, b);
            prop_assert_eq!(b.overlaps(&a), shared);
        }

        /// Whatever the sequence of claims and releases: a claim succeeds exactly when it
        /// shares a byte with no live claim that is a write (or when it reads and meets only
        /// reads); so no two overlapping maps with a write among them ever coexist.
        #[test]
        fn claims_succeed_exactly_when_they_alias_no_write(
            ops in prop::collection::vec((0usize..4, footprint(), any::<bool>(), any::<bool>(), 0usize..64), 1..60)
        ) {
            let m = Maps::default();
            let mut live: Vec<(Claim<'_>, Option<std::collections::BTreeSet<usize>>, bool)> = Vec::new();
            for (kind, f, write, release, pick) in ops {
                if release && !live.is_empty() {
                    live.remove(pick % live.len());
                    continue;
                }
                // None: the whole buffer, which meets everything.
                let (set, span) = match kind {
                    0 => (None, Span::Whole),
                    _ => (Some(bytes(&f)), Span::Part(f)),
                };
                let meets = |other: &Option<std::collections::BTreeSet<usize>>| match (&set, other) {
                    (Some(a), Some(b)) => !a.is_disjoint(b),
                    _ => true,
                };
                let clash = live.iter().any(|(_, other, lw)| (*lw || write) && meets(other));
                match m.claim(span, write) {
                    Ok(c) => {
                        prop_assert!(!clash, "{:?} write {} aliased a live claim", span, write);
                        live.push((c, set, write));
                    }
                    Err(_) => prop_assert!(clash, "{:?} write {} refused with no clash", span, write),
                }
            }
            drop(live);
            prop_assert!(!m.any());
        }
    }
}
