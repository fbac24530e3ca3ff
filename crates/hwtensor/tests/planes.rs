//! Images whose planes arrive in separate fds, laid out as V4L2 MPLANE (`NM12`: one buffer per
//! plane) and libcamera (one buffer, a plane list of offsets) deliver them. Memfds stand in for
//! the DMA-BUFs: the mapping is the same, and the DMA-BUF sync brackets are the single-fd ones.

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::OwnedFd;

use hwtensor::blob::{export_inline, import_inline};
use hwtensor::{CpuAccess, Error, PixelFormat, PlaneFd, Tensor, TensorDyn, TensorMemory};

const RW: CpuAccess = CpuAccess::ReadWrite;

/// A sealable memfd of `len` bytes.
fn memfd(len: usize) -> OwnedFd {
    let fd = rustix::fs::memfd_create(
        "plane",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, len as u64).unwrap();
    fd
}

fn write_at(fd: &OwnedFd, offset: usize, bytes: &[u8]) {
    assert_eq!(
        rustix::io::pwrite(fd, bytes, offset as u64).unwrap(),
        bytes.len()
    );
}

fn read_at(fd: &OwnedFd, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    assert_eq!(rustix::io::pread(fd, &mut v, offset as u64).unwrap(), len);
    v
}

fn luma(i: usize) -> u8 {
    (i % 251) as u8
}

fn chroma(i: usize) -> u8 {
    255 - (i % 241) as u8
}

/// An NV12M frame `h` rows high as a V4L2 driver fills it: luma in one fd, chroma in another,
/// both at 0, rows `stride` bytes apart.
fn nv12m(h: usize, stride: usize) -> (OwnedFd, OwnedFd) {
    let (y, uv) = (memfd(stride * h), memfd(stride * h / 2));
    write_at(&y, 0, &(0..stride * h).map(luma).collect::<Vec<_>>());
    write_at(&uv, 0, &(0..stride * h / 2).map(chroma).collect::<Vec<_>>());
    (y, uv)
}

fn dup(fd: &OwnedFd) -> OwnedFd {
    fd.try_clone().unwrap()
}

#[test]
fn an_nv12m_frame_in_two_buffers_is_one_image_without_a_copy() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(dup(&uv), 0, w)];
    let t = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap();
    assert_eq!(t.shape(), &[h * 3 / 2, w]);
    assert_eq!(t.memory(), TensorMemory::Shm);
    {
        let m = t.map_read().unwrap();
        assert!((0..w * h).all(|i| m[i] == luma(i)), "the luma rows");
        assert!(
            (0..w * h / 2).all(|i| m[w * h + i] == chroma(i)),
            "the chroma rows"
        );
    }
    // Writes through the image land in the producer's buffers: the same memory.
    {
        let mut m = t.map_write().unwrap();
        m[7] = 1;
        m[w * h + 9] = 2;
    }
    assert_eq!(read_at(&y, 7, 1), [1]);
    assert_eq!(read_at(&uv, 9, 1), [2]);
    assert!(t.as_fd().is_none(), "no single fd holds the image");
}

#[test]
fn an_image_in_two_buffers_travels_inline_and_copies_like_any_image() {
    let (w, h) = (1280usize, 720usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let t = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap();
    let expected = t.to_vec().unwrap();
    let back = import_inline(&export_inline(&TensorDyn::from(t.clone())).unwrap())
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert_eq!(back.to_vec().unwrap(), expected);
    assert_eq!(back.format(), Some(PixelFormat::Nv12));
    let copy = t.to_memory(TensorMemory::Mem).unwrap();
    assert_eq!(copy.to_vec().unwrap(), expected);
    let dynamic = TensorDyn::from(t);
    let sent = hwtensor::blob::export(&dynamic, hwtensor::blob::Transport::Reference);
    assert!(sent.is_err(), "by reference needs one fd");
}

#[test]
fn planes_of_one_buffer_as_libcamera_lists_them_import_as_that_buffer() {
    // One buffer after a 4096-byte header, the chroma rows right after the luma rows, the plane
    // list naming the same fd twice (as libcamera's FrameBuffer::Plane does).
    let (w, h, stride, at) = (64usize, 16usize, 128usize, 4096usize);
    let fd = memfd(at + stride * h * 3 / 2);
    write_at(&fd, at, &(0..stride * h).map(luma).collect::<Vec<_>>());
    write_at(
        &fd,
        at + stride * h,
        &(0..stride * h / 2).map(chroma).collect::<Vec<_>>(),
    );
    let planes = vec![
        PlaneFd::new(dup(&fd), at, stride),
        PlaneFd::new(dup(&fd), at + stride * h, stride),
    ];
    let t = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap();
    assert!(t.as_fd().is_some(), "one buffer, handed on by its fd");
    assert_eq!(t.byte_offset(), at);
    let m = t.map_strided_read().unwrap();
    let rows: Vec<&[u8]> = m.rows().collect();
    assert_eq!(rows[0][5], luma(5));
    assert_eq!(rows[h + 1][3], chroma(stride + 3));
}

#[test]
fn a_chroma_buffer_that_cannot_start_on_a_page_is_refused_naming_the_fix() {
    let (w, h) = (1920usize, 1080usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(matches!(err, Error::Image(_)), "{err}");
    assert!(err.to_string().contains("1920x1088"), "{err}");
    // The same frame with rows padded to 2048 bytes joins without a copy.
    let (y, uv) = nv12m(h, 2048);
    let planes = vec![PlaneFd::new(y, 0, 2048), PlaneFd::new(uv, 0, 2048)];
    let t = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap();
    assert_eq!(t.row_stride(), Some(2048));
    let rows: Vec<Vec<u8>> = t
        .map_strided_read()
        .unwrap()
        .rows()
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(rows[h][..4], [chroma(0), chroma(1), chroma(2), chroma(3)]);
}

#[test]
fn a_plane_list_that_does_not_describe_the_format_is_refused_by_name() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m(h, w);
    let one = vec![PlaneFd::new(dup(&y), 0, w)];
    let err = Tensor::<u8>::image_from_planes(one, w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(
        err.to_string().contains("2 plane(s); 1 were given"),
        "{err}"
    );
    // Chroma rows closer than a chroma row's bytes (a stride of its own may be wider).
    let skewed = vec![
        PlaneFd::new(dup(&y), 0, w),
        PlaneFd::new(dup(&uv), 0, w - 64),
    ];
    let err = Tensor::<u8>::image_from_planes(skewed, w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
    let none = Tensor::<u8>::image_from_planes(Vec::new(), w, h, PixelFormat::Nv12, RW);
    assert!(none.is_err());
}

#[test]
fn a_plane_whose_fd_is_short_or_not_memory_is_refused() {
    let (w, h) = (640usize, 480usize);
    let y = memfd(w * h);
    let short = memfd(w * h / 4);
    let planes = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(short, 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(
        matches!(err, Error::TooSmall { needed, .. } if needed == w * h / 2),
        "{err}"
    );
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let planes = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(r, 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(matches!(err, Error::Fd(_)), "{err}");
}

#[test]
fn a_read_only_import_of_planes_refuses_write_maps() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let t =
        Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, CpuAccess::Read).unwrap();
    assert!(matches!(t.map_write(), Err(Error::AccessDenied { .. })));
    assert!(t.map_read().is_ok());
}

#[test]
fn an_image_in_two_buffers_uploads_to_gpu_memory_and_back() {
    if common::device_or_skip(test_name!()).is_none() {
        return;
    }
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let t = Tensor::<u8>::image_from_planes(planes, w, h, PixelFormat::Nv12, RW).unwrap();
    let gpu = Tensor::<u8>::image(w, h, PixelFormat::Nv12, Some(TensorMemory::Gpu), RW).unwrap();
    gpu.copy_from(&t).unwrap();
    assert_eq!(gpu.to_vec().unwrap(), t.to_vec().unwrap());
    t.copy_from(&gpu).unwrap();
}

#[test]
fn a_frame_that_cannot_be_joined_in_place_is_copied_when_the_caller_asks() {
    let (w, h) = (1920usize, 1080usize);
    let (y, uv) = nv12m(h, w);
    let planes = || vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(dup(&uv), 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes(), w, h, PixelFormat::Nv12, RW).unwrap_err();
    assert!(
        err.to_string().contains("image_copied_from_planes"),
        "{err}"
    );
    let t =
        Tensor::<u8>::image_copied_from_planes(planes(), w, h, PixelFormat::Nv12, None).unwrap();
    let m = t.map_read().unwrap();
    assert!((0..w * h).all(|i| m[i] == luma(i)), "the luma rows");
    assert!(
        (0..w * h / 2).all(|i| m[w * h + i] == chroma(i)),
        "the chroma rows"
    );
    drop(m);
    let short = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(memfd(16), 0, w)];
    let err = Tensor::<u8>::image_copied_from_planes(short, w, h, PixelFormat::Nv12, None);
    assert!(err.is_err(), "a chroma fd too small for its plane");
    if common::device_or_skip(test_name!()).is_none() {
        return;
    }
    let gpu = Tensor::<u8>::image_copied_from_planes(
        planes(),
        w,
        h,
        PixelFormat::Nv12,
        Some(TensorMemory::Gpu),
    )
    .unwrap();
    assert_eq!(gpu.to_vec().unwrap(), t.to_vec().unwrap());
}
