//! fd export and import: sharing, identity, and every fd that must be refused.

#![cfg(target_os = "linux")]

mod common;

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use hwtensor::{
    CpuAccess, DType, Error, ImageSpec, ImportPolicy, PixelFormat, Tensor, TensorDyn, TensorMemory,
};

fn memfd(len: u64) -> OwnedFd {
    named_memfd("test", len)
}

/// A sealable memfd of `len` bytes named `name` (as `/proc/self/fd` shows it).
fn named_memfd(name: &str, len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create(
        name,
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    fd
}

fn refusal(fd: OwnedFd) -> String {
    match Tensor::<u8>::from_fd(fd, &[16]) {
        Err(Error::Fd(msg)) => msg,
        other => panic!("expected an fd error, got {other:?}"),
    }
}

#[test]
fn an_imported_fd_shares_memory_and_identity_with_the_exporter() {
    let a = Tensor::<u32>::new(&[64], Some(TensorMemory::Shm)).unwrap();
    let b = Tensor::<u32>::from_fd(a.clone_fd().unwrap(), &[64]).unwrap();
    assert_eq!(b.memory(), TensorMemory::Shm);
    assert_eq!(a.identity(), b.identity());
    a.map_write().unwrap()[63] = 0xdead_beef;
    assert_eq!(b.map_read().unwrap()[63], 0xdead_beef);
    b.map_write().unwrap()[0] = 7;
    assert_eq!(a.map_read().unwrap()[0], 7);
}

#[test]
fn re_importing_a_dup_of_the_same_fd_gives_the_same_identity() {
    let fd = memfd(4096);
    let dup = fd.try_clone().unwrap();
    let a = Tensor::<u8>::from_fd(fd, &[4096]).unwrap();
    let b = Tensor::<u8>::from_fd(dup, &[1024]).unwrap();
    assert_eq!(a.identity(), b.identity());
    let other = Tensor::<u8>::from_fd(memfd(4096), &[4096]).unwrap();
    assert_ne!(a.identity(), other.identity());
}

#[test]
fn cloned_fds_are_close_on_exec() {
    let t = Tensor::<u8>::new(&[16], Some(TensorMemory::Shm)).unwrap();
    let fd = t.clone_fd().unwrap();
    let flags = rustix::io::fcntl_getfd(&fd).unwrap();
    assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
}

#[test]
fn a_regular_file_is_refused_by_name() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("regular-file");
    std::fs::write(&path, [0u8; 64]).unwrap();
    let msg = refusal(File::open(&path).unwrap().into());
    // On tmpfs (the target dir in `scripts/dma-vm`, or wherever a user keeps it) a regular
    // file is shared memory, refused for another reason: that it cannot be sealed.
    if msg.contains("cannot be sealed") {
        eprintln!("SKIPPED: {} - the target dir is on tmpfs", test_name!());
        return;
    }
    assert!(msg.contains("got") && msg.contains("file"), "{msg}");
}

#[test]
fn a_pipe_is_refused_by_name() {
    let (r, _w) = std::io::pipe().unwrap();
    let msg = refusal(r.into());
    assert!(msg.contains("pipe"), "{msg}");
}

#[test]
fn a_socket_is_refused_by_name() {
    let (a, _b) = UnixStream::pair().unwrap();
    let msg = refusal(a.into());
    assert!(msg.contains("socket"), "{msg}");
}

#[test]
fn a_device_node_is_refused_by_name() {
    let msg = refusal(File::open("/dev/null").unwrap().into());
    assert!(msg.contains("character device"), "{msg}");
}

#[test]
fn an_fd_smaller_than_the_shape_is_refused_before_it_is_mapped() {
    let err = Tensor::<u32>::from_fd(memfd(100), &[26]).unwrap_err();
    assert!(
        err.to_string()
            .contains("holds 100 bytes but the tensor needs 104"),
        "{err}"
    );
    let err = Tensor::<u8>::image_from_fd(
        memfd(1000),
        &ImageSpec::new(PixelFormat::Rgba, 16, 16),
        CpuAccess::Read,
    )
    .unwrap_err();
    assert!(err.to_string().contains("needs 1024"), "{err}");
}

#[test]
fn a_shape_that_overflows_is_refused_before_the_fd_is_looked_at() {
    assert!(Tensor::<u64>::from_fd(memfd(64), &[usize::MAX / 2, 4]).is_err());
}

#[test]
fn a_read_only_fd_imports_as_a_read_only_tensor() {
    let fd = memfd(64);
    // A read-only fd cannot add seals: the producer sealed it (as hwtensor's shm does).
    rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::SHRINK).unwrap();
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let ro: OwnedFd = File::open(path).unwrap().into();
    let t = Tensor::<u8>::from_fd(ro, &[64]).unwrap();
    assert_eq!(t.access(), CpuAccess::Read);
    assert!(t.map_read().is_ok());
    assert!(matches!(t.map_write(), Err(Error::AccessDenied { .. })));
}

#[test]
fn a_read_only_fd_of_memory_nobody_sealed_is_refused() {
    let fd = memfd(64);
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let ro: OwnedFd = File::open(path).unwrap().into();
    assert!(refusal(ro).contains("sealed against shrinking"));
}

#[test]
fn memory_that_cannot_be_sealed_is_refused_by_default_and_accepted_when_the_caller_opts_in() {
    let fd = rustix::fs::memfd_create("unsealable", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 64).unwrap();
    let again = fd.try_clone().unwrap();
    assert!(refusal(fd).contains("MFD_ALLOW_SEALING"));
    let policy = ImportPolicy::STRICT.with_unsealed_shm(true);
    let t = Tensor::<u8>::from_fd_with(again, &[64], &policy).unwrap();
    assert_eq!(t.memory(), TensorMemory::Shm);
}

#[test]
fn a_gpu_drivers_memory_fd_is_not_accepted_as_shared_memory() {
    // lavapipe exports GPU memory as a memfd of this name whose first bytes are its header.
    assert!(refusal(named_memfd("llvmpipe memory fd", 64)).contains("GPU memory"));
}

#[test]
fn an_imported_memfd_can_no_longer_be_shrunk_under_us() {
    let fd = rustix::fs::memfd_create(
        "t",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, 4096).unwrap();
    let keep = fd.try_clone().unwrap();
    let t = Tensor::<u8>::from_fd(fd, &[4096]).unwrap();
    assert!(
        rustix::fs::ftruncate(keep.as_fd(), 0).is_err(),
        "the peer's truncate must fail"
    );
    assert_eq!(
        t.map_read().unwrap()[4095],
        0,
        "and the last byte stays readable"
    );
}

#[test]
fn a_dyn_tensor_imports_with_its_dtype() {
    let d = TensorDyn::from_fd(memfd(48), &[3, 4], DType::F32).unwrap();
    assert_eq!(d.dtype(), DType::F32);
    assert_eq!(d.memory(), TensorMemory::Shm);
}

#[test]
fn a_peer_truncating_while_we_import_gets_an_error_never_a_fault() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const LEN: u64 = 1 << 20;
    for _ in 0..20 {
        let fd = memfd(LEN);
        let peer = fd.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let truncating = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Fails once the importer has sealed the file: exactly the point.
                    let _ = rustix::fs::ftruncate(&peer, 0);
                    let _ = rustix::fs::ftruncate(&peer, LEN);
                }
            })
        };
        // Whatever the import saw, a tensor it returns can be read end to end.
        if let Ok(t) = Tensor::<u8>::from_fd(fd, &[LEN as usize]) {
            assert_eq!(t.to_vec().unwrap().len(), LEN as usize);
        }
        stop.store(true, Ordering::Relaxed);
        truncating.join().unwrap();
    }
}

/// Writes `bytes` at `offset` of `fd`.
fn write_at(fd: &OwnedFd, offset: u64, bytes: &[u8]) {
    assert_eq!(rustix::io::pwrite(fd, bytes, offset).unwrap(), bytes.len());
}

#[test]
fn an_nv12_frame_at_a_data_offset_with_a_padded_stride_imports_as_v4l2_lays_it_out() {
    // As a V4L2 single-planar buffer: a header page before the frame (data_offset), rows padded
    // to 64 bytes, the chroma plane right after the luma rows.
    let (w, h, stride, offset) = (40usize, 8usize, 64usize, 4096usize);
    let fd = memfd((offset + stride * h * 3 / 2) as u64);
    let luma: Vec<u8> = (0..stride * h).map(|i| (i % 251) as u8).collect();
    let chroma: Vec<u8> = (0..stride * h / 2).map(|i| 255 - (i % 251) as u8).collect();
    write_at(&fd, offset as u64, &luma);
    write_at(&fd, (offset + stride * h) as u64, &chroma);
    let t = Tensor::<u8>::image_from_fd_at(
        fd,
        offset,
        &ImageSpec::new(PixelFormat::Nv12, w, h).with_row_stride(stride),
        CpuAccess::Read,
    )
    .unwrap();
    assert_eq!(t.byte_offset(), offset);
    let planes = t.plane_table().unwrap();
    assert_eq!(
        planes[1].offset,
        h * stride,
        "the chroma rows follow the luma rows"
    );
    // NV12 is [rows of luma, then rows of chroma], each row its pixels without the padding.
    let m = t.map_strided_read().unwrap();
    let rows: Vec<&[u8]> = m.rows().collect();
    assert_eq!(rows.len(), h + h / 2);
    assert!(rows.iter().all(|r| r.len() == w));
    assert_eq!(rows[0][0], luma[0]);
    assert_eq!(rows[3][5], luma[3 * stride + 5]);
    assert_eq!(rows[h + 2][7], chroma[2 * stride + 7]);
}

#[test]
fn an_offset_past_the_end_or_off_the_element_alignment_is_refused() {
    let err = Tensor::<u8>::from_fd_at(memfd(4096), 4000, &[200]).unwrap_err();
    assert!(err.to_string().contains("4200"), "{err}");
    let err = Tensor::<u16>::from_fd_at(memfd(4096), 3, &[8]).unwrap_err();
    assert!(err.to_string().contains("align"), "{err}");
    let ok = Tensor::<u16>::from_fd_at(memfd(4096), 2, &[8]).unwrap();
    assert_eq!(ok.byte_offset(), 2);
    assert!(Tensor::<u8>::from_fd_at(memfd(4096), usize::MAX, &[8]).is_err());
}
