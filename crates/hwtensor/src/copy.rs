//! [`Tensor::copy_from`]: copies between any two backings.
//!
//! Host to host is a memcpy. Where a side is GPU memory, the copy is planned here (shapes,
//! claims, the runs of both layouts) and the platform's GPU backend runs the plan on the device
//! (`gpu::run_copy`); where a side is CUDA memory, CUDA runs it (`cuda::run_copy`). A host side
//! the device cannot reach, and any copy within one buffer, goes through CPU maps.

use crate::gpu::{self, CopyPlan, Placement};
use crate::image::ImageInfo;
use crate::Direction;
use crate::{CpuAccess, Element, Error, ImageSpec, Result, Tensor, TensorMemory};

impl<T: Element> Tensor<T> {
    /// A tight copy of this tensor (a view's elements only) in a new buffer of `memory`, the
    /// image description (colorimetry included), quantization and declared access kept: how a
    /// frame moves to the memory its user asked for.
    pub fn to_memory(&self, memory: TensorMemory) -> Result<Tensor<T>> {
        let mut copy = match self.image_info() {
            Some(i) => {
                let mut image = Tensor::<T>::image(
                    &ImageSpec::new(i.format, i.width, i.height),
                    Some(memory),
                    CpuAccess::ReadWrite,
                )?;
                image.set_colorimetry(i.colorimetry)?;
                image
            }
            None => Tensor::<T>::new(self.shape(), Some(memory))?,
        };
        copy.copy_from(self)?;
        copy.set_quantization(self.quantization())?;
        copy.access = self.access();
        Ok(copy)
    }

    /// Copies `src` into this tensor. The shapes must match; either side may be a strided view
    /// (a crop of a padded image), copied as one region per contiguous run. Between GPU
    /// tensors, or between a GPU tensor and host memory, the copy runs on the device, ordered
    /// on the process timeline behind the last writes of both.
    ///
    /// ```
    /// use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};
    ///
    /// let spec = ImageSpec::new(PixelFormat::Rgba, 64, 32);
    /// let frame = Tensor::<u8>::image(&spec, Some(TensorMemory::Mem), CpuAccess::ReadWrite)?;
    /// frame.map_write()?.fill(1);
    /// let crop = frame.view(Region::new(8, 8, 16, 16))?; // a strided view, no copy
    /// let small = Tensor::<u8>::new(crop.shape(), Some(TensorMemory::Shm))?;
    /// small.copy_from(&crop)?;
    /// assert!(small.to_vec()?.iter().all(|&b| b == 1));
    /// # Ok::<(), hwtensor::Error>(())
    /// ```
    pub fn copy_from(&self, src: &Tensor<T>) -> Result<()> {
        for image in [self.image, src.image].into_iter().flatten() {
            if !image.modifier.is_linear() {
                return Err(image.modifier.refusal("a copy"));
            }
        }
        if self.shape != src.shape {
            return Err(Error::Shape(format!(
                "copy_from: shapes {:?} and {:?} differ",
                src.shape, self.shape
            )));
        }
        if let (Some(to), Some(from)) = (self.image, src.image) {
            if !to.grid_holds_chroma() || !from.grid_holds_chroma() {
                return self.copy_planes_from(src, &to, &from);
            }
        }
        // Within one buffer the regions may overlap, and one buffer cannot be claimed for reading
        // and writing at once: such a copy reads everything first, through a map.
        if !self.buffer.same_as(&src.buffer) {
            #[cfg(target_os = "linux")]
            if let Some(done) = self.copy_on_cuda(src) {
                return done;
            }
            if let Some(done) = self.copy_on_device(src) {
                return done;
            }
        }
        self.copy_from_flat(&src.to_vec()?)
    }

    /// Copies an image whose chroma rows its grid does not describe (I420, YV12, NV24: see
    /// [`PixelFormat::grid_holds_chroma`](crate::PixelFormat::grid_holds_chroma)) plane by
    /// plane and row by row, through CPU maps: a copy of the grid would carry padding for some
    /// chroma bytes and drop others.
    fn copy_planes_from(&self, src: &Tensor<T>, to: &ImageInfo, from: &ImageInfo) -> Result<()> {
        if (to.format, to.width, to.height) != (from.format, from.width, from.height) {
            return Err(Error::Shape(format!(
                "copy_from: a {}x{} {} image into a {}x{} {} one",
                from.width, from.height, from.format, to.width, to.height, to.format
            )));
        }
        let (dst_planes, src_planes) = (to.planes()?, from.planes()?);
        // Both sides have the same format and width: a plane's rows hold the same bytes.
        let elem = T::DTYPE.size();
        let row_bytes = (0..dst_planes.len())
            .map(|k| to.format.plane_row_bytes(to.width, elem, k))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Shape("copy_from: a plane row overflows".into()))?;
        let copy = |source: &[u8], dst: &mut [u8]| {
            for ((d, s), &row) in dst_planes.iter().zip(&src_planes).zip(&row_bytes) {
                for r in 0..d.rows {
                    let (at, from_at) = (d.offset + r * d.row_stride, s.offset + r * s.row_stride);
                    let (Some(out), Some(part)) = (
                        dst.get_mut(at..at + row),
                        source.get(from_at..from_at + row),
                    ) else {
                        return Err(Error::OutOfBounds(format!(
                            "copy_from: row {r} of a plane lies past the image's bytes"
                        )));
                    };
                    out.copy_from_slice(part);
                }
            }
            Ok(())
        };
        if self.buffer.same_as(&src.buffer) {
            // One buffer cannot be claimed for reading and writing at once: read it first.
            let source = src.map_span_read()?.as_bytes().to_vec();
            return copy(&source, self.map_span_write()?.as_bytes_mut());
        }
        let read = src.map_span_read()?;
        copy(read.as_bytes(), self.map_span_write()?.as_bytes_mut())
    }

    /// The plan of a copy from `src` into this tensor: the shape and both placements.
    fn plan_from<'a>(&'a self, src: &'a Tensor<T>) -> CopyPlan<'a> {
        CopyPlan {
            shape: &self.shape,
            elem: T::DTYPE.size(),
            src: Placement {
                offset: src.offset,
                strides: &src.strides,
            },
            dst: Placement {
                offset: self.offset,
                strides: &self.strides,
            },
            fences: [src.acquire.as_ref(), self.acquire.as_ref()],
        }
    }

    /// Runs the copy on the GPU device when a side is GPU memory and the device reaches the
    /// other; `None` when it has to go through CPU maps.
    fn copy_on_device(&self, src: &Tensor<T>) -> Option<Result<()>> {
        if self.buffer.gpu().is_none() && src.buffer.gpu().is_none() {
            return None;
        }
        let (from, to) = (src.buffer.copy_side()?, self.buffer.copy_side()?);
        let plan = self.plan_from(src);
        let run = || {
            let _read = src.buffer.hold_for_device(Direction::Read)?;
            let _write = self.buffer.hold_for_device(Direction::Write)?;
            gpu::run_copy(&plan, from, to)
        };
        Some(run())
    }

    /// Runs the copy on CUDA when a side is CUDA memory and CUDA reaches the other (GPU
    /// memory, heap or shm of whole pages), or between host memory and GPU memory CUDA already
    /// maps; `None` when it has to go through CPU maps or the GPU device. A copy with a host
    /// side returns once it is done; between device memories it returns at once, and later
    /// accesses wait for it through the timeline.
    ///
    /// Why GPU memory CUDA maps goes to CUDA: on NVIDIA (580, H100) Vulkan's copy engine moves
    /// host <-> GPU bytes at 0.81-0.93x of pinned `cuMemcpy` whatever the queue, region size or
    /// host memory type (measured side by side); one copy split over two or three queues at
    /// once gains at most 0.03x (`scripts/gpu-probes/vk_copy_queues.c`). CUDA's reaches
    /// 0.95-1.0x.
    /// Only a buffer already imported (a process that maps it in CUDA, as PyTorch consumers
    /// do) is taken there: an import costs ~0.13 ms, more than the gain on one copy of a fresh
    /// tensor. Nor is every host copy sent to CUDA once CUDA is open: an upload through CUDA
    /// ends with a timeline signal from a CUDA stream, the signal that stalls *other*
    /// processes' CUDA work by ~235 us a frame (`cuda/event.rs`).
    #[cfg(target_os = "linux")]
    fn copy_on_cuda(&self, src: &Tensor<T>) -> Option<Result<()>> {
        use crate::TensorMemory;
        let cuda = |t: &Tensor<T>| t.memory() == TensorMemory::Cuda;
        let mapped_gpu = |t: &Tensor<T>| t.buffer.gpu().is_some() && t.buffer.cuda_imported();
        let host = |t: &Tensor<T>| matches!(t.memory(), TensorMemory::Mem | TensorMemory::Shm);
        let mapped_pair = (mapped_gpu(self) && host(src)) || (host(self) && mapped_gpu(src));
        if !cuda(self) && !cuda(src) && !mapped_pair {
            return None;
        }
        let (from, to) = (
            src.buffer.cuda_import().ok()?,
            self.buffer.cuda_import().ok()?,
        );
        let device_side = |t: &Tensor<T>| cuda(t) || t.buffer.gpu().is_some();
        let host_side = !device_side(self) || !device_side(src);
        let run = || {
            let _read = src.buffer.hold_for_cuda(Direction::Read)?;
            let _write = self.buffer.hold_for_cuda(Direction::Write)?;
            self.buffer.settle_cuda_reads()?; // the copy stream follows the timeline only
            let after = src
                .buffer
                .device_after(false)
                .max(from.last_use())
                .max(self.buffer.device_after(true))
                .max(to.last_use());
            let plan = self.plan_from(src);
            // CUDA cannot import a sync_file: wait for any here, bounded.
            for fence in plan.fences.into_iter().flatten() {
                fence.wait(crate::gpu::GPU_WAIT)?;
            }
            let value = crate::cuda::run_copy(&plan, from, to, after, host_side)?;
            from.used_until(value);
            to.used_until(value);
            src.buffer.record_device_use(value, false);
            self.buffer.record_device_use(value, true);
            Ok(())
        };
        Some(run())
    }
}
