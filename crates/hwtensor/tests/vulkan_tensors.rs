//! Tensors in GPU memory: maps, copies between every pair of backings, ordering. Run once as
//! is and once with `HWTENSOR_GPU_STAGING=1` (scripts/test), so the staged CPU path that NVIDIA
//! needs is exercised on lavapipe too.

#![cfg(target_os = "linux")]

mod common;

use common::device_or_skip;
use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory};

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
        .collect()
}

fn host(memory: TensorMemory, data: &[u32]) -> Tensor<u32> {
    let t = Tensor::<u32>::new(&[data.len()], Some(memory)).unwrap();
    t.copy_from_flat(data).unwrap();
    t
}

#[test]
fn a_gpu_tensor_starts_zeroed_and_keeps_what_a_map_writes() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t = Tensor::<u32>::new(&[4096], Some(TensorMemory::Gpu)).unwrap();
    assert_eq!(t.memory(), TensorMemory::Gpu);
    assert!(t.map_read().unwrap().iter().all(|&v| v == 0));
    let data = pattern(4096, 7);
    t.map_write().unwrap().copy_from_slice(&data);
    assert_eq!(t.to_vec().unwrap(), data);
}

#[test]
fn copies_between_every_pair_of_backings_preserve_the_bytes() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    // 1000 elements: a heap block under a page (no host import, so the mapped path) and
    // 300 000: page-sized buffers that the device imports.
    for n in [1000, 300_000] {
        let data = pattern(n, n as u32);
        for from in [TensorMemory::Mem, TensorMemory::Shm, TensorMemory::Gpu] {
            for to in [TensorMemory::Mem, TensorMemory::Shm, TensorMemory::Gpu] {
                let src = match from {
                    TensorMemory::Gpu => {
                        let g = Tensor::<u32>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
                        g.copy_from(&host(TensorMemory::Mem, &data)).unwrap();
                        g
                    }
                    m => host(m, &data),
                };
                let dst = Tensor::<u32>::new(&[n], Some(to)).unwrap();
                dst.copy_from(&src).unwrap();
                assert!(
                    dst.to_vec().unwrap() == data,
                    "{from} -> {to}, {n} elements"
                );
            }
        }
    }
}

#[test]
fn a_chain_of_gpu_copies_is_ordered_on_the_timeline() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let n = 1 << 18;
    let tensors: Vec<_> = (0..4)
        .map(|_| Tensor::<u32>::new(&[n], Some(TensorMemory::Gpu)).unwrap())
        .collect();
    for round in 0..5u32 {
        let data = pattern(n, round);
        tensors[0]
            .copy_from(&host(TensorMemory::Shm, &data))
            .unwrap();
        // Each copy returns at once; the next one must still see its result.
        for i in 1..tensors.len() {
            tensors[i].copy_from(&tensors[i - 1]).unwrap();
        }
        assert!(tensors[3].to_vec().unwrap() == data, "round {round}");
    }
}

#[test]
fn gpu_images_get_a_64_byte_pitch() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgb, 100, 8),
        Some(TensorMemory::Gpu),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert_eq!(t.row_stride(), Some(320));
    t.map_strided_write().unwrap().fill(9);
    assert!(t.to_vec().unwrap().iter().all(|&b| b == 9));
}

#[test]
fn a_mismatched_copy_is_refused() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let a = Tensor::<u32>::new(&[10], Some(TensorMemory::Gpu)).unwrap();
    let b = Tensor::<u32>::new(&[11], Some(TensorMemory::Mem)).unwrap();
    assert!(a.copy_from(&b).is_err());
}

#[test]
fn a_crop_of_a_padded_image_copies_into_and_out_of_gpu_memory() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let region = hwtensor::Region::new(3, 2, 50, 7);
    for memory in [TensorMemory::Mem, TensorMemory::Gpu] {
        // 256x16 RGBA: large enough that heap memory is imported into the device.
        let img = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Rgba, 256, 16),
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        let pattern: Vec<u8> = (0..img.len()).map(|i| (i % 251) as u8).collect();
        img.copy_from_flat(&pattern).unwrap();
        let crop = img.view(region).unwrap();
        let expected = crop.to_vec().unwrap();

        let g = Tensor::<u8>::new(crop.shape(), Some(TensorMemory::Gpu)).unwrap();
        g.copy_from(&crop).unwrap();
        assert!(g.to_vec().unwrap() == expected, "{memory} crop -> gpu");

        let back = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Rgba, 256, 16),
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        back.view(region).unwrap().copy_from(&g).unwrap();
        assert!(
            back.view(region).unwrap().to_vec().unwrap() == expected,
            "gpu -> {memory} crop"
        );
        let untouched = back
            .view(hwtensor::Region::new(0, 0, 256, 2))
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(
            untouched.iter().all(|&b| b == 0),
            "nothing outside the crop is written"
        );
    }
}
