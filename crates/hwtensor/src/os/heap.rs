//! Heap memory: zeroed, 64-byte aligned, page aligned from one page up. The heap backing's
//! allocation, and the host copy of a D3D11 texture: both ask the OS the same way.
//!
//! Buffers of a page or more are private anonymous mappings rather than allocator blocks: they
//! come page aligned and zeroed by the kernel on first touch, where an over-aligned
//! `alloc_zeroed` goes through `posix_memalign` and a `memset` of every byte (3 ms for a 1080p
//! RGBA frame, measured, against microseconds for the mapping).
//!
//! A fresh mapping pays a page fault per page on first touch (2025 for a 1080p frame), which
//! made a frame that is allocated, filled and dropped 3-6x slower than a `Vec` doing the same
//! (the allocator reuses its memory). So freed mappings are kept in a small bounded spare list
//! and handed out again, zeroed with one `memset`, to the next buffer of the same size.

// Heap memory is raw memory: allocation, the page-aligned mapping and its pointer.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Mutex;

use memmap2::{MmapMut, MmapOptions};

use crate::{Error, Result, TensorMemory};

/// Alignment of every heap buffer: a full cache line, which AVX-512 loads and TFLite's
/// `kDefaultTensorAlignment` both want.
pub(crate) const HEAP_ALIGN: usize = 64;

/// Heap buffers of at least this size are page aligned, so a GPU driver can import them in
/// place (`VK_EXT_external_memory_host` requires page alignment) instead of staging a copy.
pub(crate) const PAGE_ALIGN_FROM: usize = 4096;

/// Freed mappings kept for reuse, at most this many...
const SPARE_BLOCKS: usize = 4;
/// ...and at most this many bytes in all (four 4K RGBA frames): the cost of the cache is memory
/// the process keeps after it freed it, so it stays small.
const SPARE_BYTES: usize = 4 * 3840 * 2160 * 4;

/// Freed mappings kept for reuse, most recently freed last.
#[derive(Debug, Default)]
struct Spares(Vec<MmapMut>);

impl Spares {
    /// A kept mapping of exactly `len` bytes, as it was left (the caller zeroes it).
    fn take(&mut self, len: usize) -> Option<MmapMut> {
        let i = self.0.iter().rposition(|m| m.len() == len)?;
        Some(self.0.swap_remove(i))
    }

    /// Keeps `map` when it fits the byte budget (the oldest goes when the list is full);
    /// returns it otherwise, for the caller to unmap.
    fn keep(&mut self, map: MmapMut) -> Option<MmapMut> {
        let kept: usize = self.0.iter().map(|m| m.len()).sum();
        if map.len() + kept > SPARE_BYTES {
            return Some(map);
        }
        if self.0.len() == SPARE_BLOCKS {
            self.0.remove(0);
        }
        self.0.push(map);
        None
    }
}

/// The process's spare mappings.
static SPARE: Mutex<Spares> = Mutex::new(Spares(Vec::new()));

/// A spare mapping of `len` bytes, zeroed, if one is kept.
fn reuse(len: usize) -> Option<MmapMut> {
    // The memset runs outside the lock: taken out first, zeroed after.
    let mut map = SPARE.lock().ok()?.take(len)?;
    map.fill(0);
    Some(map)
}

/// Keeps a freed mapping for reuse when there is room; unmaps it otherwise (outside the lock).
fn keep(map: MmapMut) {
    let refused = match SPARE.lock() {
        Ok(mut spare) => spare.keep(map),
        Err(_) => Some(map),
    };
    drop(refused);
}

/// Mappings from this size up ask for transparent huge pages: a 2 MiB page faults in once
/// where 512 small ones fault one by one.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// A new zeroed anonymous mapping of `len` bytes, on huge pages where the kernel offers them
/// (`transparent_hugepage` set to `always` or `madvise`; elsewhere the advice is a no-op).
fn fresh_pages(len: usize) -> std::io::Result<MmapMut> {
    let map = MmapOptions::new().len(len).map_anon()?;
    // Advice only: a kernel without THP refuses it, and the small pages still work. (Windows
    // has no such advice: large pages there need a privilege; it keeps small pages.)
    #[cfg(target_os = "linux")]
    if len >= HUGE_PAGE {
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    Ok(map)
}

/// A zeroed heap allocation owned by one buffer.
#[derive(Debug)]
pub(crate) enum HeapBlock {
    /// Under a page: an allocator block (or no memory at all for zero bytes).
    Small { ptr: NonNull<u8>, layout: Layout },
    /// A page or more: an anonymous private mapping (given to the spare list on drop).
    Pages(ManuallyDrop<MmapMut>),
}

// SAFETY: HeapBlock owns its allocation exclusively, like a Box<[u8]>; access to the bytes is
// coordinated by the buffer's map accounting, not by this type.
unsafe impl Send for HeapBlock {}
// SAFETY: as above; &HeapBlock only hands out the pointer value.
unsafe impl Sync for HeapBlock {}

impl HeapBlock {
    pub(crate) fn zeroed(len: usize) -> Result<HeapBlock> {
        let alloc_err = |source| Error::Alloc {
            memory: TensorMemory::Mem,
            bytes: len,
            source,
        };
        if len >= PAGE_ALIGN_FROM {
            let map = match reuse(len) {
                Some(map) => map,
                None => fresh_pages(len).map_err(alloc_err)?,
            };
            return Ok(HeapBlock::Pages(ManuallyDrop::new(map)));
        }
        let layout = Layout::from_size_align(len, HEAP_ALIGN).expect("under a page, so it fits");
        if len == 0 {
            // A zero-sized buffer needs no memory, only a well-aligned, non-null pointer.
            let ptr = NonNull::new(HEAP_ALIGN as *mut u8).expect("alignment is non-zero");
            return Ok(HeapBlock::Small { ptr, layout });
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| alloc_err(std::io::Error::from(std::io::ErrorKind::OutOfMemory)))?;
        Ok(HeapBlock::Small { ptr, layout })
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        match self {
            HeapBlock::Small { ptr, .. } => ptr.as_ptr(),
            HeapBlock::Pages(map) => map.as_ptr().cast_mut(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            HeapBlock::Small { layout, .. } => layout.size(),
            HeapBlock::Pages(map) => map.len(),
        }
    }
}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        match self {
            HeapBlock::Small { ptr, layout } if layout.size() != 0 => {
                // SAFETY: allocated in `zeroed` with this very layout and not freed since.
                unsafe { alloc::dealloc(ptr.as_ptr(), *layout) };
            }
            HeapBlock::Pages(map) => {
                // SAFETY: taken once, here, as the block goes; nothing uses it after.
                keep(unsafe { ManuallyDrop::take(map) });
            }
            HeapBlock::Small { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_heap_blocks_are_cache_line_aligned_and_zeroed() {
        let b = HeapBlock::zeroed(100).unwrap();
        assert_eq!(b.ptr() as usize % HEAP_ALIGN, 0);
        // SAFETY: the block is 100 bytes long and alive.
        let bytes = unsafe { std::slice::from_raw_parts(b.ptr(), 100) };
        assert!(bytes.iter().all(|&x| x == 0));
    }

    #[test]
    fn heap_blocks_of_a_page_or_more_are_page_aligned() {
        let b = HeapBlock::zeroed(PAGE_ALIGN_FROM).unwrap();
        assert_eq!(b.ptr() as usize % PAGE_ALIGN_FROM, 0);
    }

    fn mapping(len: usize) -> MmapMut {
        MmapOptions::new().len(len).map_anon().unwrap()
    }

    #[test]
    fn a_kept_mapping_of_the_same_size_is_handed_out_again() {
        let mut spares = Spares::default();
        let mut map = mapping(3 * PAGE_ALIGN_FROM);
        map.fill(0xAB);
        let addr = map.as_ptr();
        assert!(spares.keep(map).is_none());
        assert!(
            spares.take(2 * PAGE_ALIGN_FROM).is_none(),
            "only the same size is reused"
        );
        let again = spares.take(3 * PAGE_ALIGN_FROM).unwrap();
        assert_eq!(again.as_ptr(), addr);
    }

    #[test]
    fn the_spare_list_keeps_few_blocks_and_a_bounded_number_of_bytes() {
        let mut spares = Spares::default();
        for _ in 0..SPARE_BLOCKS + 2 {
            assert!(spares.keep(mapping(PAGE_ALIGN_FROM)).is_none());
        }
        assert_eq!(spares.0.len(), SPARE_BLOCKS, "the oldest go");
        assert!(
            spares.keep(mapping(SPARE_BYTES)).is_some(),
            "over the byte budget: refused"
        );
    }

    #[test]
    fn heap_blocks_of_a_page_or_more_come_zeroed_even_when_reused() {
        let len = 5 * PAGE_ALIGN_FROM + 123;
        for _ in 0..3 {
            let b = HeapBlock::zeroed(len).unwrap();
            // SAFETY: the block is `len` bytes long and alive.
            let bytes = unsafe { std::slice::from_raw_parts_mut(b.ptr(), len) };
            assert!(bytes.iter().all(|&x| x == 0));
            bytes.fill(0xCD);
        }
    }

    #[test]
    fn an_impossible_heap_size_is_an_error() {
        assert!(HeapBlock::zeroed(usize::MAX - 10).is_err());
    }
}
