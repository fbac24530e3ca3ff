//! A GPU tensor's own Vulkan objects and timeline values, for a host that records its own work
//! on the process device (Linux; Windows hands out `Tensor::d3d11_texture`).
//!
//! A host that writes a tensor's `VkBuffer` in its own command buffer waits (GPU-side) for
//! [`Tensor::gpu_after`], submits inside [`GpuDevice::with_queue`](crate::gpu::GpuDevice::with_queue),
//! signals a timeline value after it and records it with [`Tensor::gpu_record`]: CPU maps,
//! copies, CUDA maps and hand-offs then order behind the host's work as behind hwtensor's.

use ash::vk;

use crate::{Direction, Element, Error, Result, Tensor, TensorDyn};

impl<T: Element> Tensor<T> {
    /// The `VkBuffer` under a GPU tensor and the byte offset of its first element in it;
    /// `None` for memory of any other kind.
    pub fn vk_buffer(&self) -> Option<(vk::Buffer, u64)> {
        let memory = self.buffer.gpu()?;
        Some((memory.buffer(), self.byte_offset() as u64))
    }

    /// The timeline value device work that accesses the tensor in `direction` must wait for
    /// (0: nothing): its last device write, and for a write its last device read too (CUDA
    /// reads marked by events are made a timeline value for it here).
    pub fn gpu_after(&self, direction: Direction) -> u64 {
        let write = direction != Direction::Read;
        if write {
            if let Err(e) = self.buffer.settle_cuda_reads() {
                log::error!("hwtensor: CUDA reads of a tensor cannot be ordered: {e}");
            }
        }
        self.buffer.device_after(write)
    }

    /// Records that device work completing at timeline `value` accessed the tensor in
    /// `direction`, so everything hwtensor does with it later orders behind that work. The
    /// value must be one the process timeline allocated (a wait for any other would only run
    /// into its bound), and the tensor device memory (GPU or CUDA).
    pub fn gpu_record(&self, value: u64, direction: Direction) -> Result<()> {
        if !matches!(
            self.memory(),
            crate::TensorMemory::Gpu | crate::TensorMemory::Cuda
        ) {
            return Err(Error::InvalidOperation(format!(
                "{} memory has no device work to order: only GPU and CUDA tensors record it",
                self.memory()
            )));
        }
        let newest = crate::gpu::device()?.last_signalled();
        if value == 0 || value > newest {
            return Err(Error::InvalidArgument(format!(
                "timeline value {value} was never allocated (the newest is {newest})"
            )));
        }
        self.buffer
            .record_device_use(value, direction != Direction::Read);
        Ok(())
    }
}

impl TensorDyn {
    /// See [`Tensor::vk_buffer`].
    pub fn vk_buffer(&self) -> Option<(vk::Buffer, u64)> {
        each_tensor!(self, t => t.vk_buffer())
    }

    /// See [`Tensor::gpu_after`].
    pub fn gpu_after(&self, direction: Direction) -> u64 {
        each_tensor!(self, t => t.gpu_after(direction))
    }

    /// See [`Tensor::gpu_record`].
    pub fn gpu_record(&self, value: u64, direction: Direction) -> Result<()> {
        each_tensor!(self, t => t.gpu_record(value, direction))
    }
}
