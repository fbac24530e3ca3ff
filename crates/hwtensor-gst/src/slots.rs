//! A buffer pool whose buffers are a channel's own buffers: one `GstBuffer` per pool slot,
//! made once (its fd memory, or a memory per plane for an image in a buffer per plane, mapped
//! once), lent out and taken back as the channel lends and
//! takes back the slot. `hwtensorsink` offers it upstream, so producers write straight into the
//! memory consumers read; `hwtensorsrc` pushes its buffers, so a frame's last unref downstream
//! is what hands it back to the producer.
//!
//! Why a pool and not a buffer made per frame: fd memory is mapped when first mapped and
//! unmapped when freed, so a fresh `GstMemory` per frame costs an mmap and a page fault per page
//! (some 760 for a 1080p I420 frame) on every frame.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use hwtensor::{TensorDyn, TensorMemory};

/// What a pool lends next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lent {
    /// The buffer of this slot.
    Slot(usize),
    /// A buffer of plain memory laid out as the slots are (the sink's `when-full=drop`: the
    /// frame written into it is dropped if no slot is free when it is rendered).
    Spare,
}

/// Which element a pool lends for: what its slot buffers carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// `hwtensorsink`'s: upstream writes frames into the buffers, and each comes back bare
    /// (but for its layout) whatever upstream put on it.
    Sink,
    /// `hwtensorsrc`'s: received frames, which other consumers of the channel read too, so
    /// the memories are read-only (an element that writes gets a copy); and each buffer
    /// keeps its two stamps ([`crate::stamp::stamp`]) from frame to frame, to be set in place
    /// rather than added anew on the latency path.
    Source,
}

/// The element behind a pool: which slot goes out next and what happens when one comes back.
pub trait Lender: Send + Sync + 'static {
    /// The slot whose buffer the next acquire lends, waiting at most as long as the element
    /// allows, and never once `flushing` is set.
    fn next_slot(&self, flushing: &AtomicBool) -> Result<Lent, gst::FlowError>;
    /// The buffer of `slot` came back: nothing in this process holds it any more.
    fn returned(&self, slot: usize);
    /// `slot` was chosen while its buffer is still out (a downstream element holds it): the
    /// pool did not lend it; take the slot back (called once the acquire that chose it ends).
    fn unusable(&self, slot: usize);
}

/// `GST_BUFFER_OFFSET_NONE`: a buffer without an offset.
const BUFFER_OFFSET_NONE: u64 = u64::MAX;

/// The options the pool supports: upstream may lay frames out by `GstVideoMeta`.
static OPTIONS: std::sync::LazyLock<[&'static str; 1]> =
    std::sync::LazyLock::new(|| [gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str()]);

mod imp {
    use super::*;

    pub(super) struct Inner {
        pub lender: Box<dyn Lender>,
        /// Whose pool it is: read-only memories and kept stamps for the source.
        pub side: Side,
        pub slots: Mutex<Vec<Slot>>,
        pub flushing: AtomicBool,
        /// The slots are not laid out as GStreamer lays out these caps by default: only a
        /// user that reads and writes through `GstVideoMeta` may take them.
        pub meta_required: AtomicBool,
    }

    /// One slot; a channel that grows adds one (`SlotPool::add_slot`).
    pub(super) struct Slot {
        /// Kept so the fd the buffer's memory names stays open while the buffer lives.
        pub tensor: TensorDyn,
        /// The slot's buffer while it is at rest here.
        pub at_rest: Option<gst::Buffer>,
        /// The buffer's address: how a buffer that comes back finds its slot.
        pub address: usize,
        /// The buffer's own memories (one, or one per plane of an image in a buffer per
        /// plane). An element that cannot map them as it wants may put a copy in their place
        /// (`gst_memory_make_mapped`, or a merge of several): its writes then never reach the
        /// slot, so such a buffer is known by its memories and the slot's are put back.
        pub memories: Vec<gst::Memory>,
    }

    impl Slot {
        /// The slot whose buffer is `buffer` over `tensor`.
        pub fn new(tensor: TensorDyn, buffer: gst::Buffer) -> Slot {
            // `memory(i)` takes a reference; `to_owned` of a MemoryRef would copy the bytes.
            let memories = (0..buffer.n_memory())
                .filter_map(|i| buffer.memory(i))
                .collect();
            Slot {
                tensor,
                address: buffer.as_ptr() as usize,
                memories,
                at_rest: Some(buffer),
            }
        }
    }

    /// The slot whose buffer is at `address`.
    pub(super) fn slot_at(slots: &[Slot], address: usize) -> Option<usize> {
        slots.iter().position(|s| s.address == address)
    }

    #[derive(Default)]
    pub struct SlotPool {
        pub(super) inner: OnceLock<Inner>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for SlotPool {
        const NAME: &'static str = "GstHwtensorSlotPool";
        type Type = super::SlotPool;
        type ParentType = gst::BufferPool;
    }

    impl ObjectImpl for SlotPool {}
    impl GstObjectImpl for SlotPool {}

    impl BufferPoolImpl for SlotPool {
        fn acquire_buffer(
            &self,
            _params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            let inner = self.inner.get().ok_or(gst::FlowError::NotNegotiated)?;
            // Slots the channel has back while a downstream element still holds their buffer
            // stay taken until another is found, so the next look gets another slot (or
            // waits, bounded, as the lender does) instead of the same one again.
            let mut held_elsewhere = Vec::new();
            let got = loop {
                let slot = match inner.lender.next_slot(&inner.flushing) {
                    Ok(Lent::Slot(slot)) => slot,
                    Ok(Lent::Spare) => break spare(inner),
                    Err(e) => break Err(e),
                };
                let mut slots = inner.slots.lock().unwrap();
                let Some(entry) = slots.get_mut(slot).map(|s| &mut s.at_rest) else {
                    break Err(gst::FlowError::Error); // a lender's slot this pool never had
                };
                // At rest a slot's buffer has us as its one owner, so it is writable; one that
                // is not (or is out) is held elsewhere. It was reset on its way back
                // (`reset_buffer`, which GStreamer runs before `release_buffer`), or is new.
                match entry.as_mut().and_then(|b| b.get_mut()) {
                    Some(_) => break Ok(entry.take().expect("just looked at")),
                    None => held_elsewhere.push(slot),
                }
            };
            for slot in held_elsewhere {
                inner.lender.unusable(slot);
            }
            got
        }

        fn release_buffer(&self, buffer: gst::Buffer) {
            let Some(inner) = self.inner.get() else {
                return;
            };
            let address = buffer.as_ptr() as usize;
            let mut slots = inner.slots.lock().unwrap();
            if let Some(slot) = slot_at(&slots, address) {
                let mut buffer = buffer;
                let s = &mut slots[slot];
                if !holds(&buffer, &s.memories) {
                    if let Some(b) = buffer.get_mut() {
                        b.remove_all_memory();
                        for memory in &s.memories {
                            b.append_memory(memory.clone());
                        }
                    }
                }
                s.at_rest = Some(buffer);
                drop(slots);
                inner.lender.returned(slot);
            }
            // Anything else (a spare) is simply freed.
        }

        // The slot buffers are made with the pool; nothing to allocate or free on activation.
        fn start(&self) -> bool {
            true
        }

        fn stop(&self) -> bool {
            true
        }

        fn flush_start(&self) {
            if let Some(inner) = self.inner.get() {
                inner.flushing.store(true, Ordering::SeqCst);
            }
        }

        fn flush_stop(&self) {
            if let Some(inner) = self.inner.get() {
                inner.flushing.store(false, Ordering::SeqCst);
            }
        }

        fn options() -> &'static [&'static str] {
            &*OPTIONS
        }

        // The default would check each buffer against the configured size, which for a layout
        // tighter than GStreamer's default is larger than the slot, and drop the buffer.
        fn reset_buffer(&self, buffer: &mut gst::BufferRef) {
            let side = self.inner.get().map_or(Side::Sink, |i| i.side);
            reset(buffer, side);
        }

        // An element that did not ask for GstVideoMeta writes GStreamer's default layout:
        // where the slots lie otherwise, it is refused and allocates its own buffers (which
        // the sink then copies, counted).
        fn set_config(&self, config: &mut gst::BufferPoolConfigRef) -> bool {
            let required = self
                .inner
                .get()
                .is_some_and(|i| i.meta_required.load(Ordering::SeqCst));
            if required && !config.has_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str()) {
                return false;
            }
            self.parent_set_config(config)
        }
    }

    /// Whether `buffer` still holds `memories`, in order, and nothing else.
    pub(super) fn holds(buffer: &gst::BufferRef, memories: &[gst::Memory]) -> bool {
        buffer.n_memory() == memories.len()
            && memories
                .iter()
                .enumerate()
                .all(|(i, m)| buffer.peek_memory(i).as_ptr() == m.as_ptr())
    }

    fn reset(buffer: &mut gst::BufferRef, side: Side) {
        buffer.set_pts(gst::ClockTime::NONE);
        buffer.set_dts(gst::ClockTime::NONE);
        buffer.set_duration(gst::ClockTime::NONE);
        buffer.set_offset(BUFFER_OFFSET_NONE);
        buffer.set_offset_end(BUFFER_OFFSET_NONE);
        buffer.unset_flags(gst::BufferFlags::all());
        // Metas of the last frame go; the layout stays, and the source's stamps, which its
        // next frame sets anew.
        buffer.foreach_meta_mut(|mut meta| {
            use gst::buffer::BufferMetaForeachAction::{Keep, Remove};
            let layout = meta.downcast_ref::<gst_video::VideoMeta>().is_some();
            let stamp = side == Side::Source
                && meta
                    .downcast_ref::<gst::ReferenceTimestampMeta>()
                    .is_some_and(|m| crate::stamp::is_stamp(m));
            std::ops::ControlFlow::Continue(if layout || stamp { Keep } else { Remove })
        });
    }

    fn spare(inner: &Inner) -> Result<gst::Buffer, gst::FlowError> {
        let t = inner.slots.lock().unwrap()[0].tensor.clone();
        let size = crate::caps::image_bytes(&t).map_err(|_| gst::FlowError::Error)?;
        let mut buffer = gst::Buffer::with_size(size).map_err(|_| gst::FlowError::Error)?;
        crate::caps::add_video_meta(buffer.get_mut().unwrap(), &t)
            .map_err(|_| gst::FlowError::Error)?;
        Ok(buffer)
    }
}

glib::wrapper! {
    /// A pool over a channel's slots (see the module docs).
    pub struct SlotPool(ObjectSubclass<imp::SlotPool>) @extends gst::BufferPool, gst::Object;
}

impl SlotPool {
    /// A pool lending `tensors` (the channel's pool, shm or DMA-BUF, in slot order) as
    /// `lender` decides, for the element on `side`.
    pub fn new(
        tensors: Vec<TensorDyn>,
        lender: Box<dyn Lender>,
        side: Side,
    ) -> Result<SlotPool, String> {
        let slots = tensors
            .into_iter()
            .map(|t| {
                let buffer = slot_buffer(&t, side)?;
                Ok(imp::Slot::new(t, buffer))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let pool: SlotPool = glib::Object::new();
        let inner = imp::Inner {
            lender,
            side,
            slots: Mutex::new(slots),
            flushing: AtomicBool::new(false),
            meta_required: AtomicBool::new(false),
        };
        if pool.imp().inner.set(inner).is_err() {
            unreachable!("a new pool has no slots yet");
        }
        Ok(pool)
    }

    /// Lends the slots only to users that lay frames out by `GstVideoMeta` (the slots' layout
    /// is not GStreamer's default for their caps).
    pub fn require_video_meta(&self) {
        if let Some(inner) = self.imp().inner.get() {
            inner.meta_required.store(true, Ordering::SeqCst);
        }
    }

    /// The slot `buffer` is the buffer of, if it is one of this pool's, and whether the slot's
    /// memory is still in it (`false`: an element replaced it with a copy it wrote instead).
    pub fn slot_of(&self, buffer: &gst::BufferRef) -> Option<(usize, bool)> {
        let slots = self.imp().inner.get()?.slots.lock().unwrap();
        let slot = imp::slot_at(&slots, buffer.as_ptr() as usize)?;
        Some((slot, imp::holds(buffer, &slots[slot].memories)))
    }

    /// The tensor behind `slot`.
    pub fn tensor(&self, slot: usize) -> Option<TensorDyn> {
        let slots = self.imp().inner.get()?.slots.lock().unwrap();
        slots.get(slot).map(|s| s.tensor.clone())
    }

    /// How many slots the pool has.
    pub fn slots(&self) -> usize {
        let inner = self.imp().inner.get();
        inner.map_or(0, |i| i.slots.lock().unwrap().len())
    }

    /// Adds a slot over `tensor` (the channel's pool grew: `Producer::add`); returns its index.
    pub fn add_slot(&self, tensor: TensorDyn) -> Result<usize, String> {
        let inner = self.imp().inner.get().ok_or("the pool has no slots")?;
        let buffer = slot_buffer(&tensor, inner.side)?;
        let mut slots = inner.slots.lock().unwrap();
        slots.push(imp::Slot::new(tensor, buffer));
        Ok(slots.len() - 1)
    }

    /// Bytes of a slot's image: the buffer size the pool lends.
    pub fn slot_size(&self) -> Option<usize> {
        self.tensor(0)
            .and_then(|t| crate::caps::image_bytes(&t).ok())
    }

    /// Activates the pool for `caps` with its own slots as the buffers.
    pub fn activate(&self, caps: &gst::Caps) -> Result<(), String> {
        let size = self.slot_size().unwrap_or(0);
        let mut config = self.config();
        let slots = self.slots() as u32;
        config.set_params(Some(caps), size as u32, slots, slots);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META);
        self.set_config(config).map_err(|e| e.to_string())?;
        self.set_active(true).map_err(|e| e.to_string())
    }
}

/// The buffer of one slot: fd memory over the tensor's fd (DMA-BUF memory for a DMA-BUF, so
/// downstream importers see one), covering the image, with its `GstVideoMeta`. An image in a
/// buffer per plane gets a memory per plane, each over its own fd, the planes one after
/// another in the buffer as `GstVideoMeta` says. The source's memories are read-only.
fn slot_buffer(t: &TensorDyn, side: Side) -> Result<gst::Buffer, String> {
    let read_only = side == Side::Source;
    // The memories (fd, start there, bytes) and each plane's offset in the buffer.
    let (pieces, offsets): (Vec<_>, Vec<usize>) = match t.plane_fds() {
        Some(planes) => {
            let table = t.plane_table().map_err(|e| e.to_string())?;
            let mut at = 0;
            planes
                .into_iter()
                .zip(table)
                .map(|((fd, start), plane)| {
                    at += plane.size;
                    ((fd, start, plane.size), at - plane.size)
                })
                .unzip()
        }
        None => {
            let fd = t
                .as_fd()
                .ok_or_else(|| format!("{} memory has no fd to lend", t.memory()))?;
            let whole = (fd, t.byte_offset(), crate::caps::image_bytes(t)?);
            (vec![whole], crate::caps::layout(t)?.0)
        }
    };
    let mut buffer = gst::Buffer::new();
    let b = buffer.get_mut().unwrap();
    for (fd, start, size) in pieces {
        b.append_memory(fd_memory(t, fd, start, size, read_only)?);
    }
    crate::caps::add_video_meta_at(b, t, &offsets)?;
    Ok(buffer)
}

/// Fd memory over `size` bytes at `start` of `fd`, one of `t`'s (DMA-BUF memory for a DMA-BUF),
/// mapped once for the pool's life; marked read-only when `read_only`.
#[allow(unsafe_code)] // fd memory over an fd the pool keeps open
fn fd_memory(
    t: &TensorDyn,
    fd: std::os::fd::BorrowedFd<'_>,
    start: usize,
    size: usize,
    read_only: bool,
) -> Result<gst::Memory, String> {
    use std::os::fd::AsRawFd;
    // KEEP_MAPPED: mapped once for the pool's life, not mmapped and unmapped per frame.
    let flags =
        gst_allocators::FdMemoryFlags::DONT_CLOSE | gst_allocators::FdMemoryFlags::KEEP_MAPPED;
    // SAFETY: the fd stays open while the memory lives: the pool keeps the tensor that owns it
    // (`Inner::tensors`), and every buffer of the pool, out or at rest, keeps the pool alive.
    // DONT_CLOSE leaves closing it to the tensor.
    let mut memory = unsafe {
        match t.memory() {
            TensorMemory::DmaBuf => gst_allocators::DmaBufAllocator::new().alloc_with_flags(
                fd.as_raw_fd(),
                start + size,
                flags,
            ),
            _ => gst_allocators::FdAllocator::new().alloc(fd.as_raw_fd(), start + size, flags),
        }
    }
    .map_err(|e| format!("wrapping the slot's fd: {e}"))?;
    let m = memory.get_mut().unwrap();
    m.resize(start..start + size);
    if read_only {
        // SAFETY: sets a flag bit of a memory this function alone holds; GStreamer reads
        // GST_MEMORY_FLAG_READONLY when a writer maps it, and then copies.
        unsafe {
            (*m.as_mut_ptr()).mini_object.flags |= gst::ffi::GST_MEMORY_FLAG_READONLY;
        }
    }
    Ok(memory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwtensor::ImageSpec;
    use hwtensor::{CpuAccess, DType, PixelFormat};

    /// Lends slot 0 every time, as a channel whose other slots are out would.
    struct FirstSlot;

    impl Lender for FirstSlot {
        fn next_slot(&self, _flushing: &AtomicBool) -> Result<Lent, gst::FlowError> {
            Ok(Lent::Slot(0))
        }
        fn returned(&self, _slot: usize) {}
        fn unusable(&self, _slot: usize) {}
    }

    /// An active pool of one small RGBA shm slot for `side`.
    fn one_slot_pool(side: Side) -> SlotPool {
        gst::init().unwrap();
        let shm = Some(TensorMemory::Shm);
        let rw = CpuAccess::ReadWrite;
        let t = TensorDyn::image(
            &ImageSpec::new(PixelFormat::Rgba, 64, 32),
            DType::U8,
            shm,
            rw,
        )
        .unwrap();
        let pool = SlotPool::new(vec![t.clone()], Box::new(FirstSlot), side).unwrap();
        pool.activate(&crate::caps::caps_of(&t).unwrap()).unwrap();
        pool
    }

    /// The buffer's `GstReferenceTimestampMeta`s: (reference caps, ns).
    fn stamps_of(buffer: &gst::BufferRef) -> Vec<(String, u64)> {
        buffer
            .iter_meta::<gst::ReferenceTimestampMeta>()
            .map(|m| (m.reference().to_string(), m.timestamp().nseconds()))
            .collect()
    }

    #[test]
    fn a_slot_buffer_lent_again_has_none_of_its_last_frames_stamps_and_keeps_its_layout() {
        let pool = one_slot_pool(Side::Sink);
        let mut first = pool.acquire_buffer(None).unwrap();
        crate::stamp::stamp(first.get_mut().unwrap(), 1, 2);
        let stamp = gst::Caps::new_empty_simple("timestamp/x-hwtensor-test");
        let at = gst::ClockTime::from_nseconds(7);
        let b = first.get_mut().unwrap();
        b.set_pts(at);
        gst::ReferenceTimestampMeta::add(b, &stamp, at, gst::ClockTime::NONE);
        drop(first); // back to the pool
        let again = pool.acquire_buffer(None).unwrap();
        assert_eq!(
            pool.slot_of(&again),
            Some((0, true)),
            "the same slot, its memory"
        );
        let stamps = again.iter_meta::<gst::ReferenceTimestampMeta>().count();
        assert_eq!(
            stamps, 0,
            "the last frame's stamp came back with the buffer"
        );
        assert_eq!(
            again.pts(),
            None,
            "the last frame's time came back with the buffer"
        );
        assert!(
            again.meta::<gst_video::VideoMeta>().is_some(),
            "the layout went"
        );
        drop(again);
        pool.set_active(false).unwrap();
    }

    #[test]
    fn the_sources_slot_buffer_keeps_only_its_own_stamps_and_the_next_frame_sets_them_in_place() {
        let pool = one_slot_pool(Side::Source);
        let mut first = pool.acquire_buffer(None).unwrap();
        let b = first.get_mut().unwrap();
        crate::stamp::stamp(b, 1, 2);
        let other = gst::Caps::new_empty_simple("timestamp/x-hwtensor-test");
        gst::ReferenceTimestampMeta::add(b, &other, gst::ClockTime::ZERO, gst::ClockTime::NONE);
        let stamp = |caps: &str, at: u64| (caps.to_string(), at);
        let (sent, received) = (
            crate::stamp::SENT_TIME_CAPS,
            crate::stamp::RECEIVED_TIME_CAPS,
        );
        drop(first);
        let mut again = pool.acquire_buffer(None).unwrap();
        assert_eq!(
            stamps_of(&again),
            [stamp(sent, 1), stamp(received, 2)],
            "the source's own two stamps stay, another's goes"
        );
        crate::stamp::stamp(again.get_mut().unwrap(), 3, 4);
        assert_eq!(
            stamps_of(&again),
            [stamp(sent, 3), stamp(received, 4)],
            "the next frame's times replace the last's, in the same two metas"
        );
        assert!(again.meta::<gst_video::VideoMeta>().is_some());
        drop(again);
        pool.set_active(false).unwrap();
    }
}
