//! The blob: round trips in both modes, and hostile input that must be refused.

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::OwnedFd;

use hwtensor::blob::{self, Transport, HEADER_LEN};
use hwtensor::{
    CpuAccess, DType, Error, ImageSpec, PixelFormat, Quantization, Region, Tensor, TensorDyn,
    TensorMemory,
};

fn owned(fds: &[std::os::fd::BorrowedFd<'_>]) -> Vec<OwnedFd> {
    fds.iter()
        .map(|fd| fd.try_clone_to_owned().unwrap())
        .collect()
}

fn numbered_image(memory: TensorMemory) -> Tensor<u8> {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 8),
        Some(memory),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    for (i, b) in t.map_write().unwrap().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    t
}

fn reference_blob() -> (Tensor<u8>, Vec<u8>) {
    let t = numbered_image(TensorMemory::Shm);
    let (bytes, _) = blob::export(&t.clone().into(), Transport::Reference).unwrap();
    (t, bytes)
}

#[test]
fn a_shared_image_travels_by_reference_and_arrives_as_the_same_buffer() {
    let t = numbered_image(TensorMemory::Shm);
    let d: TensorDyn = t.view(Region::new(4, 2, 8, 6)).unwrap().into();
    let (bytes, fds) = blob::export(&d, Transport::Reference).unwrap();
    assert_eq!(fds.len(), 1);
    let got = blob::import(&bytes, owned(&fds)).unwrap();
    assert_eq!(got.identity(), t.identity());
    assert_eq!(got.shape(), &[6, 8, 4]);
    assert_eq!(got.byte_offset(), d.byte_offset());
    assert_eq!(got.image_info(), d.image_info());
    let got = got.as_tensor::<u8>().unwrap();
    assert_eq!(
        got.to_vec().unwrap(),
        d.as_tensor::<u8>().unwrap().to_vec().unwrap()
    );
}

#[test]
fn heap_memory_cannot_travel_by_reference() {
    let t = numbered_image(TensorMemory::Mem);
    assert!(blob::export(&t.into(), Transport::Reference).is_err());
}

#[test]
fn dtype_batches_and_quantization_survive_the_trip() {
    let mut t = Tensor::<i8>::new(&[3, 4, 5, 2], Some(TensorMemory::Shm)).unwrap();
    t.set_quantization(Some(Quantization::per_tensor(0.25, -3)))
        .unwrap();
    let batch: TensorDyn = t.batch(2).unwrap().into();
    let (bytes, fds) = blob::export(&batch, Transport::Reference).unwrap();
    let got = blob::import(&bytes, owned(&fds)).unwrap();
    assert_eq!(got.dtype(), DType::I8);
    assert_eq!(got.shape(), &[4, 5, 2]);
    assert_eq!(got.byte_offset(), 80);
    assert_eq!(got.quantization(), Some(Quantization::per_tensor(0.25, -3)));
    let f = TensorDyn::image(
        &ImageSpec::new(PixelFormat::PlanarRgb, 6, 4),
        DType::F32,
        Some(TensorMemory::Mem),
        CpuAccess::Read,
    )
    .unwrap();
    let got = blob::import(&blob::export(&f, Transport::Inline).unwrap().0, vec![]).unwrap();
    assert_eq!(got.dtype(), DType::F32);
    assert_eq!(got.access(), CpuAccess::Read);
    assert_eq!(got.image_info(), f.image_info());
}

#[test]
fn a_blob_cut_short_at_any_byte_is_refused() {
    let (t, bytes) = reference_blob();
    for len in 0..bytes.len() {
        let fd = t.clone_fd().unwrap();
        assert!(
            blob::import(&bytes[..len], vec![fd]).is_err(),
            "accepted {len} of {} bytes",
            bytes.len()
        );
    }
    let inline = blob::export(&t.into(), Transport::Inline).unwrap().0;
    for len in (0..inline.len()).step_by(7) {
        assert!(
            blob::import(&inline[..len], vec![]).is_err(),
            "accepted {len} bytes"
        );
    }
}

#[test]
fn a_blob_with_bytes_past_its_length_is_refused() {
    let (t, mut bytes) = reference_blob();
    bytes.push(0);
    assert!(blob::import(&bytes, vec![t.clone_fd().unwrap()]).is_err());
}

#[test]
fn every_hostile_value_in_every_header_and_array_word_is_refused() {
    let (t, bytes) = reference_blob();
    let mutations = common::hostile_mutations(&bytes, (0..bytes.len()).step_by(4));
    for (at, v, b) in &mutations {
        let result = blob::import(b, vec![t.clone_fd().unwrap()]);
        assert!(
            result.is_err(),
            "word at {at} set to {v:#x} was accepted: {:?}",
            result.map(|d| d.shape().to_vec())
        );
    }
    assert!(mutations.len() > 150, "{} mutations", mutations.len());
}

#[test]
fn a_version_or_requirement_this_reader_does_not_know_is_refused_by_name() {
    let (t, bytes) = reference_blob();
    let mut newer = bytes.clone();
    newer[4] = 2;
    let err = blob::import(&newer, vec![t.clone_fd().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("version 2"), "{err}");
    let mut requires = bytes.clone();
    requires[13] |= 2; // bit 9: after the chroma stride (7) and the plane fds (8), no one's yet
    let err = blob::import(&requires, vec![t.clone_fd().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("newer hwtensor"), "{err}");
}

#[test]
fn a_longer_header_from_a_later_writer_is_skipped_over() {
    let (t, bytes) = reference_blob();
    let mut later = bytes[..HEADER_LEN].to_vec();
    later.extend_from_slice(&[0u8; 8]);
    later.extend_from_slice(&bytes[HEADER_LEN..]);
    later[6..8].copy_from_slice(&((HEADER_LEN + 8) as u16).to_le_bytes());
    let total = later.len() as u32;
    later[8..12].copy_from_slice(&total.to_le_bytes());
    let got = blob::import(&later, vec![t.clone_fd().unwrap()]).unwrap();
    assert_eq!(got.identity(), t.identity());
}

#[test]
fn fd_tables_that_do_not_match_the_blob_are_refused() {
    let (t, bytes) = reference_blob();
    assert!(
        blob::import(&bytes, vec![]).is_err(),
        "no fd for a reference plane"
    );
    let two = vec![t.clone_fd().unwrap(), t.clone_fd().unwrap()];
    assert!(blob::import(&bytes, two).is_err(), "a duplicated fd");
    let mut out_of_range = bytes.clone();
    let plane_at = HEADER_LEN + 2 * 8 * 3;
    out_of_range[plane_at..plane_at + 4].copy_from_slice(&1u32.to_le_bytes());
    assert!(
        blob::import(&out_of_range, vec![t.clone_fd().unwrap()]).is_err(),
        "fd index 1 of 1"
    );
}

/// A memfd a peer would send: sealable, so the receiver can stop it from shrinking.
const SEALABLE: rustix::fs::MemfdFlags =
    rustix::fs::MemfdFlags::CLOEXEC.union(rustix::fs::MemfdFlags::ALLOW_SEALING);

#[test]
fn an_fd_smaller_than_the_blob_claims_is_refused() {
    let (_, bytes) = reference_blob();
    let small = rustix::fs::memfd_create("small", SEALABLE).unwrap();
    rustix::fs::ftruncate(&small, 100).unwrap();
    let err = blob::import(&bytes, vec![small]).unwrap_err();
    assert!(matches!(err, Error::Fd(_)), "{err}");
}

#[test]
fn an_oversized_fd_is_fine_and_the_wrong_kind_of_fd_is_not() {
    let (t, bytes) = reference_blob();
    let big = rustix::fs::memfd_create("big", SEALABLE).unwrap();
    rustix::fs::ftruncate(&big, 1 << 20).unwrap();
    assert!(blob::import(&bytes, vec![big]).is_ok());
    let (pipe, _w) = std::io::pipe().unwrap();
    assert!(blob::import(&bytes, vec![pipe.into()]).is_err());
    drop(t);
}

#[test]
fn an_inline_blob_that_comes_with_fds_is_refused() {
    let t = numbered_image(TensorMemory::Shm);
    let (bytes, _) = blob::export(&t.clone().into(), Transport::Inline).unwrap();
    assert!(blob::import(&bytes, vec![t.clone_fd().unwrap()]).is_err());
}

#[test]
fn a_reference_blob_whose_offset_splits_an_element_is_refused_for_every_element_type() {
    for dtype in DType::ALL {
        let t = TensorDyn::new(&[3, 5], dtype, Some(TensorMemory::Shm)).unwrap();
        let batch = t.batch(1).unwrap();
        let (bytes, fds) = blob::export(&batch, Transport::Reference).unwrap();
        let size = dtype.size() as u64;
        for delta in [-1i64, 1, (size / 2) as i64] {
            let offset = (5 * size).wrapping_add_signed(delta);
            if offset.is_multiple_of(size) {
                continue; // one-byte elements: every offset is whole
            }
            let mut hostile = bytes.clone();
            hostile[24..32].copy_from_slice(&offset.to_le_bytes());
            // The one plane record (after one dimension and one stride) says the same.
            let plane = HEADER_LEN + 16 + 8;
            hostile[plane..plane + 8].copy_from_slice(&offset.to_le_bytes());
            let err = blob::import(&hostile, owned(&fds)).unwrap_err().to_string();
            assert!(err.contains("alignment"), "{dtype:?} at {offset}: {err}");
        }
        assert!(blob::import(&bytes, owned(&fds)).is_ok(), "{dtype:?}");
    }
}

/// Fills every byte of `t` with a pattern of its position, so a plane read at the wrong offset
/// or stride shows.
fn numbered<T: hwtensor::Element + From<u8>>(t: &Tensor<T>) {
    for (i, v) in t.map_write().unwrap().iter_mut().enumerate() {
        *v = T::from((i % 251) as u8);
    }
}

#[test]
fn every_format_added_for_cameras_and_decoders_round_trips_both_ways_with_its_planes() {
    use PixelFormat::*;
    for (format, w, h) in [
        (Nv21, 64, 6),
        (Uyvy, 64, 6),
        (Bgr, 30, 5),
        (Bgrx, 30, 5),
        (I420, 64, 7),
        (Yv12, 66, 6),
    ] {
        let t = Tensor::<u8>::image(
            &ImageSpec::new(format, w, h),
            Some(TensorMemory::Shm),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        numbered(&t);
        let d = TensorDyn::from(t.clone());
        let (bytes, fds) = blob::export(&d, Transport::Reference).unwrap();
        let by_ref = blob::import(&bytes, owned(&fds)).unwrap();
        let inline = blob::import_inline(&blob::export_inline(&d).unwrap()).unwrap();
        for got in [by_ref, inline] {
            assert_eq!(got.image_info(), t.image_info(), "{format}");
            assert_eq!(
                got.plane_table().unwrap(),
                t.plane_table().unwrap(),
                "{format}"
            );
            assert_eq!(
                got.as_tensor::<u8>().unwrap().to_vec().unwrap(),
                t.to_vec().unwrap(),
                "{format}"
            );
        }
    }
    for format in [Gray16, P010] {
        let t = Tensor::<u16>::image(
            &ImageSpec::new(format, 32, 4),
            Some(TensorMemory::Shm),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        numbered(&t);
        let got = blob::import_inline(&blob::export_inline(&t.clone().into()).unwrap()).unwrap();
        assert_eq!(
            got.as_tensor::<u16>().unwrap().to_vec().unwrap(),
            t.to_vec().unwrap(),
            "{format}"
        );
    }
}

#[test]
fn a_sixteen_bit_format_over_byte_elements_is_refused_naming_the_element_type() {
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::P010, 32, 4),
        None,
        CpuAccess::ReadWrite,
    )
    .unwrap_err();
    assert!(err.to_string().contains("u16"), "{err}");
}
