//! The process GPU device and its timeline fence, on whatever Vulkan device this machine has
//! (lavapipe in CI, the H200 on the GPU machine).

#![cfg(target_os = "linux")]

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use common::device_or_skip;
use hwtensor::gpu::{self, Features, Origin};

const BOUND: Duration = Duration::from_secs(5);

#[test]
fn two_calls_give_one_device() {
    let Some(a) = device_or_skip(test_name!()) else {
        return;
    };
    let b = gpu::device().unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.origin(), Origin::Created);
    eprintln!(
        "process device: {} features {:?}",
        a.adapter_label(),
        a.features()
    );
}

#[test]
fn the_device_describes_its_adapter() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    assert_ne!(d.device_uuid(), [0; 16]);
    assert_eq!(
        d.is_software(),
        d.adapter().kind == gpu::AdapterKind::Software
    );
    let listed = gpu::adapters().unwrap();
    assert!(
        listed.iter().any(|a| a.device_uuid == d.device_uuid()),
        "the device's adapter is listed"
    );
}

fn readable_within(fd: &impl AsFd, timeout: Duration) -> bool {
    let mut pfd = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let t = rustix::event::Timespec::try_from(timeout).unwrap();
    rustix::event::poll(&mut pfd, Some(&t)).unwrap() == 1
}

#[test]
fn a_completion_fd_becomes_readable_when_its_value_completes() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let done = d.signal().unwrap();
    d.wait(done, BOUND).unwrap();
    assert!(
        readable_within(&d.completion_fd(done).unwrap(), Duration::ZERO),
        "a completed value is readable at once"
    );

    // A value nobody allocated would never complete: refused, not waited for for ever.
    let far = d.last_signalled() + 1_000_000_000;
    let err = d.completion_fd(far).unwrap_err();
    assert!(matches!(err, hwtensor::Error::InvalidArgument(_)), "{err}");

    // Allocated but not yet submitted: waited for, and readable once it is.
    let later = d.signal_deferred().unwrap();
    let fd = d.completion_fd(later).unwrap();
    let fds: Vec<_> = (0..3).map(|_| d.completion_fd(later).unwrap()).collect();
    // Submitted by our flush, or by another test's signal: either way it completes.
    d.flush().unwrap();
    assert!(readable_within(&fd, BOUND));
    assert!(fds.iter().all(|f| readable_within(f, BOUND)));
}

#[test]
fn the_fence_exports_exactly_where_the_driver_can() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let fence = d.export_fence();
    if d.features().has(Features::EXTERNAL_SEMAPHORE_FD) && !d.is_software() {
        let fd = fence
            .as_ref()
            .expect("a driver with timeline export gives a fence");
        assert!(rustix::io::fcntl_getfd(fd)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC));
    }
    if d.is_software() {
        assert!(fence.is_none(), "lavapipe cannot export semaphores");
        let c = d.completion(d.signal().unwrap());
        assert!(c.fence.is_none(), "no fence, so no value paired with one");
    }
    eprintln!(
        "export_fence on {}: {}",
        d.adapter_label(),
        if d.export_fence().is_some() {
            "Some"
        } else {
            "None"
        }
    );
}

#[test]
fn the_hot_path_of_device_is_shared_by_threads() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let d = Arc::new(d as *const _ as usize);
    let same = (0..8)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || gpu::device().unwrap() as *const _ as usize == *d)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .all(|t| t.join().unwrap());
    assert!(same);
}
