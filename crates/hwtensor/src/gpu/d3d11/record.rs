//! The rendezvous on Windows: a named file mapping, `Local\hwtensor-gpu-<pid>`, through which
//! independently linked copies of this library find the process device, the shared fence's NT
//! handle, the signal counter and the fallback queue lock.
//!
//! Named kernel objects die with their last handle, and every copy keeps its handle for the
//! life of the process, so a record can never outlive its process and no stale sweep is needed
//! (the POSIX record needs one). A published device pointer is still checked with
//! `QueryInterface` before it is trusted.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use windows::core::HSTRING;
use windows::Win32::Foundation::INVALID_HANDLE_VALUE;
use windows::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, FILE_MAP_ALL_ACCESS, PAGE_READWRITE,
};

use crate::gpu::claim::{CLAIMING, EMPTY};
use crate::{Error, Result};

/// The layout version this copy writes and trusts ("HW", D3D11 record 1).
pub(crate) const LAYOUT_V1: u32 = 0x4857_D301;

/// Size of the mapping: one page, though the record needs far less.
const RECORD_BYTES: u32 = 4096;

/// What a publisher writes: what another copy needs to adopt the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Published {
    /// The `ID3D11Device*`; the publisher holds a reference for the life of the process.
    pub device: u64,
    /// The fence's shared NT handle in this process; 0 when there is no shareable fence.
    pub fence_handle: u64,
    /// `Features` bits of the device.
    pub features: u32,
}

/// The shared record. Every field is atomic: several copies read and write it concurrently.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Record {
    pub version: AtomicU32,
    pub pid: AtomicU32,
    /// The shared signal counter: the last timeline value allocated. Never reset.
    pub counter: AtomicU64,
    /// Highest value allocated by `signal_deferred` and not yet signalled.
    pub pending: AtomicU64,
    /// Highest value signalled on the fence (or, without a fence, finished on the CPU).
    pub submitted: AtomicU64,
    /// The queue lock for devices without `ID3D11Multithread`: 0 free, 1 held.
    pub queue_lock: AtomicU32,
    pub features: AtomicU32,
    pub device: AtomicU64,
    pub fence_handle: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Record>() <= RECORD_BYTES as usize);

/// Where the version word sits, for tests that plant a record of another layout.
#[doc(hidden)]
pub const RECORD_VERSION_OFFSET: usize = std::mem::offset_of!(Record, version);

/// What a reader found in the record (never `Stale`: a `Local\\` mapping dies with its
/// processes, so no dead process's record can be met).
pub(crate) type Found = crate::gpu::rendezvous::Found<Published>;

impl Record {
    /// Reads the record, waiting out a claim in progress (bounded).
    pub(crate) fn read_as(&self, pid: u32) -> Found {
        crate::gpu::claim::wait_settled(|| match self.version.load(Ordering::Acquire) {
            EMPTY => Some(Found::Empty),
            LAYOUT_V1 if self.pid.load(Ordering::Acquire) == pid => {
                Some(Found::Ours(self.published()))
            }
            CLAIMING => None,
            other => Some(Found::Foreign(other)),
        })
        .unwrap_or(Found::Unsettled)
    }

    fn published(&self) -> Published {
        Published {
            device: self.device.load(Ordering::Acquire),
            fence_handle: self.fence_handle.load(Ordering::Acquire),
            features: self.features.load(Ordering::Acquire),
        }
    }

    /// Claims the empty record, writes `p`, and publishes it with a release store of the
    /// version last. The counter is left as it is.
    pub(crate) fn publish_as(&self, pid: u32, p: &Published) -> bool {
        if !crate::gpu::claim::try_claim(&self.version, EMPTY) {
            return false;
        }
        self.pid.store(pid, Ordering::Release);
        self.device.store(p.device, Ordering::Release);
        self.fence_handle.store(p.fence_handle, Ordering::Release);
        self.features.store(p.features, Ordering::Release);
        self.version.store(LAYOUT_V1, Ordering::Release);
        true
    }
}

/// The state machine's view of the record, as this process.
impl crate::gpu::rendezvous::RecordLayout for Record {
    type Published = Published;
    const EMPTY_STATE: u64 = EMPTY as u64;

    fn read(&self) -> Found {
        self.read_as(std::process::id())
    }

    /// Only an empty record is ever claimed here (none is stale on Windows).
    fn publish(&self, expected: u64, p: &Published) -> bool {
        expected == Self::EMPTY_STATE && self.publish_as(std::process::id(), p)
    }
}

/// The record name of process `pid`.
#[doc(hidden)]
pub fn record_name(pid: u32) -> String {
    format!("Local\\hwtensor-gpu-{pid}")
}

/// Opens (creating if needed) and maps this process's record. `Err` is a reason to warn about:
/// the device still works, other copies just will not find it.
pub(crate) fn open_record(pid: u32) -> Result<&'static Record> {
    let name = record_name(pid);
    // SAFETY: a pagefile-backed mapping with a valid, NUL-terminated name; the handle is
    // deliberately never closed, so the record lives exactly as long as this process.
    let mapping = unsafe {
        CreateFileMappingW(
            INVALID_HANDLE_VALUE,
            None,
            PAGE_READWRITE,
            0,
            RECORD_BYTES,
            &HSTRING::from(name.as_str()),
        )
    }
    .map_err(|e| Error::InvalidOperation(format!("cannot create {name}: {e}")))?;
    // SAFETY: a live mapping handle of at least RECORD_BYTES; the view is never unmapped.
    let view = unsafe { MapViewOfFile(mapping, FILE_MAP_ALL_ACCESS, 0, 0, RECORD_BYTES as usize) };
    if view.Value.is_null() {
        return Err(Error::InvalidOperation(format!(
            "cannot map {name}: {}",
            windows::core::Error::from_thread()
        )));
    }
    // SAFETY: the view is page aligned, RECORD_BYTES long (>= size_of::<Record>()), shared by
    // every copy, zero-filled when new (all-zero is a valid Record of atomics), never unmapped.
    Ok(unsafe { &*view.Value.cast::<Record>() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 4242;

    #[test]
    fn an_empty_record_is_claimed_once_and_then_read_as_ours() {
        let r = Record::default();
        assert_eq!(r.read_as(ME), Found::Empty);
        let p = Published {
            device: 7,
            fence_handle: 9,
            features: 3,
        };
        assert!(r.publish_as(ME, &p));
        assert!(!r.publish_as(ME, &p), "a second publisher loses");
        assert_eq!(r.read_as(ME), Found::Ours(p));
    }

    #[test]
    fn a_record_of_another_layout_or_owner_is_not_trusted() {
        let r = Record::default();
        r.version.store(0x1234, Ordering::Release);
        assert_eq!(r.read_as(ME), Found::Foreign(0x1234));
        r.version.store(LAYOUT_V1, Ordering::Release);
        r.pid.store(ME + 1, Ordering::Release);
        assert_eq!(r.read_as(ME), Found::Foreign(LAYOUT_V1));
    }
}
