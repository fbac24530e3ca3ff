//! Fuzzes `blob::import` with arbitrary bytes and, when the first byte says so, a memfd of a
//! size the input chooses standing in for the fd a peer would send.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut fds = Vec::new();
    let mut blob = rest;
    if control & 1 == 1 && rest.len() >= 2 {
        // Two bytes pick the fd's size in 64-byte units: small, exact and oversized fds.
        let size = u16::from_le_bytes([rest[0], rest[1]]) as u64 * 64;
        let fd = rustix::fs::memfd_create("fuzz", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, size).unwrap();
        fds.push(fd);
        blob = &rest[2..];
    }
    if let Ok(t) = hwtensor::blob::import(blob, fds) {
        // A tensor that imports must be safe to read end to end.
        if let Ok(u8s) = t.as_tensor::<u8>() {
            let _ = u8s.to_vec();
        }
    }
});
