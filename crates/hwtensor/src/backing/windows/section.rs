//! Shared memory on Windows: an unnamed, pagefile-backed section (`CreateFileMappingW` on
//! `INVALID_HANDLE_VALUE`) with one view mapped for the life of the buffer, so a map costs what
//! a heap map costs.
//!
//! A section's size is fixed when it is created: unlike a memfd it cannot be shrunk by another
//! process that holds it, so there is nothing to seal. Unnamed, it is reached only through its
//! handle, which another process gets by duplication.

// The section and its view are made and released through the Win32 API.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use windows::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, UnmapViewOfFile, FILE_MAP_ALL_ACCESS,
    MEMORY_MAPPED_VIEW_ADDRESS, PAGE_READWRITE,
};

use crate::identity::BufferIdentity;
use crate::{Error, Result, TensorMemory};

/// Sections made by this process so far: the serial half of a section's identity.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// A section and its one view.
#[derive(Debug)]
pub(crate) struct SectionMapping {
    handle: HANDLE,
    view: *mut u8,
    len: usize,
    identity: BufferIdentity,
}

// SAFETY: the handle and the view are process-wide; the view is only read and written through
// the buffer's access claims, as heap memory is.
unsafe impl Send for SectionMapping {}
// SAFETY: as above; `&SectionMapping` hands out nothing but the pointer and plain values.
unsafe impl Sync for SectionMapping {}

impl SectionMapping {
    /// A new zeroed section of `len` bytes, mapped. A section cannot be empty, so an empty
    /// tensor gets one byte it never reaches.
    pub(crate) fn allocate(len: usize) -> Result<SectionMapping> {
        let size = len.max(1) as u64;
        // SAFETY: a pagefile-backed, unnamed mapping: no file handle, no name to validate.
        let handle = unsafe {
            CreateFileMappingW(
                INVALID_HANDLE_VALUE,
                None,
                PAGE_READWRITE,
                (size >> 32) as u32,
                size as u32,
                None,
            )
        }
        .map_err(|e| alloc_failed(len, e.into()))?;
        // Ownership first: from here on, every error path closes the handle through `mapping`.
        let mut mapping = SectionMapping {
            handle,
            view: std::ptr::null_mut(),
            len,
            identity: BufferIdentity::Section {
                pid: std::process::id(),
                serial: SERIAL.fetch_add(1, Ordering::Relaxed) + 1,
            },
        };
        // SAFETY: a live section of at least `size` bytes; the view is unmapped on drop.
        let view = unsafe { MapViewOfFile(handle, FILE_MAP_ALL_ACCESS, 0, 0, size as usize) };
        if view.Value.is_null() {
            return Err(alloc_failed(
                len,
                windows::core::Error::from_thread().into(),
            ));
        }
        mapping.view = view.Value.cast();
        Ok(mapping)
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.view
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        TensorMemory::Shm
    }

    pub(crate) fn writable(&self) -> bool {
        true
    }

    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        Ok(self.identity)
    }
}

impl Drop for SectionMapping {
    fn drop(&mut self) {
        if !self.view.is_null() {
            let view = MEMORY_MAPPED_VIEW_ADDRESS {
                Value: self.view.cast(),
            };
            // SAFETY: the view this mapping made and no one else unmaps; no map of it is live
            // (the buffer is dropped only after its last claim).
            let _ = unsafe { UnmapViewOfFile(view) };
        }
        // SAFETY: the section handle this mapping owns, closed once.
        let _ = unsafe { CloseHandle(self.handle) };
    }
}

/// The allocation error of a `len`-byte section, with the system's reason.
fn alloc_failed(len: usize, source: std::io::Error) -> Error {
    Error::Alloc {
        memory: TensorMemory::Shm,
        bytes: len,
        source,
    }
}
