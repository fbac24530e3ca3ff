//! What the fuzz target does with an input, shared with the test that replays found crashes:
//! import a blob the way a receiver does, then use the tensor the way a receiver would.
//!
//! Input layout: a control byte (bit 0: a memfd comes with the blob, its size in 64-byte units
//! in the next two bytes; bit 1: that memfd allows sealing, as a peer's should), then the blob.
//! The blob's last bytes double as knobs for the views and batch items tried. Off Linux there
//! are no fds: the memfd is left out and the blob goes through the inline import, so the same
//! corpus exercises the wire format on every platform.

use hwtensor::blob::{export_inline, import_inline};
use hwtensor::{f16, DType, Element, Region, Tensor, TensorDyn, TensorMemory};

/// Imports `data` as described above and, when that succeeds, uses the tensor.
pub fn receive(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let with_fd = control & 1 == 1 && rest.len() >= 2;
    let blob = if with_fd { &rest[2..] } else { rest };
    let Ok(t) = import(blob, with_fd.then_some((rest, control & 2 == 2))) else {
        return;
    };
    let knobs = &blob[blob.len().saturating_sub(8)..];
    match t.dtype() {
        DType::U8 => use_as::<u8>(&t, knobs),
        DType::I8 => use_as::<i8>(&t, knobs),
        DType::U16 => use_as::<u16>(&t, knobs),
        DType::I16 => use_as::<i16>(&t, knobs),
        DType::U32 => use_as::<u32>(&t, knobs),
        DType::I32 => use_as::<i32>(&t, knobs),
        DType::U64 => use_as::<u64>(&t, knobs),
        DType::I64 => use_as::<i64>(&t, knobs),
        DType::F16 => use_as::<f16>(&t, knobs),
        DType::F32 => use_as::<f32>(&t, knobs),
        DType::F64 => use_as::<f64>(&t, knobs),
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
