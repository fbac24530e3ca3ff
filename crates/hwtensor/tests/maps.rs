//! Maps: declared access, aliasing across views, ndarray views.

use hwtensor::{CpuAccess, Error, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};

mod common;
use common::SHARED;

fn image(access: CpuAccess) -> Tensor<u8> {
    Tensor::image(
        &ImageSpec::new(PixelFormat::Rgba, 8, 4),
        Some(SHARED),
        access,
    )
    .unwrap()
}

#[test]
fn a_map_in_an_undeclared_direction_is_refused() {
    let read_only = image(CpuAccess::Read);
    assert!(read_only.map_read().is_ok());
    assert!(matches!(
        read_only.map_write(),
        Err(Error::AccessDenied {
            requested: "write",
            ..
        })
    ));
    assert!(matches!(read_only.map(), Err(Error::AccessDenied { .. })));

    let write_only = image(CpuAccess::Write);
    assert!(write_only.map_write().is_ok());
    assert!(matches!(
        write_only.map_read(),
        Err(Error::AccessDenied {
            requested: "read",
            ..
        })
    ));

    let none = image(CpuAccess::None);
    assert!(none.map_read().is_err() && none.map_write().is_err() && none.map().is_err());
}

#[test]
fn read_maps_share_and_a_write_map_excludes_every_map_it_overlaps() {
    let t = image(CpuAccess::ReadWrite);
    let left = t.view(Region::new(0, 0, 4, 4)).unwrap();
    let right = t.view(Region::new(4, 0, 4, 4)).unwrap();
    let across = t.view(Region::new(2, 1, 4, 2)).unwrap();
    {
        let _a = left.map_strided_read().unwrap();
        let _b = right.map_strided_read().unwrap();
        assert!(matches!(
            t.map_write(),
            Err(Error::MapBusy {
                held: "for reading"
            })
        ));
    }
    {
        let _w = left.map_strided_write().unwrap();
        assert!(
            right.map_strided_write().is_ok(),
            "the right half shares no byte with the left half's rows"
        );
        assert!(matches!(
            across.map_strided_read(),
            Err(Error::MapBusy {
                held: "for writing"
            })
        ));
        assert!(matches!(t.map(), Err(Error::MapBusy { .. })));
    }
    assert!(t.map().is_ok(), "dropping the maps releases the buffer");
}

/// Fills part `i` with `i + 1` from a thread of its own, every part's write map live at the
/// same moment (a barrier waits for all of them): each must map beside the others.
fn fill_at_once(parts: &[Tensor<u8>]) {
    let together = std::sync::Barrier::new(parts.len());
    std::thread::scope(|s| {
        for (i, part) in parts.iter().enumerate() {
            let together = &together;
            s.spawn(move || {
                let mut m = part
                    .map_strided_write()
                    .expect("a disjoint part maps for writing");
                together.wait();
                m.fill(i as u8 + 1);
            });
        }
    });
}

#[test]
fn tiles_of_one_image_are_written_from_threads_at_once() {
    const SIDE: usize = 2;
    let (w, h) = (640, 480);
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(SHARED),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    let (tw, th) = (w / SIDE, h / SIDE);
    let tiles: Vec<_> = (0..SIDE * SIDE)
        .map(|i| {
            let (x, y) = (i % SIDE * tw, i / SIDE * th);
            t.view(Region::new(x, y, tw, th)).unwrap()
        })
        .collect();
    fill_at_once(&tiles);
    let m = t.map_read().unwrap();
    for (i, _) in tiles.iter().enumerate() {
        let (x, y) = (i % SIDE * tw, i / SIDE * th);
        let corner = |dx: usize, dy: usize| m[((y + dy) * w + x + dx) * 4];
        assert_eq!(corner(0, 0), i as u8 + 1, "tile {i}");
        assert_eq!(corner(tw - 1, th - 1), i as u8 + 1, "tile {i}");
    }
}

#[test]
fn a_view_of_part_of_the_rows_has_no_slice_map_and_its_strided_map_fills_only_its_pixels() {
    let t = image(CpuAccess::ReadWrite);
    let crop = t.view(Region::new(2, 1, 3, 2)).unwrap();
    assert!(matches!(crop.map_write(), Err(Error::NotContiguous { .. })));
    assert!(matches!(crop.map_read(), Err(Error::NotContiguous { .. })));
    crop.map_strided_write().unwrap().fill(9);
    let whole = t.to_vec().unwrap();
    let nines = whole.iter().filter(|&&b| b == 9).count();
    assert_eq!(
        nines,
        3 * 2 * 4,
        "the crop's 6 RGBA pixels, not the parent's bytes between its rows"
    );
    let rows: Vec<Vec<u8>> = crop
        .map_strided_read()
        .unwrap()
        .rows()
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(rows, vec![vec![9; 12]; 2]);
    let strip = t.view(Region::new(0, 1, 8, 2)).unwrap();
    assert!(
        strip.map_read().is_ok(),
        "whole rows of a tight image are contiguous"
    );
}

#[test]
fn a_map_is_the_same_memory_every_time() {
    let t = Tensor::<u32>::new(&[1024], Some(SHARED)).unwrap();
    let p1 = t.map_read().unwrap().as_ptr();
    let p2 = t.map().unwrap().as_ptr();
    assert_eq!(p1, p2, "one persistent mapping, not an mmap per map");
}

#[test]
fn ndarray_views_follow_the_real_strides() {
    let mut t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgb, 3, 2),
        Some(TensorMemory::Mem),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert!(
        t.set_row_stride(9).is_ok(),
        "2 rows of 9 bytes fit in the 18-byte buffer"
    );
    {
        let mut m = t.map().unwrap();
        let mut v = m.view_mut();
        v[[1, 2, 0]] = 42;
        v[[0, 0, 2]] = 7;
    }
    let m = t.map_read().unwrap();
    assert_eq!(m[9 + 2 * 3], 42);
    assert_eq!(m[2], 7);
    assert_eq!(m.view().shape(), &[2, 3, 3]);
    assert_eq!(m.view()[[1, 2, 0]], 42);
}

#[test]
fn a_caller_names_the_view_types_through_hwtensors_own_ndarray() {
    let t = Tensor::<u16>::new(&[2, 3], Some(TensorMemory::Mem)).unwrap();
    t.map_write().unwrap().fill(5);
    let m = t.map_read().unwrap();
    let v: hwtensor::ndarray::ArrayViewD<'_, u16> = m.view();
    assert_eq!(v.sum(), 30);
}

#[test]
fn copy_from_flat_and_copy_to_flat_refuse_a_slice_of_the_wrong_length() {
    let t = Tensor::<f32>::new(&[2, 3], Some(TensorMemory::Mem)).unwrap();
    assert!(matches!(t.copy_from_flat(&[1.0; 5]), Err(Error::Length(_))));
    assert!(matches!(
        t.copy_to_flat(&mut [0.0; 7]),
        Err(Error::Length(_))
    ));
    t.copy_from_flat(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn strips_of_one_image_are_written_from_threads_at_once() {
    const STRIPS: usize = 4;
    let (w, h) = (1920, 1080);
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(SHARED),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    let rows = h / STRIPS;
    let strips: Vec<_> = (0..STRIPS)
        .map(|i| t.view(Region::new(0, i * rows, w, rows)).unwrap())
        .collect();
    fill_at_once(&strips);
    let m = t.map_read().unwrap();
    let row_bytes = w * 4;
    for i in 0..STRIPS {
        let first = i * rows * row_bytes;
        assert_eq!(m[first], i as u8 + 1, "strip {i}");
        assert_eq!(m[first + rows * row_bytes - 1], i as u8 + 1, "strip {i}");
    }
}

#[test]
fn a_write_map_of_a_strip_excludes_overlapping_views_and_the_whole() {
    let t = Tensor::<u8>::new(&[8, 64], Some(SHARED)).unwrap();
    let top = t.view(Region::new(0, 0, 64, 4)).unwrap();
    let middle = t.view(Region::new(0, 2, 64, 4)).unwrap();
    let bottom = t.view(Region::new(0, 4, 64, 4)).unwrap();
    let _w = top.map_write().unwrap();
    assert!(matches!(
        middle.map_read(),
        Err(Error::MapBusy {
            held: "for writing"
        })
    ));
    assert!(matches!(t.map_read(), Err(Error::MapBusy { .. })));
    assert!(
        bottom.map_write().is_ok(),
        "rows 4..8 touch nothing of rows 0..4"
    );
}
