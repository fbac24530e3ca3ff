//! What Linux device memory (Vulkan's and CUDA's, which share the timeline and travel as fds)
//! adds to the neutral contract of `memory.rs`: the timeline values of a buffer's last device
//! uses, where an imported fd's memory came from, and how long a host <-> device copy takes.
//! D3D11 textures order their work by the device's own lock, so Windows has none of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::memory::CopyPlan;

/// The timeline values of the last device write and read of a buffer (Vulkan's or CUDA's):
/// what later device work, CPU maps and frees wait for. One per device-memory buffer.
#[derive(Debug, Default)]
pub(crate) struct DeviceUse {
    last_write: AtomicU64,
    last_read: AtomicU64,
}

impl DeviceUse {
    /// The value of the last write.
    pub(crate) fn last_write(&self) -> u64 {
        self.last_write.load(Ordering::Acquire)
    }

    /// What device work that reads (or, with `write`, writes) the buffer must wait for.
    pub(crate) fn after(&self, write: bool) -> u64 {
        let w = self.last_write();
        if write {
            w.max(self.last_read.load(Ordering::Acquire))
        } else {
            w
        }
    }

    /// Records that work completing at `value` read (or wrote) the buffer.
    pub(crate) fn record(&self, value: u64, write: bool) {
        let word = if write {
            &self.last_write
        } else {
            &self.last_read
        };
        word.fetch_max(value, Ordering::AcqRel);
    }
}

impl CopyPlan<'_> {
    /// Bytes the plan copies.
    pub(crate) fn bytes(&self) -> usize {
        let mut total = 0;
        self.for_each_run(|_, _, len| total += len);
        total
    }
}

/// The host <-> device copy rate a wait's expected time is sized by (bytes per microsecond):
/// PCIe 5 on the H200 moves ~50 GB/s; on a slower link the wait just blocks for the rest.
const COPY_BYTES_PER_US: usize = 45_000;
/// Slack on top of a copy's expected time: submission and completion latency.
const COPY_SLACK: Duration = Duration::from_micros(100);

/// About how long a copy of `bytes` between host and device takes: a wait for it spins and
/// polls that long before it blocks, because a blocked wait wakes tens of microseconds late
/// (and ~10 ms late on a value CUDA signals: a 256 MiB copy ran at 0.41x of `cuMemcpy`).
pub(crate) fn expected_copy_time(bytes: usize) -> Duration {
    Duration::from_micros((bytes / COPY_BYTES_PER_US) as u64) + COPY_SLACK
}

/// Which API made memory that arrives as an fd: it decides how the GPU device imports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemorySource {
    /// Vulkan memory, made for one buffer of the same length as the import's.
    Vulkan,
    /// CUDA VMM memory (`TensorMemory::Cuda` of a peer), whole granules of CUDA's.
    Cuda,
}
