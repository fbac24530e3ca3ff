//! The process GPU device: one device and one timeline fence for every copy of this library in
//! the process (the contract is
//! [`docs/gpu-device.md`](https://github.com/hwtensor/hwtensor/blob/main/docs/gpu-device.md) in
//! the repository).
//!
//! What every platform shares lives here: the device's shape ([`ProcessDevice`]), its
//! [`Features`] and [`Origin`], the cell that makes it once. The platform is chosen once, here:
//! Vulkan on Linux (`vulkan/`), D3D11 on Windows (`d3d11/`), each with the same file names for
//! the same concerns (`adapter`, `create`, `record`, `fence`, `memory`, `copy`), and both met
//! through what this folder writes once for both: the rendezvous state machine (`rendezvous`, on
//! the claim word of `claim`) and the timeline's shared words (`timeline`). Their public items
//! appear here under one name, `hwtensor::gpu`.
//!
//! The core (`backing/`, `buffer/`, `tensor`, `copy`) reaches GPU memory only through the names
//! this module gives it: `GpuMemory`, its CPU access, the host import, and the neutral
//! `memory` contract (the texture an image needs, the copy plan a backend runs). No backend
//! imports the core.
//!
//! # Example
//!
//! ```
//! // Every copy of hwtensor in the process gets this one device and its one timeline.
//! match hwtensor::gpu::device() {
//!     Ok(d) => {
//!         let v = d.signal()?;
//!         d.wait(v, std::time::Duration::from_secs(5))?;
//!         assert!(d.completed_value()? >= v);
//!     }
//!     Err(e) => eprintln!("no GPU device here: {e}"),
//! }
//! # Ok::<(), hwtensor::Error>(())
//! ```

use std::time::Duration;

use crate::Result;

pub(crate) mod claim;
#[cfg(target_os = "linux")]
pub(crate) mod device_memory;
pub(crate) mod memory;
pub(crate) mod process_device;
pub(crate) mod rendezvous;
pub(crate) mod timeline;
#[cfg(target_os = "linux")]
pub(crate) mod waiter;

#[cfg(target_os = "linux")]
pub(crate) use device_memory::{expected_copy_time, DeviceUse, MemorySource};
pub(crate) use memory::{
    CopyPlan, CopySide, GpuOrigin, GpuReference, HostBytes, Placement, TextureRequest,
};
pub use process_device::{Features, FenceHandle, GpuCompletion, Origin};

/// The error for an adapter choice that selects none of the adapters present: it names them, so
/// the operator can fix the variable. A request for a GPU the machine lacks is reported, not
/// guessed around: on a machine with several GPUs, a silent fallback is the wrong device.
pub(crate) fn no_adapter_matches(
    choice: &str,
    present: impl IntoIterator<Item = String>,
) -> crate::Error {
    let present: Vec<String> = present.into_iter().collect();
    let listed = if present.is_empty() {
        "none".to_string()
    } else {
        present.join("; ")
    };
    crate::Error::gpu(
        crate::GpuErrorKind::Unsupported,
        format!(
            "{ADAPTER_ENV}={choice} selects none of the adapters here ({listed}); unset it for \
             the default, or name one of these"
        ),
    )
}

/// How long a CPU map, an export, a copy or a free waits for the GPU work it must follow.
/// Generous: a 4 GiB copy at PCIe speed takes ~80 ms; a value not reached in seconds means a
/// lost device or a producer that never submitted.
pub const GPU_WAIT: Duration = Duration::from_secs(10);

/// Implements [`ProcessDevice`] for a backend's device type by its own methods of the same
/// names: the trait is the contract, the inherent methods are what users call.
macro_rules! impl_process_device {
    ($device:ty, $fence:ty) => {
        impl $crate::gpu::ProcessDevice for $device {
            type Fence = $fence;

            fn signal(&self) -> $crate::Result<u64> {
                <$device>::signal(self)
            }
            fn signal_deferred(&self) -> $crate::Result<u64> {
                <$device>::signal_deferred(self)
            }
            fn flush(&self) -> $crate::Result<()> {
                <$device>::flush(self)
            }
            fn last_signalled(&self) -> u64 {
                <$device>::last_signalled(self)
            }
            fn completed_value(&self) -> $crate::Result<u64> {
                <$device>::completed_value(self)
            }
            fn wait(&self, value: u64, timeout: std::time::Duration) -> $crate::Result<()> {
                <$device>::wait(self, value, timeout)
            }
            fn export_fence(&self) -> Option<$fence> {
                <$device>::export_fence(self)
            }
            fn origin(&self) -> $crate::gpu::Origin {
                <$device>::origin(self)
            }
            fn features(&self) -> $crate::gpu::Features {
                <$device>::features(self)
            }
            fn adapter_label(&self) -> String {
                <$device>::adapter_label(self)
            }
            fn is_software(&self) -> bool {
                <$device>::is_software(self)
            }
        }
    };
}

// The device backends call the driver through raw handles: unsafe is theirs to use.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod vulkan;
#[cfg(target_os = "linux")]
pub use vulkan::*;

#[cfg(windows)]
#[allow(unsafe_code)]
mod d3d11;
#[cfg(windows)]
pub use d3d11::*;

/// How the GPU tests skip, not API: one rule for the unit tests and the test binaries
/// (`tests/common`), so the two cannot drift apart.
#[doc(hidden)]
pub mod testing {
    /// Whether this run must prove the GPU paths (`HWTENSOR_TEST_REQUIRE_GPU=1`).
    pub fn gpu_required() -> bool {
        std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
    }

    /// The process device, or a printed `SKIPPED:` line (a failure when the GPU is required).
    pub fn device_or_skip(test: &str) -> Option<&'static super::GpuDevice> {
        match super::device() {
            Ok(d) => Some(d),
            Err(e) if gpu_required() => {
                panic!("{test}: HWTENSOR_TEST_REQUIRE_GPU=1 but there is no GPU device: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: {test} - {e}");
                None
            }
        }
    }
}

/// What the process device promises on every platform. Each backend's `GpuDevice` implements
/// it with its own methods, so a backend that lacks one fails to compile on its own target;
/// code written against this trait (`tests/gpu_shape.rs`) runs on both.
pub trait ProcessDevice: Sync + 'static {
    /// The fence as it leaves the process: an fd (Vulkan OPAQUE_FD) or an NT handle (D3D11).
    type Fence;
    /// Allocates the next timeline value and submits its signal.
    fn signal(&self) -> Result<u64>;
    /// Allocates the next value; its signal goes with the next `flush` or `signal`.
    fn signal_deferred(&self) -> Result<u64>;
    /// Submits every deferred signal.
    fn flush(&self) -> Result<()>;
    /// The newest value any copy allocated.
    fn last_signalled(&self) -> u64;
    /// The value the GPU has reached.
    fn completed_value(&self) -> Result<u64>;
    /// Waits for `value`, at most `timeout`.
    fn wait(&self, value: u64, timeout: Duration) -> Result<()>;
    /// A new handle of the timeline fence for another process or API, where there is one.
    fn export_fence(&self) -> Option<Self::Fence>;
    /// How this copy got the device.
    fn origin(&self) -> Origin;
    /// The optional features the device has.
    fn features(&self) -> Features;
    /// The adapter's name and kind, for messages.
    fn adapter_label(&self) -> String;
    /// Whether the device is a CPU implementation (lavapipe, WARP).
    fn is_software(&self) -> bool;
}
