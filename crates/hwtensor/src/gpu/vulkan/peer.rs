//! What other processes send us: their memory fds and their fences, checked before the driver
//! sees them.
//!
//! A driver trusts the fds it imports. Given a pipe, socket or FIFO, lavapipe blocks reading a
//! header from it (a hang); given a memfd a peer can truncate, our mapping faults (SIGBUS). So
//! an fd reaches the driver only when it is of the very kind this device exports (learnt once
//! from an export of our own), and a memfd only once sealed against shrinking, its size read
//! after the seal.
//!
//! A peer's fence is waited for on the CPU, bounded, never on our queue: a GPU-side wait on a
//! value the peer never signals would stall every later submission of this process, and a
//! value the peer chose must never land on our own timeline.

use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ash::vk;

use super::{format_uuid, Features, GpuDevice};
use crate::os::classify::{self, FdKind};
use crate::os::memfd;
use crate::{Error, GpuErrorKind, Result, TensorMemory};

/// How many peers' fences a device keeps imported. A consumer sees the same few producers
/// frame after frame (an import costs ~1 ms on NVIDIA); a peer that sends a new fence every
/// frame only evicts the oldest instead of growing the list.
const MAX_FOREIGN_TIMELINES: usize = 16;

/// The kinds of fd this device exports, each learnt on first need.
#[derive(Default)]
pub(crate) struct ExportKinds {
    memory: OnceLock<std::result::Result<FdKind, String>>,
    fence: OnceLock<std::result::Result<FdKind, String>>,
}

impl GpuDevice {
    /// The kind of fd this device exports memory as: learnt from a one-byte buffer of our own.
    fn memory_fd_kind(&'static self) -> Result<&'static FdKind> {
        let kind = self.export_kinds.memory.get_or_init(|| {
            let probe = super::memory::GpuMemory::allocate(1, None).map_err(|e| e.to_string())?;
            let fd = probe
                .fd()
                .ok_or_else(|| "this device exports no memory fds".to_string())?;
            FdKind::of(fd).map_err(|e| e.to_string())
        });
        kind.as_ref()
            .map_err(|e| unavailable(format!("cannot import GPU memory: {e}")))
    }

    /// The kind of fd this device exports its timeline as.
    fn fence_fd_kind(&'static self) -> Result<&'static FdKind> {
        let kind = self.export_kinds.fence.get_or_init(|| {
            let fd = self.fence_fd().ok_or_else(|| {
                format!(
                    "{} cannot export or import a timeline fence",
                    self.adapter_label()
                )
            })?;
            FdKind::of(fd).map_err(|e| e.to_string())
        });
        kind.as_ref().map_err(|e| unavailable(e.clone()))
    }

    /// Refuses a memory fd the driver must not see: of another kind than our exports, or a
    /// memfd that could shrink or is shorter than `allocation_size`.
    pub(crate) fn check_memory_fd(
        &'static self,
        fd: BorrowedFd<'_>,
        allocation_size: u64,
    ) -> Result<()> {
        let got = self.expect_kind(fd, self.memory_fd_kind()?, "GPU memory")?;
        if got.is_memfd() {
            memfd::seal_for_import(fd, false)?;
            let size = classify::size(fd)?;
            if size < allocation_size {
                return Err(Error::Fd(format!(
                    "the memory fd holds {size} bytes but the blob says {allocation_size}"
                )));
            }
        }
        Ok(())
    }

    /// The kind of `fd`, when it is `want`, the kind this device exports `what` as.
    fn expect_kind(&self, fd: BorrowedFd<'_>, want: &FdKind, what: &str) -> Result<FdKind> {
        let got = FdKind::of(fd)?;
        if got != *want {
            return Err(Error::Fd(format!(
                "the {what} fd is {}, but {} exports a {what} as {}",
                got.describe(),
                self.adapter_label(),
                want.describe()
            )));
        }
        Ok(got)
    }

    /// Accepts a peer's GPU buffer sent by reference: it must live on this device (same device
    /// and driver UUIDs), and its fence, when one came, is taken as a timeline to wait on.
    pub(crate) fn accept_reference(
        &'static self,
        device_uuid: [u8; 16],
        driver_uuid: [u8; 16],
        fence: Option<OwnedFd>,
    ) -> Result<Option<Arc<PeerTimeline>>> {
        if (self.device_uuid(), self.driver_uuid()) != (device_uuid, driver_uuid) {
            return Err(Error::Blob(format!(
                "the tensor lives on GPU {} (driver {}), but this process's device is {} = {} (driver {})",
                format_uuid(&device_uuid),
                format_uuid(&driver_uuid),
                self.adapter_label(),
                format_uuid(&self.device_uuid()),
                format_uuid(&self.driver_uuid())
            )));
        }
        fence.map(|f| self.peer_timeline(f)).transpose()
    }

    /// The timeline behind a peer's fence fd: the import this device already holds of that very
    /// fence (proven by comparing the files, not by anything the peer claims), or a new one.
    pub(crate) fn peer_timeline(&'static self, fd: OwnedFd) -> Result<Arc<PeerTimeline>> {
        if !self.features.has(Features::EXTERNAL_SEMAPHORE_FD) {
            return Err(unavailable(format!(
                "{} cannot import a timeline fence",
                self.adapter_label()
            )));
        }
        let mut timelines = self
            .timelines
            .lock()
            .map_err(|_| Error::gpu(GpuErrorKind::Driver, "the timeline cache is poisoned"))?;
        // The same file as a fence already checked and imported needs no second look: the
        // hand-off hot path pays one kcmp, not the kind check's three syscalls.
        if let Some(t) = timelines
            .iter()
            .find(|t| crate::os::same_file(t.fd.as_fd(), fd.as_fd()))
        {
            return Ok(t.clone());
        }
        self.expect_kind(fd.as_fd(), self.fence_fd_kind()?, "timeline fence")?;
        let timeline = Arc::new(PeerTimeline::import(self, fd)?);
        if timelines.len() >= MAX_FOREIGN_TIMELINES {
            timelines.remove(0);
        }
        timelines.push(timeline.clone());
        Ok(timeline)
    }
}

fn unavailable(reason: String) -> Error {
    Error::Unavailable {
        memory: TensorMemory::Gpu,
        reason,
    }
}

/// A peer's timeline fence imported into a semaphore of ours, with the fd it came from (kept
/// to recognise the same fence when it comes again).
pub(crate) struct PeerTimeline {
    device: &'static GpuDevice,
    semaphore: vk::Semaphore,
    fd: OwnedFd,
}

impl PeerTimeline {
    fn import(device: &'static GpuDevice, fd: OwnedFd) -> Result<PeerTimeline> {
        let ext = device.ext.semaphore_fd.as_ref().ok_or_else(|| {
            unavailable(format!(
                "{} cannot import a timeline fence",
                device.adapter_label()
            ))
        })?;
        let dup = fd.try_clone().map_err(|e| Error::Os {
            op: "dup of a fence fd",
            source: e,
        })?;
        let semaphore = super::fence::create_semaphore(&device.device, 0, false).map_err(|e| {
            Error::gpu(
                super::vk_kind(e),
                format!("creating a timeline failed: {e}"),
            )
        })?;
        let raw = dup.into_raw_fd();
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
            .fd(raw);
        // SAFETY: a fresh timeline semaphore of this device and a dup we own, of the kind this
        // device exports; on success the driver owns the dup.
        if let Err(e) = unsafe { ext.import_semaphore_fd(&info) } {
            crate::os::close_if_still_ours(raw, fd.as_fd());
            // SAFETY: the semaphore was never used.
            unsafe { device.device.destroy_semaphore(semaphore, None) };
            return Err(Error::gpu(
                super::vk_kind(e),
                format!("importing the peer's fence failed: {e}"),
            ));
        }
        Ok(PeerTimeline {
            device,
            semaphore,
            fd,
        })
    }

    /// Waits on the CPU until the peer's timeline reaches `value`, at most `timeout`. A value
    /// the peer never reaches is a timeout for this import alone.
    pub(crate) fn wait(&self, value: u64, timeout: Duration) -> Result<()> {
        super::fence::wait_semaphore(
            &self.device.device,
            self.semaphore,
            value,
            timeout,
            super::WAIT_SPIN,
        )
        .map_err(|e| match e {
            Error::Timeout(t) => Error::Timeout(format!("the sender's completion: {t}")),
            other => other,
        })
    }
}

impl Drop for PeerTimeline {
    fn drop(&mut self) {
        // SAFETY: only host waits ever use this semaphore, and each holds the Arc it is in.
        unsafe { self.device.device.destroy_semaphore(self.semaphore, None) };
    }
}
