//! No fd leaks through blobs and sockets, good or hostile (its own binary: it counts this
//! process's open fds).

#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::unix::net::UnixStream;

use hwtensor::blob::{self, Transport};
use hwtensor::handoff::{recv, send, send_blob};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_thousand_hand_offs_good_and_hostile_leak_no_fd() {
    let (a, b) = UnixStream::pair().unwrap();
    let t: TensorDyn = Tensor::<u8>::new(&[64, 64, 4], Some(TensorMemory::Shm))
        .unwrap()
        .into();
    let (good, _) = blob::export(&t, Transport::Reference).unwrap();
    let before = open_fds();
    for i in 0..1000 {
        send(&a, &t).unwrap();
        assert_eq!(recv(&b).unwrap().identity(), t.identity());
        // Hostile variants: a truncated blob, too many fds, a corrupted word.
        let fd = t.as_fd().unwrap();
        assert!(blob::import(
            &good[..good.len() - 1 - i % 50],
            vec![t.clone_fd().unwrap()]
        )
        .is_err());
        send_blob(&a, &good, &[fd, fd, fd]).unwrap();
        assert!(recv(&b).is_err());
        let mut bad = good.clone();
        bad[16 + i % 80] ^= 0x40;
        send_blob(&a, &bad, &[fd]).unwrap();
        let _ = recv(&b);
    }
    assert_eq!(open_fds(), before, "fds leaked over 1000 hand-offs");

    // A peer that dies mid-message, with its fd already in flight.
    let before = open_fds();
    for _ in 0..100 {
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = t.as_fd().unwrap();
        send_blob(&a, &good[..30], &[fd]).unwrap();
        a.flush().unwrap();
        drop(a);
        assert!(recv(&b).is_err());
    }
    assert_eq!(open_fds(), before, "fds leaked when peers died mid-message");
}
