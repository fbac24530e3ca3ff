//! Fuzzes the geometry upstream's `GstVideoMeta` claims for a frame `hwtensorsink` copies:
//! any plane offsets and strides over system or fd memory of any size, for a packed, a
//! three-plane and a two-plane format. The copy must refuse what reaches past the memory,
//! never read it (the address sanitizer watches every read).
#![no_main]

use std::os::fd::{AsFd, IntoRawFd, OwnedFd};
use std::sync::OnceLock;

use gst::glib::translate::IntoGlib;
use gst_video::{VideoFormat, VideoInfo};
use hwtensor::{ImageSpec, CpuAccess, DType, PixelFormat, TensorDyn, TensorMemory};
use libfuzzer_sys::fuzz_target;

/// The most bytes a fuzzed buffer holds.
const MAX_BYTES: usize = 1 << 18;

struct Setup {
    /// Per format: the caps' video info and a channel slot of that picture.
    pictures: Vec<(VideoInfo, TensorDyn)>,
    /// A memfd of `MAX_BYTES`, duplicated for each fd memory.
    memfd: OwnedFd,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        gst::init().unwrap();
        let pictures = [
            (VideoFormat::Bgrx, PixelFormat::Bgrx, 64, 48),
            (VideoFormat::I420, PixelFormat::I420, 66, 50),
            (VideoFormat::Nv12, PixelFormat::Nv12, 34, 18),
        ]
        .into_iter()
        .map(|(gst_format, format, w, h)| {
            let info = VideoInfo::builder(gst_format, w, h).build().unwrap();
            let slot = TensorDyn::image(&ImageSpec::new(format, w as usize, h as usize), DType::U8, Some(TensorMemory::Mem), CpuAccess::ReadWrite)
            .unwrap();
            (info, slot)
        })
        .collect();
        let memfd = rustix::fs::memfd_create("meta-fuzz", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&memfd, MAX_BYTES as u64).unwrap();
        Setup { pictures, memfd }
    })
}

/// A buffer of `size` bytes: fd memory over the memfd, or system memory.
fn buffer(setup: &Setup, size: usize, fd_memory: bool) -> Option<gst::Buffer> {
    if !fd_memory {
        return gst::Buffer::with_size(size).ok();
    }
    let fd = setup.memfd.as_fd().try_clone_to_owned().ok()?;
    let allocator = gst_allocators::FdAllocator::new();
    // SAFETY: a duplicate of a memfd of MAX_BYTES (>= size), given to the memory to close.
    let memory = unsafe {
        allocator.alloc(fd.into_raw_fd(), size, gst_allocators::FdMemoryFlags::NONE)
    }
    .ok()?;
    let mut buffer = gst::Buffer::new();
    buffer.get_mut()?.append_memory(memory);
    Some(buffer)
}

fuzz_target!(|data: &[u8]| {
    let setup = setup();
    let [which, s0, s1, flags, rest @ ..] = data else {
        return;
    };
    let (info, slot) = &setup.pictures[usize::from(*which) % setup.pictures.len()];
    let size = usize::from(u16::from_le_bytes([*s0, *s1])) * 4 % (MAX_BYTES + 1);
    let Some(mut buffer) = buffer(setup, size, flags & 1 == 1) else {
        return;
    };
    let planes = info.n_planes() as usize;
    let word = |i: usize| {
        let b = rest.get(i * 4..i * 4 + 4).unwrap_or(&[0; 4]);
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    let offsets: Vec<usize> = (0..planes).map(|p| word(2 * p) as usize).collect();
    let strides: Vec<i32> = (0..planes).map(|p| word(2 * p + 1) as i32).collect();
    let Some(b) = buffer.get_mut() else { return };
    // SAFETY: a buffer we hold mutably; `planes` offsets and strides, copied by the call.
    let meta = unsafe {
        gst_video::ffi::gst_buffer_add_video_meta_full(
            b.as_mut_ptr(),
            gst_video::VideoFrameFlags::empty().into_glib(),
            info.format().into_glib(),
            info.width(),
            info.height(),
            planes as u32,
            offsets.as_ptr() as *mut _,
            strides.as_ptr() as *mut _,
        )
    };
    if meta.is_null() {
        return;
    }
    let _ = gsthwtensor::fuzzing::into_slot(&buffer, info, slot);
});
