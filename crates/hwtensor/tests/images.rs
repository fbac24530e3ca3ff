//! Images: exact geometry, row strides, planes, views and batches.

#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;

use hwtensor::{
    CpuAccess, DType, Error, ImageSpec, PixelFormat, Region, Tensor, TensorDyn, TensorMemory,
};
#[cfg(target_os = "linux")]
use proptest::prelude::*;

mod common;
use common::SHARED;

const RW: CpuAccess = CpuAccess::ReadWrite;

#[cfg(target_os = "linux")]
fn memfd(len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create(
        "test",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    fd
}

/// An image whose every byte holds its own index (mod 251, a prime, so rows do not repeat).
fn numbered(w: usize, h: usize, format: PixelFormat, memory: TensorMemory) -> Tensor<u8> {
    let t = Tensor::<u8>::image(&ImageSpec::new(format, w, h), Some(memory), RW).unwrap();
    for (i, b) in t.map_write().unwrap().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    t
}

#[test]
fn nv12_at_640x480_is_460800_bytes_and_483_rows_make_725() {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, 640, 480),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    assert_eq!(t.buffer_len(), 460_800);
    assert_eq!(t.shape(), &[720, 640]);
    let odd = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, 640, 483),
        Some(SHARED),
        RW,
    )
    .unwrap();
    assert_eq!(odd.shape(), &[725, 640]);
    assert_eq!(odd.buffer_len(), 725 * 640);
}

#[test]
fn every_format_allocates_its_allocation_shape_tightly_on_the_host() {
    for format in PixelFormat::ALL {
        // GRAY16 and P010 samples are 16-bit words.
        let dtype = match format.sample_bytes() {
            Some(2) => hwtensor::DType::U16,
            _ => hwtensor::DType::U8,
        };
        let t = TensorDyn::image(
            &ImageSpec::new(format, 64, 6),
            dtype,
            Some(TensorMemory::Mem),
            RW,
        )
        .unwrap();
        assert_eq!(
            t.shape(),
            format.allocation_shape(64, 6).as_slice(),
            "{format}"
        );
        let info = t.image_info().unwrap();
        let tight = format.min_row_bytes(64, dtype.size()).unwrap();
        assert_eq!(info.row_stride, tight, "{format} is tight on the heap");
        let planes = t.plane_table().unwrap();
        let total: usize = planes.iter().map(|p| p.size).sum();
        assert_eq!(total, t.buffer_len(), "{format}: planes cover the buffer");
    }
}

#[test]
fn an_image_on_dmabuf_without_a_dma_heap_is_a_clear_error() {
    if TensorMemory::DmaBuf.is_available() {
        eprintln!("SKIPPED: {} - this machine has a dma-heap", test_name!());
        return;
    }
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 64),
        Some(TensorMemory::DmaBuf),
        RW,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unavailable {
                memory: TensorMemory::DmaBuf,
                ..
            }
        ),
        "{err}"
    );
    let auto = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 64, 64), None, RW).unwrap();
    assert_eq!(
        auto.memory(),
        TensorMemory::Mem,
        "images fall back from DMA-BUF to heap"
    );
}

#[test]
fn a_row_stride_below_the_format_minimum_is_refused() {
    let mut t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgb, 10, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    let err = t.set_row_stride(29).unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
    assert_eq!(
        t.effective_row_stride(),
        Some(30),
        "a refused stride changes nothing"
    );
}

#[test]
fn a_row_stride_past_the_buffer_capacity_is_refused() {
    let mut t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgb, 10, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    let err = t.set_row_stride(31).unwrap_err();
    assert!(err.to_string().contains("buffer holds 120"), "{err}");
    assert!(t.set_row_stride(usize::MAX).is_err());
}

#[test]
#[cfg(target_os = "linux")]
fn a_row_stride_that_splits_an_element_is_refused() {
    let fd = memfd(4096);
    let err = Tensor::<f32>::image_from_fd(
        fd,
        &ImageSpec::new(PixelFormat::Rgba, 4, 4).with_row_stride(66),
        RW,
    )
    .unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
}

#[test]
#[cfg(target_os = "linux")]
fn a_padded_image_from_an_fd_strips_its_padding_for_an_npu() {
    let (w, h, stride) = (5, 3, 64);
    let t = Tensor::<u8>::image_from_fd(
        memfd(3 * 64),
        &ImageSpec::new(PixelFormat::Rgb, w, h).with_row_stride(stride),
        RW,
    )
    .unwrap();
    assert_eq!(t.row_stride(), Some(64));
    assert_eq!(t.strides(), &[64, 3, 1]);
    {
        let mut m = t.map_strided_write().unwrap();
        for y in 0..h {
            for x in 0..w * 3 {
                *m.get_mut(&[y, x / 3, x % 3]).unwrap() = (y * 100 + x) as u8;
            }
        }
    }
    let flat = t.to_vec().unwrap();
    let expected: Vec<u8> = (0..h)
        .flat_map(|y| (0..w * 3).map(move |x| (y * 100 + x) as u8))
        .collect();
    assert_eq!(flat, expected);
}

#[test]
#[cfg(target_os = "linux")]
fn widening_the_stride_inside_a_larger_buffer_moves_the_rows() {
    let mut t =
        Tensor::<u8>::image_from_fd(memfd(4 * 64), &ImageSpec::new(PixelFormat::Grey, 8, 4), RW)
            .unwrap();
    assert_eq!(t.row_stride(), None);
    t.set_row_stride(64).unwrap();
    assert_eq!(t.strides(), &[64, 1]);
    let planes = t.plane_table().unwrap();
    assert_eq!(planes.len(), 1);
    let p = planes[0];
    assert_eq!((p.offset, p.row_stride, p.rows, p.size), (0, 64, 4, 256));
}

#[test]
fn a_view_offset_in_x_that_touches_the_last_row_maps_and_reads_correctly() {
    // Tight 8x4 RGBA in a buffer of exactly 128 bytes: the view's last row ends at the last
    // byte, so a map sized in whole rows from the view's start would run 16 bytes past it.
    let t = numbered(8, 4, PixelFormat::Rgba, SHARED);
    assert_eq!(t.buffer_len(), 128);
    let v = t.view(Region::new(4, 2, 4, 2)).unwrap();
    assert_eq!(v.shape(), &[2, 4, 4]);
    assert_eq!(v.byte_offset() + v.byte_extent(), 128);
    let expected: Vec<u8> = [2usize, 3]
        .iter()
        .flat_map(|y| (16..32).map(move |x| (y * 32 + x) as u8))
        .collect();
    assert_eq!(v.to_vec().unwrap(), expected);
    let m = v.map_strided_read().unwrap();
    assert_eq!(m.rows().map(<[u8]>::len).collect::<Vec<_>>(), [16, 16]);
    assert_eq!(m.view()[[1, 3, 3]], 127);
    assert_eq!(m.get(&[1, 3, 3]), Some(&127));
    assert_eq!(m.get(&[2, 0, 0]), None, "an index outside the view");
}

#[test]
fn views_nest_relative_to_their_parent_and_share_its_buffer() {
    let t = numbered(16, 16, PixelFormat::Rgb, TensorMemory::Mem);
    let outer = t.view(Region::new(2, 3, 10, 10)).unwrap();
    let inner = outer.view(Region::new(1, 1, 4, 4)).unwrap();
    let direct = t.view(Region::new(3, 4, 4, 4)).unwrap();
    assert_eq!(inner.to_vec().unwrap(), direct.to_vec().unwrap());
    assert_eq!(inner.identity(), t.identity());
    assert_eq!(inner.width(), Some(4));
    *inner
        .map_strided_write()
        .unwrap()
        .get_mut(&[0, 0, 0])
        .unwrap() = 255;
    assert_eq!(
        t.map_read().unwrap()[4 * 48 + 3 * 3],
        255,
        "a view writes into its parent"
    );
}

#[test]
fn a_view_out_of_bounds_is_an_error_not_a_clamp() {
    let t = numbered(16, 8, PixelFormat::Rgba, TensorMemory::Mem);
    for r in [
        Region::new(0, 0, 17, 1),
        Region::new(15, 0, 2, 1),
        Region::new(0, 8, 1, 1),
        Region::new(0, 4, 1, 5),
        Region::new(usize::MAX, 0, 2, 1),
        Region::new(0, 1, 1, usize::MAX),
    ] {
        assert!(
            matches!(t.view(r), Err(Error::RegionOutside { region, .. }) if region == r)
                || matches!(t.view(r), Err(Error::OutOfBounds(_))),
            "{r:?}"
        );
    }
    let v = t.view(Region::new(8, 4, 8, 4)).unwrap();
    assert!(
        v.view(Region::new(1, 0, 8, 1)).is_err(),
        "a nested view is bounded by its parent"
    );
}

#[test]
fn a_view_of_a_semi_planar_image_is_refused_with_the_way_out() {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, 64, 64),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    let err = t.view(Region::new(0, 0, 32, 32)).unwrap_err();
    assert!(err.to_string().contains("plane_table"), "{err}");
}

#[test]
fn a_view_that_splits_a_yuyv_pixel_pair_is_refused() {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Yuyv, 64, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    assert!(t.view(Region::new(1, 0, 2, 2)).is_err());
    assert!(t.view(Region::new(2, 0, 3, 2)).is_err());
    assert_eq!(t.view(Region::new(2, 0, 4, 2)).unwrap().shape(), &[2, 4, 2]);
}

#[test]
fn a_planar_view_selects_the_same_rectangle_of_every_plane() {
    let t = numbered(8, 4, PixelFormat::PlanarRgb, TensorMemory::Mem);
    let v = t.view(Region::new(6, 3, 2, 1)).unwrap();
    assert_eq!(v.shape(), &[3, 1, 2]);
    assert_eq!(v.to_vec().unwrap(), vec![30, 31, 62, 63, 94, 95]);
}

#[test]
fn batches_pick_one_image_and_refuse_an_index_past_the_end() {
    let t = Tensor::<u8>::image_batch(
        3,
        &ImageSpec::new(PixelFormat::Rgba, 4, 2),
        Some(SHARED),
        RW,
    )
    .unwrap();
    assert_eq!(t.shape(), &[3, 2, 4, 4]);
    let second = t.batch(1).unwrap();
    assert_eq!(second.shape(), &[2, 4, 4]);
    assert_eq!(second.byte_offset(), 32);
    second.map_write().unwrap().fill(9);
    let all = t.to_vec().unwrap();
    assert!(all[32..64].iter().all(|&b| b == 9) && all[..32].iter().all(|&b| b == 0));
    assert!(matches!(
        t.batch(3),
        Err(Error::IndexOutside { index: 3, len: 3 })
    ));
    assert!(
        second.batch(0).is_err(),
        "a single image has no batch dimension"
    );
    let crop = second.view(Region::new(1, 1, 2, 1)).unwrap();
    assert_eq!(crop.byte_offset(), 32 + 16 + 4);
}

#[test]
fn a_plain_tensor_views_its_height_and_width() {
    let t = Tensor::<u16>::new(&[2, 6, 5, 3], Some(TensorMemory::Mem)).unwrap();
    let v = t.view(Region::new(1, 2, 3, 4)).unwrap();
    assert_eq!(v.shape(), &[2, 4, 3, 3]);
    assert_eq!(v.byte_offset(), (2 * 5 * 3 + 3) * 2);
    let b = t.batch(1).unwrap().view(Region::new(4, 5, 1, 1)).unwrap();
    assert_eq!(b.shape(), &[1, 1, 3]);
    assert!(Tensor::<u8>::new(&[7], Some(TensorMemory::Mem))
        .unwrap()
        .view(Region::new(0, 0, 1, 1))
        .is_err());
}

#[cfg(target_os = "linux")]
proptest! {
    #[test]
    fn any_view_reads_what_its_rectangle_of_the_parent_holds(
        w in 1usize..40, h in 1usize..20, pad in 0usize..9,
        rx in 0usize..40, ry in 0usize..20, rw in 0usize..40, rh in 0usize..20,
    ) {
        let stride = w * 3 + pad;
        let t = Tensor::<u8>::image_from_fd(memfd((stride * h) as u64), &ImageSpec::new(PixelFormat::Rgb, w, h).with_row_stride(stride), RW).unwrap();
        for (y, row) in t.map_strided_write().unwrap().rows_mut().enumerate() {
            for (x, b) in row.iter_mut().enumerate() {
                *b = ((y * stride + x) % 251) as u8;
            }
        }
        let region = Region::new(rx, ry, rw, rh);
        match t.view(region) {
            Ok(v) => {
                prop_assert!(rx + rw <= w && ry + rh <= h);
                let expected: Vec<u8> = (ry..ry + rh)
                    .flat_map(|y| (rx * 3..(rx + rw) * 3).map(move |x| ((y * stride + x) % 251) as u8))
                    .collect();
                prop_assert_eq!(v.to_vec().unwrap(), expected);
            }
            Err(_) => prop_assert!(rx + rw > w || ry + rh > h),
        }
    }
}

#[test]
fn an_image_allocated_with_a_chosen_pitch_keeps_it_and_a_pitch_too_small_is_refused() {
    for memory in [TensorMemory::Mem, SHARED] {
        let t = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Rgba, 40, 8).with_row_stride(256),
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        assert_eq!(t.effective_row_stride(), Some(256), "{memory}");
        assert_eq!(t.strides()[0], 256);
        let nv12 = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Nv12, 40, 8).with_row_stride(64),
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        let planes = nv12.plane_table().unwrap();
        assert_eq!((planes[0].row_stride, planes[1].offset), (64, 64 * 8));
    }
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 40, 8).with_row_stride(100),
        None,
        CpuAccess::ReadWrite,
    )
    .unwrap_err();
    assert!(err.to_string().contains("100"), "{err}");
}

/// Each row of each plane of `a` equals the same row of `b` (their data, padding aside).
fn same_planes(a: &Tensor<u8>, b: &Tensor<u8>) {
    let info = *a.image_info().unwrap();
    let (pa, pb) = (a.plane_table().unwrap(), b.plane_table().unwrap());
    let (ma, mb) = (
        a.map_bytes(hwtensor::Direction::Read).unwrap(),
        b.map_bytes(hwtensor::Direction::Read).unwrap(),
    );
    let (ba, bb) = (ma.as_bytes().unwrap(), mb.as_bytes().unwrap());
    for (k, (x, y)) in pa.iter().zip(&pb).enumerate() {
        let row = info.format.plane_row_bytes(info.width, 1, k).unwrap();
        for r in 0..x.rows {
            let (i, j) = (x.offset + r * x.row_stride, y.offset + r * y.row_stride);
            assert_eq!(
                ba[i..i + row],
                bb[j..j + row],
                "{} plane {k} row {r}",
                info.format
            );
        }
    }
}

#[test]
fn padded_i420_yv12_and_nv24_images_copy_plane_by_plane_both_ways() {
    let (w, h) = (64, 48);
    for format in [PixelFormat::I420, PixelFormat::Yv12, PixelFormat::Nv24] {
        let padded = Tensor::<u8>::image(
            &ImageSpec::new(format, w, h).with_row_stride(format.min_row_bytes(w, 1).unwrap() + 64),
            Some(TensorMemory::Mem),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        {
            let mut m = padded.map_bytes(hwtensor::Direction::Write).unwrap();
            for (i, b) in m.as_bytes_mut().unwrap().iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
        }
        let tight = padded.to_memory(TensorMemory::Mem).unwrap();
        assert!(
            tight.row_stride().is_none(),
            "{format}: to_memory makes a tight image"
        );
        same_planes(&padded, &tight);
        let back = Tensor::<u8>::image(
            &ImageSpec::new(format, w, h).with_row_stride(padded.image_info().unwrap().row_stride),
            Some(TensorMemory::Mem),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        back.copy_from(&tight).unwrap();
        same_planes(&tight, &back);
    }
}

/// A 1364x768 I420 frame as GStreamer lays it out by default: luma rows of 1364 bytes (already
/// a multiple of 4), chroma rows of 682 bytes rounded up to 684, where the I420 rule gives 682.
const GST_W: usize = 1364;
const GST_H: usize = 768;
const GST_LUMA: usize = 1364;
const GST_CHROMA: usize = 684;

fn gst_i420(memory: TensorMemory) -> Tensor<u8> {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::I420, GST_W, GST_H)
            .with_row_stride(GST_LUMA)
            .with_chroma_stride(GST_CHROMA),
        Some(memory),
        RW,
    )
    .unwrap();
    {
        let mut m = t.map_bytes(hwtensor::Direction::Write).unwrap();
        for (i, b) in m.as_bytes_mut().unwrap().iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
    }
    t
}

#[test]
fn an_i420_image_with_gstreamers_chroma_stride_has_the_plane_table_gstreamer_has() {
    let t = gst_i420(TensorMemory::Mem);
    let info = *t.image_info().unwrap();
    assert_eq!(info.chroma_stride, Some(GST_CHROMA));
    let planes = t.plane_table().unwrap();
    let luma = GST_LUMA * GST_H;
    let chroma = GST_CHROMA * GST_H / 2;
    assert_eq!(
        planes
            .iter()
            .map(|p| (p.offset, p.row_stride))
            .collect::<Vec<_>>(),
        [
            (0, GST_LUMA),
            (luma, GST_CHROMA),
            (luma + chroma, GST_CHROMA)
        ]
    );
    // The map reaches the end of the last V row.
    let last = planes[2];
    let end = last.offset + (last.rows - 1) * last.row_stride + GST_W / 2;
    assert_eq!(t.map_bytes(hwtensor::Direction::Read).unwrap().len(), end);
    // The rule's stride is no stride of its own.
    let derived = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::I420, 64, 4)
            .with_row_stride(64)
            .with_chroma_stride(32),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    assert_eq!(derived.image_info().unwrap().chroma_stride, None);
}

#[test]
fn a_chroma_stride_travels_through_copies_and_blobs_both_ways() {
    let t = gst_i420(SHARED);
    let tight = t.to_memory(TensorMemory::Mem).unwrap();
    assert_eq!(tight.image_info().unwrap().chroma_stride, None);
    same_planes(&t, &tight);
    let back = gst_i420(TensorMemory::Mem);
    back.copy_from(&tight).unwrap();
    same_planes(&tight, &back);
    let dynamic = TensorDyn::from(t.clone());
    let inline = hwtensor::blob::import_inline(&hwtensor::blob::export_inline(&dynamic).unwrap())
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert_eq!(inline.image_info().unwrap().chroma_stride, Some(GST_CHROMA));
    same_planes(&t, &inline);
    #[cfg(target_os = "linux")]
    {
        let (blob, fds) =
            hwtensor::blob::export(&dynamic, hwtensor::blob::Transport::Reference).unwrap();
        let fds = fds
            .iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect();
        let by_fd = hwtensor::blob::import(&blob, fds).unwrap();
        assert_eq!(by_fd.identity(), t.identity());
        assert_eq!(by_fd.image_info().unwrap().chroma_stride, Some(GST_CHROMA));
    }
}

#[test]
fn a_chroma_stride_that_cannot_hold_a_chroma_row_or_has_no_chroma_planes_is_refused() {
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::I420, 64, 4)
            .with_row_stride(64)
            .with_chroma_stride(30),
        None,
        RW,
    )
    .unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 4)
            .with_row_stride(256)
            .with_chroma_stride(256),
        None,
        RW,
    )
    .unwrap_err();
    assert!(err.to_string().contains("no chroma planes"), "{err}");
    let err = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, 64, 4)
            .with_row_stride(64)
            .with_chroma_stride(96),
        Some(TensorMemory::Gpu),
        RW,
    )
    .unwrap_err();
    assert!(err.to_string().contains("GPU memory"), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn planes_in_one_fd_with_their_own_chroma_stride_import_as_that_image() {
    let t = gst_i420(TensorMemory::Shm);
    let planes = t.plane_table().unwrap();
    let fds = planes
        .iter()
        .map(|p| hwtensor::PlaneFd::new(t.clone_fd().unwrap(), p.offset, p.row_stride))
        .collect();
    let imported = Tensor::<u8>::image_from_planes(
        fds,
        &ImageSpec::new(PixelFormat::I420, GST_W, GST_H),
        CpuAccess::Read,
    )
    .unwrap();
    assert_eq!(imported.identity(), t.identity());
    assert_eq!(
        imported.image_info().unwrap().chroma_stride,
        Some(GST_CHROMA)
    );
    same_planes(&t, &imported);
}

#[test]
fn a_blob_whose_chroma_stride_bit_names_the_derived_stride_is_refused() {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::I420, 64, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    let mut bytes = hwtensor::blob::export_inline(&TensorDyn::from(t)).unwrap();
    bytes[12] |= 1 << 7;
    let err = hwtensor::blob::import_inline(&bytes).unwrap_err();
    assert!(err.to_string().contains("chroma stride"), "{err}");
}

#[test]
fn an_image_whose_rows_and_strides_pass_the_address_space_is_refused_before_any_allocation() {
    let huge = 1usize << 32;
    for memory in [TensorMemory::Mem, TensorMemory::Shm] {
        let err = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Yv12, 16, huge)
                .with_row_stride(16)
                .with_chroma_stride(huge),
            Some(memory),
            RW,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("more bytes than this platform can address"),
            "{memory}: {err}"
        );
    }
    let err = TensorDyn::image(
        &ImageSpec::new(PixelFormat::I420, 16, huge)
            .with_row_stride(huge)
            .with_chroma_stride(huge),
        DType::U8,
        None,
        RW,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Shape(_) | Error::RowStride(_)),
        "{err}"
    );
}

#[test]
fn one_image_spec_carries_strides_and_colours_and_an_allocation_refuses_a_tiled_modifier() {
    let bt709 = hwtensor::Colorimetry::new(
        hwtensor::ColorPrimaries::Bt709,
        hwtensor::TransferFunction::Bt709,
        hwtensor::ColorMatrix::Bt709,
        hwtensor::ColorRange::Limited,
    );
    let spec = ImageSpec::new(PixelFormat::I420, 1364, 8)
        .with_row_stride(1364)
        .with_chroma_stride(684)
        .with_colorimetry(bt709);
    let t = Tensor::<u8>::image(&spec, Some(TensorMemory::Mem), RW).unwrap();
    let info = t.image_info().unwrap();
    assert_eq!((info.row_stride, info.chroma_row_stride()), (1364, 684));
    assert_eq!(info.colorimetry, bt709);
    assert_eq!(ImageSpec::of(info), spec);
    let tiled = spec.with_modifier(hwtensor::DrmModifier(0x0100_0000_0000_0001));
    let err = Tensor::<u8>::image(&tiled, Some(TensorMemory::Mem), RW).unwrap_err();
    assert!(err.to_string().contains("linear"), "{err}");
}

#[test]
fn a_chroma_stride_without_its_row_stride_is_refused_naming_the_fix() {
    let spec = ImageSpec::new(PixelFormat::I420, 64, 8).with_chroma_stride(40);
    let err = Tensor::<u8>::image(&spec, Some(TensorMemory::Mem), RW).unwrap_err();
    assert!(matches!(err, Error::RowStride(_)), "{err}");
    let rust = err.message_for(hwtensor::Lang::Rust);
    assert!(rust.contains("ImageSpec::with_row_stride"), "{rust}");
    let python = err.message_for(hwtensor::Lang::Python);
    assert!(python.contains("ImageSpec(row_stride=)"), "{python}");
}

#[test]
#[cfg(target_os = "linux")]
fn an_import_carries_the_specs_modifier_and_planes_that_disagree_with_its_strides_are_refused() {
    let tiled = ImageSpec::new(PixelFormat::Rgba, 16, 4)
        .with_modifier(hwtensor::DrmModifier(0x0100_0000_0000_0001));
    let t = Tensor::<u8>::image_from_fd(memfd(4096), &tiled, RW).unwrap();
    assert_eq!(t.drm_modifier(), tiled.modifier);
    assert!(t.map_read().is_err(), "a tiled frame read as rows");
    let nv12 = ImageSpec::new(PixelFormat::Nv12, 64, 8).with_row_stride(128);
    let planes = vec![
        hwtensor::PlaneFd::new(memfd(4096), 0, 64),
        hwtensor::PlaneFd::new(memfd(4096), 0, 64),
    ];
    let err = Tensor::<u8>::image_from_planes(planes, &nv12, RW).unwrap_err();
    assert!(
        err.to_string().contains("disagree with the planes"),
        "{err}"
    );
}
