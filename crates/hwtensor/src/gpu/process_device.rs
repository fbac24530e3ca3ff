//! What the process GPU device looks like on every platform: how this copy came by it
//! ([`Origin`]), which optional capabilities it has ([`Features`]), and the once-per-copy cell
//! that makes it and keeps a failure ([`DeviceCell`]), and a point on its timeline as it leaves
//! the process ([`GpuCompletion`]). The Vulkan (`vulkan/`) and D3D11 (`d3d11/`) backends add
//! their own feature bits and build on these.

use std::sync::OnceLock;

use crate::{Error, Result};

/// The timeline fence as it leaves the process: an fd of the Vulkan timeline semaphore
/// (OPAQUE_FD) on Linux, the shared NT handle of the D3D11 fence on Windows.
#[cfg(target_os = "linux")]
pub type FenceHandle = std::os::fd::OwnedFd;
/// The timeline fence as it leaves the process: an fd of the Vulkan timeline semaphore
/// (OPAQUE_FD) on Linux, the shared NT handle of the D3D11 fence on Windows.
#[cfg(windows)]
pub type FenceHandle = std::os::windows::io::OwnedHandle;

/// A point on the process timeline: the exported fence (where there is one) and the value a
/// consumer waits for. A value is never paired with the wrong fence: no fence, no pairing.
/// `#[non_exhaustive]`: made by [`GpuCompletion::new`].
#[derive(Debug)]
#[non_exhaustive]
pub struct GpuCompletion {
    /// The timeline's exported fence, where the device can export it.
    pub fence: Option<FenceHandle>,
    /// The timeline value to wait for.
    pub value: u64,
}

impl GpuCompletion {
    /// `value` on `fence` (as received from the process that made it), or with no fence.
    pub fn new(fence: Option<FenceHandle>, value: u64) -> GpuCompletion {
        GpuCompletion { fence, value }
    }
}

/// Optional capabilities the device was created with; each backend defines its bits as
/// associated constants (`Features::FENCE`, `Features::EXTERNAL_MEMORY_FD`, ...).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Features(pub(crate) u32);

impl Features {
    /// Where the rung of the creation ladder (0 = everything asked for took) lives in the bits.
    pub(crate) const TIER_SHIFT: u32 = 24;

    /// Whether every capability in `flags` is present.
    pub fn has(self, flags: u32) -> bool {
        self.0 & flags == flags
    }

    /// Which rung of the creation ladder took: how many optional capabilities were dropped.
    pub fn tier(self) -> u32 {
        self.0 >> Self::TIER_SHIFT
    }

    /// The names of the capabilities present.
    pub fn names(self) -> Vec<&'static str> {
        crate::gpu::FEATURE_NAMES
            .iter()
            .filter(|(f, _)| self.has(*f))
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} (tier {})", self.names(), self.tier())
    }
}

/// How this copy came by its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// This copy created it.
    Created,
    /// Another copy in the process published it; this copy adopted it.
    Adopted,
    /// The host application's, installed with `use_external_device`.
    External,
}

/// This copy's process device: made on first use, kept (and leaked: it lives as long as the
/// process) or, on failure, the failure's kind and text kept, so later calls answer at once
/// with the same error.
pub(crate) struct DeviceCell<T: 'static>(OnceLock<std::result::Result<&'static T, Failure>>);

/// A failed device creation, kept: its kind and its words.
#[derive(Debug)]
struct Failure {
    kind: crate::GpuErrorKind,
    message: String,
}

impl Failure {
    fn of(e: Error) -> Failure {
        match e {
            Error::Gpu { kind, message } => Failure { kind, message },
            other => Failure {
                kind: crate::GpuErrorKind::Unsupported,
                message: other.to_string(),
            },
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<T> DeviceCell<T> {
    pub(crate) const fn new() -> Self {
        DeviceCell(OnceLock::new())
    }

    /// The device, made by `init` on the first call; a failure is the same error every time.
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> Result<T>) -> Result<&'static T> {
        let made = self.0.get_or_init(|| {
            init()
                .map(|d| &*Box::leak(Box::new(d)))
                .map_err(Failure::of)
        });
        match made {
            Ok(d) => Ok(d),
            Err(f) => Err(Error::gpu(f.kind, f.message.clone())),
        }
    }

    /// Refuses a host device offered too late: after this copy made its device, or after it
    /// failed to (quoting the failure: "already initialised" would send the host looking for a
    /// call it lost a race to, when the truth is "impossible here").
    pub(crate) fn refuse_late_host_device(&self) -> Result<()> {
        match self.0.get() {
            None => Ok(()),
            Some(Ok(_)) => Err(Error::InvalidOperation(
                "this copy of hwtensor already has its process device; install the host device before the first GPU use".into(),
            )),
            Some(Err(e)) => Err(Error::InvalidOperation(format!(
                "the process device already failed here, so a host device can no longer be installed: {e}"
            ))),
        }
    }
}

/// The refusal of a host device when another copy already published one: installing it anyway
/// would be silently ignored.
pub(crate) fn already_published() -> Error {
    Error::InvalidOperation(
        "another copy of hwtensor in this process already published a device; the host device would be ignored".into(),
    )
}
