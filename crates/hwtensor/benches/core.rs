//! Core benchmarks: allocate, map, and map + fill of `[1, H, W, 4]` u8 tensors on heap and
//! shared memory, beside a plain heap-to-heap memcpy of the same bytes in the same run.
//!
//! `cargo bench -p hwtensor --bench core`; medians are in
//! `target/criterion/<group>/<bench>/new/estimates.json` (`scripts/bench-summary` prints them
//! side by side with the ratio to memcpy).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hwtensor::{Tensor, TensorMemory};

/// The frame sizes users stream: (name, width, height).
const FRAMES: [(&str, usize, usize); 4] = [
    ("360p", 640, 360),
    ("720p", 1280, 720),
    ("1080p", 1920, 1080),
    ("4k", 3840, 2160),
];

const BACKINGS: [TensorMemory; 2] = [TensorMemory::Mem, TensorMemory::Shm];

fn shape(w: usize, h: usize) -> [usize; 4] {
    [1, h, w, 4]
}

fn allocate(c: &mut Criterion) {
    let mut g = c.benchmark_group("allocate");
    for (name, w, h) in FRAMES {
        for memory in BACKINGS {
            g.bench_function(BenchmarkId::new(memory.name(), name), |b| {
                b.iter(|| Tensor::<u8>::new(black_box(&shape(w, h)), Some(memory)).unwrap())
            });
        }
    }
    g.finish();
}

fn map(c: &mut Criterion) {
    let mut g = c.benchmark_group("map");
    for (name, w, h) in FRAMES {
        for memory in BACKINGS {
            let t = Tensor::<u8>::new(&shape(w, h), Some(memory)).unwrap();
            g.bench_function(BenchmarkId::new(memory.name(), name), |b| {
                b.iter(|| black_box(t.map().unwrap().as_ptr()))
            });
        }
    }
    g.finish();
}

fn map_fill(c: &mut Criterion) {
    let mut g = c.benchmark_group("map_fill");
    for (name, w, h) in FRAMES {
        let bytes = w * h * 4;
        let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        g.throughput(Throughput::Bytes(bytes as u64));
        let mut dst = vec![0u8; bytes];
        g.bench_function(BenchmarkId::new("memcpy", name), |b| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        for memory in BACKINGS {
            let t = Tensor::<u8>::new(&shape(w, h), Some(memory)).unwrap();
            g.bench_function(BenchmarkId::new(memory.name(), name), |b| {
                b.iter(|| t.map_write().unwrap().copy_from_slice(black_box(&src)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, allocate, map, map_fill);
criterion_main!(benches);
