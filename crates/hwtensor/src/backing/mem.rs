//! Heap memory: zeroed, 64-byte aligned, page aligned from one page up.
//!
//! Buffers of a page or more are private anonymous mappings rather than allocator blocks: they
//! come page aligned and zeroed by the kernel on first touch, where an over-aligned
//! `alloc_zeroed` goes through `posix_memalign` and a `memset` of every byte (3 ms for a 1080p
//! RGBA frame, measured, against microseconds for the mapping).

// Heap memory is raw memory: allocation, the page-aligned mapping and its pointer.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};

use crate::{Error, Result, TensorMemory};

/// Alignment of every heap buffer: a full cache line, which AVX-512 loads and TFLite's
/// `kDefaultTensorAlignment` both want.
pub(crate) const HEAP_ALIGN: usize = 64;

/// Heap buffers of at least this size are page aligned, so a GPU driver can import them in
/// place (`VK_EXT_external_memory_host` requires page alignment) instead of staging a copy.
pub(crate) const PAGE_ALIGN_FROM: usize = 4096;

/// A zeroed heap allocation owned by one buffer.
#[derive(Debug)]
pub(crate) enum HeapBlock {
    /// Under a page: an allocator block (or no memory at all for zero bytes).
    Small { ptr: NonNull<u8>, layout: Layout },
    /// A page or more: an anonymous private mapping.
    Pages(MmapMut),
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
            let map = MmapOptions::new().len(len).map_anon().map_err(alloc_err)?;
            return Ok(HeapBlock::Pages(map));
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
        if let HeapBlock::Small { ptr, layout } = self {
            if layout.size() != 0 {
                // SAFETY: allocated in `zeroed` with this very layout and not freed since.
                unsafe { alloc::dealloc(ptr.as_ptr(), *layout) };
            }
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

    #[test]
    fn an_impossible_heap_size_is_an_error() {
        assert!(HeapBlock::zeroed(usize::MAX - 10).is_err());
    }
}
