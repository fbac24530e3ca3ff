//! No fd leaks (its own binary: it counts this process's open fds, which other tests would
//! change under it).

#![cfg(target_os = "linux")]

use std::fs::File;
use std::os::unix::net::UnixStream;

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_thousand_rounds_of_allocate_export_import_and_drop_leak_no_fd() {
    // Warm up lazily opened process state (the memfd probe) before counting.
    drop(Tensor::<u8>::new(&[1], Some(TensorMemory::Shm)).unwrap());
    let before = open_fds();
    for i in 0..1000 {
        let t = Tensor::<u8>::new(&[64, 64], Some(TensorMemory::Shm)).unwrap();
        let imported = Tensor::<u8>::from_fd(t.clone_fd().unwrap(), &[64, 64]).unwrap();
        let view = imported.view(Region::new(1, 1, 8, 8)).unwrap();
        let image = Tensor::<u8>::image_from_fd(
            t.clone_fd().unwrap(),
            &ImageSpec::new(PixelFormat::Rgba, 16, 16),
            CpuAccess::Read,
        )
        .unwrap();
        assert_eq!(view.identity(), image.identity());
        // Failed imports must close what they were given, too.
        assert!(Tensor::<u8>::from_fd(t.clone_fd().unwrap(), &[64, 65]).is_err());
        assert!(Tensor::<u8>::from_fd(File::open("/dev/null").unwrap().into(), &[1]).is_err());
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(Tensor::<u8>::from_fd(a.into(), &[1]).is_err());
        let _ = i;
    }
    assert_eq!(open_fds(), before, "fds leaked over 1000 rounds");
}
