//! sync_files and the Vulkan device: a tensor's pending GPU writes exported as a sync_file that
//! `poll` sees signal once they are done, and a copy that reads a tensor fenced by a sync_file
//! waiting for it GPU-side, not on the CPU. The driver must offer `SYNC_FD` binary semaphores
//! (NVIDIA does); lavapipe has no external semaphores, so there the export waits and gives
//! `None` (pinned below) and the GPU-side tests are SKIPPED.

#![cfg(target_os = "linux")]

mod common;

use common::device_or_skip;
use hwtensor::gpu::GpuDevice;
use hwtensor::{Direction, Tensor, TensorDyn, TensorMemory};
use std::time::Duration;

/// Bytes of each GPU copy in the chain that keeps a write pending: ~3 ms per copy at the
/// H200's 380 GB/s, so the chain is still running when the test looks.
const BIG_ON_HARDWARE: usize = 1 << 30;
/// The same on lavapipe, where the copies run on the CPU.
const BIG_IN_SOFTWARE: usize = 16 << 20;
/// Copies in the chain.
const CHAIN: usize = 3;
/// How long a test waits for a sync_file at most.
const FENCE_WAIT: Duration = Duration::from_secs(10);

/// Set on a machine whose driver is known to have `SYNC_FD` semaphores, where their absence is a
/// failure: the GPU alone does not promise them (NVIDIA 580 on the headless H200 and H100
/// machines reports none, measured; lavapipe has no external semaphores at all).
const REQUIRE_SYNC_FILE: &str = "HWTENSOR_TEST_REQUIRE_SYNC_FILE";

/// Skips a test for a feature the driver says it lacks (a failure under
/// `HWTENSOR_TEST_REQUIRE_SYNC_FILE=1`); the CPU-wait fallback has been checked by then.
fn skip_for_lack(device: &GpuDevice, test: &str, reason: &str) {
    let required = std::env::var(REQUIRE_SYNC_FILE).is_ok_and(|v| v == "1");
    assert!(!required, "{test}: {REQUIRE_SYNC_FILE}=1 but {reason}");
    let kind = if device.is_software() {
        "a software device"
    } else {
        "the driver reports no SYNC_FD semaphores"
    };
    eprintln!("SKIPPED: {test} - {reason} ({kind})");
}

/// A GPU tensor whose last write is the end of a chain of GPU copies still running (its
/// bytes are zeros: only the timing matters, and a CPU map of a gigabyte would cost seconds).
fn pending_write(device: &GpuDevice) -> Tensor<u8> {
    let n = match device.exports_sync_files() {
        true => BIG_ON_HARDWARE,
        false => BIG_IN_SOFTWARE,
    };
    let mut last = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    for _ in 0..CHAIN {
        let next = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
        next.copy_from(&last).unwrap();
        last = next;
    }
    last
}

#[test]
fn pending_gpu_writes_export_as_a_sync_file_that_signals_once_they_are_done() {
    let Some(device) = device_or_skip(test_name!()) else {
        return;
    };
    let t = pending_write(device);
    let written = TensorDyn::from(t.clone()).gpu_after(Direction::Read);
    assert!(written > 0, "the chain left no pending write");
    let exported = t.export_sync_file().unwrap();
    if !device.exports_sync_files() {
        // The exporter waited instead: the reader gets finished bytes and no fence.
        assert!(exported.is_none());
        assert!(device.completed_value().unwrap() >= written);
        return skip_for_lack(
            device,
            test_name!(),
            "this device exports no sync_files (the CPU-wait fallback was checked)",
        );
    }
    let fence = exported.expect("a write was pending, so a sync_file comes back");
    fence.wait(FENCE_WAIT).unwrap();
    assert!(fence.is_signalled().unwrap());
    // The fence signalled only once the point it stands for was reached.
    assert!(device.completed_value().unwrap() >= written);
    // Nothing pending any more: nothing to export.
    assert!(t.export_sync_file().unwrap().is_none());
}

#[test]
fn a_gpu_copy_from_a_fenced_tensor_waits_for_the_fence_on_the_gpu_not_the_cpu() {
    let Some(device) = device_or_skip(test_name!()) else {
        return;
    };
    if !device.exports_sync_files() || !device.imports_sync_files() {
        return skip_for_lack(
            device,
            test_name!(),
            "this device does not both export and import sync_files",
        );
    }
    let busy = pending_write(device);
    let fence = busy.export_sync_file().unwrap().expect("a pending write");
    let data: Vec<u32> = (0..4096).collect();
    let src = Tensor::<u32>::new(&[4096], Some(TensorMemory::Gpu)).unwrap();
    src.copy_from_flat(&data).unwrap();
    let fenced = src.with_sync_file(fence);
    let dst = Tensor::<u32>::new(&[4096], Some(TensorMemory::Gpu)).unwrap();
    dst.copy_from(&fenced).unwrap();
    // A CPU wait would have returned only after the chain finished.
    let returned_early = !fenced.sync_file().unwrap().is_signalled().unwrap();
    assert_eq!(dst.to_vec().unwrap(), data);
    // The copy waited for the fence: once it is done, so is the fence.
    assert!(fenced.sync_file().unwrap().is_signalled().unwrap());
    assert!(
        returned_early,
        "copy_from returned after the fence signalled: it waited on the CPU"
    );
}
