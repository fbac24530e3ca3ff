//! What the fuzz target does with an input, shared with the test that replays found crashes:
//! import a blob the way a receiver does, then use the tensor the way a receiver would.
//!
//! Input layout: a control byte (bit 0: a memfd comes with the blob, its size in 64-byte units
//! in the next two bytes; bit 1: that memfd allows sealing, as a peer's should), then the blob.
//! The blob's last bytes double as knobs for the views and batch items tried.

use std::os::fd::OwnedFd;

use hwtensor::blob::{export, import, Transport};
use hwtensor::{f16, DType, Element, Region, Tensor, TensorDyn, TensorMemory};

/// Imports `data` as described above and, when that succeeds, uses the tensor.
pub fn receive(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let mut fds = Vec::new();
    let mut blob = rest;
    if control & 1 == 1 && rest.len() >= 2 {
        fds.push(memfd(
            u16::from_le_bytes([rest[0], rest[1]]),
            control & 2 == 2,
        ));
        blob = &rest[2..];
    }
    let Ok(t) = import(blob, fds) else {
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
    }
}

fn memfd(units: u16, sealable: bool) -> OwnedFd {
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
    for mode in [Transport::Inline, Transport::Reference] {
        if let Ok((bytes, fds)) = export(&t, mode) {
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
}
