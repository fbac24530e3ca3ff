//! GPU images on Windows: D3D11 textures on the process device, seen by the CPU through a
//! staging texture whose pitch is the row stride.

// Raw driver handles: a host device, shared handles, COM pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

mod common;

use hwtensor::gpu::windows::core::Interface;
use hwtensor::gpu::windows::Win32::Graphics::Direct3D11::{
    ID3D11Resource, ID3D11Texture2D, D3D11_BIND_SHADER_RESOURCE, D3D11_TEXTURE2D_DESC,
    D3D11_USAGE_DEFAULT,
};
use hwtensor::gpu::windows::Win32::Graphics::Dxgi::Common::{
    DXGI_FORMAT_R8G8B8A8_UNORM, DXGI_SAMPLE_DESC,
};
use hwtensor::{f16, CpuAccess, Error, ImageSpec, PixelFormat, Tensor, TensorMemory};

use common::{device_or_skip, skip_unless_required};

const GPU: Option<TensorMemory> = Some(TensorMemory::Gpu);
const RW: CpuAccess = CpuAccess::ReadWrite;

/// Writes a pattern over every element (a staging texture's rows are padded to its pitch).
fn pattern(t: &Tensor<u8>, seed: u8) {
    let mut m = t.map_strided_write().unwrap();
    for (y, row) in m.rows_mut().enumerate() {
        for (x, b) in row.iter_mut().enumerate() {
            *b = ((y * 131 + x) as u8).wrapping_mul(7).wrapping_add(seed);
        }
    }
}

#[test]
fn a_gpu_image_is_a_texture_whose_staging_pitch_is_its_row_stride() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 100, 10), GPU, RW).unwrap();
    assert_eq!(t.memory(), TensorMemory::Gpu);
    assert!(t.d3d11_texture().is_some());
    let stride = t.image_info().unwrap().row_stride;
    assert!(stride >= 400, "a row holds at least its pixels: {stride}");
    assert!(t.buffer_len() >= stride * 10);
    assert!(t.to_vec().unwrap().iter().all(|&b| b == 0), "zeroed");
}

#[test]
fn what_a_write_map_leaves_is_in_the_texture_where_the_gpu_sees_it() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let a = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Bgra, 64, 8), GPU, RW).unwrap();
    let b = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Bgra, 64, 8), GPU, RW).unwrap();
    pattern(&a, 3);
    let (ta, tb): (ID3D11Resource, ID3D11Resource) =
        (a.d3d11_texture().unwrap(), b.d3d11_texture().unwrap());
    // A copy on the GPU, outside this library: only what reached a's texture can arrive in b.
    // SAFETY: two textures of one grid on the process device, inside its queue bracket.
    unsafe {
        let _ = d.context().cast::<ID3D11Resource>();
        d.context().CopyResource(&tb, &ta);
    }
    assert_eq!(b.to_vec().unwrap(), a.to_vec().unwrap());
    assert!(b.to_vec().unwrap().iter().any(|&x| x != 0));
}

#[test]
fn every_format_a_dxgi_format_holds_allocates_and_round_trips() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    for format in [
        PixelFormat::Rgba,
        PixelFormat::Bgra,
        PixelFormat::Grey,
        PixelFormat::Nv12,
        PixelFormat::Nv16,
        PixelFormat::Nv24,
        PixelFormat::Yuyv,
        PixelFormat::Vyuy,
    ] {
        let t = Tensor::<u8>::image(&ImageSpec::new(format, 32, 6), GPU, RW).unwrap();
        pattern(&t, 11);
        let host = Tensor::<u8>::image(&ImageSpec::new(format, 32, 6), Some(TensorMemory::Mem), RW)
            .unwrap();
        host.copy_from(&t).unwrap();
        assert_eq!(host.to_vec().unwrap(), t.to_vec().unwrap(), "{format}");
    }
    let f = Tensor::<f32>::image(&ImageSpec::new(PixelFormat::Rgba, 8, 4), GPU, RW).unwrap();
    f.copy_from_flat(&vec![0.5f32; 8 * 4 * 4]).unwrap();
    assert!(f.to_vec().unwrap().iter().all(|&v| v == 0.5));
    let h = Tensor::<f16>::image(&ImageSpec::new(PixelFormat::Rgba, 8, 4), GPU, RW).unwrap();
    h.copy_from_flat(&vec![f16::from_f32(1.5); 8 * 4 * 4])
        .unwrap();
    assert!(h.to_vec().unwrap().iter().all(|&v| v == f16::from_f32(1.5)));
}

#[test]
fn a_format_no_dxgi_format_holds_is_refused_naming_what_is_possible() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let err = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgb, 32, 6), GPU, RW).unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("DXGI"), "{err}");
    let err = Tensor::<u8>::new(&[64], GPU).unwrap_err();
    assert!(err.to_string().contains("Tensor::image"), "{err}");
    let err =
        Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Grey, 20_000, 2), GPU, RW).unwrap_err();
    assert!(err.to_string().contains("16384"), "{err}");
}

#[test]
fn a_gpu_image_is_shared_as_an_nt_handle_with_its_completion() {
    let test = "a_gpu_image_is_shared_as_an_nt_handle_with_its_completion";
    let Some(d) = device_or_skip(test) else {
        return;
    };
    let t = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 16, 16), GPU, RW).unwrap();
    pattern(&t, 5);
    match t.share_gpu() {
        Ok(share) => {
            use std::os::windows::io::AsHandle;
            assert!(share.completion.value <= d.last_signalled());
            assert_eq!(share.completion.fence.is_some(), d.export_fence().is_some());
            // The receiving side (here the same device): the same pixels, through the handle.
            let back = Tensor::<u8>::image_from_gpu_share(
                share.texture.as_handle(),
                &share.completion,
                &ImageSpec::new(PixelFormat::Rgba, 16, 16),
                RW,
            )
            .unwrap();
            assert_eq!(back.to_vec().unwrap(), t.to_vec().unwrap());
        }
        Err(Error::Unavailable { reason, .. }) => skip_unless_required(
            test,
            &format!("no shared NT handles under this driver ({reason})"),
        ),
        Err(e) => panic!("{e}"),
    }
    let host = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 16),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    assert!(matches!(host.share_gpu(), Err(Error::InvalidOperation(_))));
}

#[test]
fn a_handle_that_is_not_a_shared_texture_is_refused_on_import() {
    use hwtensor::gpu::windows::Win32::System::Threading::CreateEventW;
    use std::os::windows::io::{AsHandle, FromRawHandle, OwnedHandle};
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    // SAFETY: an unnamed event, owned by the test.
    let event = unsafe { CreateEventW(None, true, false, None) }.unwrap();
    // SAFETY: a fresh handle nothing else owns.
    let event = unsafe { OwnedHandle::from_raw_handle(event.0) };
    let completion = hwtensor::gpu::GpuCompletion::new(None, 0);
    let err = Tensor::<u8>::image_from_gpu_share(
        event.as_handle(),
        &completion,
        &ImageSpec::new(PixelFormat::Rgba, 16, 16),
        RW,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(_) | Error::Unavailable { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("shared"), "{err}");
}

#[test]
fn whole_gpu_images_and_crops_of_them_copy_on_the_gpu() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let a = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Nv12, 40, 12), GPU, RW).unwrap();
    let b = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Nv12, 40, 12), GPU, RW).unwrap();
    pattern(&a, 9);
    b.copy_from(&a).unwrap();
    assert_eq!(b.to_vec().unwrap(), a.to_vec().unwrap());

    let c = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 40, 12), GPU, RW).unwrap();
    let d = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 40, 12), GPU, RW).unwrap();
    pattern(&c, 1);
    let region = hwtensor::Region::new(4, 2, 16, 8);
    let (from, to) = (c.view(region).unwrap(), d.view(region).unwrap());
    to.copy_from(&from).unwrap();
    assert_eq!(to.to_vec().unwrap(), from.to_vec().unwrap());
    assert!(
        d.to_vec().unwrap()[..4].iter().all(|&x| x == 0),
        "outside the crop is untouched"
    );
}

#[test]
fn host_images_go_up_and_views_come_down_through_the_staging_texture() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let host = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 50, 7),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    pattern(&host, 17);
    let gpu = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 50, 7), GPU, RW).unwrap();
    gpu.copy_from(&host).unwrap();
    assert_eq!(
        gpu.to_vec().unwrap(),
        host.to_vec().unwrap(),
        "up, then read through a map"
    );

    let region = hwtensor::Region::new(3, 2, 16, 4);
    let crop = gpu.view(region).unwrap();
    let down = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    down.copy_from(&crop).unwrap();
    assert_eq!(
        down.to_vec().unwrap(),
        host.view(region).unwrap().to_vec().unwrap(),
        "a view down"
    );

    // A GPU view as the destination: the texture comes down into staging first, so the rest stays.
    let small = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 4),
        Some(TensorMemory::Mem),
        RW,
    )
    .unwrap();
    gpu.view(region).unwrap().copy_from(&small).unwrap();
    let after = gpu.to_vec().unwrap();
    assert!(gpu
        .view(region)
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    assert_eq!(
        after[..4],
        host.to_vec().unwrap()[..4],
        "outside the view is untouched"
    );
}

#[test]
fn a_grey_crop_of_one_gpu_image_lands_in_a_bigger_gpu_image() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let a = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Grey, 30, 10), GPU, RW).unwrap();
    let b = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Grey, 70, 20), GPU, RW).unwrap();
    pattern(&a, 2);
    let from = a.view(hwtensor::Region::new(5, 3, 12, 6)).unwrap();
    let to = b.view(hwtensor::Region::new(40, 11, 12, 6)).unwrap();
    to.copy_from(&from).unwrap();
    assert_eq!(to.to_vec().unwrap(), from.to_vec().unwrap());
    let all = b.to_vec().unwrap();
    assert_eq!(
        all.iter().filter(|&&x| x != 0).count(),
        from.to_vec().unwrap().iter().filter(|&&x| x != 0).count(),
        "nothing else of b changed"
    );
}

#[test]
fn views_of_different_formats_copy_between_the_staging_textures() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    // RGBA8 into BGRA8 has no GPU-side copy (different DXGI formats): the bytes travel through
    // both staging textures, unchanged, as copy_from promises.
    let a = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 24, 6), GPU, RW).unwrap();
    let b = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Bgra, 40, 9), GPU, RW).unwrap();
    pattern(&a, 31);
    let from = a.view(hwtensor::Region::new(2, 1, 10, 4)).unwrap();
    let to = b.view(hwtensor::Region::new(20, 3, 10, 4)).unwrap();
    to.copy_from(&from).unwrap();
    assert_eq!(to.to_vec().unwrap(), from.to_vec().unwrap());
    // One image of a batch is a band of rows of the tall texture: copied between two batches.
    let n =
        Tensor::<u8>::image_batch(2, &ImageSpec::new(PixelFormat::Grey, 8, 4), GPU, RW).unwrap();
    let m =
        Tensor::<u8>::image_batch(2, &ImageSpec::new(PixelFormat::Grey, 8, 4), GPU, RW).unwrap();
    pattern(&n, 5);
    m.batch(1).unwrap().copy_from(&n.batch(0).unwrap()).unwrap();
    assert_eq!(
        m.batch(1).unwrap().to_vec().unwrap(),
        n.batch(0).unwrap().to_vec().unwrap()
    );
    assert!(m
        .batch(0)
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&x| x == 0));
}

/// A texture as a host makes it on the process device: `w`x`h` RGBA8.
fn host_texture(d: &hwtensor::gpu::GpuDevice, w: u32, h: u32) -> ID3D11Texture2D {
    let desc = D3D11_TEXTURE2D_DESC {
        Width: w,
        Height: h,
        MipLevels: 1,
        ArraySize: 1,
        Format: DXGI_FORMAT_R8G8B8A8_UNORM,
        SampleDesc: DXGI_SAMPLE_DESC {
            Count: 1,
            Quality: 0,
        },
        Usage: D3D11_USAGE_DEFAULT,
        BindFlags: D3D11_BIND_SHADER_RESOURCE.0 as u32,
        CPUAccessFlags: 0,
        MiscFlags: 0,
    };
    let mut texture = None;
    // SAFETY: a valid description and an out-pointer to a local.
    unsafe { d.device().CreateTexture2D(&desc, None, Some(&mut texture)) }.unwrap();
    texture.unwrap()
}

#[test]
fn a_hosts_own_texture_becomes_a_tensor_over_the_same_texels() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let texture = host_texture(d, 16, 4);
    let t = Tensor::<u8>::from_d3d11_texture(
        &texture,
        0,
        &ImageSpec::new(PixelFormat::Rgba, 16, 4),
        RW,
    )
    .unwrap();
    assert_eq!(t.memory(), TensorMemory::Gpu);
    pattern(&t, 5);
    // A second tensor over the same texture sees what the first wrote into it.
    let again = Tensor::<u8>::from_d3d11_texture(
        &texture,
        0,
        &ImageSpec::new(PixelFormat::Rgba, 16, 4),
        RW,
    )
    .unwrap();
    assert_eq!(again.to_vec().unwrap(), t.to_vec().unwrap());
    assert!(again.to_vec().unwrap().iter().any(|&b| b != 0));
}

#[test]
fn a_host_texture_that_is_not_the_image_or_a_completion_never_signalled_is_refused() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let texture = host_texture(d, 16, 4);
    let wrong = Tensor::<u8>::from_d3d11_texture(
        &texture,
        0,
        &ImageSpec::new(PixelFormat::Rgba, 32, 4),
        RW,
    );
    assert!(matches!(wrong, Err(Error::InvalidArgument(_))), "{wrong:?}");
    let never = d.last_signalled() + 1000;
    let early = Tensor::<u8>::from_d3d11_texture(
        &texture,
        never,
        &ImageSpec::new(PixelFormat::Rgba, 16, 4),
        RW,
    );
    let err = early.unwrap_err().to_string();
    assert!(err.contains("never signalled"), "{err}");
}

#[test]
fn a_gpu_image_crosses_a_named_pipe_as_its_texture_and_completion() {
    use hwtensor::handoff::{recv, send, Pipe, PipeListener};
    let test = test_name!();
    if device_or_skip(test).is_none() {
        return;
    }
    let t = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 32, 8), GPU, RW).unwrap();
    pattern(&t, 9);
    if let Err(Error::Unavailable { reason, .. }) = t.share_gpu() {
        return skip_unless_required(
            test,
            &format!("no shared textures under this driver ({reason})"),
        );
    }
    let name = format!("hwtensor-d3d11-handoff-{}", std::process::id());
    let mut listener = PipeListener::bind(&name).unwrap();
    let wait = std::time::Duration::from_secs(10);
    let receiver = std::thread::spawn(move || {
        let pipe = Pipe::connect(&name, wait).unwrap();
        recv(&pipe, wait).unwrap().into_tensor::<u8>().unwrap()
    });
    let pipe = listener.accept(wait).unwrap();
    send(&pipe, &t.clone().into()).unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(got.memory(), TensorMemory::Gpu);
    assert_eq!(
        got.to_vec().unwrap(),
        t.to_vec().unwrap(),
        "the same texels"
    );
}
