//! Shared memory on Windows: an unnamed, pagefile-backed section (`CreateFileMappingW` on
//! `INVALID_HANDLE_VALUE`) with one view mapped for the life of the buffer, so a map costs what
//! a heap map costs.
//!
//! A section's size is fixed when it is created: unlike a memfd it cannot be shrunk by another
//! process that holds it, so there is nothing to seal. Unnamed, it is reached only through its
//! handle, which another process gets by duplication.

// The section and its view are made and released through the Win32 API.
#![allow(unsafe_code)]

use std::os::windows::io::{BorrowedHandle, IntoRawHandle, OwnedHandle};
use std::sync::atomic::{AtomicU64, Ordering};

use windows::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, UnmapViewOfFile, VirtualQuery, FILE_MAP_ALL_ACCESS,
    MEMORY_BASIC_INFORMATION, MEMORY_MAPPED_VIEW_ADDRESS, PAGE_READWRITE,
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

    /// Maps a section another process made, taking `handle` (closed on every error): refused
    /// when the handle is not a section this process may map read-write (an event, a file, a
    /// closed value), or when the section is smaller than the `needed` bytes the sender claims.
    /// Its identity is the one the sender names (`identity`): a section has no name to read.
    pub(crate) fn import(
        handle: OwnedHandle,
        needed: usize,
        identity: BufferIdentity,
    ) -> Result<SectionMapping> {
        let mut mapping = SectionMapping {
            handle: HANDLE(handle.into_raw_handle()),
            view: std::ptr::null_mut(),
            len: needed,
            identity,
        };
        // SAFETY: any handle value: MapViewOfFile refuses what is not a mappable section. The
        // whole section is mapped (size 0), so its real size is the view's.
        let view = unsafe { MapViewOfFile(mapping.handle, FILE_MAP_ALL_ACCESS, 0, 0, 0) };
        if view.Value.is_null() {
            return Err(Error::Handoff(format!(
                "the handle is not a section this process can map read-write: {}",
                windows::core::Error::from_thread()
            )));
        }
        mapping.view = view.Value.cast();
        let mut info = MEMORY_BASIC_INFORMATION::default();
        // SAFETY: a query of the view just mapped, into a valid out struct of its size.
        let got = unsafe {
            VirtualQuery(
                Some(view.Value),
                &mut info,
                std::mem::size_of::<MEMORY_BASIC_INFORMATION>(),
            )
        };
        if got == 0 || info.RegionSize < needed {
            return Err(Error::TooSmall {
                needed,
                capacity: info.RegionSize,
            });
        }
        Ok(mapping)
    }

    /// The section's handle, to duplicate into another process.
    pub(crate) fn handle(&self) -> BorrowedHandle<'_> {
        // SAFETY: the handle this mapping owns, alive as long as `&self`.
        unsafe { BorrowedHandle::borrow_raw(self.handle.0) }
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
