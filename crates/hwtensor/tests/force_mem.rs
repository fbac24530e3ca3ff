//! `HWTENSOR_FORCE_MEM=1` (its own test binary: it sets a process-wide variable).

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory, FORCE_MEM_ENV};

#[test]
fn forcing_heap_memory_overrides_automatic_selection_but_not_an_explicit_request() {
    std::env::set_var(FORCE_MEM_ENV, "1");
    let plain = Tensor::<u8>::new(&[64], None).unwrap();
    assert_eq!(plain.memory(), TensorMemory::Mem);
    let image = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 8),
        None,
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert_eq!(image.memory(), TensorMemory::Mem);
    // An explicit request still gets what it names: shared memory (a memfd on Linux, a
    // section on Windows).
    let shm = Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap();
    assert_eq!(shm.memory(), TensorMemory::Shm);
    std::env::remove_var(FORCE_MEM_ENV);
}
