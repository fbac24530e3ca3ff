//! GPU memory on the process device: exportable buffers, their CPU view, and host imports.
//!
//! Where the driver offers memory that is device-local, host-visible and cached (lavapipe), a
//! buffer is mapped once and maps hand out that pointer. Where exportable memory can only be
//! device-local (NVIDIA: the host-visible VRAM type cannot be exported, and CPU reads of it run
//! at 0.03 GB/s), the CPU sees a persistent HOST_CACHED staging buffer instead: a read map
//! copies device -> staging on the GPU and waits; a write map copies back when it drops.
//! `HWTENSOR_GPU_STAGING=1` forces the staged path, so it is exercised on lavapipe too.

use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use ash::vk;
use ash::vk::Handle;

use super::submit::Queue;
use super::{Features, GpuDevice};
use crate::gpu::{DeviceUse, GpuOrigin, GpuReference, MemorySource, TextureRequest, GPU_WAIT};
use crate::{Error, GpuErrorKind, Result, TensorMemory};

/// Forces CPU access through a staging buffer even where memory could be mapped directly.
pub const STAGING_ENV: &str = "HWTENSOR_GPU_STAGING";

const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);

/// A buffer and the memory bound to it, owned together from the buffer's creation on: dropping
/// it destroys both, so an error at any later step (no memory type, a failed allocation, bind,
/// dup or `vkMapMemory`) frees everything made. The memory is null until bound; freeing a null
/// handle is a no-op in Vulkan. Dropping it is for owners that know the GPU is done with it.
struct BoundBuffer {
    device: &'static GpuDevice,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
}

impl BoundBuffer {
    fn create(
        device: &'static GpuDevice,
        size: u64,
        usage: vk::BufferUsageFlags,
        handles: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<BoundBuffer> {
        let buffer = device.create_buffer(size, usage, handles)?;
        test_hooks::count_live(1);
        Ok(BoundBuffer {
            device,
            buffer,
            memory: vk::DeviceMemory::null(),
        })
    }

    fn requirements(&self) -> vk::MemoryRequirements {
        // SAFETY: a query on a live buffer.
        unsafe {
            self.device
                .device
                .get_buffer_memory_requirements(self.buffer)
        }
    }

    /// Allocates `size` bytes of `type_index` (exported or imported as `extra` says) and binds
    /// them to the buffer.
    fn bind(&mut self, size: u64, type_index: u32, extra: MemoryExtra) -> Result<()> {
        self.memory = self
            .device
            .bind_memory(self.buffer, size, type_index, extra)?;
        test_hooks::count_live(1);
        Ok(())
    }

    /// Binds memory imported from `import.fd` to the buffer, which needs `needed` bytes (a
    /// `len`-byte tensor). The driver gets a dup: `import.fd` is closed when this returns.
    fn bind_imported(
        &mut self,
        needed: u64,
        len: usize,
        type_index: u32,
        import: MemoryImport,
    ) -> Result<()> {
        let MemoryImport {
            fd,
            allocation_size,
            source,
        } = import;
        // An opaque fd's real size cannot be asked of the driver, and importing it with another
        // size is undefined: only the size the exporter must have made is accepted.
        if !import_size_fits(source, allocation_size, needed) {
            return Err(Error::Fd(format!(
                "the blob says the memory holds {allocation_size} bytes; a {len}-byte buffer on this device has {needed}"
            )));
        }
        let raw = test_hooks::dup(fd.as_fd())
            .map_err(|e| Error::Os {
                op: "dup of a memory fd",
                source: e,
            })?
            .into_raw_fd();
        let extra = MemoryExtra::ImportFd {
            fd: raw,
            dedicated: source == MemorySource::Vulkan,
        };
        self.bind(allocation_size, type_index, extra)
            .inspect_err(|_| crate::os::close_if_still_ours(raw, fd.as_fd()))
    }
}

impl Drop for BoundBuffer {
    fn drop(&mut self) {
        // SAFETY: no GPU work uses them: owners wait for it first (GpuMemory) or are promised
        // it (HostImport::new's contract), and a staging buffer goes with its GpuMemory.
        unsafe {
            self.device.device.destroy_buffer(self.buffer, None);
            self.device.device.free_memory(self.memory, None);
        }
        test_hooks::count_live(if self.memory == vk::DeviceMemory::null() {
            -1
        } else {
            -2
        });
    }
}

/// An exporter's memory fd and what the blob says of it.
struct MemoryImport {
    fd: OwnedFd,
    allocation_size: u64,
    source: MemorySource,
}

/// What unit tests hook into: a count of live Vulkan buffers and memories made on this thread,
/// and failures injected into the steps that are hard to make fail for real (a dup, a map), so
/// a test proves each error path frees what it made. Outside tests they count nothing and
/// inject nothing.
mod test_hooks {
    use std::os::fd::{BorrowedFd, OwnedFd};

    /// A step a test makes fail.
    #[cfg(test)]
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(super) enum Step {
        Dup,
        Map,
    }

    #[cfg(test)]
    thread_local! {
        pub(super) static LIVE: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
        pub(super) static FAIL: std::cell::Cell<Option<Step>> = const { std::cell::Cell::new(None) };
    }

    #[inline(always)]
    pub(super) fn count_live(_delta: isize) {
        #[cfg(test)]
        LIVE.with(|l| l.set(l.get() + _delta));
    }

    pub(super) fn dup(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
        #[cfg(test)]
        if FAIL.get() == Some(Step::Dup) {
            return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
        }
        fd.try_clone_to_owned()
    }

    /// Whether a test made `vkMapMemory` fail.
    #[inline(always)]
    pub(super) fn map_fails() -> bool {
        #[cfg(test)]
        return FAIL.get() == Some(Step::Map);
        #[cfg(not(test))]
        false
    }
}

/// How the CPU reaches the bytes.
enum CpuView {
    /// The memory itself, mapped once.
    Direct(*mut u8),
    /// A staging buffer, made on the first CPU map (an import that only GPU work touches never
    /// pays for one: pinning a 4K frame's staging memory costs milliseconds on NVIDIA).
    Staged(OnceLock<Staging>),
}

/// A host-visible buffer the CPU reads and writes in place of device-local memory.
struct Staging {
    bound: BoundBuffer,
    ptr: *mut u8,
    coherent: bool,
}

// SAFETY: the pointer is into a mapping this value owns; access is coordinated by map claims.
unsafe impl Send for Staging {}
// SAFETY: as above.
unsafe impl Sync for Staging {}

/// `staged_at` of a staging copy that reflects no write (none made yet, or an import's).
const NEVER_STAGED: u64 = u64::MAX;

/// A buffer in GPU memory and what orders access to it.
pub(crate) struct GpuMemory {
    /// The buffer, its memory and their device. Freed by `drop` only once the GPU is done with
    /// it (leaked otherwise).
    bound: ManuallyDrop<BoundBuffer>,
    allocation_size: u64,
    len: usize,
    cpu: CpuView,
    /// The memory's exported fd (made once), for hand-off and identity; `None` where the device
    /// cannot export memory.
    fd: Option<OwnedFd>,
    /// Timeline value of the last GPU write, and of the last GPU read (Vulkan's or CUDA's).
    uses: DeviceUse,
    /// The `last_write` the staging copy reflects.
    staged_at: AtomicU64,
    /// Whether another process may write the memory (an import, or memory whose fd was handed
    /// out): its writes never reach `last_write` here, so the staging copy cannot be trusted
    /// and every CPU map downloads. (A consumer that acknowledged frames through CPU maps read
    /// its own stale staging copy of the producer's next frame on NVIDIA.)
    shared: AtomicBool,
    /// Who allocated the memory: this process, or the exporter an import came from.
    origin: GpuOrigin,
}

/// Serials of this copy's allocations. The memory handle is mixed in, so two copies of the
/// library in one process (each with its own counter) do not hand out the same key at once.
static SERIAL: AtomicU64 = AtomicU64::new(0);

impl GpuOrigin {
    fn local(memory: vk::DeviceMemory) -> GpuOrigin {
        let me = super::record::ProcessKey::current();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed) + 1;
        GpuOrigin {
            pid: me.map_or(0, |k| k.pid),
            start_time: me.map_or(0, |k| k.start_time),
            serial: n ^ memory.as_raw().rotate_left(32),
        }
    }
}

// SAFETY: the raw pointers are into mappings owned by this value; access through them is
// coordinated by the buffer's map claims, and Vulkan handles are usable from any thread.
unsafe impl Send for GpuMemory {}
// SAFETY: as above.
unsafe impl Sync for GpuMemory {}

fn staging_forced() -> bool {
    std::env::var(STAGING_ENV).is_ok_and(|v| v.trim() == "1")
}

impl GpuDevice {
    fn memory_type(&self, bits: u32, want: vk::MemoryPropertyFlags) -> Option<u32> {
        let p = &self.memory_properties;
        (0..p.memory_type_count).find(|&i| {
            bits & (1 << i) != 0 && p.memory_types[i as usize].property_flags.contains(want)
        })
    }

    /// The memory type of a tensor buffer, and whether the CPU may map it directly.
    fn tensor_memory_type(&self, bits: u32) -> Option<(u32, bool)> {
        let direct = vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_CACHED;
        if !staging_forced() {
            if let Some(i) = self.memory_type(bits, direct) {
                return Some((i, true));
            }
        }
        // Device-local memory that is not host-visible first: host-visible VRAM reads crawl.
        let p = &self.memory_properties;
        (0..p.memory_type_count)
            .find(|&i| {
                let f = p.memory_types[i as usize].property_flags;
                bits & (1 << i) != 0
                    && f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                    && !f.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
            })
            .or_else(|| self.memory_type(bits, vk::MemoryPropertyFlags::DEVICE_LOCAL))
            .or_else(|| self.memory_type(bits, vk::MemoryPropertyFlags::empty()))
            .map(|i| (i, false))
    }

    fn export_handle_types(&self) -> vk::ExternalMemoryHandleTypeFlags {
        if self.features.has(Features::EXTERNAL_MEMORY_FD) {
            vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD
        } else {
            vk::ExternalMemoryHandleTypeFlags::empty()
        }
    }

    fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
        handles: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<vk::Buffer> {
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handles);
        // Shared between the main and the transfer queue where there are two, so neither needs
        // an ownership transfer before touching it.
        let families = self.queue_families();
        let mut info = vk::BufferCreateInfo::default()
            .size(size.max(1))
            .usage(usage);
        info = if families.len() > 1 {
            info.sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(&families)
        } else {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        };
        if !handles.is_empty() {
            info = info.push_next(&mut external);
        }
        // SAFETY: a plain creation on a live device; the chain outlives the call.
        unsafe { self.device.create_buffer(&info, None) }.map_err(super::failed("vkCreateBuffer"))
    }

    /// Allocates and binds dedicated memory of `type_index` for `buffer`, exporting or
    /// importing as `extra` says.
    fn bind_memory(
        &self,
        buffer: vk::Buffer,
        size: u64,
        type_index: u32,
        extra: MemoryExtra,
    ) -> Result<vk::DeviceMemory> {
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut export =
            vk::ExportMemoryAllocateInfo::default().handle_types(self.export_handle_types());
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index);
        let mut import_fd;
        let mut import_host;
        match extra {
            MemoryExtra::None => {}
            MemoryExtra::Export => info = info.push_next(&mut dedicated).push_next(&mut export),
            MemoryExtra::ImportFd { fd, dedicated: one } => {
                // Dedicated where the export was, and without export info: NVIDIA treats an
                // import that also asks to be exportable as a fresh allocation (measured: the
                // importer saw zeros). Re-export uses the fd we keep instead.
                import_fd = vk::ImportMemoryFdInfoKHR::default()
                    .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD)
                    .fd(fd);
                info = info.push_next(&mut import_fd);
                if one {
                    info = info.push_next(&mut dedicated);
                }
            }
            MemoryExtra::ImportHost(ptr) => {
                import_host = vk::ImportMemoryHostPointerInfoEXT::default()
                    .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
                    .host_pointer(ptr);
                info = info.push_next(&mut import_host);
            }
        }
        // SAFETY: every struct in the chain outlives the call; the buffer belongs to this device.
        let memory = unsafe { self.device.allocate_memory(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                Error::Alloc {
                    memory: TensorMemory::Gpu,
                    bytes: size as usize,
                    source: std::io::Error::other(format!("vkAllocateMemory: {e}")),
                }
            }
            other => Error::gpu(
                super::vk_kind(other),
                format!("vkAllocateMemory of {size} bytes failed: {other}"),
            ),
        })?;
        // SAFETY: fresh memory of a type the buffer accepts, bound once at offset 0.
        if let Err(e) = unsafe { self.device.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: the memory was never used.
            unsafe { self.device.free_memory(memory, None) };
            return Err(Error::gpu(
                super::vk_kind(e),
                format!("vkBindBufferMemory failed: {e}"),
            ));
        }
        Ok(memory)
    }

    fn map_whole(&self, memory: vk::DeviceMemory) -> Result<*mut u8> {
        if test_hooks::map_fails() {
            return Err(super::failed("vkMapMemory")(
                vk::Result::ERROR_MEMORY_MAP_FAILED,
            ));
        }
        // SAFETY: host-visible memory of this device, mapped once for its whole life.
        unsafe {
            self.device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
        }
        .map(|p| p.cast::<u8>())
        .map_err(super::failed("vkMapMemory"))
    }

    fn staging(&'static self, size: u64) -> Result<Staging> {
        // Owned from the first line: an error below drops it, which frees what was made.
        let mut bound = BoundBuffer::create(
            self,
            size,
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk::ExternalMemoryHandleTypeFlags::empty(),
        )?;
        let req = bound.requirements();
        let cached = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_CACHED;
        let coherent =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_index = self
            .memory_type(req.memory_type_bits, cached)
            .or_else(|| self.memory_type(req.memory_type_bits, coherent))
            .ok_or_else(|| {
                Error::gpu(
                    GpuErrorKind::Driver,
                    "no host-visible memory for a staging buffer",
                )
            })?;
        let is_coherent = self.memory_properties.memory_types[type_index as usize]
            .property_flags
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        bound.bind(req.size, type_index, MemoryExtra::None)?;
        let ptr = self.map_whole(bound.memory)?;
        Ok(Staging {
            bound,
            ptr,
            coherent: is_coherent,
        })
    }

    /// The memory a tensor buffer is allocated with: exportable where the device can export.
    fn export_extra(&self) -> MemoryExtra {
        match self.export_handle_types().is_empty() {
            true => MemoryExtra::None,
            false => MemoryExtra::Export,
        }
    }

    fn export_memory_fd(&self, memory: vk::DeviceMemory) -> Option<OwnedFd> {
        let ext = self.ext.memory_fd.as_ref()?;
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(memory)
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the memory was allocated exportable as OPAQUE_FD on this device.
        let raw = unsafe { ext.get_memory_fd(&info) }.ok()?;
        crate::os::own_cloexec(raw)
    }
}

enum MemoryExtra {
    None,
    Export,
    /// An fd to import; `dedicated` where the exporter made it for one buffer (Vulkan).
    ImportFd {
        fd: i32,
        dedicated: bool,
    },
    ImportHost(*mut std::ffi::c_void),
}

/// What an imported fd's size must be for a `len`-byte buffer that needs `needed` bytes here.
/// Vulkan memory was made for the exporter's identical buffer, so its size is exactly ours;
/// CUDA memory is whole granules of CUDA's, so at least ours.
fn import_size_fits(source: MemorySource, allocation_size: u64, needed: u64) -> bool {
    match source {
        MemorySource::Vulkan => allocation_size == needed,
        MemorySource::Cuda => allocation_size >= needed,
    }
}

impl GpuMemory {
    /// A zeroed buffer of `len` bytes on the process device.
    /// Vulkan GPU memory is a buffer: the texture request (for images) is not needed.
    pub(crate) fn allocate(len: usize, _texture: Option<&TextureRequest>) -> Result<GpuMemory> {
        let device = super::device()?;
        let mut mem = GpuMemory::bind(device, len, None)?;
        mem.fd = device.export_memory_fd(mem.bound.memory);
        mem.origin = GpuOrigin::local(mem.bound.memory);
        mem.zero()?;
        Ok(mem)
    }

    /// Imports an exported memory fd of `allocation_size` bytes holding a `len`-byte buffer,
    /// made by `source`. Takes the fd: the driver keeps it on success, it is closed on failure.
    pub(crate) fn import(
        fd: OwnedFd,
        allocation_size: u64,
        len: usize,
        origin: GpuOrigin,
        source: MemorySource,
    ) -> Result<GpuMemory> {
        let device = super::device()?;
        if !device.features.has(Features::EXTERNAL_MEMORY_FD) {
            return Err(Error::Unavailable {
                memory: TensorMemory::Gpu,
                reason: format!("{} cannot import memory fds", device.adapter_label()),
            });
        }
        device.check_memory_fd(fd.as_fd(), allocation_size)?;
        let keep = fd.try_clone().ok(); // the driver takes `fd`; keep one for identity and re-export
        let import = MemoryImport {
            fd,
            allocation_size,
            source,
        };
        let mut mem = GpuMemory::bind(device, len, Some(import))?;
        mem.fd = keep;
        mem.origin = origin;
        Ok(mem)
    }

    /// A `len`-byte tensor buffer with memory (new, or imported from `import`) and the CPU's
    /// view of it. Ownership comes first: the buffer is owned from its creation and the
    /// `GpuMemory` from the next line, so an error at any step frees everything made.
    fn bind(
        device: &'static GpuDevice,
        len: usize,
        import: Option<MemoryImport>,
    ) -> Result<GpuMemory> {
        let handles = device.export_handle_types();
        let bound = BoundBuffer::create(device, len as u64, BUFFER_USAGE, handles)?;
        let req = bound.requirements();
        let imported = import.is_some();
        let mut mem = GpuMemory {
            bound: ManuallyDrop::new(bound),
            allocation_size: req.size,
            len,
            cpu: CpuView::Staged(OnceLock::new()),
            fd: None,
            uses: DeviceUse::default(),
            staged_at: AtomicU64::new(if imported { NEVER_STAGED } else { 0 }),
            shared: AtomicBool::new(imported),
            origin: GpuOrigin {
                pid: 0,
                start_time: 0,
                serial: 0,
            },
        };
        let (type_index, direct) =
            device
                .tensor_memory_type(req.memory_type_bits)
                .ok_or_else(|| {
                    Error::gpu(GpuErrorKind::Driver, "no memory type fits a tensor buffer")
                })?;
        match import {
            None => mem
                .bound
                .bind(req.size, type_index, device.export_extra())?,
            Some(import) => {
                mem.allocation_size = import.allocation_size;
                mem.bound.bind_imported(req.size, len, type_index, import)?;
            }
        }
        if direct {
            mem.cpu = CpuView::Direct(device.map_whole(mem.bound.memory)?);
        }
        Ok(mem)
    }

    /// Fills the buffer with zeros on the GPU (Vulkan memory starts undefined).
    fn zero(&self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let buffer = self.bound.buffer;
        let v = self
            .device()
            .submit_commands(Queue::Transfer, 0, &[], |d, cmd| {
                // SAFETY: recording a fill of this buffer's whole range.
                unsafe { d.cmd_fill_buffer(cmd, buffer, 0, vk::WHOLE_SIZE, 0) }
            })?;
        self.uses.record(v, true);
        self.staged_at.store(NEVER_STAGED, Ordering::Release);
        Ok(())
    }

    pub(crate) fn device(&self) -> &'static GpuDevice {
        self.bound.device
    }
    pub(crate) fn buffer(&self) -> vk::Buffer {
        self.bound.buffer
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn allocation_size(&self) -> u64 {
        self.allocation_size
    }
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }
    /// The exported fd, for another process or API: from now on the memory may change behind
    /// this process's back (see `shared`).
    pub(crate) fn fd_to_share(&self) -> Option<BorrowedFd<'_>> {
        self.shared.store(true, Ordering::Release);
        self.fd()
    }
    pub(crate) fn origin(&self) -> GpuOrigin {
        self.origin
    }

    /// The blob's GPU section for this memory sent by reference, and the fence fd to send with
    /// the value of its last GPU write. Where the device cannot export its fence, waits for
    /// that write first, so the receiver reads finished bytes: a value is never paired with
    /// the wrong fence.
    pub(crate) fn describe(&self) -> Result<(GpuReference, Option<(BorrowedFd<'_>, u64)>)> {
        let completion = self.device().peer_completion(self.last_write())?;
        let reference = self.device().reference(self.allocation_size, self.origin);
        Ok((reference, completion))
    }

    /// The CPU pointer: the mapping itself or the staging buffer (made by `begin_cpu`, which
    /// every map goes through before it reads this).
    pub(crate) fn ptr(&self) -> *mut u8 {
        match &self.cpu {
            CpuView::Direct(p) => *p,
            CpuView::Staged(s) => s
                .get()
                .map_or(std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), |s| {
                    s.ptr
                }),
        }
    }

    fn staging(&self) -> Result<&Staging> {
        let CpuView::Staged(cell) = &self.cpu else {
            return Err(Error::gpu(GpuErrorKind::Driver, "not a staged buffer"));
        };
        if cell.get().is_none() {
            // A racing creator's extra staging is dropped (freed) by `set` failing.
            let _ = cell.set(self.device().staging(self.len as u64)?);
        }
        Ok(cell.get().expect("set above"))
    }

    pub(crate) fn last_write(&self) -> u64 {
        self.uses.last_write()
    }

    /// What a GPU operation that reads (or, with `write`, writes) this buffer must wait for.
    pub(crate) fn after(&self, write: bool) -> u64 {
        self.uses.after(write)
    }

    /// Records that GPU work (Vulkan's or CUDA's) completing at `value` read (or wrote) this
    /// buffer.
    pub(crate) fn record(&self, value: u64, write: bool) {
        self.uses.record(value, write);
    }

    /// Gets the CPU view current for an access (`write`: one that may modify it): waits for
    /// the GPU work it must follow and, when staged, downloads.
    pub(crate) fn begin_cpu(&self, write: bool) -> Result<GpuCpuAccess<'_>> {
        let last = self.last_write();
        if let CpuView::Staged(_) = self.cpu {
            let staging = self.staging()?;
            let stale = self.staged_at.load(Ordering::Acquire) != last;
            if stale || self.shared.load(Ordering::Acquire) {
                let (src, dst, len) = (self.bound.buffer, staging.bound.buffer, self.len as u64);
                let v = self
                    .device()
                    .submit_commands(Queue::Transfer, last, &[], |d, cmd| {
                        copy(d, cmd, src, dst, 0, 0, len)
                    })?;
                self.device().wait(v, GPU_WAIT)?;
                self.record(v, false);
                if !staging.coherent {
                    self.invalidate(staging.bound.memory)?;
                }
                self.staged_at.store(last, Ordering::Release);
            }
        }
        self.device().wait(self.after(write), GPU_WAIT)?;
        Ok(GpuCpuAccess { mem: self, write })
    }

    fn invalidate(&self, memory: vk::DeviceMemory) -> Result<()> {
        let range = vk::MappedMemoryRange::default()
            .memory(memory)
            .size(vk::WHOLE_SIZE);
        // SAFETY: the memory is mapped, and the GPU work that wrote it has completed.
        unsafe {
            self.device()
                .device
                .invalidate_mapped_memory_ranges(&[range])
        }
        .map_err(super::failed("vkInvalidateMappedMemoryRanges"))
    }

    /// Sends the staging copy back to the device after a CPU write.
    fn upload_after_cpu_write(&self) -> Result<()> {
        let CpuView::Staged(_) = self.cpu else {
            return Ok(());
        };
        let staging = self.staging()?;
        if !staging.coherent {
            let range = vk::MappedMemoryRange::default()
                .memory(staging.bound.memory)
                .size(vk::WHOLE_SIZE);
            // SAFETY: the staging memory is mapped and the CPU writes are done.
            unsafe { self.device().device.flush_mapped_memory_ranges(&[range]) }
                .map_err(super::failed("vkFlushMappedMemoryRanges"))?;
        }
        let (src, dst, len) = (staging.bound.buffer, self.bound.buffer, self.len as u64);
        let v =
            self.device()
                .submit_commands(Queue::Transfer, self.after(true), &[], |d, cmd| {
                    copy(d, cmd, src, dst, 0, 0, len)
                })?;
        self.record(v, true);
        self.staged_at.store(v, Ordering::Release);
        Ok(())
    }
}

/// Records a buffer-to-buffer copy.
pub(crate) fn copy(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    src_offset: u64,
    dst_offset: u64,
    size: u64,
) {
    copy_regions(
        d,
        cmd,
        src,
        dst,
        &[vk::BufferCopy {
            src_offset,
            dst_offset,
            size,
        }],
    );
}

/// Records a buffer-to-buffer copy of several regions.
pub(crate) fn copy_regions(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: &[vk::BufferCopy],
) {
    if regions.iter().all(|r| r.size == 0) {
        return;
    }
    // SAFETY: recording into a command buffer being recorded; both buffers live until the
    // work completes (their owners wait for it before freeing them).
    unsafe { d.cmd_copy_buffer(cmd, src, dst, regions) }
}

/// An open CPU access of GPU memory: on drop after a write, the staged bytes go back.
pub(crate) struct GpuCpuAccess<'a> {
    mem: &'a GpuMemory,
    write: bool,
}

impl Drop for GpuCpuAccess<'_> {
    fn drop(&mut self) {
        if self.write {
            if let Err(e) = self.mem.upload_after_cpu_write() {
                log::error!("hwtensor: writing a CPU map back to GPU memory failed: {e}");
            }
        }
    }
}

impl std::fmt::Debug for GpuCpuAccess<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCpuAccess")
            .field("write", &self.write)
            .finish()
    }
}

impl Drop for GpuMemory {
    fn drop(&mut self) {
        // Freeing memory the GPU still uses is undefined: wait for it, or leak it.
        if let Err(e) = self.device().wait(self.after(true), GPU_WAIT) {
            log::error!("hwtensor: GPU memory still in use at drop ({e}); leaking it rather than freeing it under the GPU");
            if let CpuView::Staged(cell) = &mut self.cpu {
                std::mem::forget(cell.take());
            }
            return;
        }
        self.device().retire_finished();
        // SAFETY: dropped once, here; no GPU work uses it any more (waited above) and no map
        // outlives the tensor that owns this memory.
        unsafe { ManuallyDrop::drop(&mut self.bound) };
    }
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory")
            .field("len", &self.len)
            .field("staged", &matches!(self.cpu, CpuView::Staged(_)))
            .finish()
    }
}

/// A host buffer imported into the device for the length of one copy.
/// Send + Sync: Vulkan handles are usable from any thread.
pub(crate) struct HostImport {
    bound: BoundBuffer,
}

impl HostImport {
    /// Imports `len` bytes at `ptr`, or `None` where the device cannot (no extension, an
    /// unaligned pointer).
    ///
    /// # Safety
    /// `ptr..ptr + round_up(len, alignment)` must be mapped memory that stays valid and is not
    /// freed until the import is dropped, and every GPU use of it has completed by then.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> Option<HostImport> {
        let device = super::device().ok()?;
        let ext = device.ext.memory_host.as_ref()?;
        if len == 0 {
            return None;
        }
        let align = device.ext.host_import_alignment;
        // The driver does not check alignment (lavapipe): we must.
        if align == 0 || !(ptr as usize).is_multiple_of(align) {
            return None;
        }
        let size = len.div_ceil(align) * align;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the caller vouches for the pointer; the out-struct outlives the call.
        let r = unsafe {
            (ext.fp().get_memory_host_pointer_properties_ext)(
                device.device.handle(),
                vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
                ptr.cast_const().cast(),
                &mut props,
            )
        };
        if r != vk::Result::SUCCESS {
            return None;
        }
        let mut bound = BoundBuffer::create(
            device,
            size as u64,
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
        )
        .ok()?;
        let req = bound.requirements();
        let type_index = device.memory_type(
            props.memory_type_bits & req.memory_type_bits,
            vk::MemoryPropertyFlags::empty(),
        )?;
        let extra = MemoryExtra::ImportHost(ptr.cast());
        bound.bind(size as u64, type_index, extra).ok()?;
        Some(HostImport { bound })
    }

    /// The buffer over the host memory.
    pub(crate) fn buffer(&self) -> vk::Buffer {
        self.bound.buffer
    }
}

impl std::fmt::Debug for HostImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostImport").finish_non_exhaustive()
    }
}

/// Vulkan images are buffers with the 64-byte pitch every importer accepts: no pitch of the
/// driver's own.
pub(crate) fn image_row_pitch(_texture: &TextureRequest) -> Result<Option<usize>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::test_hooks::{Step, FAIL, LIVE};
    use super::*;
    use crate::gpu::testing::{device_or_skip, gpu_required};

    /// Runs `f` with `step` made to fail; returns its result and how many Vulkan buffers and
    /// memories it left alive on this thread.
    fn failing<R>(step: Step, f: impl FnOnce() -> R) -> (R, isize) {
        let before = LIVE.get();
        FAIL.set(Some(step));
        let r = f();
        FAIL.set(None);
        (r, LIVE.get() - before)
    }

    #[test]
    fn the_live_object_count_sees_a_buffer_and_its_memory() {
        let Some(device) = device_or_skip("the_live_object_count_sees_a_buffer_and_its_memory")
        else {
            return;
        };
        let before = LIVE.get();
        let staging = device.staging(4096).unwrap();
        assert_eq!(
            LIVE.get() - before,
            2,
            "a staging buffer is a buffer and its memory"
        );
        drop(staging);
        assert_eq!(LIVE.get(), before);
    }

    #[test]
    fn a_failed_map_frees_the_buffer_and_memory_it_was_made_with() {
        let Some(device) =
            device_or_skip("a_failed_map_frees_the_buffer_and_memory_it_was_made_with")
        else {
            return;
        };
        let (staging, left) = failing(Step::Map, || device.staging(4096));
        let err = staging.err().expect("the injected map failure is an error");
        assert!(err.to_string().contains("vkMapMemory"), "{err}");
        assert_eq!(
            left, 0,
            "a staging buffer whose map failed left Vulkan objects alive"
        );

        // Dropped inside, so what is counted is what the failure left behind.
        let staged = |m: GpuMemory| matches!(m.cpu, CpuView::Staged(_));
        let (mem, left) = failing(Step::Map, || GpuMemory::allocate(4096, None).map(staged));
        match mem {
            Err(e) => assert!(e.to_string().contains("vkMapMemory"), "{e}"),
            // Staged memory (NVIDIA, or HWTENSOR_GPU_STAGING=1) is not mapped when it is bound.
            Ok(staged) => assert!(staged, "a direct map did not fail"),
        }
        assert_eq!(
            left, 0,
            "a tensor buffer whose map failed left Vulkan objects alive"
        );
    }

    #[test]
    fn a_failed_dup_of_an_imported_fd_frees_the_buffer_it_was_made_with() {
        let test = "a_failed_dup_of_an_imported_fd_frees_the_buffer_it_was_made_with";
        let Some(device) = device_or_skip(test) else {
            return;
        };
        let exported = GpuMemory::allocate(4096, None).unwrap();
        let Some(fd) = exported.fd().map(|f| f.try_clone_to_owned().unwrap()) else {
            assert!(
                !gpu_required(),
                "{test}: {} cannot export memory",
                device.adapter_label()
            );
            eprintln!("SKIPPED: {test} - the device cannot export memory");
            return;
        };
        let (size, origin) = (exported.allocation_size(), exported.origin());
        let (import, left) = failing(Step::Dup, || {
            GpuMemory::import(fd, size, 4096, origin, MemorySource::Vulkan)
        });
        assert!(import
            .unwrap_err()
            .to_string()
            .contains("dup of a memory fd"));
        assert_eq!(
            left, 0,
            "an import whose dup failed left Vulkan objects alive"
        );
    }
}
