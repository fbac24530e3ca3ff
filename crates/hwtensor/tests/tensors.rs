//! Allocation, backings, dtypes and the shapes that must be refused.

use hwtensor::{f16, DType, Element, Error, Tensor, TensorDyn, TensorMemory};

mod common;
use common::SHARED;

fn allocates_zeroed<T: Element>(memory: TensorMemory) {
    let t = Tensor::<T>::new(&[3, 5, 7], Some(memory)).unwrap();
    assert_eq!(t.memory(), memory);
    assert_eq!(t.len(), 105);
    assert_eq!(t.buffer_len(), 105 * T::DTYPE.size());
    assert!(t.map_read().unwrap().iter().all(|v| *v == T::default()));
}

#[test]
fn every_dtype_allocates_zeroed_on_heap_and_shared_memory() {
    for memory in [TensorMemory::Mem, SHARED] {
        allocates_zeroed::<u8>(memory);
        allocates_zeroed::<i8>(memory);
        allocates_zeroed::<u16>(memory);
        allocates_zeroed::<i16>(memory);
        allocates_zeroed::<u32>(memory);
        allocates_zeroed::<i32>(memory);
        allocates_zeroed::<u64>(memory);
        allocates_zeroed::<i64>(memory);
        allocates_zeroed::<f16>(memory);
        allocates_zeroed::<f32>(memory);
        allocates_zeroed::<f64>(memory);
    }
}

#[test]
fn heap_tensors_are_64_byte_aligned() {
    for len in [1, 3, 63, 65, 1000] {
        let t = Tensor::<u8>::new(&[len], Some(TensorMemory::Mem)).unwrap();
        let m = t.map_read().unwrap();
        assert_eq!(m.as_ptr() as usize % 64, 0, "len {len}");
    }
}

#[test]
fn automatic_selection_takes_shared_memory_when_there_is_no_dma_heap() {
    if TensorMemory::DmaBuf.is_available() {
        eprintln!("SKIPPED: {} - this machine has a dma-heap", test_name!());
        return;
    }
    let t = Tensor::<u8>::new(&[16], None).unwrap();
    assert_eq!(t.memory(), SHARED);
}

#[test]
fn asking_for_a_backing_that_is_not_here_is_an_error_that_says_why() {
    if !TensorMemory::Cuda.is_available() {
        let err = Tensor::<u8>::new(&[16], Some(TensorMemory::Cuda)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unavailable {
                    memory: TensorMemory::Cuda,
                    ..
                }
            ),
            "{err}"
        );
    }
    if !TensorMemory::DmaBuf.is_available() {
        let err = Tensor::<u8>::new(&[16], Some(TensorMemory::DmaBuf)).unwrap_err();
        let why = if cfg!(target_os = "linux") {
            "dma_heap"
        } else {
            "fd-backed"
        };
        assert!(err.to_string().contains(why), "{err}");
    }
}

#[test]
fn a_shape_whose_size_overflows_usize_is_refused() {
    for memory in [None, Some(TensorMemory::Mem), Some(SHARED)] {
        assert!(Tensor::<u8>::new(&[usize::MAX, 2], memory).is_err());
        assert!(Tensor::<u64>::new(&[usize::MAX / 4], memory).is_err());
        assert!(Tensor::<f32>::new(&[1 << 32, 1 << 32], memory).is_err());
    }
}

#[test]
fn an_allocation_too_large_for_the_machine_is_an_error_not_an_abort() {
    let err = Tensor::<u8>::new(&[1 << 62], Some(TensorMemory::Mem)).unwrap_err();
    assert!(
        matches!(err, Error::Alloc { .. } | Error::Shape(_)),
        "{err}"
    );
    // A memfd can be sized sparsely far past RAM; it is the mapping that the kernel refuses.
    let err = Tensor::<u8>::new(&[1 << 62], Some(SHARED)).unwrap_err();
    assert!(
        matches!(err, Error::Alloc { .. } | Error::Os { .. }),
        "{err}"
    );
}

#[test]
fn zero_sized_tensors_map_to_empty_slices_on_every_backing() {
    for memory in [TensorMemory::Mem, SHARED] {
        for shape in [&[0][..], &[4, 0, 3], &[0, 0]] {
            let t = Tensor::<f32>::new(shape, Some(memory)).unwrap();
            assert!(t.is_empty());
            assert!(t.map().unwrap().is_empty());
            assert!(t.to_vec().unwrap().is_empty());
        }
    }
}

#[test]
fn a_rank_zero_tensor_holds_one_element() {
    let t = Tensor::<i32>::new(&[], Some(TensorMemory::Mem)).unwrap();
    t.map_write().unwrap()[0] = -5;
    assert_eq!(t.to_vec().unwrap(), vec![-5]);
}

#[test]
fn writes_through_one_clone_are_seen_through_another() {
    let a = Tensor::<u16>::new(&[4, 4], Some(SHARED)).unwrap();
    let b = a.clone();
    a.map_write().unwrap().fill(513);
    assert!(b.map_read().unwrap().iter().all(|&v| v == 513));
    assert_eq!(a.identity(), b.identity());
}

#[test]
fn a_dyn_tensor_borrows_back_as_its_own_type_only() {
    let d = TensorDyn::new(&[2, 3], DType::F32, Some(TensorMemory::Mem)).unwrap();
    assert_eq!(d.dtype(), DType::F32);
    assert_eq!(d.shape(), &[2, 3]);
    let t = d.as_tensor::<f32>().unwrap();
    t.map_write().unwrap()[5] = 1.5;
    let err = d.as_tensor::<u8>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::DType {
                expected: DType::U8,
                actual: DType::F32
            }
        ),
        "{err}"
    );
    let wrong = d.into_tensor::<i32>().unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "dtype mismatch: the tensor holds f32, i32 was asked for"
    );
    let t = wrong.tensor.into_tensor::<f32>().unwrap();
    assert_eq!(t.to_vec().unwrap()[5], 1.5);
}

#[test]
fn taking_out_the_wrong_type_is_an_error_that_question_mark_passes_on() {
    fn take(d: TensorDyn) -> hwtensor::Result<Tensor<u16>> {
        Ok(d.into_tensor::<u16>()?)
    }
    let d = TensorDyn::from(Tensor::<f32>::new(&[2], Some(TensorMemory::Mem)).unwrap());
    let err = take(d).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DType {
                expected: DType::U16,
                actual: DType::F32
            }
        ),
        "{err}"
    );
}

#[test]
fn every_dtype_round_trips_through_a_dyn_tensor() {
    for dtype in DType::ALL {
        let d = TensorDyn::new(&[3], dtype, Some(TensorMemory::Mem)).unwrap();
        assert_eq!(d.dtype(), dtype);
        assert_eq!(d.buffer_len(), 3 * dtype.size());
    }
}

#[test]
fn liveness_ends_with_the_last_tensor_over_the_buffer() {
    let t = Tensor::<u8>::new(&[8], Some(SHARED)).unwrap();
    let live = t.liveness();
    let view = t.batch(3).unwrap();
    drop(t);
    assert!(live.is_alive(), "the batch still holds the buffer");
    drop(view);
    assert!(!live.is_alive());
}

#[test]
#[cfg(target_os = "linux")]
fn heap_memory_has_no_fd_to_clone() {
    let t = Tensor::<u8>::new(&[8], Some(TensorMemory::Mem)).unwrap();
    let err = t.clone_fd().unwrap_err();
    assert!(err.to_string().contains("no fd"), "{err}");
}
