//! Upstream's own fd buffers adopted into the channel: DMA-BUF from v4l2src or a decoder, the
//! memfds of another channel's hwtensorsrc. A buffer is one fd memory, or one per plane (a
//! multi-planar camera's NV12M, which the channel hands off with an fd per plane). Each new
//! buffer is imported once
//! (`TensorDyn::image_from_planes`, checked as any import is) and added to the channel's pool
//! (`Producer::add`); every later frame upstream brings in it goes out as its id, no copy.
//! The sink holds upstream's buffer until every consumer has handed its slot back, so
//! upstream cannot write the next frame into it under a reader.
//!
//! A buffer is known by the file each plane's fd is (device and inode, which our import keeps
//! alive, so no other buffer can take them over), and where each plane starts and how far
//! apart its rows are: the fd number is upstream's to reuse, and the same fd coming back with
//! another layout is another frame (read with the old layout, its consumers saw garbage).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};

use gst_video::VideoInfo;
use hwtensor::stream::{Producer, Slot};
use hwtensor::{CpuAccess, ImageSpec, PlaneFd, TensorDyn};

use crate::caps::Geometry;

/// Buffers a channel adopts at most beyond its own pool: v4l2src and decoders keep 2 to 32.
pub(super) const ADOPT_ROOM: usize = 32;

/// What identifies an upstream buffer: per plane, the device and inode of its fd, its offset
/// there and its row stride.
type Key = Vec<(u64, u64, usize, usize)>;

/// The upstream buffers a channel adopted.
#[derive(Default)]
pub(super) struct Adopted {
    slots: HashMap<Key, Slot>,
    /// Upstream's buffer behind each slot consumers may still hold.
    held: Vec<(Slot, gst::Buffer)>,
}

impl Adopted {
    /// The slot of `buffer` in the channel: one adopted before, or a new one where the buffer's
    /// fd memories import as the frame. `Err` says why it cannot be adopted (the frame is then
    /// copied).
    pub(super) fn slot_for(
        &mut self,
        producer: &mut Producer,
        g: &Geometry,
        info: &VideoInfo,
        buffer: &gst::BufferRef,
    ) -> Result<Slot, String> {
        let planes = planes_of(buffer, info)?;
        let key = key(&planes)?;
        if let Some(&slot) = self.slots.get(&key) {
            return Ok(slot);
        }
        let tensor = import(&planes, g)?;
        let slot = producer.add(tensor).map_err(|e| e.to_string())?;
        self.slots.insert(key, slot);
        Ok(slot)
    }

    /// Sends nothing; keeps `buffer` until consumers hand `slot` back.
    pub(super) fn hold(&mut self, slot: Slot, buffer: gst::Buffer) {
        self.held.push((slot, buffer));
    }

    /// Lets upstream have back every buffer whose slot no consumer holds any more.
    pub(super) fn release_returned(&mut self, producer: &mut Producer) {
        if !self.held.is_empty() {
            self.held.retain(|(slot, _)| producer.is_held(*slot));
        }
    }
}

/// One plane of an upstream frame: the fd it lies in, where it starts there, its row stride.
struct PlaneAt<'a> {
    fd: BorrowedFd<'a>,
    offset: usize,
    stride: usize,
}

/// An fd memory of `buffer`: its fd, where the memory starts in it, its size.
fn memory_fd(memory: &gst::MemoryRef) -> Result<(BorrowedFd<'_>, usize, usize), String> {
    let fd_memory = memory
        .downcast_memory_ref::<gst_allocators::FdMemory>()
        .ok_or_else(|| {
            let kind = memory.allocator().map(|a| a.memory_type().to_string());
            format!(
                "not fd memory ({} memory)",
                kind.as_deref().unwrap_or("system")
            )
        })?;
    let raw = fd_memory.fd();
    if raw < 0 {
        return Err("fd memory without an fd".into());
    }
    // SAFETY: the memory owns the fd, and the buffer (borrowed for the result's life) the
    // memory.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    Ok((fd, memory.offset(), memory.size()))
}

/// Each plane of the frame in `buffer`, where `GstVideoMeta` (or, without one, the caps'
/// default layout) puts it. A plane's offset counts across the buffer's memories one after
/// another (v4l2src's NV12M: the chroma plane at the luma memory's size, in the second memory).
fn planes_of<'a>(buffer: &'a gst::BufferRef, info: &VideoInfo) -> Result<Vec<PlaneAt<'a>>, String> {
    let memories = (0..buffer.n_memory())
        .map(|i| memory_fd(buffer.peek_memory(i)))
        .collect::<Result<Vec<_>, String>>()?;
    let (offsets, strides): (Vec<usize>, Vec<i32>) = match buffer.meta::<gst_video::VideoMeta>() {
        Some(m) => (m.offset().to_vec(), m.stride().to_vec()),
        None => (info.offset().to_vec(), info.stride().to_vec()),
    };
    offsets
        .iter()
        .zip(&strides)
        .map(|(&at, &stride)| {
            let stride = usize::try_from(stride).map_err(|_| "a negative stride")?;
            let mut start = 0;
            for &(fd, offset, size) in &memories {
                if at < start + size {
                    let offset = offset + (at - start);
                    return Ok(PlaneAt { fd, offset, stride });
                }
                start += size;
            }
            Err(format!("a plane at byte {at} of a {start}-byte buffer"))
        })
        .collect()
}

/// The buffer's key: each plane's file, where the plane starts there, and its row stride.
fn key(planes: &[PlaneAt<'_>]) -> Result<Key, String> {
    if planes.is_empty() {
        return Err("a frame without planes".into());
    }
    planes
        .iter()
        .map(|p| {
            let st = rustix::fs::fstat(p.fd).map_err(|e| format!("fstat of upstream's fd: {e}"))?;
            Ok((st.st_dev, st.st_ino, p.offset, p.stride))
        })
        .collect()
}

/// The frame as an image over duplicates of its planes' fds.
fn import(planes: &[PlaneAt<'_>], g: &Geometry) -> Result<TensorDyn, String> {
    let planes = planes
        .iter()
        .map(|p| {
            let fd =
                p.fd.as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| format!("dup of upstream's fd: {e}"))?;
            Ok(PlaneFd::new(fd, p.offset, p.stride))
        })
        .collect::<Result<Vec<_>, String>>()?;
    TensorDyn::image_from_planes(
        planes,
        &ImageSpec::new(g.format, g.width, g.height),
        g.dtype,
        CpuAccess::Read,
    )
    .map_err(|e| e.to_string())
}
