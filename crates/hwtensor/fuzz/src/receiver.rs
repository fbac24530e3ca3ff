//! What the fuzz target does with an input, shared with the test that replays found crashes:
//! import a blob the way a receiver does, then use the tensor the way a receiver would.
//!
//! Input layout: a control byte (bit 0: a memfd comes with the blob, its size in 64-byte units
//! in the next two bytes; bit 1: that memfd allows sealing, as a peer's should), then the blob.
//! The blob's last bytes double as knobs for the views and batch items tried. Off Linux there
//! are no fds: the memfd is left out and the blob goes through the inline import, so the same
//! corpus exercises the wire format on every platform.

use hwtensor::blob::{export_inline, import_inline};
use hwtensor::{f16, DType, Element, ImageSpec, Region, Tensor, TensorDyn, TensorMemory};

/// Imports `data` as described above and, when that succeeds, uses the tensor.
pub fn receive(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let with_fd = control & 1 == 1 && rest.len() >= 2;
    let blob = if with_fd { &rest[2..] } else { rest };
    if let Ok(t) = import(blob, with_fd.then_some((rest, control & 2 == 2))) {
        use_any(&t, &blob[blob.len().saturating_sub(8)..]);
    }
}

/// A valid blob to nudge, and the size of the memfd that comes with it (by reference).
pub struct Seed {
    pub blob: Vec<u8>,
    pub fd_len: Option<usize>,
}

/// Valid blobs of every element size, views at offsets, images, quantization: what
/// [`nudge`] starts from. Where this platform has fds, each by reference and inline.
pub fn seeds() -> &'static [Seed] {
    static SEEDS: std::sync::OnceLock<Vec<Seed>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| make_seeds().unwrap_or_default())
}

fn make_seeds() -> hwtensor::Result<Vec<Seed>> {
    use hwtensor::{CpuAccess, PixelFormat, Quantization};
    let memory = match cfg!(target_os = "linux") {
        true => TensorMemory::Shm,
        false => TensorMemory::Mem,
    };
    let mut q = Tensor::<i8>::new(&[2, 3, 4], Some(memory))?;
    q.set_quantization(Some(Quantization::per_tensor(0.5, 1)))?;
    let image = TensorDyn::image(
        &ImageSpec::new(PixelFormat::Rgba, 16, 8),
        DType::U8,
        Some(memory),
        CpuAccess::ReadWrite,
    )?;
    let mut tensors: Vec<TensorDyn> = vec![
        q.into(),
        image.view(Region::new(2, 2, 8, 4))?,
        image,
        TensorDyn::image(
            &ImageSpec::new(PixelFormat::Nv12, 8, 6),
            DType::U8,
            Some(memory),
            CpuAccess::Read,
        )?,
        TensorDyn::image(
            &ImageSpec::new(PixelFormat::PlanarRgb, 4, 4),
            DType::F32,
            Some(memory),
            CpuAccess::Read,
        )?,
    ];
    for dtype in [DType::U16, DType::F16, DType::I32, DType::F64, DType::U64] {
        tensors.push(TensorDyn::new(&[3, 5], dtype, Some(memory))?.batch(1)?);
    }
    let mut seeds = Vec::new();
    for t in &tensors {
        #[cfg(target_os = "linux")]
        {
            let (blob, _) = hwtensor::blob::export(t, hwtensor::blob::Transport::Reference)?;
            seeds.push(Seed {
                blob,
                fd_len: Some(t.buffer_len()),
            });
        }
        seeds.push(Seed {
            blob: export_inline(t)?,
            fd_len: None,
        });
    }
    Ok(seeds)
}

/// Input layout: a byte picking a seed, then pairs (word, delta): the 4-byte word at byte
/// 4 * word of the seed's blob gets the signed delta added. So every field a peer controls,
/// offsets, strides, plane records and lengths included, moves by small amounts, which random
/// bytes rarely do (the misaligned offsets this found in 2 minutes were missed for months).
/// Returns whether the nudged blob imported.
pub fn nudge(data: &[u8]) -> bool {
    let (seeds, Some((&pick, pairs))) = (seeds(), data.split_first()) else {
        return false;
    };
    let Some(seed) = seeds.get(usize::from(pick) % seeds.len().max(1)) else {
        return false;
    };
    let mut blob = seed.blob.clone();
    for pair in pairs.chunks_exact(2) {
        let at = usize::from(pair[0]) * 4;
        if let Some(word) = blob.get_mut(at..at + 4) {
            let w = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            let nudged = w.wrapping_add_signed(i32::from(pair[1] as i8));
            word.copy_from_slice(&nudged.to_le_bytes());
        }
    }
    let imported = match seed.fd_len {
        #[cfg(target_os = "linux")]
        Some(len) => {
            let units = u16::try_from(len.div_ceil(64)).unwrap_or(u16::MAX);
            hwtensor::blob::import(&blob, vec![memfd(units, true)])
        }
        _ => import_inline(&blob),
    };
    let Ok(t) = imported else { return false };
    use_any(&t, &pairs[pairs.len().saturating_sub(8)..]);
    true
}

/// Uses an imported tensor as its element type.
fn use_any(t: &TensorDyn, knobs: &[u8]) {
    match t.dtype() {
        DType::U8 => use_as::<u8>(t, knobs),
        DType::I8 => use_as::<i8>(t, knobs),
        DType::U16 => use_as::<u16>(t, knobs),
        DType::I16 => use_as::<i16>(t, knobs),
        DType::U32 => use_as::<u32>(t, knobs),
        DType::I32 => use_as::<i32>(t, knobs),
        DType::U64 => use_as::<u64>(t, knobs),
        DType::I64 => use_as::<i64>(t, knobs),
        DType::F16 => use_as::<f16>(t, knobs),
        DType::F32 => use_as::<f32>(t, knobs),
        DType::F64 => use_as::<f64>(t, knobs),
        _ => {} // a type newer than this target: imported, nothing more to try
    }
}

/// Imports `blob` with the memfd `fd` describes (its size in the first two bytes, whether it is
/// sealable), where this platform has fds.
#[cfg(target_os = "linux")]
fn import(blob: &[u8], fd: Option<(&[u8], bool)>) -> hwtensor::Result<TensorDyn> {
    let fds = fd
        .map(|(size, sealable)| memfd(u16::from_le_bytes([size[0], size[1]]), sealable))
        .into_iter()
        .collect();
    hwtensor::blob::import(blob, fds)
}

#[cfg(not(target_os = "linux"))]
fn import(blob: &[u8], _fd: Option<(&[u8], bool)>) -> hwtensor::Result<TensorDyn> {
    import_inline(blob)
}

#[cfg(target_os = "linux")]
fn memfd(units: u16, sealable: bool) -> std::os::fd::OwnedFd {
    let mut flags = rustix::fs::MemfdFlags::CLOEXEC;
    if sealable {
        flags |= rustix::fs::MemfdFlags::ALLOW_SEALING;
    }
    let fd = rustix::fs::memfd_create("fuzz", flags).expect("memfd_create");
    rustix::fs::ftruncate(&fd, u64::from(units) * 64).expect("ftruncate");
    fd
}

/// Everything a receiver does after an import: maps, ndarray views, sub-views and batch
/// items, copies, and handing it on (export and import again).
fn use_as<T: Element>(t: &TensorDyn, knobs: &[u8]) {
    let Ok(t) = t.as_tensor::<T>() else {
        return;
    };
    let k = |i: usize| usize::from(knobs.get(i).copied().unwrap_or(0));
    read_everything(t);
    if let Ok(mut m) = t.map_write() {
        m.as_bytes_mut().fill(0x5a);
        let _ = m.view_mut().len();
    }
    if let Ok(mut m) = t.map_strided_write() {
        for row in m.rows_mut() {
            row.fill(T::default());
        }
        let _ = m.get_mut(&vec![usize::MAX; t.shape().len()]);
        let _ = m.view_mut().len();
    }
    let regions = [
        Region::new(k(0), k(1), k(2), k(3)),
        Region::new(0, 0, k(4), k(5)),
        Region::new(usize::MAX - k(6), k(7), 1, 1),
    ];
    for region in regions {
        if let Ok(v) = t.view(region) {
            read_everything(&v);
            if let Ok(inner) = v.view(Region::new(k(7), k(6), k(5), k(4))) {
                read_everything(&inner);
            }
        }
    }
    for index in [0, k(0), usize::MAX] {
        if let Ok(item) = t.batch(index) {
            read_everything(&item);
        }
    }
    if let Ok(copy) = Tensor::<T>::new(t.shape(), Some(TensorMemory::Mem)) {
        let _ = copy.copy_from(t);
        let _ = t.copy_from(&copy);
    }
    let t: TensorDyn = t.clone().into();
    if let Ok(bytes) = export_inline(&t) {
        let _ = import_inline(&bytes);
    }
    #[cfg(target_os = "linux")]
    {
        use hwtensor::blob::{export, import, Transport};
        if let Ok((bytes, fds)) = export(&t, Transport::Reference) {
            let fds = fds
                .iter()
                .filter_map(|f| f.try_clone_to_owned().ok())
                .collect();
            let _ = import(&bytes, fds);
        }
    }
}

fn read_everything<T: Element>(t: &Tensor<T>) {
    let _ = t.to_vec();
    if let Ok(m) = t.map_read() {
        let bytes = m.as_bytes();
        std::hint::black_box(bytes.iter().fold(0u8, |a, b| a ^ b));
        std::hint::black_box(m.view().iter().count());
    }
    if let Ok(m) = t.map_strided_read() {
        std::hint::black_box(m.rows().map(<[T]>::len).sum::<usize>());
        std::hint::black_box(m.get(&vec![0; t.shape().len()]));
    }
}
