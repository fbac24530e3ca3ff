//! The fd path of the blob (Linux): a tensor's buffer travels as its fd beside the blob, and
//! GPU memory with its fence. The GPU section is the backend's to fill and to accept
//! (`GpuMemory::describe`, `GpuDevice::accept_reference`); this file only carries it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::wire::{self, bad, Described, Outgoing};
use super::{
    inline_buffer, Transport, REQUIRES_COMPLETION, REQUIRES_PLANE_FDS, REQUIRES_SYNC_FILE,
};
use crate::backing::linux::{Plan, PlaneFds, PlaneSource};
use crate::backing::Storage;
use crate::buffer::Buffer;
use crate::gpu::{GpuMemory, MemorySource, GPU_WAIT};
use crate::os::same_file;
use crate::{Element, Error, ImportPolicy, Result, Tensor, TensorDyn, TensorMemory};

/// Writes the blob that describes `tensor`, and the fds that must travel with it (borrowed from
/// the tensor: send them before it is dropped).
pub fn export(tensor: &TensorDyn, mode: Transport) -> Result<(Vec<u8>, Vec<BorrowedFd<'_>>)> {
    match mode {
        Transport::Inline => Ok((super::export_inline(tensor)?, vec![])),
        Transport::Reference => each_tensor!(tensor, t => export_reference(t)),
    }
}

fn export_reference<T: Element>(t: &Tensor<T>) -> Result<(Vec<u8>, Vec<BorrowedFd<'_>>)> {
    if let Some(planes) = t.buffer.plane_fds() {
        return export_planes(t, planes);
    }
    let fd = t.as_fd().ok_or_else(|| Error::Unavailable {
        memory: t.memory(),
        reason: "this memory has no fd to send by reference; [[send_inline]] copies its bytes \
             instead, or allocate it on shm"
            .into(),
    })?;
    let mut fds = vec![fd];
    let mut out = Outgoing::reference(t);
    if let Some(described) = t.buffer.describe_device() {
        let (reference, completion) = described?;
        out.gpu = reference;
        if let Some((fence, value)) = completion {
            fds.push(fence);
            out.completion = Some(value);
        }
    }
    if let Some(fence) = t.sync_file() {
        if out.completion.is_some() {
            // Device memory's own timeline orders its writes; a sync_file beside it is waited
            // for here, so the blob names one fence.
            fence.wait(GPU_WAIT)?;
        } else {
            fds.push(fence.as_fd());
            out.sync_file = true;
        }
    }
    out.fd_count = fds.len();
    Ok((out.write(t, None)?, fds))
}

/// An image whose planes are in separate fds: plane `k`'s fd goes as fd `k` (required bit 8).
/// Only the whole image: the receiver maps the planes as the image lays them out, so any other
/// view of them would arrive as the whole.
fn export_planes<'a, T: Element>(
    t: &'a Tensor<T>,
    planes: PlaneFds<'a>,
) -> Result<(Vec<u8>, Vec<BorrowedFd<'a>>)> {
    let model = t.image_info().map(|i| i.planes()).transpose()?;
    if t.byte_offset() != planes.lead || model.as_deref() != Some(planes.model) {
        return Err(Error::InvalidOperation(
            "this is a view (a crop, a reshape) of an image whose planes are in separate \
             buffers, which travels by reference only as the whole image: send the image \
             itself, or [[send_inline]]"
                .into(),
        ));
    }
    if let Some(fence) = t.sync_file() {
        // The blob carries an fd per plane and no fence: the sender waits for its own.
        fence.wait(GPU_WAIT)?;
    }
    let out = Outgoing {
        byte_offset: 0,
        buffer_len: wire::one_buffer_extent(&wire::plane_records(t, 0)?) as usize,
        fd_count: planes.fds.len(),
        plane_offsets: Some(planes.offsets.to_vec()),
        ..Outgoing::reference(t)
    };
    Ok((
        out.write(t, None)?,
        planes.fds.iter().map(AsFd::as_fd).collect(),
    ))
}

/// Turns a blob and the fds that came with it into a tensor, under the strict
/// [`ImportPolicy`]: GPU memory by reference is refused, since nothing here says where the fds
/// came from (see [`import_with`] and the trust model in [`ImportPolicy`]'s module).
///
/// Takes every fd: the ones the tensor keeps live as long as it does, the others (and all of
/// them on an error) are closed before this returns.
pub fn import(blob: &[u8], fds: Vec<OwnedFd>) -> Result<TensorDyn> {
    import_with(blob, fds, &ImportPolicy::STRICT)
}

/// [`import`] under `policy`: what the caller knows of the fds' sender. Everything the blob
/// says is validated before anything is imported; a completion the sender claims is waited
/// for through the fence it sent (at most ten seconds), never taken on its word.
pub fn import_with(blob: &[u8], fds: Vec<OwnedFd>, policy: &ImportPolicy) -> Result<TensorDyn> {
    let d = Described::read(blob)?;
    let buffer = match d.inline {
        Some(data) => {
            if !fds.is_empty() {
                return Err(bad(format!("an inline blob came with {} fds", fds.len())));
            }
            inline_buffer(data)?
        }
        None if d.header.required & REQUIRES_PLANE_FDS != 0 => {
            return planes_tensor(d, fds, policy);
        }
        None => reference_buffer(&d, fds, policy)?,
    };
    d.tensor(buffer)
}

/// An image with an fd per plane (required bit 8): the fds mapped side by side as
/// `Tensor::image_from_planes` maps them, each checked as any import is (its kind, shared
/// memory sealed, the bytes its plane needs), and of the kind the blob says.
fn planes_tensor(d: Described<'_>, fds: Vec<OwnedFd>, policy: &ImportPolicy) -> Result<TensorDyn> {
    if fds.len() != d.header.fd_count {
        return Err(bad(format!(
            "a blob with an fd per plane names {} fds, {} arrived",
            d.header.fd_count,
            fds.len()
        )));
    }
    let model = d.parts.image().map(|i| i.planes()).transpose()?;
    let model = model.ok_or_else(|| bad("the plane fds bit on a blob that is not an image"))?;
    let sources: Vec<PlaneSource> = fds
        .into_iter()
        .zip(&d.plane_offsets)
        .map(|(fd, &offset)| PlaneSource { fd, offset })
        .collect();
    let plan = Plan::of(&sources, &model)?;
    let buffer = crate::planes::mapped_planes(sources, &plan, policy.unsealed_shm)?;
    if buffer.memory() != d.memory {
        return Err(bad(format!(
            "the blob says {} but the planes' fds are {}",
            d.memory,
            buffer.memory()
        )));
    }
    d.tensor_at(buffer, plan.lead)
}

fn reference_buffer(
    d: &Described<'_>,
    mut fds: Vec<OwnedFd>,
    policy: &ImportPolicy,
) -> Result<Buffer> {
    let (h, memory) = (&d.header, d.memory);
    if is_device_memory(memory) && !policy.gpu_memory {
        return Err(bad(
            "GPU and CUDA memory by reference are accepted only from a trusted peer (the \
             driver trusts the fd's content): [[accept_gpu_reference]]",
        ));
    }
    let fenced = h.required & (REQUIRES_COMPLETION | REQUIRES_SYNC_FILE) != 0;
    let needed = 1 + fenced as usize;
    if h.fd_count != needed || fds.len() != needed {
        return Err(bad(format!(
            "a reference blob of this kind needs exactly {needed} fd(s): it names {}, {} arrived",
            h.fd_count,
            fds.len()
        )));
    }
    let fence = (needed == 2).then(|| fds.pop()).flatten();
    let Some(fd) = fds.pop() else {
        return Err(bad("the memory fd is missing"));
    };
    if h.required & REQUIRES_SYNC_FILE != 0 {
        // Waited for here, bounded, and dropped: the tensor returned is complete.
        let fence = fence.ok_or_else(|| bad("the sync_file fd is missing"))?;
        crate::SyncFile::from_fd(fence)
            .and_then(|f| f.wait(GPU_WAIT))
            .map_err(|e| bad(format!("completion_fd: {e}")))?;
        return shared_buffer(d, fd, policy);
    }
    if memory == TensorMemory::Gpu {
        return gpu_buffer(d, fd, fence, MemorySource::Vulkan);
    }
    if memory == TensorMemory::Cuda {
        return cuda_buffer(d, fd, fence);
    }
    shared_buffer(d, fd, policy)
}

/// Shared memory or a DMA-BUF by reference, checked to be the kind the blob says.
fn shared_buffer(d: &Described<'_>, fd: OwnedFd, policy: &ImportPolicy) -> Result<Buffer> {
    let memory = d.memory;
    if !matches!(memory, TensorMemory::Shm | TensorMemory::DmaBuf) {
        return Err(bad(format!(
            "a reference blob of {memory} memory cannot be imported by fd"
        )));
    }
    let buffer = Buffer::import(fd, d.buffer_len, policy)?;
    if buffer.memory() != memory {
        return Err(bad(format!(
            "the blob says {memory} but the fd is {}",
            buffer.memory()
        )));
    }
    Ok(buffer)
}

/// Imports GPU memory on this process's device, once the sender's last write has completed.
///
/// The device accepts the GPU section first (its device, a fence of the kind it exports),
/// and the completion is waited for on the CPU through that fence, bounded: a value the
/// sender chose never lands on this process's timeline. A pooled buffer seen before reuses its
/// import only when the fd sent is provably the same file as the one the import holds; the
/// identity the blob claims alone proves nothing.
fn gpu_buffer(
    d: &Described<'_>,
    fd: OwnedFd,
    fence: Option<OwnedFd>,
    source: MemorySource,
) -> Result<Buffer> {
    let g = &d.header.gpu;
    let completion = crate::gpu::device()?.accept_reference(g.device_uuid, g.driver_uuid, fence)?;
    let cached = Buffer::find_gpu(&g.producer).filter(|b| {
        b.len() == d.buffer_len
            && b.gpu().is_some_and(|m| {
                m.allocation_size() == g.allocation_size
                    && m.fd().is_some_and(|ours| same_file(ours, fd.as_fd()))
            })
    });
    let buffer = match cached {
        Some(b) => b, // `fd` is dropped: it is the very file our import holds
        None => {
            let mem = GpuMemory::import(fd, g.allocation_size, d.buffer_len, g.producer, source)?;
            let b = Buffer::new(Storage::Gpu(mem))?;
            b.remember_gpu();
            b
        }
    };
    if let Some(timeline) = completion {
        timeline.wait(d.header.completion_value, GPU_WAIT)?;
    }
    Ok(buffer)
}

/// Whether `memory` is device memory that travels with a GPU section (and may carry a fence).
pub(super) fn is_device_memory(memory: TensorMemory) -> bool {
    matches!(memory, TensorMemory::Gpu | TensorMemory::Cuda)
}

/// Imports CUDA memory into this process's CUDA context, once the sender's last write has
/// completed (through its fence, as for GPU memory). The fd must be of the kind CUDA exports.
/// A process without CUDA (none here, or `HWTENSOR_CUDA=off`) imports it into Vulkan as GPU
/// memory instead: the same bytes, reached by Vulkan work and CPU maps.
fn cuda_buffer(d: &Described<'_>, fd: OwnedFd, fence: Option<OwnedFd>) -> Result<Buffer> {
    if crate::cuda::device().is_err() {
        return gpu_buffer(d, fd, fence, MemorySource::Cuda);
    }
    let g = &d.header.gpu;
    let completion = crate::gpu::device()?.accept_reference(g.device_uuid, g.driver_uuid, fence)?;
    let mem = crate::cuda::CudaMemory::import(fd, g.allocation_size, d.buffer_len, g.producer)?;
    let buffer = Buffer::new(Storage::Cuda(mem))?;
    if let Some(timeline) = completion {
        timeline.wait(d.header.completion_value, GPU_WAIT)?;
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SyncFile;

    fn eventfd(count: u32) -> OwnedFd {
        rustix::event::eventfd(count, rustix::event::EventfdFlags::CLOEXEC).unwrap()
    }

    fn owned(fds: Vec<BorrowedFd<'_>>) -> Vec<OwnedFd> {
        fds.iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect()
    }

    #[test]
    fn a_tensor_with_a_sync_file_travels_with_it_as_fd_1_and_the_sync_file_bit() {
        let t = Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap();
        let fenced = TensorDyn::from(t.with_sync_file(SyncFile::stand_in(eventfd(1))));
        let (blob, fds) = export(&fenced, Transport::Reference).unwrap();
        assert_eq!(fds.len(), 2);
        let d = Described::read(&blob).unwrap();
        assert_ne!(d.header.required & REQUIRES_SYNC_FILE, 0);
        assert_eq!(d.header.completion_fd, 1);
        // The stand-in is no sync_file: the receiver's check refuses it by name.
        let err = import(&blob, owned(fds)).unwrap_err().to_string();
        assert!(
            err.contains("completion_fd") && err.contains("sync_file"),
            "{err}"
        );
    }

    #[test]
    fn a_sync_file_bit_without_its_fd_or_beside_a_timeline_is_refused() {
        let t = Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap();
        let fenced = TensorDyn::from(t.with_sync_file(SyncFile::stand_in(eventfd(1))));
        let (blob, fds) = export(&fenced, Transport::Reference).unwrap();
        let mut only_memory = owned(fds);
        only_memory.truncate(1);
        assert!(import(&blob, only_memory).is_err());
        let mut both = blob.clone();
        let required = u32::from_le_bytes(both[12..16].try_into().unwrap());
        both[12..16].copy_from_slice(&(required | REQUIRES_COMPLETION).to_le_bytes());
        let err = Described::read(&both).err().unwrap().to_string();
        assert!(err.contains("completion"), "{err}");
    }

    #[test]
    fn a_cpu_map_waits_for_the_sync_file_and_then_reads() {
        let t = Tensor::<u8>::new(&[4], Some(TensorMemory::Shm)).unwrap();
        t.map_write().unwrap().fill(9);
        let fenced = t.with_sync_file(SyncFile::stand_in(eventfd(1)));
        assert_eq!(fenced.to_vec().unwrap(), [9; 4]);
        assert!(fenced.sync_file().unwrap().is_signalled().unwrap());
    }
}
