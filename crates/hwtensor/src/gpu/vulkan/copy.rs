//! The device side of [`Tensor::copy_from`](crate::Tensor::copy_from) on Vulkan: runs a copy
//! the core planned (`gpu::CopyPlan`), on the process timeline.
//!
//! Into or out of GPU memory the copy runs on the GPU: directly from or to the host buffer,
//! which the device imports (`VK_EXT_external_memory_host`, ~49 GB/s on the H200 against
//! ~8 GB/s through a CPU copy into staging); a host buffer the device cannot import is not
//! reached (`reaches_host`), and the core copies it through CPU maps. GPU to GPU is a device
//! copy that returns at once; every later access waits for it.

use ash::vk;

use super::memory::{copy_regions, GpuMemory};
use super::{GpuDevice, Queue};
use crate::gpu::{expected_copy_time, CopyPlan, CopySide, HostBytes, GPU_WAIT};
use crate::os::SyncFile;
use crate::{Error, Result};

/// Whether the device copies to and from this host buffer: only through its import.
pub(crate) fn reaches_host(host: &HostBytes<'_>) -> bool {
    host.import.is_some()
}

/// Runs `plan` from `src` into `dst`, at least one of them GPU memory, the host side reached
/// (`reaches_host`). The core holds both sides' claims for the call.
pub(crate) fn run_copy(plan: &CopyPlan<'_>, src: CopySide<'_>, dst: CopySide<'_>) -> Result<()> {
    let regions = regions(plan);
    let fences: Vec<&SyncFile> = plan.fences.iter().flatten().map(|f| &***f).collect();
    match (src, dst) {
        (CopySide::Gpu(s), CopySide::Gpu(d)) => gpu_to_gpu(s, d, &regions, &fences),
        (CopySide::Host(h), CopySide::Gpu(d)) => {
            through_import(host_buffer(&h)?, d, Way::Upload, &regions, &fences)
        }
        (CopySide::Gpu(s), CopySide::Host(h)) => {
            through_import(host_buffer(&h)?, s, Way::Download, &regions, &fences)
        }
        (CopySide::Host(_), CopySide::Host(_)) => Err(Error::InvalidOperation(
            "a host-to-host copy is a memcpy, not device work".into(),
        )),
    }
}

fn host_buffer(host: &HostBytes<'_>) -> Result<vk::Buffer> {
    host.import.map(|i| i.buffer()).ok_or_else(|| {
        Error::InvalidOperation("the device cannot reach this host buffer (not imported)".into())
    })
}

/// Submits `regions` from `src` into `dst` on the transfer queue once the timeline reaches
/// `after` and `fences` signal (GPU-side where the device imports sync_files, else waited for
/// here first); the value that marks the copy.
fn submit_copy(
    device: &GpuDevice,
    after: u64,
    fences: &[&SyncFile],
    (src, dst): (vk::Buffer, vk::Buffer),
    regions: &[vk::BufferCopy],
) -> Result<u64> {
    let imported = device.import_sync_files(fences, GPU_WAIT)?;
    let v = device.submit_commands(Queue::Transfer, after, &imported.waits(), |dev, cmd| {
        copy_regions(dev, cmd, src, dst, regions)
    })?;
    imported.used_until(v);
    Ok(v)
}

fn gpu_to_gpu(
    s: &GpuMemory,
    d: &GpuMemory,
    regions: &[vk::BufferCopy],
    fences: &[&SyncFile],
) -> Result<()> {
    let after = s.after(false).max(d.after(true));
    let buffers = (s.buffer(), d.buffer());
    let v = submit_copy(d.device(), after, fences, buffers, regions)?;
    s.record(v, false);
    d.record(v, true);
    Ok(())
}

/// A copy between GPU memory `gpu` and an imported host buffer, waited for: the host memory
/// must not be touched or freed while the GPU still uses it.
fn through_import(
    host: vk::Buffer,
    gpu: &GpuMemory,
    way: Way,
    regions: &[vk::BufferCopy],
    fences: &[&SyncFile],
) -> Result<()> {
    let gpu_writes = way == Way::Upload;
    let buffers = match way {
        Way::Upload => (host, gpu.buffer()),
        Way::Download => (gpu.buffer(), host),
    };
    let v = submit_copy(
        gpu.device(),
        gpu.after(gpu_writes),
        fences,
        buffers,
        regions,
    )?;
    gpu.record(v, gpu_writes);
    let bytes: usize = regions.iter().map(|r| r.size as usize).sum();
    gpu.device()
        .wait_expecting(v, GPU_WAIT, expected_copy_time(bytes))?;
    // The caller frees the host import next: its copy is retired first (see retire_finished).
    gpu.device().retire_finished();
    Ok(())
}

/// The plan's runs as Vulkan copy regions.
fn regions(plan: &CopyPlan<'_>) -> Vec<vk::BufferCopy> {
    let mut regions = Vec::new();
    plan.for_each_run(|src_offset, dst_offset, len| {
        regions.push(vk::BufferCopy {
            src_offset: src_offset as u64,
            dst_offset: dst_offset as u64,
            size: len as u64,
        })
    });
    regions
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Upload,
    Download,
}
