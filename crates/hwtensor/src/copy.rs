//! [`Tensor::copy_from`]: copies between any two backings.
//!
//! Host to host is a memcpy. Into or out of GPU memory the copy runs on the GPU, ordered on the
//! process timeline: directly from or to the host buffer where the device can import it
//! (`VK_EXT_external_memory_host`, ~49 GB/s on the H200 against ~8 GB/s through a CPU copy into
//! staging), else through a CPU map. GPU to GPU is a device copy that returns at once; every
//! later access waits for it.

use crate::buffer::Buffer;
use crate::geometry::for_each_paired_run;
use crate::gpu::memory::{copy_regions, GpuMemory, GPU_WAIT};
use crate::gpu::Queue;
use crate::map::Direction;
use crate::{Element, Error, Result, Tensor};

impl<T: Element> Tensor<T> {
    /// Copies `src` into this tensor. The shapes must match; either side may be a strided view
    /// (a crop of a padded image), copied as one region per contiguous run.
    pub fn copy_from(&self, src: &Tensor<T>) -> Result<()> {
        if self.shape != src.shape {
            return Err(Error::Shape(format!(
                "copy_from: shapes {:?} and {:?} differ",
                src.shape, self.shape
            )));
        }
        let (from_gpu, to_gpu) = (src.buffer.gpu(), self.buffer.gpu());
        match (from_gpu, to_gpu) {
            (None, None) => self.copy_from_flat(&src.to_vec()?),
            (Some(s), Some(d)) => self.gpu_to_gpu(src, s, d),
            (None, Some(d)) => match src.buffer.host_import(d.device()) {
                Some(import) => self.through_import(src, import.buffer, d, Way::Upload),
                None => self.copy_from_flat(&src.to_vec()?),
            },
            (Some(s), None) => match self.buffer.host_import(s.device()) {
                Some(import) => self.through_import(src, import.buffer, s, Way::Download),
                None => self.copy_from_flat(&src.to_vec()?),
            },
        }
    }

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
