//! Host memory someone else owns -- a NumPy array, an inference runtime's arena,
//! `cudaHostAlloc` memory -- lent to a tensor without a copy. The owner is kept until the last
//! tensor over the memory goes, and dropping it is how the memory is given back.

// Foreign memory is a raw pointer someone else vouches for: one unsafe constructor.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use crate::{Error, Result};

/// What keeps foreign memory alive: dropped (on any thread) when the last tensor over the
/// memory is gone.
pub type ForeignOwner = Box<dyn Send + Sync>;

/// The bytes of a foreign buffer and their owner.
pub(crate) struct ForeignHost {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    _owner: ForeignOwner,
}

// SAFETY: the constructor's contract makes the bytes valid from any thread while the owner
// lives; access to them is coordinated by the buffer's map accounting, as for heap memory.
unsafe impl Send for ForeignHost {}
// SAFETY: as above; &ForeignHost only hands out the pointer value.
unsafe impl Sync for ForeignHost {}

impl std::fmt::Debug for ForeignHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignHost")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

impl ForeignHost {
    /// Lends `len` bytes at `ptr`, kept alive by `owner`.
    ///
    /// # Safety
    /// The bytes must stay valid for reads (and for writes, with `writable`), neither freed
    /// nor moved, from any thread, until `owner` is dropped.
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len: usize,
        writable: bool,
        owner: ForeignOwner,
    ) -> Result<ForeignHost> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| Error::InvalidArgument("foreign memory at a null pointer".into()))?;
        Ok(ForeignHost {
            ptr,
            len,
            writable,
            _owner: owner,
        })
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }
}
