//! Recording and submitting GPU work on the process queue, ordered on the timeline.
//!
//! Every submission waits (GPU-side) for the timeline values it must follow and signals a new
//! value, allocated under the shared queue lock like any other signal, so work submitted by any
//! copy in the process lands on one increasing timeline.

use std::sync::Mutex;
use std::time::Duration;

use ash::vk;

use super::GpuDevice;
use crate::{Error, GpuErrorKind, Result};

/// A second queue with its own command pool (the transfer-only queue).
pub(crate) struct Lane {
    pub queue: vk::Queue,
    pub family: u32,
    pub work: Work,
}

/// Which queue a piece of work goes to. Only copies are submitted as commands today; the
/// main queue takes them where there is no transfer-only family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// The transfer-only queue where there is one, else the main queue.
    Transfer,
}

/// The command pool of this copy and the command buffers still in flight.
pub(crate) struct Work {
    pool: Mutex<Pool>,
}

struct Pool {
    pool: vk::CommandPool,
    /// Command buffers and the timeline value that completes them.
    in_flight: Vec<(u64, vk::CommandBuffer)>,
}

impl Work {
    pub(crate) fn new(
        device: &ash::Device,
        queue_family: u32,
    ) -> std::result::Result<Work, vk::Result> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: a plain creation on a live device.
        let pool = unsafe { device.create_command_pool(&info, None) }?;
        Ok(Work {
            pool: Mutex::new(Pool {
                pool,
                in_flight: Vec::new(),
            }),
        })
    }

    /// Destroys the pool of a device that is being discarded.
    ///
    /// # Safety
    /// Nothing recorded from the pool may still be pending on the GPU.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        if let Ok(pool) = self.pool.lock() {
            // SAFETY: the caller's contract; freeing the pool frees its command buffers.
            unsafe { device.destroy_command_pool(pool.pool, None) };
        }
    }
}

impl GpuDevice {
    /// Records commands with `record` and submits them once the timeline reaches `after` (and
    /// each foreign `(semaphore, value)` in `foreign` is reached); returns the value that
    /// signals their completion.
    pub(crate) fn submit_commands(
        &self,
        on: Queue,
        after: u64,
        foreign: &[(vk::Semaphore, u64)],
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<u64> {
        let (queue, work) = match (&self.transfer, on) {
            (Some(lane), Queue::Transfer) => (lane.queue, &lane.work),
            _ => (self.queue, &self.work),
        };
        let mut pool = work
            .pool
            .lock()
            .map_err(|_| Error::gpu(GpuErrorKind::Driver, "the command pool is poisoned"))?;
        self.reclaim(&mut pool);
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool.pool)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and is used under its mutex only.
        let cmd = unsafe { self.device.allocate_command_buffers(&alloc) }
            .map_err(super::failed("allocating a command buffer"))?[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer of this pool, recorded once.
        unsafe { self.device.begin_command_buffer(cmd, &begin) }
            .map_err(super::failed("vkBeginCommandBuffer"))?;
        record(&self.device, cmd);
        // Make the transfer writes visible to the host and to later work, whoever waits next.
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(
                vk::AccessFlags::HOST_READ
                    | vk::AccessFlags::MEMORY_READ
                    | vk::AccessFlags::MEMORY_WRITE,
            );
        // SAFETY: recording into the command buffer begun above.
        unsafe {
            self.device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::ALL_COMMANDS,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
            self.device
                .end_command_buffer(cmd)
                .map_err(super::failed("vkEndCommandBuffer"))?;
        }
        let mut waits: Vec<(vk::Semaphore, u64)> = foreign.to_vec();
        if after > 0 {
            waits.push((self.timeline.semaphore, after));
        }
        let value = self
            .timeline
            .submit_work(&self.device, queue, cmd, &waits)?;
        pool.in_flight.push((value, cmd));
        Ok(value)
    }

    /// Frees every command buffer whose work has completed, on both queues. Called before
    /// objects that work used are destroyed, after their completion was waited for: so the
    /// validation layer has seen that work retire (`Timeline::observe`), and frees no buffer
    /// it believes in use.
    pub(crate) fn retire_finished(&self) {
        let lanes = std::iter::once(&self.work).chain(self.transfer.as_ref().map(|l| &l.work));
        for work in lanes {
            if let Ok(mut pool) = work.pool.lock() {
                self.reclaim(&mut pool);
            }
        }
    }

    /// Frees the command buffers whose work has completed.
    fn reclaim(&self, pool: &mut Pool) {
        let Ok(done) = self.completed_value() else {
            return;
        };
        // Observe `done` through a wait (it returns at once) so trackers retire the work.
        if done == 0 || self.wait(done, Duration::ZERO).is_err() {
            return;
        }
        self.retire_sync_semaphores(done);
        let (finished, running): (Vec<_>, Vec<_>) =
            pool.in_flight.drain(..).partition(|(v, _)| *v <= done);
        pool.in_flight = running;
        if let Some(last) = finished.iter().map(|(v, _)| *v).max() {
            self.timeline.observe(&self.device, last);
            let cmds: Vec<vk::CommandBuffer> = finished.into_iter().map(|(_, c)| c).collect();
            // SAFETY: these command buffers completed (their values are reached) and belong to this pool.
            unsafe { self.device.free_command_buffers(pool.pool, &cmds) };
        }
    }
}
