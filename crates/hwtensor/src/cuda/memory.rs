//! `TensorMemory::Cuda`: device memory of the CUDA device, made with the virtual memory API
//! (`cuMemCreate`) exportable as a POSIX fd, mapped once in the primary context.
//!
//! The CPU reaches it through a pinned staging buffer, made on the first CPU map (the same rules
//! as staged GPU memory: the GPU work a map must follow is waited for, bounded; a write map is
//! copied back when it ends). CUDA maps of it are native: its own device address.

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::device::{device, CudaDevice};
use super::driver::{check, sys};
use crate::gpu::{expected_copy_time, DeviceUse, GpuOrigin, GpuReference, GPU_WAIT};
use crate::os::classify::FdKind;
use crate::{Error, Result, TensorMemory};

/// What keeps foreign CUDA memory alive (the same type as `hwtensor::ForeignOwner`, named here
/// so the device layer imports nothing from the backings above it).
type Owner = Box<dyn Send + Sync>;

/// `staged_at` of a staging copy that reflects nothing yet.
const NEVER_STAGED: u64 = u64::MAX;

/// Serials of this copy's CUDA allocations (with the address mixed in, as for GPU memory).
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Device memory of the CUDA device at `va`: a VMM allocation (ours or an import), or memory
/// another library owns.
pub(crate) struct CudaMemory {
    device: &'static CudaDevice,
    backing: Backing,
    va: sys::CUdeviceptr,
    len: usize,
    /// Pinned host memory the CPU maps, made on the first CPU map.
    staging: OnceLock<Staging>,
    /// Serialises the staging copies of concurrent read maps.
    staging_lock: Mutex<()>,
    uses: DeviceUse,
    /// The `last_write` the staging copy reflects.
    staged_at: AtomicU64,
    origin: GpuOrigin,
}

/// Where the device memory comes from, and so what dropping it undoes.
enum Backing {
    /// A VMM allocation, ours or an import: unmapped, its address range freed and its handle
    /// released at drop.
    Vmm {
        handle: sys::CUmemGenericAllocationHandle,
        /// Bytes reserved and mapped: `len` rounded up to the allocation granularity.
        size: usize,
        /// The allocation exported as a POSIX fd (kept: a hand-off sends it), or the fd an
        /// import came from.
        fd: OwnedFd,
    },
    /// Memory another library allocated (a PyTorch or CuPy tensor through DLPack): its owner
    /// is dropped at drop, after hwtensor's last use. It has no fd, so it travels only inline.
    Foreign { _owner: Owner },
}

/// Pinned host memory of the CUDA driver.
struct Staging(*mut u8);

// SAFETY: CUDA handles and addresses are usable from any thread; the staging pointer is host
// memory whose use is coordinated by the buffer's map claims.
unsafe impl Send for CudaMemory {}
// SAFETY: as above.
unsafe impl Sync for CudaMemory {}
// SAFETY: as above.
unsafe impl Send for Staging {}
// SAFETY: as above.
unsafe impl Sync for Staging {}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory")
            .field("len", &self.len)
            .field("foreign", &matches!(self.backing, Backing::Foreign { .. }))
            .finish_non_exhaustive()
    }
}

fn location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    }
}

/// What the allocation is: pinned device memory of the CUDA device, exportable as a POSIX fd.
fn properties(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// `len` rounded up to a whole number of `granularity` (at least one).
pub(crate) fn rounded(len: usize, granularity: usize) -> Option<usize> {
    let granularity = granularity.max(1);
    len.max(1).checked_next_multiple_of(granularity)
}

/// The allocation granularity of the CUDA device for `prop`.
fn granularity(prop: &sys::CUmemAllocationProp) -> Result<usize> {
    let mut granularity = 0usize;
    // SAFETY: a valid description; an out-pointer to a local.
    let r = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    check(r, "cuMemGetAllocationGranularity")?;
    Ok(granularity.max(1))
}

/// Reserves `size` bytes of device addresses, maps `handle` there and makes it readable and
/// writable by the device; releases the handle on failure.
fn map_handle(
    device: &CudaDevice,
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
) -> Result<sys::CUdeviceptr> {
    let release = |e: Error| {
        // SAFETY: the caller's handle, mapped nowhere (or unmapped before this runs).
        unsafe { sys::cuMemRelease(handle) };
        e
    };
    let mut va: sys::CUdeviceptr = 0;
    // SAFETY: an out-pointer to a local; a fresh reservation of `size` bytes.
    let r = unsafe { sys::cuMemAddressReserve(&mut va, size, 0, 0, 0) };
    check(r, "cuMemAddressReserve").map_err(release)?;
    let free_va = |e: Error| {
        // SAFETY: reserved above, nothing mapped in it (or unmapped before this runs).
        unsafe { sys::cuMemAddressFree(va, size) };
        release(e)
    };
    // SAFETY: the reservation is `size` bytes; the driver checks the allocation is too.
    let r = unsafe { sys::cuMemMap(va, size, 0, handle, 0) };
    check(r, "cuMemMap").map_err(free_va)?;
    let access = sys::CUmemAccessDesc {
        location: location(device.ordinal()),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the mapping made above; one access description.
    let r = unsafe { sys::cuMemSetAccess(va, size, &access, 1) };
    check(r, "cuMemSetAccess").map_err(|e| {
        // SAFETY: mapped above.
        unsafe { sys::cuMemUnmap(va, size) };
        free_va(e)
    })?;
    Ok(va)
}

/// Exports `handle` as a POSIX fd.
fn export_fd(handle: sys::CUmemGenericAllocationHandle) -> Result<OwnedFd> {
    let mut raw: i32 = -1;
    // SAFETY: the out-pointer receives an int fd for the POSIX handle type.
    let r = unsafe {
        sys::cuMemExportToShareableHandle(
            (&mut raw as *mut i32).cast::<c_void>(),
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    };
    check(r, "cuMemExportToShareableHandle")?;
    // SAFETY: a new fd the driver handed us.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The kind of fd CUDA exports its memory as, learnt once from a small allocation of our own:
/// an import of any other kind (a pipe, a socket, a memfd) is refused before CUDA sees it.
fn export_kind() -> Result<&'static FdKind> {
    static KIND: OnceLock<std::result::Result<FdKind, String>> = OnceLock::new();
    KIND.get_or_init(|| {
        let probe = CudaMemory::allocate(1).map_err(|e| e.to_string())?;
        let fd = probe.fd().ok_or("a new allocation has no fd")?;
        FdKind::of(fd).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::Unavailable {
        memory: TensorMemory::Cuda,
        reason: format!("cannot import CUDA memory: {e}"),
    })
}

impl CudaMemory {
    /// `len` zeroed bytes of CUDA device memory.
    pub(crate) fn allocate(len: usize) -> Result<CudaMemory> {
        let device = device()?;
        let _current = device.enter()?;
        let prop = properties(device.ordinal());
        let size = rounded(len, granularity(&prop)?).ok_or_else(|| Error::Alloc {
            memory: TensorMemory::Cuda,
            bytes: len,
            source: std::io::Error::other("the size overflows the allocation granularity"),
        })?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: a valid description; an out-pointer to a local.
        let r = unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) };
        if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(Error::Alloc {
                memory: TensorMemory::Cuda,
                bytes: size,
                source: std::io::Error::other("cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY"),
            });
        }
        check(r, "cuMemCreate")?;
        let va = map_handle(device, handle, size)?;
        let made = CudaMemory::assemble(device, handle, va, size, len, None)?;
        made.zero(size)?;
        Ok(made)
    }

    /// Imports CUDA memory another process exported (`fd`, of `allocation_size` bytes) holding
    /// a `len`-byte buffer allocated by `origin`. The fd must be of the kind CUDA exports, and
    /// the size a whole number of granules covering `len`.
    pub(crate) fn import(
        fd: OwnedFd,
        allocation_size: u64,
        len: usize,
        origin: GpuOrigin,
    ) -> Result<CudaMemory> {
        let device = device()?;
        let _current = device.enter()?;
        let want = export_kind()?;
        let got = FdKind::of(fd.as_fd())?;
        if got != *want {
            return Err(Error::Fd(format!(
                "the CUDA memory fd is {}, but CUDA exports memory as {}",
                got.describe(),
                want.describe()
            )));
        }
        let granules = granularity(&properties(device.ordinal()))?;
        let size = usize::try_from(allocation_size).unwrap_or(usize::MAX);
        if size < len || size % granules != 0 || rounded(len, granules) != Some(size) {
            return Err(Error::Fd(format!(
                "the blob says the CUDA allocation holds {allocation_size} bytes; a {len}-byte \
                 buffer on this device has {:?}",
                rounded(len, granules)
            )));
        }
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: an fd of the kind CUDA exports, passed as the POSIX handle type asks (the
        // fd itself, widened); CUDA does not take it.
        let r = unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd.as_raw_fd() as usize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        };
        check(r, "cuMemImportFromShareableHandle")?;
        let va = map_handle(device, handle, size)?;
        CudaMemory::assemble(device, handle, va, size, len, Some((fd, origin)))
    }

    /// The memory around a mapped handle: a new allocation of ours (its fd exported, a new
    /// origin) or an import (its fd and origin given).
    fn assemble(
        device: &'static CudaDevice,
        handle: sys::CUmemGenericAllocationHandle,
        va: sys::CUdeviceptr,
        size: usize,
        len: usize,
        imported: Option<(OwnedFd, GpuOrigin)>,
    ) -> Result<CudaMemory> {
        let undo = |e: Error| {
            // SAFETY: mapped by `map_handle`, used by nothing yet.
            unsafe {
                sys::cuMemUnmap(va, size);
                sys::cuMemAddressFree(va, size);
                sys::cuMemRelease(handle);
            }
            e
        };
        let (fd, origin) = match imported {
            Some(given) => given,
            None => (export_fd(handle).map_err(undo)?, local_origin(va)),
        };
        Ok(CudaMemory::over(
            device,
            Backing::Vmm { handle, size, fd },
            va,
            len,
            origin,
        ))
    }

    /// The memory around a backing mapped at `va`.
    fn over(
        device: &'static CudaDevice,
        backing: Backing,
        va: sys::CUdeviceptr,
        len: usize,
        origin: GpuOrigin,
    ) -> CudaMemory {
        CudaMemory {
            device,
            backing,
            va,
            len,
            staging: OnceLock::new(),
            staging_lock: Mutex::new(()),
            uses: DeviceUse::default(),
            staged_at: AtomicU64::new(NEVER_STAGED),
            origin,
        }
    }

    /// Wraps `len` bytes of device memory at `va` that `owner` keeps alive. Pending writes to
    /// it must be ordered on `ready` (hwtensor's import stream, which the producer was asked
    /// to sync with): the timeline is signalled from it, and that value is the memory's first
    /// write, so every later use follows them.
    ///
    /// # Safety
    /// `va` must address `len` bytes of device memory valid in the CUDA device's primary
    /// context until `owner` is dropped.
    pub(crate) unsafe fn foreign(
        va: sys::CUdeviceptr,
        len: usize,
        owner: Owner,
        ready: sys::CUstream,
    ) -> Result<CudaMemory> {
        let device = device()?;
        let _current = device.enter()?;
        let mem = CudaMemory::over(
            device,
            Backing::Foreign { _owner: owner },
            va,
            len,
            local_origin(va),
        );
        let value = device.signal_from_stream(ready, 0)?;
        mem.record(value, true);
        Ok(mem)
    }

    /// Fills the memory with zeros before anyone can use it. The driver's plain memset runs
    /// asynchronously to the host and to non-blocking streams, so a kernel on the caller's
    /// stream, a copy or a free could race it (a kernel's output zeroed after the fact, or
    /// memory unmapped under the fill). The fill runs on hwtensor's stream, is recorded as the
    /// first write (so a free waits for it even if this returns an error) and is waited for
    /// here, bounded: it costs a few microseconds against the allocation's hundred.
    /// `size`: the bytes mapped, the allocation's whole granules.
    fn zero(&self, size: usize) -> Result<()> {
        let stream = self.device.own_stream()?;
        // SAFETY: the mapping is `size` bytes and accessible; hwtensor's own stream.
        let r = unsafe { sys::cuMemsetD8Async(self.va, 0, size, stream) };
        check(r, "cuMemsetD8Async")?;
        let value = match self.device.signal_from_stream(stream, 0) {
            Ok(value) => value,
            Err(e) => {
                // No value says when the fill ends: mark it as never known done, so a free
                // waits (bounded) and then leaks the memory rather than unmap it under the fill.
                self.record(u64::MAX, true);
                return Err(e);
            }
        };
        self.record(value, true);
        self.device
            .gpu()
            .wait_expecting(value, GPU_WAIT, expected_copy_time(size))
    }

    /// The fd the memory is exported as (for hand-off); none for another library's memory.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backing {
            Backing::Vmm { fd, .. } => Some(fd.as_fd()),
            Backing::Foreign { .. } => None,
        }
    }

    /// The blob's GPU section for this memory sent by reference, and the fence fd to send with
    /// the value of its last write. Where the GPU device cannot export its fence, waits for that
    /// write first, so the receiver reads finished bytes.
    pub(crate) fn describe(&self) -> Result<(GpuReference, Option<(BorrowedFd<'_>, u64)>)> {
        let Backing::Vmm { size, .. } = &self.backing else {
            return Err(Error::Unavailable {
                memory: TensorMemory::Cuda,
                reason: "this CUDA memory belongs to another library (DLPack) and has no fd to \
                         send by reference: send it inline, or copy it into cuda memory first"
                    .into(),
            });
        };
        let gpu = self.device.gpu();
        let completion = gpu.peer_completion(self.uses.last_write())?;
        Ok((gpu.reference(*size as u64, self.origin), completion))
    }

    /// The device address of the first byte.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.va
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn origin(&self) -> GpuOrigin {
        self.origin
    }

    /// The CPU pointer: the staging buffer, made by `begin_cpu` (every map goes through it
    /// before it reads this), else null.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.staging.get().map_or(std::ptr::null_mut(), |s| s.0)
    }

    /// What CUDA work on this memory must wait for (`write`: work that writes it).
    pub(crate) fn after(&self, write: bool) -> u64 {
        self.uses.after(write)
    }

    /// Records that GPU work completing at `value` read (or wrote) this memory.
    pub(crate) fn record(&self, value: u64, write: bool) {
        self.uses.record(value, write);
    }

    fn staging(&self) -> Result<*mut u8> {
        if let Some(s) = self.staging.get() {
            return Ok(s.0);
        }
        let mut host = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local; freed in Drop.
        let r = unsafe { sys::cuMemAllocHost_v2(&mut host, self.len.max(1)) };
        check(r, "cuMemAllocHost")?;
        let made = Staging(host.cast());
        let kept = self.staging.get_or_init(|| made);
        Ok(kept.0)
    }

    /// Gets the staging copy current for a CPU access (`write`: one that may modify it): waits
    /// for the GPU work it must follow, then copies the memory down when the copy is stale.
    pub(crate) fn begin_cpu(&self, write: bool) -> Result<CudaCpuAccess<'_>> {
        let _current = self.device.enter()?;
        let host = self.staging()?;
        let wait = self.after(write);
        if wait > 0 {
            self.device.gpu().wait(wait, GPU_WAIT)?;
        }
        let _staging = self
            .staging_lock
            .lock()
            .map_err(|_| Error::InvalidOperation("a CUDA staging copy panicked earlier".into()))?;
        let last = self.uses.last_write();
        if self.staged_at.load(Ordering::Acquire) != last {
            // SAFETY: both ranges are `len` bytes: the staging buffer and the mapping.
            let r = unsafe { sys::cuMemcpyDtoH_v2(host.cast(), self.va, self.len) };
            check(r, "cuMemcpyDtoH")?;
            self.staged_at.store(last, Ordering::Release);
        }
        Ok(CudaCpuAccess { mem: self, write })
    }

    fn upload_after_cpu_write(&self) -> Result<()> {
        let _current = self.device.enter()?;
        let host = self.ptr();
        // SAFETY: the staging buffer the write map used, `len` bytes; synchronous.
        let r = unsafe { sys::cuMemcpyHtoD_v2(self.va, host.cast_const().cast(), self.len) };
        check(r, "cuMemcpyHtoD")?;
        self.staged_at
            .store(self.uses.last_write(), Ordering::Release);
        Ok(())
    }
}

/// An open CPU access of CUDA memory: after a write, the staged bytes go back when it ends.
pub(crate) struct CudaCpuAccess<'a> {
    mem: &'a CudaMemory,
    write: bool,
}

impl std::fmt::Debug for CudaCpuAccess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaCpuAccess")
            .field("write", &self.write)
            .finish()
    }
}

impl Drop for CudaCpuAccess<'_> {
    fn drop(&mut self) {
        if self.write {
            if let Err(e) = self.mem.upload_after_cpu_write() {
                log::error!("hwtensor: writing a CPU map back to CUDA memory failed: {e}");
            }
        }
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // Freeing memory CUDA still uses is undefined: wait for it, or leak it.
        let last = self.after(true);
        if last > 0 {
            if let Err(e) = self.device.gpu().wait(last, GPU_WAIT) {
                log::error!("hwtensor: CUDA memory still in use at drop ({e}); leaking it");
                return;
            }
        }
        let Ok(_current) = self.device.enter() else {
            return;
        };
        // SAFETY: no work uses the memory any more (waited above); each made once, undone once.
        // Another library's memory is only let go of (its owner drops after this).
        unsafe {
            if let Backing::Vmm { handle, size, .. } = &self.backing {
                sys::cuMemUnmap(self.va, *size);
                sys::cuMemAddressFree(self.va, *size);
                sys::cuMemRelease(*handle);
            }
            if let Some(s) = self.staging.get() {
                sys::cuMemFreeHost(s.0.cast());
            }
        }
    }
}

/// A new allocation's identity: this process and a serial mixed with its address, so two
/// copies of the library in one process do not hand out the same one.
fn local_origin(va: sys::CUdeviceptr) -> GpuOrigin {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed) + 1;
    let me = crate::os::ProcessKey::current();
    GpuOrigin {
        pid: me.map_or(0, |k| k.pid),
        start_time: me.map_or(0, |k| k.start_time),
        serial: serial ^ va.rotate_left(32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_allocation_is_rounded_up_to_whole_granules() {
        assert_eq!(rounded(1, 2 << 20), Some(2 << 20));
        assert_eq!(rounded(0, 2 << 20), Some(2 << 20));
        assert_eq!(rounded(2 << 20, 2 << 20), Some(2 << 20));
        assert_eq!(rounded((2 << 20) + 1, 2 << 20), Some(4 << 20));
        assert_eq!(rounded(usize::MAX, 2 << 20), None);
    }
}
