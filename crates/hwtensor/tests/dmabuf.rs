//! DMA-BUF memory for real: tensors from the kernel's dma-heap, and DMA-BUFs a driver made
//! (udmabuf, which turns memfd pages into a DMA-BUF, stands in for a camera or a decoder).
//! Our machines have no dma-heap and no udmabuf, so these tests run in `scripts/dma-vm`'s
//! virtual machine (the test command's DMA-BUF leg) and skip elsewhere;
//! `HWTENSOR_TEST_REQUIRE_DMABUF=1` makes a skip a failure. The channel's DMA-BUF frames
//! across processes are in `stream.rs`.

#![cfg(target_os = "linux")]
// udmabuf's ioctl has no safe wrapper.
#![allow(unsafe_code)]

mod common;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use hwtensor::{
    CpuAccess, DType, Direction, ImageSpec, PixelFormat, PlaneFd, Tensor, TensorDyn, TensorMemory,
};

/// A DMA-BUF of several pages and a part page: the brackets and maps must cover the tail.
const LEN: usize = 3 * 4096 + 100;
/// Where udmabuf lives.
const UDMABUF: &str = "/dev/udmabuf";

fn pattern(i: usize) -> u8 {
    (i * 7 + 3) as u8
}

/// What `/proc/self/fd` shows for `fd`: a DMA-BUF reads `/dmabuf:<name>`, a memfd `/memfd:...`,
/// so a test can tell a real DMA-BUF from a stand-in.
fn fd_link(fd: BorrowedFd<'_>) -> String {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `struct udmabuf_create` of linux/udmabuf.h.
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::write::<UdmabufCreate>(b'u', 0x42);
/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 1;

/// A memfd of `len` bytes (whole pages, as udmabuf needs) sealed against shrinking (udmabuf
/// refuses one that could shrink under the device), and the DMA-BUF udmabuf makes of its
/// pages; `None` (a skip) where there is no udmabuf.
fn udmabuf(test: &str, len: usize) -> Option<(OwnedFd, OwnedFd)> {
    let device = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(UDMABUF)
    {
        Ok(f) => f,
        Err(e) => {
            common::dmabuf_part_or_skip(test, Some(format!("no {UDMABUF}: {e}")));
            return None;
        }
    };
    let memfd = rustix::fs::memfd_create(
        "udmabuf-pages",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&memfd, len as u64).unwrap();
    rustix::fs::fcntl_add_seals(&memfd, rustix::fs::SealFlags::SHRINK).unwrap();
    let create = UdmabufCreate {
        memfd: memfd.as_raw_fd() as u32,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size: len as u64,
    };
    // SAFETY: the ioctl reads a `udmabuf_create` that outlives the call; it returns a new fd
    // or -1.
    let fd = unsafe { libc::ioctl(device.as_raw_fd(), UDMABUF_CREATE as _, &create) };
    assert!(
        fd >= 0,
        "UDMABUF_CREATE: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new fd the kernel just gave us, owned by nobody else.
    Some((memfd, unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[test]
fn a_dmabuf_tensor_comes_from_the_dma_heap_and_its_maps_keep_every_byte() {
    if !common::dma_heap_or_skip(test_name!()) {
        return;
    }
    let t = Tensor::<u8>::new(&[LEN], Some(TensorMemory::DmaBuf)).unwrap();
    assert_eq!(t.memory(), TensorMemory::DmaBuf);
    let heap = t.dma_heap().expect("a dma-heap tensor names its heap");
    assert!(
        std::path::Path::new("/dev/dma_heap").join(heap).exists(),
        "{heap}"
    );
    let link = fd_link(t.as_fd().unwrap());
    assert!(link.starts_with("/dmabuf:"), "not a DMA-BUF: {link}");
    {
        let mut m = t.map_write().unwrap();
        m.iter_mut().enumerate().for_each(|(i, b)| *b = pattern(i));
    }
    let m = t.map_read().unwrap();
    assert_eq!(m.len(), LEN);
    assert_eq!((0..LEN).find(|&i| m[i] != pattern(i)), None);
}

#[test]
fn an_i420_image_on_dmabuf_keeps_each_planes_bytes_where_its_plane_table_says() {
    if !common::dma_heap_or_skip(test_name!()) {
        return;
    }
    let (w, h) = (1280, 720);
    let image = TensorDyn::image(
        &ImageSpec::new(PixelFormat::I420, w, h),
        DType::U8,
        Some(TensorMemory::DmaBuf),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert_eq!(image.memory(), TensorMemory::DmaBuf);
    let planes = image.plane_table().unwrap();
    assert_eq!(planes.len(), 3);
    {
        let mut map = image.map_bytes(Direction::Write).unwrap();
        let m = map.as_bytes_mut().unwrap();
        for (n, p) in planes.iter().enumerate() {
            m[p.offset..p.offset + p.size].fill(0x10 * (n as u8 + 1));
        }
    }
    let map = image.map_bytes(Direction::Read).unwrap();
    let m = map.as_bytes().unwrap();
    for (n, p) in planes.iter().enumerate() {
        let plane = &m[p.offset..p.offset + p.size];
        assert!(
            plane.iter().all(|&b| b == 0x10 * (n as u8 + 1)),
            "plane {n}"
        );
    }
}

#[test]
fn a_dmabuf_a_driver_made_imports_as_dmabuf_over_the_drivers_own_pages() {
    let Some((memfd, dmabuf)) = udmabuf(test_name!(), 4 * 4096) else {
        return;
    };
    assert!(fd_link(dmabuf.as_fd()).starts_with("/dmabuf:"));
    let bytes: Vec<u8> = (0..4 * 4096).map(pattern).collect();
    rustix::io::pwrite(&memfd, &bytes, 0).unwrap();
    let t = Tensor::<u8>::from_fd(dmabuf, &[4 * 4096]).unwrap();
    assert_eq!(t.memory(), TensorMemory::DmaBuf);
    assert_eq!(
        t.map_read().unwrap().to_vec(),
        bytes,
        "the import reads the pages the driver's memory holds"
    );
    t.map_write().unwrap().fill(0xA5);
    let mut back = vec![0u8; 4 * 4096];
    rustix::io::pread(&memfd, &mut back, 0).unwrap();
    assert!(
        back.iter().all(|&b| b == 0xA5),
        "a write through the import reaches the driver's pages"
    );
}

#[test]
fn an_nv12_image_over_two_dmabufs_a_driver_made_reads_each_plane_from_its_own_buffer() {
    let test = test_name!();
    // The luma plane ends on a page, as a plane in a buffer of its own must (`image_from_planes`).
    let (w, h) = (64, 64);
    let Some((y_pages, y)) = udmabuf(test, 4096) else {
        return;
    };
    let Some((uv_pages, uv)) = udmabuf(test, 4096) else {
        return;
    };
    rustix::io::pwrite(&y_pages, &vec![0x51; w * h], 0).unwrap();
    rustix::io::pwrite(&uv_pages, &vec![0x82; w * h / 2], 0).unwrap();
    let image = TensorDyn::image_from_planes(
        vec![PlaneFd::new(y, 0, w), PlaneFd::new(uv, 0, w)],
        &ImageSpec::new(PixelFormat::Nv12, w, h),
        DType::U8,
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert_eq!(image.memory(), TensorMemory::DmaBuf);
    let planes = image.plane_table().unwrap();
    let map = image.map_bytes(Direction::Read).unwrap();
    let m = map.as_bytes().unwrap();
    let (luma, chroma) = (&planes[0], &planes[1]);
    assert!(m[luma.offset..luma.offset + luma.size]
        .iter()
        .all(|&b| b == 0x51));
    assert!(m[chroma.offset..chroma.offset + chroma.size]
        .iter()
        .all(|&b| b == 0x82));
}

#[test]
fn a_gpu_copy_into_and_out_of_a_dmabuf_tensor_keeps_every_byte() {
    let test = test_name!();
    if !common::dma_heap_or_skip(test) || common::device_or_skip(test).is_none() {
        return;
    }
    let len = 1 << 20;
    let src = Tensor::<u8>::new(&[len], Some(TensorMemory::DmaBuf)).unwrap();
    src.map_write()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = pattern(i));
    let gpu = Tensor::<u8>::new(&[len], Some(TensorMemory::Gpu)).unwrap();
    gpu.copy_from(&src).unwrap();
    let back = Tensor::<u8>::new(&[len], Some(TensorMemory::DmaBuf)).unwrap();
    back.copy_from(&gpu).unwrap();
    let m = back.map_read().unwrap();
    assert_eq!((0..len).find(|&i| m[i] != pattern(i)), None);
}
