//! A buffer as CUDA sees it, made once per buffer and kept with it: GPU memory imported from
//! its exported Vulkan fd (`cuImportExternalMemory`), or host memory registered with CUDA
//! (pinned and device-mapped, so kernels and copies reach it at PCIe speed without staging).

use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::device::{device, CudaDevice};
use super::driver::{check, sys};
use super::event::{self, ReadMark};
use crate::gpu::GPU_WAIT;
use crate::{Error, Result, TensorMemory};

/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`: pinned for every context,
/// and mapped into the device's address space.
const REGISTER_FLAGS: u32 = 0x01 | 0x02;
/// `CU_MEMHOSTREGISTER_READ_ONLY`: for a foreign buffer mapped read-only.
const REGISTER_READ_ONLY: u32 = 0x08;

/// A buffer as the buffer layer describes it to CUDA. [`BufferImport::of`] decides from it
/// whether and how CUDA reaches the buffer, so the rule (and the words of its refusal) lives
/// with CUDA, not with the buffers.
pub(crate) enum Offer<'a> {
    /// CUDA memory, at its device address.
    Cuda(sys::CUdeviceptr),
    /// GPU memory of the process device, with its exported fd where it has one.
    Gpu {
        fd: Option<BorrowedFd<'a>>,
        allocation_size: u64,
        len: usize,
    },
    /// Host memory mapped at `ptr` (of `memory`'s kind), in whole pages or not.
    Host {
        ptr: *mut u8,
        len: usize,
        writable: bool,
        whole_pages: bool,
        memory: TensorMemory,
    },
}

/// How CUDA reaches one buffer.
enum Reach {
    /// Vulkan memory imported as external memory, mapped as one device buffer.
    External(sys::CUexternalMemory),
    /// Host memory registered with CUDA, at this host address.
    Registered(*mut u8),
    /// CUDA's own memory: nothing to import or undo.
    Native,
}

/// One buffer's CUDA import, the newest timeline value CUDA work on it signals, and the marks
/// of CUDA reads that signal none (see `event`).
pub(crate) struct BufferImport {
    device: &'static CudaDevice,
    reach: Reach,
    /// The device address of the buffer's first byte.
    ptr: sys::CUdeviceptr,
    /// Whether CUDA may write it (a read-only registration may not).
    writable: bool,
    last_use: AtomicU64,
    reads: Reads,
}

/// The marks of CUDA reads that may still run, and whether there are any: the flag keeps the
/// lock off a CPU write map of a buffer CUDA never read.
#[derive(Default)]
struct Reads {
    any: AtomicBool,
    marks: Mutex<Vec<Arc<ReadMark>>>,
}

impl Reads {
    /// The marks, locked; a panic elsewhere while they were held leaves them usable.
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<ReadMark>>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The marks still pending, those done forgotten.
    fn pending(&self) -> Vec<Arc<ReadMark>> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut marks = self.lock();
        *marks = event::pending(std::mem::take(&mut *marks));
        self.any.store(!marks.is_empty(), Ordering::Release);
        marks.clone()
    }

    /// Forgets `settled`, which a timeline value now covers; marks recorded since stay.
    fn forget(&self, settled: &[Arc<ReadMark>]) {
        let mut marks = self.lock();
        marks.retain(|m| !settled.iter().any(|s| Arc::ptr_eq(m, s)));
        self.any.store(!marks.is_empty(), Ordering::Release);
    }
}

// SAFETY: CUDA handles and device addresses are usable from any thread; the host address is
// only passed back to CUDA.
unsafe impl Send for BufferImport {}
// SAFETY: as above.
unsafe impl Sync for BufferImport {}

impl std::fmt::Debug for BufferImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferImport")
            .field("external", &matches!(self.reach, Reach::External(_)))
            .field("ptr", &self.ptr)
            .finish_non_exhaustive()
    }
}

impl BufferImport {
    /// The buffer `offer` describes as CUDA reaches it: CUDA memory as itself, GPU memory
    /// through its exported fd, host memory of whole pages registered. Anything else is
    /// [`Error::Unavailable`] saying what CUDA can reach.
    ///
    /// # Safety
    /// A host offer of whole pages must be mapped (and, when `writable`, writable) until the
    /// import is dropped, as [`Self::of_host`] requires.
    pub(crate) unsafe fn of(offer: Offer<'_>) -> Result<Self> {
        let unavailable = |reason: String| Error::Unavailable {
            memory: TensorMemory::Cuda,
            reason,
        };
        match offer {
            Offer::Cuda(ptr) => Self::native(ptr),
            Offer::Gpu {
                fd: Some(fd),
                allocation_size,
                len,
            } => Self::of_gpu(fd, allocation_size, len),
            Offer::Gpu { fd: None, .. } => Err(unavailable(
                "this GPU memory has no exported fd for CUDA to import".into(),
            )),
            Offer::Host {
                ptr,
                len,
                writable,
                whole_pages: true,
                ..
            } => {
                // SAFETY: the caller's contract, passed on.
                unsafe { Self::of_host(ptr, len, writable) }
            }
            Offer::Host { len, memory, .. } => Err(unavailable(format!(
                "CUDA cannot reach this {memory} buffer of {len} bytes: only GPU memory and \
                 heap or shm buffers of whole pages (4096 bytes and up) can be mapped"
            ))),
        }
    }

    /// Imports exported Vulkan memory (`fd`, an OPAQUE_FD of `allocation_size` bytes) holding a
    /// `len`-byte buffer. The fd stays the caller's: CUDA gets a duplicate.
    fn of_gpu(fd: BorrowedFd<'_>, allocation_size: u64, len: usize) -> Result<Self> {
        let device = device()?;
        let _current = device.enter()?;
        let dup = fd.try_clone_to_owned().map_err(|e| crate::Error::Os {
            op: "dup of a GPU memory fd for CUDA",
            source: e,
        })?;
        let raw = dup.into_raw_fd();
        let desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            handle: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 { fd: raw },
            size: allocation_size,
            flags: 0,
            reserved: [0; 16],
        };
        let mut memory = std::ptr::null_mut();
        // SAFETY: an OPAQUE_FD of Vulkan memory of this GPU and its allocation size; an
        // out-pointer to a local.
        let r = unsafe { sys::cuImportExternalMemory(&mut memory, &desc) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // CUDA takes the fd only on success.
            // SAFETY: the duplicate is ours and CUDA did not take it.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        check(r, "cuImportExternalMemory")?;
        let buffer = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC {
            offset: 0,
            size: len as u64,
            flags: 0,
            reserved: [0; 16],
        };
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the memory imported above; the range is inside its allocation.
        let r = unsafe { sys::cuExternalMemoryGetMappedBuffer(&mut ptr, memory, &buffer) };
        if let Err(e) = check(r, "cuExternalMemoryGetMappedBuffer") {
            // SAFETY: imported above, nothing mapped from it.
            unsafe { sys::cuDestroyExternalMemory(memory) };
            return Err(e);
        }
        Ok(BufferImport {
            device,
            reach: Reach::External(memory),
            ptr,
            writable: true,
            last_use: AtomicU64::new(0),
            reads: Reads::default(),
        })
    }

    /// Registers `len` bytes of host memory at `host` with CUDA.
    ///
    /// # Safety
    /// `host..host + len` must be mapped memory of whole pages that stays mapped until the
    /// import is dropped, and (when `writable`) writable.
    unsafe fn of_host(host: *mut u8, len: usize, writable: bool) -> Result<Self> {
        let device = device()?;
        let _current = device.enter()?;
        let flags = REGISTER_FLAGS | if writable { 0 } else { REGISTER_READ_ONLY };
        // SAFETY: the caller's contract; the registration is undone before the memory goes.
        let r = unsafe { sys::cuMemHostRegister_v2(host.cast(), len, flags) };
        check(r, "cuMemHostRegister")?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: registered just above with DEVICEMAP; an out-pointer to a local.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut ptr, host.cast(), 0) };
        if let Err(e) = check(r, "cuMemHostGetDevicePointer") {
            // SAFETY: registered above.
            unsafe { sys::cuMemHostUnregister(host.cast()) };
            return Err(e);
        }
        Ok(BufferImport {
            device,
            reach: Reach::Registered(host),
            ptr,
            writable,
            last_use: AtomicU64::new(0),
            reads: Reads::default(),
        })
    }

    /// CUDA memory at `ptr`, reached as itself.
    fn native(ptr: sys::CUdeviceptr) -> Result<Self> {
        Ok(BufferImport {
            device: device()?,
            reach: Reach::Native,
            ptr,
            writable: true,
            last_use: AtomicU64::new(0),
            reads: Reads::default(),
        })
    }

    /// The device address of the buffer's first byte.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Whether CUDA may write through this import.
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// The newest timeline value CUDA work on this buffer signals.
    pub(crate) fn last_use(&self) -> u64 {
        self.last_use.load(Ordering::Acquire)
    }

    /// Records that CUDA work on this buffer completes at timeline `value`.
    pub(crate) fn used_until(&self, value: u64) {
        self.last_use.fetch_max(value, Ordering::AcqRel);
    }

    /// Records a CUDA read of the buffer that ends at `mark`: later writes follow it.
    pub(crate) fn read_until(&self, mark: Arc<ReadMark>) {
        let mut marks = self.reads.lock();
        let mut kept = event::pending(std::mem::take(&mut *marks));
        kept.push(mark);
        *marks = kept;
        self.reads.any.store(true, Ordering::Release);
    }

    /// The marks of CUDA reads of the buffer that may still run.
    pub(crate) fn pending_reads(&self) -> Vec<Arc<ReadMark>> {
        self.reads.pending()
    }

    /// Makes `stream` wait GPU-side for the CUDA reads still pending: a CUDA write follows
    /// them without a timeline value.
    pub(crate) fn order_reads_before(&self, stream: sys::CUstream) -> Result<()> {
        for mark in self.reads.pending() {
            mark.order_before(stream)?;
        }
        Ok(())
    }

    /// Turns the pending CUDA reads into one timeline value (see `event::settle`), recorded as
    /// this import's last use, for work that orders by the timeline (Vulkan's); `None` when
    /// no read is pending.
    pub(crate) fn settle_reads(&self) -> Result<Option<u64>> {
        let settled = self.reads.pending();
        if settled.is_empty() {
            return Ok(None);
        }
        // On an error the marks stay: a later settle or wait tries again.
        let value = event::settle(self.device, &settled)?;
        self.used_until(value);
        self.reads.forget(&settled);
        Ok(Some(value))
    }

    /// Waits (CPU) until CUDA work on this buffer has finished (with `write`, its reads too):
    /// before the CPU touches host memory CUDA may still be using.
    pub(crate) fn wait_idle(&self, write: bool) -> Result<()> {
        if write {
            event::wait(&self.reads.pending(), GPU_WAIT)?;
        }
        match self.last_use() {
            0 => Ok(()),
            v => self.device.gpu().wait(v, GPU_WAIT),
        }
    }
}

impl Drop for BufferImport {
    fn drop(&mut self) {
        if matches!(self.reach, Reach::Native) {
            // The memory waits for its own last timeline use when it goes; not for reads
            // marked by events, which only this import knows of.
            if let Err(e) = event::wait(&self.reads.pending(), GPU_WAIT) {
                log::error!(
                    "hwtensor: a CUDA read of a buffer did not finish before it was freed: {e}"
                );
            }
            return;
        }
        // CUDA may still be using the buffer: wait for its last use, bounded, before undoing
        // the import under it.
        if let Err(e) = self.wait_idle(true) {
            log::error!("hwtensor: CUDA work on a buffer did not finish before it was freed: {e}");
        }
        let Ok(_current) = self.device.enter() else {
            return;
        };
        // SAFETY: made by this import, used by no work any more (waited above), undone once.
        let (call, r) = unsafe {
            match self.reach {
                Reach::External(memory) => {
                    let freed = sys::cuMemFree_v2(self.ptr);
                    let destroyed = sys::cuDestroyExternalMemory(memory);
                    let r = if freed == sys::CUresult::CUDA_SUCCESS {
                        destroyed
                    } else {
                        freed
                    };
                    ("cuDestroyExternalMemory", r)
                }
                Reach::Native => return,
                Reach::Registered(host) => {
                    ("cuMemHostUnregister", sys::cuMemHostUnregister(host.cast()))
                }
            }
        };
        if let Err(e) = check(r, call) {
            log::error!("hwtensor: {e}");
        }
    }
}
