//! No fd leaks over a thousand GPU hand-offs (its own binary: it counts this process's fds).

mod common;

use std::os::fd::OwnedFd;

use common::device_or_skip;
use hwtensor::blob::{self, Transport};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_thousand_gpu_hand_offs_leak_no_fd() {
    if device_or_skip("a_thousand_gpu_hand_offs_leak_no_fd").is_none() {
        return;
    }
    let t: TensorDyn = Tensor::<u8>::new(&[64 * 1024], Some(TensorMemory::Gpu))
        .unwrap()
        .into();
    // Warm up what is made once: the completion waiter, the exported fence.
    let _ = blob::export(&t, Transport::Reference).unwrap();
    let before = open_fds();
    for _ in 0..1000 {
        let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
        let fds: Vec<OwnedFd> = fds
            .iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect();
        let got = blob::import(&bytes, fds).unwrap();
        assert_eq!(got.identity(), t.identity());
        // A failed import closes what it was given, too.
        let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
        let fds: Vec<OwnedFd> = fds
            .iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect();
        assert!(blob::import(&bytes[..bytes.len() - 1], fds).is_err());
    }
    assert_eq!(open_fds(), before, "fds leaked over 1000 GPU hand-offs");
}
