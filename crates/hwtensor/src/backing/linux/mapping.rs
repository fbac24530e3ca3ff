//! The one persistent CPU mapping of an fd-backed buffer.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memmap2::{MmapOptions, MmapRaw};

use crate::{Error, Result, TensorMemory};

/// An fd and its shared mapping, made once and dropped with the buffer.
#[derive(Debug)]
pub(crate) struct FdMapping {
    // Field order matters: the mapping is dropped (unmapped) before the fd is closed.
    map: Option<MmapRaw>,
    fd: OwnedFd,
    len: usize,
    memory: TensorMemory,
    writable: bool,
    /// The dma-heap a DMA-BUF of ours came from (`None` for shm and imports).
    heap: Option<String>,
}

impl FdMapping {
    /// Maps the first `len` bytes of `fd` shared, read-write where the fd allows it and
    /// read-only where it does not (a read-only DMA-BUF from a decoder).
    pub(crate) fn new(fd: OwnedFd, len: usize, memory: TensorMemory) -> Result<FdMapping> {
        if len == 0 {
            // mmap refuses a zero length; a zero-sized tensor needs no mapping.
            return Ok(FdMapping {
                map: None,
                fd,
                len,
                memory,
                writable: true,
                heap: None,
            });
        }
        let opts = {
            let mut o = MmapOptions::new();
            o.len(len);
            o
        };
        let (map, writable) = match opts.map_raw(&fd) {
            Ok(m) => (m, true),
            Err(rw) => {
                let m = opts.map_raw_read_only(&fd).map_err(|_| Error::Os {
                    op: "mmap of the tensor's fd",
                    source: rw,
                })?;
                (m, false)
            }
        };
        Ok(FdMapping {
            map: Some(map),
            fd,
            len,
            memory,
            writable,
            heap: None,
        })
    }

    /// Records the dma-heap this DMA-BUF was allocated from.
    pub(crate) fn set_heap(&mut self, heap: String) {
        self.heap = Some(heap);
    }

    /// The dma-heap this DMA-BUF of ours came from.
    pub(crate) fn heap(&self) -> Option<&str> {
        self.heap.as_deref()
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        match &self.map {
            Some(m) => m.as_mut_ptr(),
            None => std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    #[inline]
    pub(crate) fn memory(&self) -> TensorMemory {
        self.memory
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }
}
