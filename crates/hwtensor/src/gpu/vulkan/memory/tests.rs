//! Failure injection at each step of making GPU memory: whatever fails, nothing is left.

use super::bound::test_hooks::{Step, FAIL, LIVE};
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
    let Some(device) = device_or_skip("the_live_object_count_sees_a_buffer_and_its_memory") else {
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
    let Some(device) = device_or_skip("a_failed_map_frees_the_buffer_and_memory_it_was_made_with")
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
