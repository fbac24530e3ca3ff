//! The Windows-only backing (a pagefile-backed section) on every other platform: an
//! uninhabited type with the methods `Storage` calls on the real one, as `stub.rs` is for the
//! Linux-only kinds. No value of it can exist.

use crate::identity::BufferIdentity;
use crate::{Error, Result, TensorMemory};

/// A section and its view: none on this platform.
#[derive(Debug)]
pub(crate) enum SectionMapping {}

impl SectionMapping {
    /// Refuses: shared memory here is a memfd (`Storage::allocate` asks only on Windows).
    pub(crate) fn allocate(len: usize) -> Result<SectionMapping> {
        Err(Error::Unavailable {
            memory: TensorMemory::Shm,
            reason: format!("a {len}-byte section: sections are Windows shared memory"),
        })
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        match *self {}
    }
    pub(crate) fn len(&self) -> usize {
        match *self {}
    }
    pub(crate) fn memory(&self) -> TensorMemory {
        match *self {}
    }
    pub(crate) fn writable(&self) -> bool {
        match *self {}
    }
    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        match *self {}
    }
}
