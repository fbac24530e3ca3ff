//! Heap memory: zeroed, 64-byte aligned, page aligned from one page up.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::{Error, Result, TensorMemory};

/// Alignment of every heap buffer: a full cache line, which AVX-512 loads and TFLite's
/// `kDefaultTensorAlignment` both want.
pub(crate) const HEAP_ALIGN: usize = 64;

/// Heap buffers of at least this size are page aligned, so a GPU driver can import them in
/// place (`VK_EXT_external_memory_host` requires page alignment) instead of staging a copy.
pub(crate) const PAGE_ALIGN_FROM: usize = 4096;

/// A zeroed heap allocation owned by one buffer.
#[derive(Debug)]
pub(crate) struct HeapBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: HeapBlock owns its allocation exclusively, like a Box<[u8]>; access to the bytes is
// coordinated by the buffer's map accounting, not by this type.
unsafe impl Send for HeapBlock {}
// SAFETY: as above; &HeapBlock only hands out the pointer value.
unsafe impl Sync for HeapBlock {}

impl HeapBlock {
    pub(crate) fn zeroed(len: usize) -> Result<HeapBlock> {
        let align = if len >= PAGE_ALIGN_FROM {
            rustix::param::page_size().max(HEAP_ALIGN)
        } else {
            HEAP_ALIGN
        };
        let layout = Layout::from_size_align(len, align)
            .map_err(|_| Error::Shape(format!("{len} bytes is too large to allocate")))?;
        if len == 0 {
            // A zero-sized buffer needs no memory, only a well-aligned, non-null pointer.
            let ptr = NonNull::new(align as *mut u8).expect("alignment is non-zero");
            return Ok(HeapBlock { ptr, layout });
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| Error::Alloc {
            memory: TensorMemory::Mem,
            bytes: len,
            source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        })?;
        Ok(HeapBlock { ptr, layout })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated in `zeroed` with this very layout and not freed since.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
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
        assert_eq!(b.ptr() as usize % rustix::param::page_size(), 0);
    }

    #[test]
    fn an_impossible_heap_size_is_an_error() {
        assert!(HeapBlock::zeroed(usize::MAX - 10).is_err());
    }
}
