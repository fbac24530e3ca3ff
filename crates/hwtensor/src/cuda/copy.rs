//! The CUDA side of [`Tensor::copy_from`](crate::Tensor::copy_from): runs a copy the core
//! planned (`gpu::CopyPlan`) when a side is CUDA memory, on CUDA's copy engines, between any
//! two buffers CUDA reaches (CUDA memory, imported GPU memory, registered host memory): one
//! `cuMemcpyAsync` per contiguous run on hwtensor's own stream, ordered by the process timeline.

use std::sync::atomic::{AtomicU64, Ordering};

use super::device::device;
use super::driver::{check, sys};
use super::import::BufferImport;
use crate::gpu::{expected_copy_time, CopyPlan, GPU_WAIT};
use crate::Result;

/// How many copies CUDA has run in this process (`testing::copies_run`).
static COPIES_RUN: AtomicU64 = AtomicU64::new(0);

/// How many copies CUDA has run in this process: which engine a copy took is not otherwise
/// observable, and the choice is a rule the tests pin.
pub(crate) fn copies_run() -> u64 {
    COPIES_RUN.load(Ordering::Relaxed)
}

/// Copies the plan's runs from `from` into `to` once the timeline reaches `after`, and returns
/// the timeline value that says the copy is done. With `wait`, returns only once it is (a host
/// side must not be touched or freed while the copy engine still reads or writes it).
pub(crate) fn run_copy(
    plan: &CopyPlan<'_>,
    from: &BufferImport,
    to: &BufferImport,
    after: u64,
    wait: bool,
) -> Result<u64> {
    let device = device()?;
    let _current = device.enter()?;
    let stream = device.own_stream()?;
    device.wait_on_stream(stream, after)?;
    let (src, dst) = (from.device_ptr(), to.device_ptr());
    let mut failed = None;
    plan.for_each_run(|s, d, len| {
        if failed.is_none() {
            // SAFETY: both ranges lie inside their buffers (the plan is of two checked
            // tensors), which the caller's claims keep alive and unaliased for the copy.
            let r = unsafe { sys::cuMemcpyAsync(dst + d as u64, src + s as u64, len, stream) };
            failed = check(r, "cuMemcpyAsync").err();
        }
    });
    // Signalled even after a failed copy: a value allocated must be reached, or every later
    // wait on the timeline would run into its bound.
    let value = device.signal_from_stream(stream, after)?;
    COPIES_RUN.fetch_add(1, Ordering::Relaxed);
    if let Some(e) = failed {
        return Err(e);
    }
    if wait {
        // Bounded, and watching the counter for about the copy's time: a host thread blocked
        // on a value CUDA signals wakes ~10 ms late.
        device
            .gpu()
            .wait_expecting(value, GPU_WAIT, expected_copy_time(plan.bytes()))?;
    }
    Ok(value)
}
