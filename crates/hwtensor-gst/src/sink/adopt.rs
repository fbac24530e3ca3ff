//! Upstream's own fd buffers adopted into the channel: DMA-BUF from v4l2src or a decoder, the
//! memfds of another channel's hwtensorsrc. Only a buffer in one fd memory: the channel's
//! hand-off carries one fd per buffer, so a buffer per plane (NV12M) is copied instead. Each
//! new buffer is imported once
//! (`TensorDyn::image_from_planes`, checked as any import is) and added to the channel's pool
//! (`Producer::add`); every later frame upstream brings in it goes out as its id, no copy.
//! The sink holds upstream's buffer until every consumer has handed its slot back, so
//! upstream cannot write the next frame into it under a reader.
//!
//! A buffer is known by the file its fd is (device and inode, which our import keeps alive,
//! so no other buffer can take them over) and its offset in it: the fd number is upstream's
//! to reuse.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};

use gst_video::VideoInfo;
use hwtensor::stream::{Producer, Slot};
use hwtensor::{CpuAccess, PlaneFd, TensorDyn};

use crate::caps::Geometry;

/// Buffers a channel adopts at most beyond its own pool: v4l2src and decoders keep 2 to 32.
pub(super) const ADOPT_ROOM: usize = 32;

/// What identifies an upstream buffer: the device and inode of its fd, its offset there.
type Key = (u64, u64, usize);

/// The upstream buffers a channel adopted.
#[derive(Default)]
pub(super) struct Adopted {
    slots: HashMap<Key, Slot>,
    /// Upstream's buffer behind each slot consumers may still hold.
    held: Vec<(Slot, gst::Buffer)>,
}

impl Adopted {
    /// The slot of `buffer` in the channel: one adopted before, or a new one where the buffer
    /// is one fd memory that imports as the frame. `Err` says why it cannot be adopted (the
    /// frame is then copied).
    pub(super) fn slot_for(
        &mut self,
        producer: &mut Producer,
        g: &Geometry,
        info: &VideoInfo,
        buffer: &gst::BufferRef,
    ) -> Result<Slot, String> {
        let (fd, offset) = fd_of(buffer)?;
        let key = key(fd, offset)?;
        if let Some(&slot) = self.slots.get(&key) {
            return Ok(slot);
        }
        let tensor = import(fd, offset, g, info, buffer)?;
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

/// The fd of a buffer that is one fd memory, and where the memory starts in it.
fn fd_of(buffer: &gst::BufferRef) -> Result<(BorrowedFd<'_>, usize), String> {
    if buffer.n_memory() != 1 {
        return Err(format!("{} memories, not one", buffer.n_memory()));
    }
    let memory = buffer.peek_memory(0);
    let fd_memory = memory
        .downcast_memory_ref::<gst_allocators::FdMemory>()
        .ok_or("not fd memory")?;
    let raw = fd_memory.fd();
    if raw < 0 {
        return Err("fd memory without an fd".into());
    }
    // SAFETY: the memory owns the fd, and the buffer (borrowed for the result's life) the
    // memory.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    Ok((fd, memory.offset()))
}

fn key(fd: BorrowedFd<'_>, offset: usize) -> Result<Key, String> {
    let st = rustix::fs::fstat(fd).map_err(|e| format!("fstat of upstream's fd: {e}"))?;
    Ok((st.st_dev, st.st_ino, offset))
}

/// The frame `buffer` holds as an image over a duplicate of its fd: each plane where
/// `GstVideoMeta` (or, without one, the caps' default layout) puts it.
fn import(
    fd: BorrowedFd<'_>,
    offset: usize,
    g: &Geometry,
    info: &VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<TensorDyn, String> {
    let (offsets, strides): (Vec<usize>, Vec<i32>) = match buffer.meta::<gst_video::VideoMeta>() {
        Some(m) => (m.offset().to_vec(), m.stride().to_vec()),
        None => (info.offset().to_vec(), info.stride().to_vec()),
    };
    let planes = offsets
        .iter()
        .zip(&strides)
        .map(|(&at, &stride)| {
            let fd = fd
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| format!("dup of upstream's fd: {e}"))?;
            let stride = usize::try_from(stride).map_err(|_| "a negative stride")?;
            Ok(PlaneFd::new(fd, offset + at, stride))
        })
        .collect::<Result<Vec<_>, String>>()?;
    TensorDyn::image_from_planes(
        planes,
        g.width,
        g.height,
        g.format,
        g.dtype,
        CpuAccess::Read,
    )
    .map_err(|e| e.to_string())
}
