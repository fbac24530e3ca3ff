//! Writes a seed corpus of valid blobs for the `import` target: `cargo run --bin seeds -- DIR`.
//! Each seed is laid out as the target reads it (`receiver.rs`): a control byte, the fd size,
//! the blob.

use hwtensor::blob::{export, Transport};
use hwtensor::{ImageSpec, CpuAccess, DType, PixelFormat, Quantization, Region, Tensor, TensorDyn, TensorMemory};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    let mut q = Tensor::<i8>::new(&[2, 3, 4], Some(TensorMemory::Shm))?;
    q.set_quantization(Some(Quantization::per_tensor(0.5, 1)))?;
    let image = Tensor::<u8>::image(&ImageSpec::new(PixelFormat::Rgba, 16, 8), Some(TensorMemory::Shm), CpuAccess::ReadWrite)?;
    let tensors: Vec<TensorDyn> = vec![
        q.into(),
        image.view(Region::new(2, 2, 8, 4))?.into(),
        image.into(),
        TensorDyn::image(&ImageSpec::new(PixelFormat::Nv12, 8, 6), DType::U8, Some(TensorMemory::Shm), CpuAccess::Read)?,
        TensorDyn::image(&ImageSpec::new(PixelFormat::PlanarRgb, 4, 4), DType::F32, Some(TensorMemory::Shm), CpuAccess::Read)?,
    ];
    for (i, t) in tensors.iter().enumerate() {
        let (blob, _) = export(t, Transport::Reference)?;
        let units = t.buffer_len().div_ceil(64) as u16;
        let mut seed = vec![3u8]; // a sealable memfd of the buffer's size
        seed.extend_from_slice(&units.to_le_bytes());
        seed.extend_from_slice(&blob);
        std::fs::write(format!("{dir}/reference-{i}"), seed)?;
        let (blob, _) = export(t, Transport::Inline)?;
        std::fs::write(format!("{dir}/inline-{i}"), [&[0u8][..], &blob].concat())?;
    }
    Ok(())
}
