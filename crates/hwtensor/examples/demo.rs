//! A small tour: a 1080p RGBA frame in shared memory, handed to a second tensor by fd (as a
//! consumer process would receive it), written on one side and verified on the other, then
//! cropped without a copy and flattened for an NPU.

use std::time::Instant;

use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};

fn main() -> Result<(), hwtensor::Error> {
    println!("backings here:");
    for m in TensorMemory::ALL {
        match m.unavailable_reason() {
            None => println!("  {m:<7} available"),
            Some(why) => println!("  {m:<7} unavailable: {why}"),
        }
    }

    let (w, h) = (1920, 1080);
    let frame = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )?;
    {
        let mut px = frame.map_write()?;
        for (i, b) in px.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
    }

    let started = Instant::now();
    let fd = frame.clone_fd()?;
    let received = Tensor::<u8>::image_from_fd(
        fd,
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        CpuAccess::Read,
    )?;
    let imported_in = started.elapsed();
    let ok = received
        .map_read()?
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i % 251) as u8);
    println!(
        "1080p RGBA frame shared by fd: {} bytes, import + map {:?}, same buffer: {}, pixels verified: {ok}",
        received.buffer_len(),
        imported_in,
        received.identity() == frame.identity()
    );

    let crop = received.view(Region::new(1600, 900, 320, 180))?;
    let flat = crop.to_vec()?;
    println!(
        "crop {:?} at byte offset {} (no copy); flattened for an NPU: {} bytes",
        crop.shape(),
        crop.byte_offset(),
        flat.len()
    );
    if !ok {
        eprintln!("error: the consumer saw different pixels");
        std::process::exit(1);
    }
    Ok(())
}
