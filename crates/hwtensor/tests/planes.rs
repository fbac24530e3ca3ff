//! Images whose planes arrive in separate fds, laid out as V4L2 MPLANE (`NM12`: one buffer per
//! plane) and libcamera (one buffer, a plane list of offsets) deliver them. Memfds stand in for
//! the DMA-BUFs: the mapping is the same, and the DMA-BUF sync brackets are the single-fd ones.

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hwtensor::blob::{self, export_inline, import_inline, Transport, HEADER_LEN};
use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
use hwtensor::{
    CpuAccess, Error, ImageSpec, PixelFormat, PlaneFd, Tensor, TensorDyn, TensorMemory,
};

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
    nv12m_at(h, stride, 0)
}

/// As [`nv12m`], the chroma rows `chroma_at` bytes into their fd (a driver's `data_offset`).
fn nv12m_at(h: usize, stride: usize, chroma_at: usize) -> (OwnedFd, OwnedFd) {
    let (y, uv) = (memfd(stride * h), memfd(chroma_at + stride * h / 2));
    write_at(&y, 0, &(0..stride * h).map(luma).collect::<Vec<_>>());
    let rows: Vec<u8> = (0..stride * h / 2).map(chroma).collect();
    write_at(&uv, chroma_at, &rows);
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
    let t = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap();
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
fn an_image_in_two_buffers_also_travels_inline_and_copies_like_any_image() {
    let (w, h) = (1280usize, 720usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let t = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap();
    let expected = t.to_vec().unwrap();
    let back = import_inline(&export_inline(&TensorDyn::from(t.clone())).unwrap())
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert_eq!(back.to_vec().unwrap(), expected);
    assert_eq!(back.format(), Some(PixelFormat::Nv12));
    let copy = t.to_memory(TensorMemory::Mem).unwrap();
    assert_eq!(copy.to_vec().unwrap(), expected);
}

/// Where the chroma rows start in their fd in the by-reference tests: a page in, as drivers
/// that put a header first have them (a plane in its own fd must start on a page).
const CHROMA_AT: usize = 8192;

/// A 640x480 NV12M image over duplicates of `y` and `uv` (chroma at [`CHROMA_AT`]).
fn nv12m_image(y: &OwnedFd, uv: &OwnedFd) -> Tensor<u8> {
    let planes = vec![
        PlaneFd::new(dup(y), 0, 640),
        PlaneFd::new(dup(uv), CHROMA_AT, 640),
    ];
    Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, 640, 480), RW)
        .unwrap()
}

fn owned(fds: &[BorrowedFd<'_>]) -> Vec<OwnedFd> {
    fds.iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect()
}

#[test]
fn an_image_in_two_buffers_travels_by_reference_with_an_fd_per_plane_as_the_same_memory() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m_at(h, w, CHROMA_AT);
    let t = nv12m_image(&y, &uv);
    let sent = TensorDyn::from(t.clone());
    let (bytes, fds) = blob::export(&sent, Transport::Reference).unwrap();
    assert_eq!(fds.len(), 2, "one fd per plane");
    let back = blob::import(&bytes, owned(&fds))
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert_eq!(back.format(), Some(PixelFormat::Nv12));
    assert_eq!(
        (back.shape(), back.strides(), back.row_stride()),
        (t.shape(), t.strides(), t.row_stride())
    );
    assert_eq!(back.to_vec().unwrap(), t.to_vec().unwrap());
    {
        let mut m = back.map_write().unwrap();
        m[5] = 3;
        m[w * h + 6] = 4;
    }
    assert_eq!(
        read_at(&y, 5, 1),
        [3],
        "the receiver wrote the sender's luma"
    );
    assert_eq!(read_at(&uv, CHROMA_AT + 6, 1), [4], "and its chroma");
}

#[test]
fn a_channel_lends_an_image_in_two_buffers_to_its_consumer_without_a_copy() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m_at(h, w, CHROMA_AT);
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(vec![nv12m_image(&y, &uv).into()]).unwrap();
    producer.attach(a).unwrap();
    let mut consumer = consumer.join().unwrap();
    let slot = producer.acquire(Duration::from_secs(5)).unwrap();
    write_at(&uv, CHROMA_AT, &[77]); // the producer's camera writes the next frame
    producer.send(slot, FrameMeta::new(1, 0)).unwrap();
    let frame = consumer.recv(Wait::For(Duration::from_secs(5))).unwrap();
    let m = frame
        .tensor()
        .as_tensor::<u8>()
        .unwrap()
        .map_read()
        .unwrap();
    assert_eq!((m[0], m[1]), (luma(0), luma(1)));
    assert_eq!(
        m[w * h],
        77,
        "the consumer reads the producer's chroma buffer"
    );
}

#[test]
fn only_the_whole_of_an_image_in_two_buffers_travels_by_reference() {
    let (y, uv) = nv12m_at(480, 640, CHROMA_AT);
    let t = nv12m_image(&y, &uv);
    let crop = t.repoint(&[64, 640]).unwrap(); // the first 64 luma rows
    let err = blob::export(&TensorDyn::from(crop.clone()), Transport::Reference).unwrap_err();
    assert!(err.to_string().contains("whole image"), "{err}");
    let inline = import_inline(&export_inline(&TensorDyn::from(crop.clone())).unwrap()).unwrap();
    assert_eq!(
        inline.into_tensor::<u8>().unwrap().to_vec().unwrap(),
        crop.to_vec().unwrap()
    );
}

/// Byte offset of plane `k`'s record in a blob of a rank-`rank` tensor.
fn plane_record_at(rank: usize, k: usize) -> usize {
    HEADER_LEN + 2 * 8 * rank + 32 * k
}

#[test]
fn a_blob_with_an_fd_per_plane_that_lies_about_its_fds_is_refused() {
    let (y, uv) = nv12m_at(480, 640, CHROMA_AT);
    let t = TensorDyn::from(nv12m_image(&y, &uv));
    let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    let import = |b: &[u8], fds: Vec<OwnedFd>| blob::import(b, fds).map(|t| t.shape().to_vec());
    assert!(import(&bytes, owned(&fds[..1])).is_err(), "one fd of two");
    let mut three = owned(&fds);
    three.push(dup(&y));
    assert!(import(&bytes, three).is_err(), "three fds for two planes");
    let swapped = vec![dup(&uv), dup(&y)];
    assert!(
        import(&bytes, swapped).is_err(),
        "the chroma fd is too short for the luma"
    );
    let short = memfd(CHROMA_AT + 100);
    let err = import(&bytes, vec![dup(&y), short]).unwrap_err();
    assert!(matches!(err, Error::TooSmall { .. }), "{err}");
    let (pipe, _w) = rustix::pipe::pipe().unwrap();
    assert!(
        import(&bytes, vec![dup(&y), pipe]).is_err(),
        "a pipe for a plane"
    );
    let chroma = plane_record_at(t.shape().len(), 1);
    let mut wrong_index = bytes.clone();
    wrong_index[chroma..chroma + 4].copy_from_slice(&0u32.to_le_bytes());
    let err = import(&wrong_index, owned(&fds)).unwrap_err();
    assert!(err.to_string().contains("plane k is in fd k"), "{err}");
    let mut off_page = bytes.clone();
    off_page[chroma + 8..chroma + 16].copy_from_slice(&100u64.to_le_bytes());
    let err = import(&off_page, owned(&fds)).unwrap_err();
    assert!(err.to_string().contains("start on a page"), "{err}");
    let mut dmabuf = bytes.clone();
    dmabuf[17] = TensorMemory::DmaBuf.code();
    assert!(
        import(&dmabuf, owned(&fds)).is_err(),
        "memfds claimed as DMA-BUFs"
    );
    let mut no_bit = bytes.clone();
    no_bit[13] &= !1; // bit 8
    let err = import(&no_bit, owned(&fds)).unwrap_err();
    assert!(err.to_string().contains("plane fds bit"), "{err}");
}

#[test]
fn every_hostile_word_of_a_blob_with_an_fd_per_plane_is_refused() {
    let (y, uv) = nv12m_at(480, 640, CHROMA_AT);
    let t = TensorDyn::from(nv12m_image(&y, &uv));
    let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    // A plane's offset in its fd may be any that fits: its words are the receiver's to map.
    let offsets: Vec<usize> = (0..2)
        .flat_map(|k| {
            let at = plane_record_at(t.shape().len(), k) + 8;
            [at, at + 4]
        })
        .collect();
    let words = (0..bytes.len())
        .step_by(4)
        .filter(|at| !offsets.contains(at));
    let mutations = common::hostile_mutations(&bytes, words);
    for (at, v, b) in &mutations {
        let result = blob::import(b, owned(&fds));
        assert!(result.is_err(), "word at {at} set to {v:#x} was accepted");
    }
    assert!(mutations.len() > 150, "{} mutations", mutations.len());
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
    let t = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap();
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
    let err = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap_err();
    assert!(matches!(err, Error::Image(_)), "{err}");
    assert!(err.to_string().contains("1920x1088"), "{err}");
    // The same frame with rows padded to 2048 bytes joins without a copy.
    let (y, uv) = nv12m(h, 2048);
    let planes = vec![PlaneFd::new(y, 0, 2048), PlaneFd::new(uv, 0, 2048)];
    let t = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap();
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
    let err = Tensor::<u8>::image_from_planes(one, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap_err();
    assert!(
        err.to_string().contains("2 plane(s); 1 were given"),
        "{err}"
    );
    // Chroma rows closer than a chroma row's bytes (a stride of its own may be wider).
    let skewed = vec![
        PlaneFd::new(dup(&y), 0, w),
        PlaneFd::new(dup(&uv), 0, w - 64),
    ];
    let err = Tensor::<u8>::image_from_planes(skewed, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
    let none =
        Tensor::<u8>::image_from_planes(Vec::new(), &ImageSpec::new(PixelFormat::Nv12, w, h), RW);
    assert!(none.is_err());
}

#[test]
fn a_plane_whose_fd_is_short_or_not_memory_is_refused() {
    let (w, h) = (640usize, 480usize);
    let y = memfd(w * h);
    let short = memfd(w * h / 4);
    let planes = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(short, 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap_err();
    assert!(
        matches!(err, Error::TooSmall { needed, .. } if needed == w * h / 2),
        "{err}"
    );
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let planes = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(r, 0, w)];
    let err = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap_err();
    assert!(matches!(err, Error::Fd(_)), "{err}");
}

#[test]
fn a_read_only_import_of_planes_refuses_write_maps() {
    let (w, h) = (640usize, 480usize);
    let (y, uv) = nv12m(h, w);
    let planes = vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)];
    let t = Tensor::<u8>::image_from_planes(
        planes,
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        CpuAccess::Read,
    )
    .unwrap();
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
    let t = Tensor::<u8>::image_from_planes(planes, &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
        .unwrap();
    let gpu = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        Some(TensorMemory::Gpu),
        RW,
    )
    .unwrap();
    gpu.copy_from(&t).unwrap();
    assert_eq!(gpu.to_vec().unwrap(), t.to_vec().unwrap());
    t.copy_from(&gpu).unwrap();
}

#[test]
fn a_frame_that_cannot_be_joined_in_place_is_copied_when_the_caller_asks() {
    let (w, h) = (1920usize, 1080usize);
    let (y, uv) = nv12m(h, w);
    let planes = || vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(dup(&uv), 0, w)];
    let err =
        Tensor::<u8>::image_from_planes(planes(), &ImageSpec::new(PixelFormat::Nv12, w, h), RW)
            .unwrap_err();
    assert!(
        err.to_string().contains("image_copied_from_planes"),
        "{err}"
    );
    let t = Tensor::<u8>::image_copied_from_planes(
        planes(),
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        None,
    )
    .unwrap();
    let m = t.map_read().unwrap();
    assert!((0..w * h).all(|i| m[i] == luma(i)), "the luma rows");
    assert!(
        (0..w * h / 2).all(|i| m[w * h + i] == chroma(i)),
        "the chroma rows"
    );
    drop(m);
    let short = vec![PlaneFd::new(dup(&y), 0, w), PlaneFd::new(memfd(16), 0, w)];
    let err = Tensor::<u8>::image_copied_from_planes(
        short,
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        None,
    );
    assert!(err.is_err(), "a chroma fd too small for its plane");
    if common::device_or_skip(test_name!()).is_none() {
        return;
    }
    let gpu = Tensor::<u8>::image_copied_from_planes(
        planes(),
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        Some(TensorMemory::Gpu),
    )
    .unwrap();
    assert_eq!(gpu.to_vec().unwrap(), t.to_vec().unwrap());
}
