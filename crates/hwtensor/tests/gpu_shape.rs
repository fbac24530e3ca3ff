//! What the process device promises on every platform, tested through the one public shape:
//! its timeline (Vulkan's semaphore on Linux, D3D11's fence or its no-fence path on Windows) and
//! copies between views of one GPU image.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::device_or_skip;
use hwtensor::gpu::ProcessDevice;
use hwtensor::{CpuAccess, Error, ImageSpec, PixelFormat, Tensor, TensorMemory};

const BOUND: Duration = Duration::from_secs(5);

#[test]
fn signals_from_many_threads_are_strictly_increasing_and_all_complete() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    signals_are_unique_increasing_and_complete(d);
}

/// Written against the shared shape only: the same code checks Vulkan and D3D11.
fn signals_are_unique_increasing_and_complete<D: ProcessDevice>(d: &'static D) {
    let per_thread: Vec<Vec<u64>> = (0..4)
        .map(|_| {
            std::thread::spawn(move || (0..200).map(|_| d.signal().unwrap()).collect::<Vec<_>>())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for values in &per_thread {
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "each thread sees increasing values"
        );
    }
    let all: HashSet<u64> = per_thread.iter().flatten().copied().collect();
    assert_eq!(all.len(), 800, "no value handed out twice");
    let max = *all.iter().max().unwrap();
    d.wait(max, BOUND).unwrap();
    assert!(d.completed_value().unwrap() >= max);
    assert!(d.last_signalled() >= max);
}

#[test]
fn a_wait_for_a_value_never_signalled_times_out_within_its_bound() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    a_never_signalled_value_times_out(d);
}

fn a_never_signalled_value_times_out<D: ProcessDevice>(d: &D) {
    let never = d.last_signalled() + 1_000_000;
    let started = Instant::now();
    let err = d.wait(never, Duration::from_millis(100)).unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn deferred_signals_complete_when_flushed() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    deferred_values_complete_once_flushed(d);
}

fn deferred_values_complete_once_flushed<D: ProcessDevice>(d: &D) {
    let a = d.signal_deferred().unwrap();
    let b = d.signal_deferred().unwrap();
    assert!(b > a);
    d.flush().unwrap();
    d.wait(b, BOUND).unwrap();
    assert!(d.completed_value().unwrap() >= b);
    d.flush().unwrap(); // nothing pending: a no-op
}

#[test]
fn a_view_copies_into_another_view_of_the_same_gpu_image() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let img = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 8),
        Some(TensorMemory::Gpu),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    let pattern: Vec<u8> = (0..img.len()).map(|i| (i % 251) as u8).collect();
    img.copy_from_flat(&pattern).unwrap();
    let (left, right) = (
        hwtensor::Region::new(0, 0, 16, 8),
        hwtensor::Region::new(32, 0, 16, 8),
    );
    let expected = img.view(left).unwrap().to_vec().unwrap();
    img.view(right)
        .unwrap()
        .copy_from(&img.view(left).unwrap())
        .unwrap();
    assert_eq!(img.view(right).unwrap().to_vec().unwrap(), expected);
    img.copy_from(&img).unwrap();
    assert_eq!(
        img.view(left).unwrap().to_vec().unwrap(),
        expected,
        "a copy onto itself changes nothing"
    );
}

#[test]
fn the_device_prints_its_adapter_origin_and_features_for_debugging() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let printed = format!("{d:?}");
    assert!(printed.starts_with("GpuDevice"), "{printed}");
    assert!(printed.contains(&d.adapter_label()), "{printed}");
    assert!(
        printed.contains("origin") && printed.contains("tier"),
        "{printed}"
    );
}
