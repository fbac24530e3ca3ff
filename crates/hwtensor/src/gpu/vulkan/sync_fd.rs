//! sync_files (Linux DMA fences) on the Vulkan device: a point of the timeline exported as
//! one, and a received one waited for GPU-side by the submission that needs it, where the
//! driver has `SYNC_FD` binary semaphores. Where it has none, callers wait on the CPU instead:
//! lavapipe has no external semaphores, and NVIDIA 580 on our headless H200 and H100 machines
//! reports no `SYNC_FD` handle type (measured; DMA fences there come with nvidia-drm).
//!
//! A GPU-side wait on a received sync_file is safe where one on a peer's timeline is not (see
//! `peer`): a sync_file is a kernel DMA fence, which every driver must signal in bounded time
//! (a hung job's fence is signalled with an error when the driver's timeout resets it), so a
//! submission that waits for one cannot stall this process's queue for ever. Only our own
//! value, signalled after our own work, lands on the timeline; the fence itself never does.

use std::os::fd::{AsFd, IntoRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ash::vk;

use super::{failed, GpuDevice};
use crate::os::SyncFile;
use crate::os::{close_if_still_ours, own_cloexec};
use crate::{Error, Result};

/// What the driver does with `SYNC_FD` binary semaphores, learnt once.
#[derive(Clone, Copy, Debug, Default)]
struct Support {
    export: bool,
    import: bool,
}

/// The device's sync_file state: what the driver supports, and the binary semaphores that
/// pending submissions still use.
#[derive(Default)]
pub(crate) struct SyncFds {
    support: OnceLock<Support>,
    /// Semaphores and the timeline value of the submission that used them: Vulkan forbids
    /// destroying a semaphore a pending batch refers to, so each waits for its value.
    retiring: Mutex<Vec<(u64, vk::Semaphore)>>,
}

/// Binary semaphores holding imported sync_files, owned until a submission has used them:
/// dropped unused (an error on the way), they are destroyed at once.
pub(crate) struct Imported<'d> {
    device: &'d GpuDevice,
    semaphores: Vec<vk::Semaphore>,
}

impl Imported<'_> {
    /// The waits a submission passes on (a binary semaphore's value is ignored).
    pub(crate) fn waits(&self) -> Vec<(vk::Semaphore, u64)> {
        self.semaphores.iter().map(|&s| (s, 0)).collect()
    }

    /// Hands the semaphores to the device, to be destroyed once `value` (the submission that
    /// waited on them) completes.
    pub(crate) fn used_until(mut self, value: u64) {
        let semaphores = std::mem::take(&mut self.semaphores);
        self.device.retire_after(value, semaphores);
    }
}

impl Drop for Imported<'_> {
    fn drop(&mut self) {
        for &s in &self.semaphores {
            // SAFETY: no submission refers to these (`used_until` takes them otherwise).
            unsafe { self.device.device.destroy_semaphore(s, None) };
        }
    }
}

impl GpuDevice {
    fn sync_fd_support(&self) -> Support {
        *self.sync_fds.support.get_or_init(|| {
            if self.ext.semaphore_fd.is_none() {
                return Support::default();
            }
            let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
                .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
            let mut props = vk::ExternalSemaphoreProperties::default();
            // SAFETY: a query on the device's own physical device.
            unsafe {
                self.instance
                    .get_physical_device_external_semaphore_properties(
                        self.physical,
                        &info,
                        &mut props,
                    )
            };
            let has = |f| props.external_semaphore_features.contains(f);
            Support {
                export: has(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE),
                import: has(vk::ExternalSemaphoreFeatureFlags::IMPORTABLE),
            }
        })
    }

    /// Whether this device exports timeline points as sync_files.
    pub fn exports_sync_files(&self) -> bool {
        self.sync_fd_support().export
    }

    /// Whether this device waits for received sync_files GPU-side.
    pub fn imports_sync_files(&self) -> bool {
        self.sync_fd_support().import
    }

    /// Timeline `value` as a sync_file that signals once the timeline reaches it: a binary
    /// semaphore signalled by a batch that waits for `value`, exported. `None` where the device
    /// cannot export one, or where the driver says the point has already signalled.
    pub(crate) fn export_sync_file(&self, value: u64) -> Result<Option<OwnedFd>> {
        let Some(table) = self
            .ext
            .semaphore_fd
            .as_ref()
            .filter(|_| self.exports_sync_files())
        else {
            return Ok(None);
        };
        let semaphore = self.binary_semaphore(true)?;
        let waits = [(self.timeline.semaphore, value)];
        let submitted =
            self.timeline
                .submit_signals(&self.device, self.queue, &waits, &[semaphore]);
        let done_at = match submitted {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: the failed submission left no batch referring to it.
                unsafe { self.device.destroy_semaphore(semaphore, None) };
                return Err(e);
            }
        };
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        // SAFETY: the semaphore was made exportable as SYNC_FD and has a pending signal, as a
        // SYNC_FD export requires.
        let raw = unsafe { table.get_semaphore_fd(&info) };
        self.retire_after(done_at, vec![semaphore]);
        let raw = raw.map_err(failed("exporting a timeline point as a sync_file"))?;
        // -1: the spec lets a driver answer so for a payload that has signalled already.
        Ok(own_cloexec(raw))
    }

    /// `fences` imported for one submission to wait on, GPU-side; one seen signalled needs no
    /// import. Where the device cannot import sync_files, each is waited for here on the CPU,
    /// at most `bound`, and none is returned.
    pub(crate) fn import_sync_files(
        &self,
        fences: &[&SyncFile],
        bound: Duration,
    ) -> Result<Imported<'_>> {
        let mut imported = Imported {
            device: self,
            semaphores: Vec::new(),
        };
        let table = self
            .ext
            .semaphore_fd
            .as_ref()
            .filter(|_| self.imports_sync_files());
        for fence in fences {
            if fence.is_signalled()? {
                continue;
            }
            match table {
                Some(table) => imported.semaphores.push(self.import_one(table, fence)?),
                None => fence.wait(bound)?,
            }
        }
        Ok(imported)
    }

    fn import_one(
        &self,
        table: &ash::khr::external_semaphore_fd::Device,
        fence: &SyncFile,
    ) -> Result<vk::Semaphore> {
        let fd: OwnedFd = fence
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| Error::Os {
                op: "dup of a sync_file",
                source,
            })?;
        let semaphore = self.binary_semaphore(false)?;
        let raw = fd.into_raw_fd();
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .flags(vk::SemaphoreImportFlags::TEMPORARY)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD)
            .fd(raw);
        // SAFETY: a binary semaphore of this device with no pending operation; a SYNC_FD
        // import is temporary, as the spec requires; on success the driver owns `raw`.
        match unsafe { table.import_semaphore_fd(&info) } {
            Ok(()) => Ok(semaphore),
            Err(e) => {
                // A failed import leaves the fd ours, unless the driver closed it anyway.
                close_if_still_ours(raw, fence.as_fd());
                // SAFETY: nothing refers to the semaphore.
                unsafe { self.device.destroy_semaphore(semaphore, None) };
                Err(failed("importing a sync_file as a semaphore")(e))
            }
        }
    }

    fn binary_semaphore(&self, exportable: bool) -> Result<vk::Semaphore> {
        let mut export = vk::ExportSemaphoreCreateInfo::default()
            .handle_types(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD);
        let mut info = vk::SemaphoreCreateInfo::default();
        if exportable {
            info = info.push_next(&mut export);
        }
        // SAFETY: a plain creation on a live device; the chain outlives the call.
        unsafe { self.device.create_semaphore(&info, None) }
            .map_err(failed("creating a binary semaphore"))
    }

    /// Destroys `semaphores` once the timeline reaches `value`.
    fn retire_after(&self, value: u64, semaphores: Vec<vk::Semaphore>) {
        match self.sync_fds.retiring.lock() {
            Ok(mut r) => r.extend(semaphores.into_iter().map(|s| (value, s))),
            // A poisoned list leaks these few handles rather than destroy them in use.
            Err(_) => log::warn!("hwtensor: the sync_file semaphore list is poisoned"),
        }
    }

    /// Destroys the binary semaphores whose submissions completed (`done` reached).
    pub(crate) fn retire_sync_semaphores(&self, done: u64) {
        let Ok(mut retiring) = self.sync_fds.retiring.lock() else {
            return;
        };
        retiring.retain(|&(value, s)| {
            if value > done {
                return true;
            }
            // SAFETY: the batch that used it completed (its value is reached).
            unsafe { self.device.destroy_semaphore(s, None) };
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::time::{Duration, Instant};

    use crate::gpu::testing::device_or_skip;
    use crate::{SyncFile, Tensor, TensorMemory};

    /// How long the fence stays unsignalled: long beside a 16 KiB copy.
    const HELD: Duration = Duration::from_millis(100);

    fn eventfd() -> OwnedFd {
        rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
    }

    // An eventfd stands in for the fence (it polls readable once written, as a signalled
    // sync_file does): only a device that waits on the CPU polls it; one that imports
    // sync_files is covered by tests/vulkan_sync_file.rs with a real one.
    #[test]
    fn a_device_copy_from_a_fenced_tensor_waits_on_the_cpu_where_it_cannot_import_the_fence() {
        let test =
            "a_device_copy_from_a_fenced_tensor_waits_on_the_cpu_where_it_cannot_import_the_fence";
        let Some(device) = device_or_skip(test) else {
            return;
        };
        if device.imports_sync_files() {
            eprintln!(
                "SKIPPED: {test} - the device imports sync_files (vulkan_sync_file runs that)"
            );
            return;
        }
        let data: Vec<u32> = (0..4096).collect();
        let src = Tensor::<u32>::new(&[4096], Some(TensorMemory::Gpu)).unwrap();
        src.copy_from_flat(&data).unwrap();
        let fence = eventfd();
        let signal = fence.try_clone().unwrap();
        let fenced = src.with_sync_file(SyncFile::stand_in(fence));
        let signaller = std::thread::spawn(move || {
            std::thread::sleep(HELD);
            rustix::io::write(&signal, &1u64.to_ne_bytes()).unwrap();
        });
        let started = Instant::now();
        for to in [TensorMemory::Gpu, TensorMemory::Shm] {
            let dst = Tensor::<u32>::new(&[4096], Some(to)).unwrap();
            dst.copy_from(&fenced).unwrap();
            assert!(
                started.elapsed() >= HELD,
                "a copy into {to} did not wait for the fence"
            );
            assert_eq!(dst.to_vec().unwrap(), data);
        }
        signaller.join().unwrap();
    }
}
