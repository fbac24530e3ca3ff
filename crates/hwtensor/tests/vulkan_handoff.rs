//! GPU tensors handed over by blob: ordering behind the producer's write, device checks, bad
//! memory fds, and a producer that goes away first.

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use common::device_or_skip;
use hwtensor::blob::{self, Transport, HEADER_LEN};
use hwtensor::handoff::{recv, send};
use hwtensor::{Error, ImportPolicy, Tensor, TensorDyn, TensorMemory};

/// These tests hand GPU memory to themselves: a peer trusted as this process is.
const TRUSTED: ImportPolicy = ImportPolicy::TRUSTED_PEER;

const N: usize = 1 << 16;

fn gpu_tensor_with(seed: u32) -> Tensor<u32> {
    // Written by an asynchronous GPU copy, so the hand-off must order behind GPU work.
    let staging = Tensor::<u32>::new(&[N], Some(TensorMemory::Gpu)).unwrap();
    let data: Vec<u32> = (0..N as u32).map(|i| i ^ seed).collect();
    staging.map_write().unwrap().copy_from_slice(&data);
    let t = Tensor::<u32>::new(&[N], Some(TensorMemory::Gpu)).unwrap();
    t.copy_from(&staging).unwrap();
    t
}

fn owned(fds: &[std::os::fd::BorrowedFd<'_>]) -> Vec<OwnedFd> {
    fds.iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect()
}

#[test]
fn a_consumer_never_sees_bytes_from_before_the_producers_write() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || {
        for round in 0..40u32 {
            let got = recv(&b).unwrap().into_tensor::<u32>().unwrap();
            assert_eq!(got.memory(), TensorMemory::Gpu);
            let m = got.map_read().unwrap();
            let bad = (0..N).find(|&i| m[i] != i as u32 ^ round);
            assert_eq!(bad, None, "round {round}: stale element");
        }
    });
    for round in 0..40u32 {
        let t = gpu_tensor_with(round);
        send(&a, &t.into()).unwrap();
    }
    consumer.join().unwrap();
}

#[test]
fn an_imported_tensor_outlives_its_producer() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t: TensorDyn = gpu_tensor_with(99).into();
    let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    let got = blob::import_with(&bytes, owned(&fds), &TRUSTED).unwrap();
    drop(fds);
    drop(t);
    let got = got.into_tensor::<u32>().unwrap();
    assert_eq!(got.to_vec().unwrap()[1234], 1234 ^ 99);
    // And it can be written and handed on again.
    got.map_write().unwrap()[0] = 77;
    let got: TensorDyn = got.into();
    let (bytes, fds) = blob::export(&got, Transport::Reference).unwrap();
    let again = blob::import_with(&bytes, owned(&fds), &TRUSTED)
        .unwrap()
        .into_tensor::<u32>()
        .unwrap();
    assert_eq!(again.to_vec().unwrap()[0], 77);
}

#[test]
fn a_blob_from_another_gpu_is_refused_naming_both_devices() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let t: TensorDyn = gpu_tensor_with(1).into();
    let (mut bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    bytes[96..112].copy_from_slice(&[0xee; 16]);
    let err = blob::import_with(&bytes, owned(&fds), &TRUSTED)
        .unwrap_err()
        .to_string();
    assert!(err.contains("eeeeeeee-eeee"), "{err}");
    assert!(
        err.contains(&hwtensor::gpu::format_uuid(&d.device_uuid())),
        "{err}"
    );
}

#[test]
fn a_truncated_memory_fd_is_refused_and_an_oversized_one_is_handled_cleanly() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    if !d.is_software() {
        eprintln!(
            "SKIPPED: {} - memfd stand-ins for memory fds are a lavapipe fact",
            test_name!()
        );
        return;
    }
    let t: TensorDyn = gpu_tensor_with(2).into();
    let (bytes, _) = blob::export(&t, Transport::Reference).unwrap();
    drop(t); // else the import would find the live buffer and never look at the fd
    let memfd = |len: u64| {
        let fd = rustix::fs::memfd_create(
            "llvmpipe memory fd",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        rustix::fs::ftruncate(&fd, len).unwrap();
        fd
    };
    let alloc = u64::from_le_bytes(bytes[128..136].try_into().unwrap());
    let err = blob::import_with(&bytes, vec![memfd(alloc / 2)], &TRUSTED).unwrap_err();
    assert!(matches!(err, Error::Fd(_)), "{err}");
    // The driver may take or refuse an oversized fd; either way a clean result, no crash.
    match blob::import_with(&bytes, vec![memfd(alloc * 2)], &TRUSTED) {
        Ok(big) => assert_eq!(big.as_tensor::<u32>().unwrap().to_vec().unwrap().len(), N),
        Err(e) => assert!(matches!(e, Error::Gpu { .. } | Error::Fd(_)), "{e}"),
    }
}

#[test]
fn a_gpu_blob_with_hostile_gpu_fields_is_refused() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t: TensorDyn = gpu_tensor_with(3).into();
    let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    for (at, value) in [(128usize, 0u64), (128, 1), (128, u64::MAX), (72, 5)] {
        let mut b = bytes.clone();
        if at == 72 {
            b[72..76].copy_from_slice(&(value as u32).to_le_bytes());
        } else {
            b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        assert!(
            blob::import_with(&b, owned(&fds), &TRUSTED).is_err(),
            "field at {at} = {value:#x} accepted"
        );
    }
    assert!(bytes.len() > HEADER_LEN);
}

#[test]
fn a_gpu_tensor_travels_inline_as_its_bytes() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t: TensorDyn = gpu_tensor_with(4).into();
    let (bytes, fds) = blob::export(&t, Transport::Inline).unwrap();
    assert!(fds.is_empty());
    let got = blob::import_with(&bytes, vec![], &TRUSTED).unwrap();
    assert_eq!(got.memory(), TensorMemory::Mem);
    assert_eq!(got.as_tensor::<u32>().unwrap().to_vec().unwrap()[9], 9 ^ 4);
}

#[test]
fn a_buffer_handed_back_to_its_own_process_comes_home_as_itself() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t: TensorDyn = gpu_tensor_with(5).into();
    let t_alive = t.liveness();
    let import = || {
        let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
        blob::import_with(&bytes, owned(&fds), &TRUSTED).unwrap()
    };
    let (first, second) = (import(), import());
    assert_eq!(
        first.identity(),
        t.identity(),
        "an import carries the allocator's identity"
    );
    assert_eq!(second.identity(), t.identity());
    drop(t);
    assert!(
        t_alive.is_alive(),
        "the imports are the producer's own buffer, not new imports"
    );
    drop((first, second));
    assert!(!t_alive.is_alive(), "the cache holds buffers weakly");
}
