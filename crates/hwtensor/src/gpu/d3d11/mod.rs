//! The D3D11 backend of the process device (Windows): one `ID3D11Device` and one shared
//! `ID3D11Fence` for every copy of this library in the process (the Windows specifics are
//! [`docs/windows-d3d11.md`](https://github.com/hwtensor/hwtensor/blob/main/docs/windows-d3d11.md)).
//!
//! `device()` makes it on the first call: adopt what another copy published in the rendezvous
//! record; else take the host's device given to [`use_external_device`]; else select an adapter
//! and climb the creation ladder. Then it publishes what it got.

mod adapter;
mod choice;
mod conv;
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
use windows::Win32::Foundation::HANDLE;
use windows::Win32::Graphics::Direct3D11::{
    ID3D11Device, ID3D11Device1, ID3D11Device5, ID3D11DeviceContext, ID3D11DeviceContext4,
    ID3D11Fence, ID3D11Multithread, ID3D11Query, D3D11_QUERY_DESC, D3D11_QUERY_EVENT,
};

pub use adapter::{AdapterChoice, AdapterInfo, AdapterKind, ADAPTER_ENV};
pub(crate) use conv::{failed, hr_kind, FEATURE_NAMES};
pub use create::new_device::DEBUG_ENV;
pub use create::{adapters, device, use_external_device};
pub use fence::WAIT_SPIN;
pub use record::{record_name, RECORD_VERSION_OFFSET};
pub use windows;

pub(crate) use copy::{reaches_host, run_copy};
pub use memory::GpuShare;
pub(crate) use memory::{image_row_pitch, GpuCpuAccess, GpuMemory, HostImport};

use fence::Timeline;

use crate::{Error, Result};

use crate::gpu::{Features, GpuCompletion, Origin};

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

impl GpuDevice {
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
