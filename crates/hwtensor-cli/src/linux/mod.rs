//! What the command does on Linux: the two-process demo over a Unix socket, the hand-off
//! benchmarks, and the Vulkan device's probe and figures.

mod capi;
pub mod channel;
mod cuda;
pub mod demo;
mod gpu;
mod handoff;
pub mod zenoh_demo;

pub use gpu::{probe_json, probe_text};
pub use handoff::run as bench;

/// Host memories the core benchmarks measure; the last, a sealed memfd, is the one the targets
/// are judged on (it is what crosses processes).
pub const HOST_MEMORIES: &[hwtensor::TensorMemory] =
    &[hwtensor::TensorMemory::Mem, hwtensor::TensorMemory::Shm];

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the machine, so a producer's
/// send time and a consumer's receive time can be subtracted.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sizes for the bandwidth figures: two frames and the 256 MiB buffer the CUDA figure uses.
pub const BANDWIDTH_SIZES: [(&str, usize); 3] = [
    ("1080p", 1920 * 1080 * 4),
    ("4k", 3840 * 2160 * 4),
    ("256MiB", 256 << 20),
];

/// Rounds of each bandwidth figure (each round one copy and one reference): 256 MiB copies take
/// ~5 ms each way.
pub const BANDWIDTH_ROUNDS: usize = 31;
