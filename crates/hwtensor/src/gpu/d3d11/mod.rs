//! The D3D11 backend of the process device (Windows): one `ID3D11Device` and one shared
//! `ID3D11Fence` for every copy of this library in the process (the Windows specifics are
//! [`docs/windows-d3d11.md`](https://github.com/hwtensor/hwtensor/blob/main/docs/windows-d3d11.md)).
//!
//! `device()` makes it on the first call: adopt what another copy published in the rendezvous
//! record; else take the host's device given to [`use_external_device`]; else select an adapter
//! and climb the creation ladder. Then it publishes what it got.

mod adapter;
mod choice;
mod copy;
mod create;
mod fence;
mod memory;
mod record;

use std::ffi::c_void;
use std::os::windows::io::OwnedHandle;
use std::sync::Mutex;
use std::time::Duration;

use windows::core::Interface;
use windows::Win32::Foundation::{GENERIC_ALL, HANDLE};
use windows::Win32::Graphics::Direct3D11::{
    ID3D11Device, ID3D11Device1, ID3D11Device5, ID3D11DeviceContext, ID3D11DeviceContext4,
    ID3D11Fence, ID3D11Multithread, ID3D11Query, D3D11_FENCE_FLAG_NONE, D3D11_FENCE_FLAG_SHARED,
    D3D11_QUERY_DESC, D3D11_QUERY_EVENT,
};

pub use adapter::{AdapterChoice, AdapterInfo, AdapterKind, ADAPTER_ENV};
pub use create::DEBUG_ENV;
pub use fence::WAIT_SPIN;
pub use record::{record_name, RECORD_VERSION_OFFSET};
pub use windows;

pub(crate) use copy::{reaches_host, run_copy};
pub use memory::GpuShare;
pub(crate) use memory::{image_row_pitch, GpuCpuAccess, GpuMemory, HostImport};

use crate::gpu::timeline::TimelineWords;
use fence::{Fence, Timeline};
use record::{Found, Published, Record};

use crate::gpu::process_device::DeviceCell;
use crate::{Error, Result};

use crate::gpu::{Features, GpuCompletion, Origin};

impl Features {
    /// `D3D11_CREATE_DEVICE_BGRA_SUPPORT` took.
    pub const BGRA: u32 = 1 << 0;
    /// `D3D11_CREATE_DEVICE_VIDEO_SUPPORT` took.
    pub const VIDEO: u32 = 1 << 1;
    /// `ID3D11Device1`: opening shared NT handles.
    pub const SHARED_HANDLES: u32 = 1 << 2;
    /// `ID3D11Device5` and `ID3D11DeviceContext4`: the timeline fence.
    pub const FENCE: u32 = 1 << 3;
    /// `ID3D11Multithread`: the device's own lock orders every copy and thread.
    pub const MULTITHREAD: u32 = 1 << 4;
    /// The debug layer is on.
    pub const DEBUG: u32 = 1 << 5;
}

/// The names `Features::names` gives the bits of this backend.
pub(crate) const FEATURE_NAMES: [(u32, &str); 6] = [
    (Features::BGRA, "bgra"),
    (Features::VIDEO, "video"),
    (Features::SHARED_HANDLES, "shared_handles"),
    (Features::FENCE, "fence"),
    (Features::MULTITHREAD, "multithread"),
    (Features::DEBUG, "debug"),
];

/// A host application's D3D11 device, for [`use_external_device`]: the `ID3D11Device*`.
#[derive(Clone, Copy, Debug)]
pub struct ExternalDevice {
    /// The host's `ID3D11Device`, as a raw COM pointer.
    pub device: *mut c_void,
}

/// The interfaces of one device, each optional one queried once.
struct Interfaces {
    device: ID3D11Device,
    context: ID3D11DeviceContext,
    device1: Option<ID3D11Device1>,
    device5: Option<ID3D11Device5>,
    context4: Option<ID3D11DeviceContext4>,
    multithread: Option<ID3D11Multithread>,
}

impl Interfaces {
    fn query(device: ID3D11Device) -> Result<Interfaces> {
        // SAFETY: a query of a live device.
        let context = unsafe { device.GetImmediateContext() }.map_err(|e| {
            Error::gpu(
                hr_kind(&e),
                format!("the device has no immediate context: {e}"),
            )
        })?;
        let warn = |what: &str, loses: &str| {
            log::warn!("hwtensor: the D3D11 device has no {what}; {loses}");
        };
        let device1 = device.cast::<ID3D11Device1>().ok();
        if device1.is_none() {
            warn("ID3D11Device1", "shared NT handles cannot be opened");
        }
        let device5 = device.cast::<ID3D11Device5>().ok();
        let context4 = context.cast::<ID3D11DeviceContext4>().ok();
        if device5.is_none() || context4.is_none() {
            warn(
                "ID3D11Device5/ID3D11DeviceContext4",
                "no fence: every signal finishes its work on the CPU",
            );
        }
        let multithread = context
            .cast::<ID3D11Multithread>()
            .or_else(|_| device.cast::<ID3D11Multithread>())
            .ok();
        match &multithread {
            // SAFETY: turning protection on is what lets threads other than the GL worker use
            // the immediate context.
            Some(m) => unsafe {
                let _ = m.SetMultithreadProtected(true);
            },
            None => warn(
                "ID3D11Multithread",
                "only a process-local lock orders the queue",
            ),
        }
        Ok(Interfaces {
            device,
            context,
            device1,
            device5,
            context4,
            multithread,
        })
    }

    fn features(&self, flags: u32, tier: u32) -> u32 {
        use windows::Win32::Graphics::Direct3D11::{
            D3D11_CREATE_DEVICE_BGRA_SUPPORT as BGRA, D3D11_CREATE_DEVICE_DEBUG as DEBUG,
            D3D11_CREATE_DEVICE_VIDEO_SUPPORT as VIDEO,
        };
        let mut f = tier << Features::TIER_SHIFT;
        let on = |bit: i32| flags & bit as u32 != 0;
        f |= if on(BGRA.0 as i32) { Features::BGRA } else { 0 };
        f |= if on(VIDEO.0 as i32) {
            Features::VIDEO
        } else {
            0
        };
        f |= if on(DEBUG.0 as i32) {
            Features::DEBUG
        } else {
            0
        };
        f |= if self.device1.is_some() {
            Features::SHARED_HANDLES
        } else {
            0
        };
        f |= if self.device5.is_some() && self.context4.is_some() {
            Features::FENCE
        } else {
            0
        };
        f |= if self.multithread.is_some() {
            Features::MULTITHREAD
        } else {
            0
        };
        f
    }
}

/// The process GPU device.
pub struct GpuDevice {
    ifaces: Interfaces,
    info: AdapterInfo,
    features: Features,
    origin: Origin,
    feature_level: i32,
    timeline: Timeline,
    /// The event query that finishes work on the CPU where there is no fence.
    finish: Mutex<Option<ID3D11Query>>,
}

/// The device's Multithread critical section, held until drop (also when `f` panics: a
/// section left entered would stop every other thread and copy at its next GPU call).
struct Bracket<'a>(&'a ID3D11Multithread);

impl<'a> Bracket<'a> {
    fn enter(m: &'a ID3D11Multithread) -> Self {
        // SAFETY: a live interface; the matching Leave is in Drop.
        unsafe { m.Enter() };
        Bracket(m)
    }
}

impl Drop for Bracket<'_> {
    fn drop(&mut self) {
        // SAFETY: entered in `enter` on this thread.
        unsafe { self.0.Leave() };
    }
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("adapter", &self.info.label())
            .field("origin", &self.origin)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

// SAFETY: the immediate context is only used inside the queue bracket (the device's own
// Multithread lock, or the record's lock where the device has none); the device itself is
// free-threaded.
unsafe impl Sync for GpuDevice {}
// SAFETY: as above.
unsafe impl Send for GpuDevice {}

static DEVICE: DeviceCell<GpuDevice> = DeviceCell::new();
static EXTERNAL: Mutex<Option<ID3D11Device>> = Mutex::new(None);

/// The process device, made on the first call. A failure is kept, and every later call gets
/// the same text at once.
pub fn device() -> Result<&'static GpuDevice> {
    DEVICE.get_or_init(init)
}

/// Every adapter DXGI lists.
pub fn adapters() -> Result<Vec<AdapterInfo>> {
    let factory = adapter::factory()?;
    Ok(adapter::enumerate(&factory)
        .into_iter()
        .map(|(_, i)| i)
        .collect())
}

/// Installs the host's device as the process device. Call it before anything calls
/// [`device`]. Takes a reference of its own.
///
/// # Safety
/// `ext.device` must be null or a live `ID3D11Device*` (any COM interface of it).
pub unsafe fn use_external_device(ext: ExternalDevice) -> Result<()> {
    DEVICE.refuse_late_host_device()?;
    if ext.device.is_null() {
        return Err(Error::InvalidArgument(
            "use_external_device needs a non-null ID3D11Device".into(),
        ));
    }
    let pid = std::process::id();
    if let Ok(record) = record::open_record(pid) {
        if let Found::Ours(_) = record.read_as(pid) {
            return Err(crate::gpu::process_device::already_published());
        }
    }
    // SAFETY: the caller vouches that the pointer is a live COM object.
    let device = unsafe { ID3D11Device::from_raw_borrowed(&ext.device) }
        .and_then(|d| d.cast::<ID3D11Device>().ok())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "the host object does not answer QueryInterface for ID3D11Device".into(),
            )
        })?;
    *EXTERNAL
        .lock()
        .map_err(|_| Error::InvalidOperation("a previous installer panicked".into()))? =
        Some(device);
    Ok(())
}

fn init() -> Result<GpuDevice> {
    let pid = std::process::id();
    let record = match record::open_record(pid) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("hwtensor: no GPU rendezvous ({e}); other copies of hwtensor in this process will make their own device");
            return own_device(None);
        }
    };
    crate::gpu::rendezvous::adopt_or_publish::<D3d11>(record)
}

/// The D3D11 backend as the rendezvous state machine sees it.
struct D3d11;

impl crate::gpu::rendezvous::DeviceMaker for D3d11 {
    type Record = Record;
    type Device = GpuDevice;

    fn own(record: Option<&'static Record>) -> Result<GpuDevice> {
        own_device(record)
    }

    fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
        adopt(record, p)
    }

    fn published(device: &GpuDevice) -> Published {
        device.published()
    }

    fn discard(device: GpuDevice) {
        device.discard();
    }
}

/// A device of this copy: the host's, if installed, else a new one. Its counter is the
/// record's when there is a record to share.
fn own_device(record: Option<&'static Record>) -> Result<GpuDevice> {
    let shared = record.map_or_else(TimelineWords::private, fence::words_in_record);
    let external = EXTERNAL.lock().ok().and_then(|mut e| e.take());
    let (ifaces, info, flags, tier, level, origin) = match external {
        Some(device) => {
            let info = adapter::of_device(&device).unwrap_or_else(unknown_adapter);
            // SAFETY: queries of a live device.
            let (flags, level) = unsafe { (device.GetCreationFlags(), device.GetFeatureLevel()) };
            (
                Interfaces::query(device)?,
                info,
                flags,
                0,
                level,
                Origin::External,
            )
        }
        None => {
            let c = create::create()?;
            // SAFETY: a query of a live device. Wine reports 0 whatever was asked for; keep
            // what was asked for then, so the record says which rung took.
            let reported = unsafe { c.device.GetCreationFlags() };
            let flags = if reported == 0 {
                c.requested_flags
            } else {
                reported
            };
            (
                Interfaces::query(c.device)?,
                c.info,
                flags,
                c.tier,
                c.feature_level,
                Origin::Created,
            )
        }
    };
    let features = Features(ifaces.features(flags, tier));
    let fence = make_fence(&ifaces, shared.last())?;
    log::info!(
        "hwtensor: process GPU device on {} (feature level {:#x}, {features:?})",
        info.label(),
        level.0
    );
    Ok(GpuDevice::assemble(
        ifaces,
        info,
        features,
        origin,
        level.0,
        Timeline { fence, shared },
    ))
}

fn unknown_adapter() -> AdapterInfo {
    AdapterInfo {
        name: "unknown adapter".into(),
        kind: AdapterKind::Integrated,
        vendor_id: 0,
        device_id: 0,
        luid: (0, 0),
        dedicated_video_memory: 0,
    }
}

/// A shared fence starting at `initial` with its NT handle, where the device can make one.
fn make_fence(ifaces: &Interfaces, initial: u64) -> Result<Option<Fence>> {
    let (Some(device5), Some(context)) = (&ifaces.device5, &ifaces.context4) else {
        return Ok(None);
    };
    let mut fence: Option<ID3D11Fence> = None;
    // SAFETY: an out-pointer to a local.
    unsafe { device5.CreateFence(initial, D3D11_FENCE_FLAG_SHARED, &mut fence) }
        .map_err(failed("CreateFence"))?;
    let fence = fence.ok_or_else(|| {
        Error::gpu(
            crate::GpuErrorKind::Driver,
            "CreateFence succeeded without a fence",
        )
    })?;
    // SAFETY: a shareable fence; the handle is kept for the life of the process.
    let shared_handle = unsafe { fence.CreateSharedHandle(None, GENERIC_ALL.0, None) }
        .map_err(|e| {
            log::warn!("hwtensor: the fence cannot be shared ({e}); other APIs get no fence")
        })
        .ok();
    Ok(Some(Fence {
        fence,
        context: context.clone(),
        shared_handle,
    }))
}

/// Adopts the device another copy published, after `QueryInterface` says it is one.
fn adopt(record: &'static Record, p: &Published) -> Result<GpuDevice> {
    let raw = p.device as usize as *mut c_void;
    if raw.is_null() {
        return Err(Error::gpu(
            crate::GpuErrorKind::Driver,
            "the published GPU device record is incomplete",
        ));
    }
    // SAFETY: a pointer published by a copy in this very process (the record is named after
    // it and dies with it), which holds its reference for the life of the process.
    let device = unsafe { ID3D11Device::from_raw_borrowed(&raw) }
        .and_then(|d| d.cast::<ID3D11Device>().ok())
        .ok_or_else(|| {
            Error::gpu(
                crate::GpuErrorKind::Driver,
                "the published device does not answer QueryInterface for ID3D11Device",
            )
        })?;
    let ifaces = Interfaces::query(device)?;
    let info = adapter::of_device(&ifaces.device).unwrap_or_else(unknown_adapter);
    // SAFETY: a query of a live device.
    let level = unsafe { ifaces.device.GetFeatureLevel() };
    let timeline = adopt_fence(&ifaces, record, p.fence_handle)?;
    Ok(GpuDevice::assemble(
        ifaces,
        info,
        Features(p.features),
        Origin::Adopted,
        level.0,
        timeline,
    ))
}

/// The published fence, opened from its NT handle; a copy that cannot open it signals a
/// private fence and exports nothing, so a value is never paired with the wrong fence.
fn adopt_fence(ifaces: &Interfaces, record: &'static Record, handle: u64) -> Result<Timeline> {
    let shared = fence::words_in_record(record);
    let (Some(device5), Some(context)) = (&ifaces.device5, &ifaces.context4) else {
        return Ok(Timeline {
            fence: None,
            shared,
        });
    };
    let handle = HANDLE(handle as usize as *mut c_void);
    let mut opened: Option<ID3D11Fence> = None;
    let result = if handle.is_invalid() || handle.0.is_null() {
        Err(windows::core::Error::from_hresult(
            windows::Win32::Foundation::E_HANDLE,
        ))
    } else {
        // SAFETY: an NT handle published by a copy in this process; an out-pointer to a local.
        unsafe { device5.OpenSharedFence(handle, &mut opened) }
    };
    match (result, opened) {
        (Ok(()), Some(fence)) => Ok(Timeline {
            fence: Some(Fence {
                fence,
                context: context.clone(),
                shared_handle: Some(handle),
            }),
            shared,
        }),
        _ => {
            log::warn!("hwtensor: cannot open the published fence; this copy signals a private one and exports none");
            let mut fence: Option<ID3D11Fence> = None;
            // SAFETY: an out-pointer to a local.
            unsafe { device5.CreateFence(0, D3D11_FENCE_FLAG_NONE, &mut fence) }
                .map_err(failed("creating a private fence"))?;
            Ok(Timeline {
                fence: fence.map(|fence| Fence {
                    fence,
                    context: context.clone(),
                    shared_handle: None,
                }),
                shared: TimelineWords::private(),
            })
        }
    }
}

/// The error for a D3D11/DXGI call that failed: "`what` failed: `error`", of the error's kind.
pub(crate) fn failed(what: &str) -> impl Fn(windows::core::Error) -> Error + '_ {
    move |e| Error::gpu(hr_kind(&e), format!("{what} failed: {e}"))
}

/// The kind of failure a D3D11/DXGI error is, for [`Error::Gpu`].
pub(crate) fn hr_kind(e: &windows::core::Error) -> crate::GpuErrorKind {
    use crate::GpuErrorKind as K;
    use windows::Win32::Foundation::{E_NOINTERFACE, E_NOTIMPL, E_OUTOFMEMORY};
    use windows::Win32::Graphics::Dxgi::{
        DXGI_ERROR_DEVICE_HUNG, DXGI_ERROR_DEVICE_REMOVED, DXGI_ERROR_DEVICE_RESET,
        DXGI_ERROR_UNSUPPORTED, DXGI_ERROR_WAIT_TIMEOUT,
    };
    match e.code() {
        c if [
            DXGI_ERROR_DEVICE_REMOVED,
            DXGI_ERROR_DEVICE_RESET,
            DXGI_ERROR_DEVICE_HUNG,
        ]
        .contains(&c) =>
        {
            K::Lost
        }
        c if c == E_OUTOFMEMORY => K::OutOfMemory,
        c if [DXGI_ERROR_UNSUPPORTED, E_NOTIMPL, E_NOINTERFACE].contains(&c) => K::Unsupported,
        c if c == DXGI_ERROR_WAIT_TIMEOUT => K::Timeout,
        _ => K::Driver,
    }
}

impl GpuDevice {
    fn assemble(
        ifaces: Interfaces,
        info: AdapterInfo,
        features: Features,
        origin: Origin,
        feature_level: i32,
        timeline: Timeline,
    ) -> GpuDevice {
        GpuDevice {
            ifaces,
            info,
            features,
            origin,
            feature_level,
            timeline,
            finish: Mutex::new(None),
        }
    }

    /// Releases a device this copy built and lost the publication race with: the COM
    /// references go with the value; the fence's NT handle is closed by hand.
    fn discard(self) {
        if let Some(handle) = self.timeline.fence.as_ref().and_then(|f| f.shared_handle) {
            // SAFETY: a handle this copy created and never published or shared.
            let _ = unsafe { windows::Win32::Foundation::CloseHandle(handle) };
        }
    }

    fn published(&self) -> Published {
        Published {
            device: self.ifaces.device.as_raw() as usize as u64,
            fence_handle: self
                .timeline
                .fence
                .as_ref()
                .and_then(|f| f.shared_handle)
                .map_or(0, |h| h.0 as usize as u64),
            features: self.features.0,
        }
    }

    /// Runs `f` inside the queue bracket: the device's own Multithread lock, which every copy
    /// and thread shares, or the record's lock where the device has none. Use the immediate
    /// context from any thread but its owner's only inside it. Do not call it from inside `f`:
    /// the fallback lock of a device without `ID3D11Multithread` does not nest.
    pub fn with_queue<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.ifaces.multithread {
            Some(m) => {
                let _inside = Bracket::enter(m);
                f()
            }
            None => {
                // The record is a `Local\` mapping that dies with the last process holding it,
                // so the holder is a live thread of this process: waiting on is right, but say so.
                let _lock = loop {
                    match self.timeline.shared.lock() {
                        Ok(lock) => break lock,
                        Err(e) => log::error!("hwtensor: {e}; still waiting"),
                    }
                };
                f()
            }
        }
    }

    /// Flushes and waits on the CPU until the GPU has finished everything queued so far
    /// (an event query); the no-fence path's signal.
    fn finish_on_cpu(&self) -> Result<()> {
        let mut slot = self
            .finish
            .lock()
            .map_err(|_| Error::gpu(crate::GpuErrorKind::Driver, "the finish query is poisoned"))?;
        let query = match slot.as_ref() {
            Some(q) => q.clone(),
            None => {
                let desc = D3D11_QUERY_DESC {
                    Query: D3D11_QUERY_EVENT,
                    MiscFlags: 0,
                };
                let mut q = None;
                // SAFETY: a valid description and an out-pointer to a local.
                unsafe { self.ifaces.device.CreateQuery(&desc, Some(&mut q)) }
                    .map_err(failed("creating an event query"))?;
                slot.insert(q.ok_or_else(|| {
                    Error::gpu(crate::GpuErrorKind::Driver, "CreateQuery returned nothing")
                })?)
                .clone()
            }
        };
        // SAFETY: the context is used inside the queue bracket (our caller holds it).
        unsafe {
            self.context().End(&query);
            self.context().Flush();
        }
        let started = std::time::Instant::now();
        loop {
            let mut done = windows::core::BOOL(0);
            // SAFETY: an event query writes one BOOL; S_FALSE (not yet) leaves it untouched.
            let polled = unsafe {
                self.context().GetData(
                    &query,
                    Some(std::ptr::from_mut(&mut done).cast()),
                    std::mem::size_of::<windows::core::BOOL>() as u32,
                    0,
                )
            };
            polled.map_err(failed("polling the event query"))?;
            if done.as_bool() {
                return Ok(());
            }
            if started.elapsed() >= crate::gpu::GPU_WAIT {
                return Err(Error::Timeout(format!(
                    "the GPU did not finish its queued work within {:?}",
                    crate::gpu::GPU_WAIT
                )));
            }
            std::thread::yield_now();
        }
    }

    /// The `ID3D11Device`.
    pub fn device(&self) -> &ID3D11Device {
        &self.ifaces.device
    }
    /// The immediate context; use it inside [`with_queue`](Self::with_queue) from threads
    /// other than the one that owns it.
    pub fn context(&self) -> &ID3D11DeviceContext {
        &self.ifaces.context
    }
    /// `ID3D11Device1`, where the device has it.
    pub fn device1(&self) -> Option<&ID3D11Device1> {
        self.ifaces.device1.as_ref()
    }
    /// The shared fence every copy signals, where the device has fences.
    pub fn fence(&self) -> Option<&ID3D11Fence> {
        self.timeline.fence.as_ref().map(|f| &f.fence)
    }
    /// How this copy got the device (created, adopted from another copy, or the host's).
    pub fn origin(&self) -> Origin {
        self.origin
    }
    /// What the adapter is.
    pub fn adapter(&self) -> &AdapterInfo {
        &self.info
    }
    /// The adapter's description and kind, for messages.
    pub fn adapter_label(&self) -> String {
        self.info.label()
    }
    /// Whether the device is WARP (a CPU implementation).
    pub fn is_software(&self) -> bool {
        self.info.is_software()
    }
    /// The adapter LUID as (high, low).
    pub fn luid(&self) -> (i32, u32) {
        self.info.luid
    }
    /// The `D3D_FEATURE_LEVEL` the device runs at (for example `0xb100` for 11.1).
    pub fn feature_level(&self) -> i32 {
        self.feature_level
    }
    /// The optional features the device has.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Allocates the next timeline value and signals it; an error if the signal failed.
    pub fn signal(&self) -> Result<u64> {
        self.timeline.signal(self)
    }

    /// Allocates the next value now; its signal goes out with [`flush`](Self::flush) (or the
    /// next `signal` of any copy).
    pub fn signal_deferred(&self) -> Result<u64> {
        Ok(self.timeline.signal_deferred(self))
    }

    /// Signals every deferred value at once.
    pub fn flush(&self) -> Result<()> {
        self.timeline.flush(self)
    }

    /// The newest value allocated by any copy.
    pub fn last_signalled(&self) -> u64 {
        self.timeline.last_signalled()
    }

    /// The value the GPU has reached.
    pub fn completed_value(&self) -> Result<u64> {
        Ok(self.timeline.completed_value())
    }

    /// Waits for `value`, at most `timeout`: spins briefly, then blocks.
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<()> {
        self.timeline.wait(value, timeout)
    }

    /// A manual-reset event that is set when `value` completes: the Windows counterpart of
    /// `completion_fd`, for `WaitForMultipleObjects` loops.
    pub fn completion_event(&'static self, value: u64) -> Result<OwnedHandle> {
        self.timeline.completion_event(value)
    }

    /// A new NT handle of the shared fence for another API or process; `None` without fences
    /// (Wine) or for a copy that signals a private fence.
    pub fn export_fence(&self) -> Option<OwnedHandle> {
        self.timeline.export()
    }

    /// The point `value` on the timeline, with the fence where one can be exported.
    pub fn completion(&self, value: u64) -> GpuCompletion {
        GpuCompletion {
            fence: self.export_fence(),
            value,
        }
    }

    /// Waits, at most `timeout`, until a peer's fence behind `fence` reaches `value`. On the
    /// CPU, bounded, as every peer completion is on Linux: a GPU-side `Wait` on a value the peer
    /// chose would hold this device's queue, and everything behind it, for as long as the peer
    /// likes (forever for a value it never signals).
    pub(crate) fn wait_for_peer(
        &self,
        fence: std::os::windows::io::BorrowedHandle<'_>,
        value: u64,
        timeout: Duration,
    ) -> Result<()> {
        use std::os::windows::io::AsRawHandle;
        let Some(device5) = &self.ifaces.device5 else {
            return Err(Error::Unavailable {
                memory: crate::TensorMemory::Gpu,
                reason: format!("{} has no fences to wait on", self.adapter_label()),
            });
        };
        let mut opened: Option<ID3D11Fence> = None;
        // SAFETY: a handle the caller lends for the call; an out-pointer to a local.
        unsafe { device5.OpenSharedFence(HANDLE(fence.as_raw_handle()), &mut opened) }.map_err(
            |e| Error::InvalidArgument(format!("the completion's fence does not open: {e}")),
        )?;
        let opened = opened.ok_or_else(|| {
            Error::gpu(
                crate::GpuErrorKind::Driver,
                "OpenSharedFence returned nothing",
            )
        })?;
        fence::wait_for_value(&opened, value, timeout).map_err(|e| match e {
            Error::Timeout(_) => Error::Timeout(format!(
                "the peer's completion {value} did not come within {timeout:?}"
            )),
            other => other,
        })
    }
}

impl_process_device!(GpuDevice, OwnedHandle);
