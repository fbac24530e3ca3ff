//! The blob's wire format on every platform (this file runs under Wine too): inline round
//! trips, and hostile or truncated inline blobs refused without a panic.

mod common;
#[path = "../fuzz/src/receiver.rs"]
mod receiver;

use hwtensor::blob::{self, HEADER_LEN};
use hwtensor::{
    CpuAccess, DType, ImageSpec, PixelFormat, Quantization, Region, Tensor, TensorDyn, TensorMemory,
};

fn numbered_image() -> Tensor<u8> {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 8),
        Some(TensorMemory::Mem),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    for (i, b) in t.map_write().unwrap().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    t
}

#[test]
fn a_heap_tensor_travels_inline_with_its_bytes_only() {
    let t = numbered_image();
    let view = t.view(Region::new(8, 4, 8, 4)).unwrap();
    let d: TensorDyn = view.clone().into();
    let bytes = blob::export_inline(&d).unwrap();
    assert!(
        bytes.len() < HEADER_LEN + 512,
        "only the view's extent travels, not the whole image"
    );
    let got = blob::import_inline(&bytes).unwrap();
    assert_eq!(got.memory(), TensorMemory::Mem);
    assert_eq!(got.byte_offset(), 0);
    assert_eq!(
        got.as_tensor::<u8>().unwrap().to_vec().unwrap(),
        view.to_vec().unwrap()
    );
}

#[test]
fn every_format_round_trips_inline() {
    for format in PixelFormat::ALL {
        // GRAY16 and P010 samples are 16-bit words.
        let dtype = match format.sample_bytes() {
            Some(2) => DType::U16,
            _ => DType::U8,
        };
        let t = TensorDyn::image(
            &ImageSpec::new(format, 8, 5),
            dtype,
            Some(TensorMemory::Mem),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        let got = blob::import_inline(&blob::export_inline(&t).unwrap()).unwrap();
        assert_eq!(got.shape(), t.shape(), "{format}");
    }
}

#[test]
fn dtype_access_and_quantization_survive_an_inline_trip() {
    let mut t = Tensor::<i8>::new(&[3, 4, 5, 2], Some(TensorMemory::Mem)).unwrap();
    t.set_quantization(Some(Quantization::per_tensor(0.25, -3)))
        .unwrap();
    let batch: TensorDyn = t.batch(2).unwrap().into();
    let got = blob::import_inline(&blob::export_inline(&batch).unwrap()).unwrap();
    assert_eq!((got.dtype(), got.shape()), (DType::I8, &[4usize, 5, 2][..]));
    assert_eq!(got.quantization(), batch.quantization());
    let f = TensorDyn::image(
        &ImageSpec::new(PixelFormat::PlanarRgb, 6, 4),
        DType::F32,
        Some(TensorMemory::Mem),
        CpuAccess::Read,
    )
    .unwrap();
    let got = blob::import_inline(&blob::export_inline(&f).unwrap()).unwrap();
    assert_eq!((got.dtype(), got.access()), (DType::F32, CpuAccess::Read));
    assert_eq!(got.image_info(), f.image_info());
}

#[test]
fn an_inline_blob_cut_short_at_any_byte_is_refused() {
    let bytes = blob::export_inline(&numbered_image().into()).unwrap();
    for len in 0..bytes.len() {
        assert!(
            blob::import_inline(&bytes[..len]).is_err(),
            "accepted {len} bytes"
        );
    }
}

#[test]
fn every_hostile_value_in_every_header_and_array_word_of_an_inline_blob_is_refused() {
    let bytes = blob::export_inline(&numbered_image().into()).unwrap();
    // The header, then shape, strides and the one plane record; the data after them is free.
    let described = HEADER_LEN + 2 * 8 * 3 + 32;
    let mutations = common::hostile_mutations(&bytes, (0..described).step_by(4));
    for (at, v, b) in &mutations {
        let result = blob::import_inline(b);
        assert!(result.is_err(), "word at {at} set to {v:#x} was accepted");
    }
    assert!(mutations.len() > 150, "{} mutations", mutations.len());
}

#[test]
fn a_reference_blob_is_refused_by_the_inline_import_by_name() {
    let mut bytes = blob::export_inline(&numbered_image().into()).unwrap();
    bytes[18] = 0; // the mode byte: reference
    let err = blob::import_inline(&bytes).unwrap_err();
    assert!(matches!(err, hwtensor::Error::Blob(_)), "{err}");
}

/// Inputs the fuzzer once crashed on, replayed the way the fuzz target reads and uses them.
#[test]
fn inputs_the_fuzzer_found_are_refused_without_a_panic_on_every_platform() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut replayed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        receiver::receive(&std::fs::read(entry.unwrap().path()).unwrap());
        replayed += 1;
    }
    assert!(replayed > 0, "the regression corpus is empty");
}

#[test]
fn an_inline_blob_of_a_crop_carries_only_the_crop() {
    let (w, h) = (64usize, 32usize);
    let parent = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h).with_row_stride(512),
        Some(TensorMemory::Mem),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    {
        let mut m = parent.map_strided_write().unwrap();
        for (y, row) in m.rows_mut().enumerate() {
            for (x, b) in row.iter_mut().enumerate() {
                *b = ((y * 512 + x) % 251) as u8;
            }
        }
    }
    let crop = parent
        .view(hwtensor::Region {
            x: 8,
            y: 4,
            width: 16,
            height: 8,
        })
        .unwrap();
    let blob = blob::export_inline(&TensorDyn::from(crop.clone())).unwrap();
    let crop_bytes = 16 * 8 * 4;
    assert!(
        blob.len() < HEADER_LEN + 256 + crop_bytes,
        "{} bytes: the parent's pixels between the crop's rows travelled too",
        blob.len()
    );
    let back = blob::import_inline(&blob)
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert_eq!(back.shape(), crop.shape());
    assert_eq!(back.to_vec().unwrap(), crop.to_vec().unwrap());
    assert_eq!(back.width(), Some(16));
}

#[test]
fn an_inline_blob_imported_from_its_owner_is_read_in_place_and_read_only() {
    let t = numbered_image();
    let bytes = blob::export_inline(&t.clone().into()).unwrap();
    let range = bytes.as_ptr_range();
    let got = blob::import_inline_from(bytes).unwrap();
    let got = got.as_tensor::<u8>().unwrap();
    assert_eq!(got.to_vec().unwrap(), t.to_vec().unwrap());
    let at = got.map_read().unwrap().as_bytes().as_ptr();
    assert!(
        range.contains(&at),
        "the pixels are read where the blob holds them"
    );
    assert_eq!(got.access(), CpuAccess::Read);
    assert!(
        got.map_write().is_err(),
        "a receive buffer is lent read-only"
    );
}

#[test]
fn a_hostile_blob_imported_from_its_owner_is_refused_like_any() {
    let bytes = blob::export_inline(&numbered_image().into()).unwrap();
    for n in [0, 10, HEADER_LEN, bytes.len() - 1] {
        assert!(
            blob::import_inline_from(bytes[..n].to_vec()).is_err(),
            "{n} bytes"
        );
    }
}

#[test]
fn colorimetry_travels_with_an_image_and_its_views_and_an_unknown_code_is_refused() {
    use hwtensor::{ColorRange, Colorimetry};
    let mut t = numbered_image();
    t.set_colorimetry(Colorimetry::BT709_LIMITED).unwrap();
    let view = t.view(Region::new(2, 2, 4, 4)).unwrap();
    assert_eq!(view.colorimetry(), Some(Colorimetry::BT709_LIMITED));
    let bytes = blob::export_inline(&view.into()).unwrap();
    let got = blob::import_inline(&bytes).unwrap();
    let got = got.image_info().unwrap().colorimetry;
    assert_eq!(got, Colorimetry::BT709_LIMITED);
    assert_eq!(got.range, ColorRange::Limited);
    // The range code (header byte 91) set to one no version defines.
    let mut hostile = bytes.clone();
    hostile[91] = 77;
    let err = blob::import_inline(&hostile).unwrap_err();
    assert!(err.to_string().contains("range code 77"), "{err}");
    let mut plain = Tensor::<u8>::new(&[4], Some(TensorMemory::Mem)).unwrap();
    assert!(
        plain.set_colorimetry(Colorimetry::SRGB).is_err(),
        "a plain tensor has no colours"
    );
}

#[test]
fn quantization_is_for_integers_with_a_positive_scale_and_a_zero_point_that_fits() {
    let q = |scale, zero_point| Some(Quantization::per_tensor(scale, zero_point));
    let mut u = Tensor::<u8>::new(&[4], Some(TensorMemory::Mem)).unwrap();
    assert!(u.set_quantization(q(0.5, 128)).is_ok());
    assert!(
        u.set_quantization(q(0.5, 256)).is_err(),
        "a u8 cannot hold 256"
    );
    assert!(u.set_quantization(q(0.5, -1)).is_err());
    assert!(u.set_quantization(q(0.0, 0)).is_err());
    assert!(u.set_quantization(q(f32::NAN, 0)).is_err());
    let mut f = Tensor::<f32>::new(&[4], Some(TensorMemory::Mem)).unwrap();
    assert!(matches!(
        f.set_quantization(q(0.5, 0)),
        Err(hwtensor::Error::InvalidOperation(_))
    ));
    // A hostile blob saying so is refused too: scale (header bytes 64..68) set to -1.
    let mut i = Tensor::<i8>::new(&[4], Some(TensorMemory::Mem)).unwrap();
    i.set_quantization(q(0.25, -3)).unwrap();
    let mut bytes = blob::export_inline(&i.into()).unwrap();
    bytes[64..68].copy_from_slice(&(-1.0f32).to_le_bytes());
    let err = blob::import_inline(&bytes).unwrap_err();
    assert!(err.to_string().contains("scale"), "{err}");
}

#[test]
fn per_channel_quantization_travels_and_follows_batch_items_and_views() {
    // Four output channels of a conv layer's weights, quantized each on its own (axis 0).
    let mut w = Tensor::<i8>::new(&[4, 3, 3], Some(TensorMemory::Mem)).unwrap();
    let q =
        Quantization::per_channel(0, vec![0.5, 0.25, 0.125, 0.0625], vec![0, 1, -1, 2]).unwrap();
    w.set_quantization(Some(q.clone())).unwrap();
    let got = blob::import_inline(&blob::export_inline(&w.clone().into()).unwrap()).unwrap();
    assert_eq!(got.quantization(), Some(q));
    let item = w.batch(2).unwrap();
    assert_eq!(
        item.quantization(),
        Some(Quantization::per_tensor(0.125, -1)),
        "a channel's item is quantized as that channel"
    );
    // Channels on the last axis of an image-like [h, w, c] tensor: views keep them all.
    let mut hwc = Tensor::<u8>::new(&[4, 4, 2], Some(TensorMemory::Mem)).unwrap();
    let q2 = Quantization::per_channel(2, vec![1.0, 2.0], vec![3, 4]).unwrap();
    hwc.set_quantization(Some(q2.clone())).unwrap();
    let view = hwc.view(Region::new(1, 1, 2, 2)).unwrap();
    assert_eq!(view.quantization(), Some(q2));
    assert!(
        hwc.reshape(&[32]).is_err(),
        "the channel axis would lose its meaning"
    );
    // Parameters for a different channel count are refused, in a tensor and in a blob.
    let wrong = Quantization::per_channel(0, vec![1.0; 3], vec![0; 3]).unwrap();
    assert!(w.set_quantization(Some(wrong)).is_err());
    let mut bytes = blob::export_inline(&w.into()).unwrap();
    bytes[76..80].copy_from_slice(&5u32.to_le_bytes()); // quant_channels: 5 of a 4-channel axis
    assert!(blob::import_inline(&bytes).is_err());
}

/// Rewrites an inline blob of a `[2, 3]` tensor as a `[1, 3]` tensor from `offset` on: a
/// geometry that fits its bytes wherever the offset falls.
fn shifted_inline(dtype: DType, offset: u64) -> Vec<u8> {
    let t = TensorDyn::new(&[2, 3], dtype, Some(TensorMemory::Mem)).unwrap();
    let mut bytes = blob::export_inline(&t).unwrap();
    bytes[24..32].copy_from_slice(&offset.to_le_bytes());
    bytes[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&1u64.to_le_bytes());
    // The one plane record (after two dimensions and two strides) says the same.
    let plane = HEADER_LEN + 32;
    bytes[plane + 8..plane + 16].copy_from_slice(&offset.to_le_bytes());
    let extent = 3 * dtype.size() as u64;
    bytes[plane + 24..plane + 32].copy_from_slice(&extent.to_le_bytes());
    bytes
}

#[test]
fn an_inline_blob_whose_offset_splits_an_element_is_refused_for_every_element_type() {
    for dtype in DType::ALL {
        let size = dtype.size() as u64;
        let whole = blob::import_inline(&shifted_inline(dtype, size)).unwrap();
        assert_eq!(whole.byte_offset() as u64, size, "{dtype:?}");
        for offset in (1..size).chain(size + 1..2 * size) {
            let bytes = shifted_inline(dtype, offset);
            let err = blob::import_inline(&bytes).unwrap_err().to_string();
            assert!(err.contains("alignment"), "{dtype:?} at {offset}: {err}");
            assert!(
                blob::import_inline_from(bytes).is_err(),
                "{dtype:?} at {offset}"
            );
        }
    }
}

#[test]
fn every_word_of_every_seed_nudged_a_little_imports_or_is_refused_without_a_panic() {
    let seeds = receiver::seeds();
    assert!(seeds.len() >= 10, "seeds of every element size");
    let (mut imported, mut refused) = (0, 0);
    for (pick, seed) in seeds.iter().enumerate() {
        assert!(
            receiver::nudge(&[pick as u8]),
            "seed {pick} imports as it is"
        );
        // Every word alone, and every two words together (a field and the record that must
        // agree with it: a byte offset and its plane record), by the same small amounts.
        let words = (seed.blob.len() / 4).min(256) as u8;
        for a in 0..words {
            for b in a..words {
                for delta in [-1i8, 1, -4, 4] {
                    let d = delta as u8;
                    match receiver::nudge(&[pick as u8, a, d, b, if a == b { 0 } else { d }]) {
                        true => imported += 1,
                        false => refused += 1,
                    }
                }
            }
        }
    }
    eprintln!("{imported} nudged blobs imported, {refused} refused");
    assert!(imported > 0 && refused > 0);
}
