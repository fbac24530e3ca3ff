//! The GPU side of [`Tensor::copy_from`](crate::Tensor::copy_from) on Vulkan.
//!
//! Into or out of GPU memory the copy runs on the GPU, ordered on the process timeline:
//! directly from or to the host buffer where the device can import it
//! (`VK_EXT_external_memory_host`, ~49 GB/s on the H200 against ~8 GB/s through a CPU copy into
//! staging), else through a CPU map. GPU to GPU is a device copy that returns at once; every
//! later access waits for it.

use super::memory::{copy_regions, GpuMemory, HostImport, GPU_WAIT};
use super::{GpuDevice, Queue};
use crate::backing::Storage;
use crate::buffer::Buffer;
use crate::geometry::for_each_paired_run;
use crate::map::Direction;
use crate::{Element, Result, Tensor, TensorMemory};

/// Copies `src` into `dst` (same shapes, at least one on the GPU) on the device; `None` when
/// the pair has to go through CPU maps instead (a host side the device cannot import).
pub(crate) fn copy_on_gpu<T: Element>(dst: &Tensor<T>, src: &Tensor<T>) -> Option<Result<()>> {
    match (src.buffer.gpu(), dst.buffer.gpu()) {
        (Some(s), Some(d)) => Some(dst.gpu_to_gpu(src, s, d)),
        (None, Some(d)) => host_import(&src.buffer, d.device())
            .map(|import| dst.through_import(src, import.buffer, d, Way::Upload)),
        (Some(s), None) => host_import(&dst.buffer, s.device())
            .map(|import| dst.through_import(src, import.buffer, s, Way::Download)),
        (None, None) => None,
    }
}

/// This host buffer as a GPU buffer, imported once (`VK_EXT_external_memory_host`); `None`
/// where it cannot be: GPU memory itself, a DMA-BUF, a heap block under a page, a device
/// without the extension.
fn host_import<'a>(buffer: &'a Buffer, device: &'static GpuDevice) -> Option<&'a HostImport> {
    let importable = match buffer.storage() {
        Storage::Heap(h) => h.len() >= crate::backing::mem::PAGE_ALIGN_FROM,
        Storage::Fd(m) => m.memory() == TensorMemory::Shm && m.len() > 0,
        Storage::Gpu(_) => false,
    };
    if !importable {
        return None;
    }
    buffer
        .gpu_import_slot()
        .get_or_init(|| {
            // SAFETY: the storage is a page-aligned mapping of whole pages (anonymous or a
            // memfd) that lives as long as the buffer, which drops the import first; every
            // copy through the import is waited for before it returns.
            unsafe { HostImport::new(device, buffer.ptr(), buffer.len()) }
        })
        .as_ref()
}

impl<T: Element> Tensor<T> {
    fn gpu_to_gpu(&self, src: &Tensor<T>, s: &GpuMemory, d: &GpuMemory) -> Result<()> {
        let _read = src.buffer.claim_for(Direction::Read)?;
        let _write = self.buffer.claim_for(Direction::Write)?;
        let after = s.after(false).max(d.after(true));
        let (sb, db, regions) = (s.buffer(), d.buffer(), self.regions_from(src));
        let v = d
            .device()
            .submit_commands(Queue::Transfer, after, &[], |dev, cmd| {
                copy_regions(dev, cmd, sb, db, &regions)
            })?;
        s.record(v, false);
        d.record(v, true);
        Ok(())
    }

    /// A copy between GPU memory `gpu` and the imported host buffer of the other tensor, waited
    /// for: the host memory must not be touched or freed while the GPU still uses it.
    fn through_import(
        &self,
        src: &Tensor<T>,
        host: ash::vk::Buffer,
        gpu: &GpuMemory,
        way: Way,
    ) -> Result<()> {
        let (host_buffer, gpu_buffer): (&Buffer, &Buffer) = match way {
            Way::Upload => (&src.buffer, &self.buffer),
            Way::Download => (&self.buffer, &src.buffer),
        };
        let (host_dir, gpu_dir, gpu_writes) = match way {
            Way::Upload => (Direction::Read, Direction::Write, true),
            Way::Download => (Direction::Write, Direction::Read, false),
        };
        let _host = host_buffer.begin_access(host_dir)?;
        let _gpu = gpu_buffer.claim_for(gpu_dir)?;
        let (sb, db) = match way {
            Way::Upload => (host, gpu.buffer()),
            Way::Download => (gpu.buffer(), host),
        };
        let regions = self.regions_from(src);
        let v = gpu.device().submit_commands(
            Queue::Transfer,
            gpu.after(gpu_writes),
            &[],
            |dev, cmd| copy_regions(dev, cmd, sb, db, &regions),
        )?;
        gpu.record(v, gpu_writes);
        gpu.device().wait(v, GPU_WAIT)
    }
}

impl<T: Element> Tensor<T> {
    /// The copy regions from `src` into this tensor, in each buffer's byte offsets.
    fn regions_from(&self, src: &Tensor<T>) -> Vec<ash::vk::BufferCopy> {
        let mut regions = Vec::new();
        for_each_paired_run(
            &self.shape,
            &src.strides,
            &self.strides,
            T::DTYPE.size(),
            |s, d, len| {
                regions.push(ash::vk::BufferCopy {
                    src_offset: (src.offset + s) as u64,
                    dst_offset: (self.offset + d) as u64,
                    size: len as u64,
                })
            },
        );
        regions
    }
}

#[derive(Clone, Copy)]
enum Way {
    Upload,
    Download,
}
