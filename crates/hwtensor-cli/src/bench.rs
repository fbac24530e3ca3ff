//! `hwtensor bench`: the library's figures beside the reference they are judged against,
//! measured in the same run (machines are shared and noisy: only side-by-side ratios hold).

use hwtensor::ImageSpec;
use std::time::Duration;

use hwtensor::Tensor;

use crate::timing::{fmt, median, median_per_call};

/// Frame sizes users stream: (name, width, height).
const FRAMES: [(&str, usize, usize); 4] = [
    ("360p", 640, 360),
    ("720p", 1280, 720),
    ("1080p", 1920, 1080),
    ("4k", 3840, 2160),
];

/// How much slower a fresh heap frame (allocate, fill, drop) may be than a `Vec` doing the same.
const FRESH_TARGET_RATIO: f64 = 1.1;

/// Targets from the issues, checked and printed beside the figures.
const MAP_TARGET: Duration = Duration::from_nanos(100);
const FILL_TARGET_RATIO: f64 = 0.8;

pub struct Samples {
    /// Timed batches (or rounds) per figure.
    pub rounds: usize,
}

pub fn run(quick: bool) -> crate::Result {
    let s = Samples {
        rounds: if quick { 15 } else { 101 },
    };
    println!("== core: [1, H, W, 4] u8 tensors (medians) ==");
    allocate_and_map(&s)?;
    part_maps(&s)?;
    fill(&s)?;
    fresh_frames(&s)?;
    crate::platform::bench(&s)
}

pub fn shape(w: usize, h: usize) -> [usize; 4] {
    [1, h, w, 4]
}

pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets target"
    } else {
        "MISSES target"
    }
}

fn allocate_and_map(s: &Samples) -> crate::Result {
    println!(
        "{:<8} {:<6} {:>12} {:>10}",
        "frame", "memory", "allocate", "map"
    );
    for (name, w, h) in FRAMES {
        for &memory in crate::platform::HOST_MEMORIES {
            let alloc = median_per_call(s.rounds, 10, || {
                drop(Tensor::<u8>::new(&shape(w, h), Some(memory)).unwrap())
            });
            let t = Tensor::<u8>::new(&shape(w, h), Some(memory))?;
            let map = median_per_call(s.rounds, 1000, || {
                drop(std::hint::black_box(t.map().unwrap()))
            });
            let note = if Some(&memory) == crate::platform::HOST_MEMORIES.last() {
                verdict(map <= MAP_TARGET)
            } else {
                ""
            };
            println!(
                "{name:<8} {:<6} {:>12} {:>10}  {note}",
                memory.name(),
                fmt(alloc),
                fmt(map)
            );
        }
    }
    Ok(())
}

/// A map of a strip of a 1080p shm image (a byte-range claim) beside a map of the whole (the
/// one-atomic path), with a neighbouring strip write-mapped meanwhile, as threads tiling an
/// image hold them.
fn part_maps(s: &Samples) -> crate::Result {
    use hwtensor::{CpuAccess, PixelFormat, Region, TensorMemory};
    let memory = *crate::platform::HOST_MEMORIES
        .last()
        .unwrap_or(&TensorMemory::Mem);
    let (w, h) = (1920, 1080);
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(memory),
        CpuAccess::ReadWrite,
    )?;
    let whole = median_per_call(s.rounds, 1000, || {
        drop(std::hint::black_box(t.map().unwrap()))
    });
    let top = t.view(Region::new(0, 0, w, h / 2))?;
    let bottom = t.view(Region::new(0, h / 2, w, h / 2))?;
    let held = top.map_write()?;
    let strip = median_per_call(s.rounds, 1000, || {
        drop(std::hint::black_box(bottom.map().unwrap()))
    });
    drop(held);
    println!(
        "1080p {} map: whole {} ({}), a strip beside a write-mapped strip {} ({:.2}x)",
        memory.name(),
        fmt(whole),
        verdict(whole <= MAP_TARGET),
        fmt(strip),
        strip.as_secs_f64() / whole.as_secs_f64()
    );
    Ok(())
}

fn fill(s: &Samples) -> crate::Result {
    let kinds = crate::platform::HOST_MEMORIES;
    let fills: Vec<String> = kinds.iter().map(|m| format!("{} fill", m.name())).collect();
    let ratios: Vec<String> = kinds.iter().map(|m| format!("{}/cpy", m.name())).collect();
    println!(
        "\n{:<8} {:>12}{}{}",
        "frame",
        "memcpy",
        fills
            .iter()
            .map(|f| format!(" {f:>12}"))
            .collect::<String>(),
        ratios
            .iter()
            .map(|r| format!(" {r:>9}"))
            .collect::<String>()
    );
    for (name, w, h) in FRAMES {
        let bytes = w * h * 4;
        let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        let mut dst = vec![0u8; bytes];
        let tensors = kinds
            .iter()
            .map(|&m| Tensor::<u8>::new(&shape(w, h), Some(m)))
            .collect::<Result<Vec<_>, _>>()?;
        // Interleave them so drift on a shared machine hits them alike.
        let mut copy_t = vec![];
        let mut fill_t = vec![vec![]; tensors.len()];
        for _ in 0..s.rounds {
            copy_t.push(median_per_call(1, 1, || {
                dst.copy_from_slice(std::hint::black_box(&src))
            }));
            for (t, times) in tensors.iter().zip(&mut fill_t) {
                times.push(median_per_call(1, 1, || {
                    t.map_write().unwrap().copy_from_slice(&src)
                }));
            }
        }
        let c = median(&mut copy_t);
        let fills: Vec<Duration> = fill_t.iter_mut().map(|t| median(t)).collect();
        let ratio = |x: Duration| c.as_secs_f64() / x.as_secs_f64();
        // The target is judged on the shareable kind: the last of the list.
        let shared = *fills.last().expect("at least heap memory");
        let note = if matches!(name, "1080p" | "4k") {
            verdict(ratio(shared) >= FILL_TARGET_RATIO)
        } else {
            ""
        };
        println!(
            "{name:<8} {:>12}{}{}  {note}",
            fmt(c),
            fills
                .iter()
                .map(|&f| format!("{:>12}", fmt(f)))
                .collect::<String>(),
            fills
                .iter()
                .map(|&f| format!("{:>8.2}x", ratio(f)))
                .collect::<String>()
        );
    }
    Ok(())
}

/// A fresh frame each time, as a pipeline that does not pool makes them: a heap tensor
/// allocated, filled and dropped, beside a zeroed `Vec<u8>` allocated, filled and dropped.
fn fresh_frames(s: &Samples) -> crate::Result {
    println!(
        "\n{:<8} {:>12} {:>12} {:>10}",
        "frame", "Vec", "mem tensor", "mem/Vec"
    );
    for (name, w, h) in FRAMES {
        let bytes = w * h * 4;
        let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        let (mut vec_t, mut mem_t) = (vec![], vec![]);
        for _ in 0..s.rounds {
            vec_t.push(median_per_call(1, 1, || {
                let mut v = vec![0u8; bytes];
                v.copy_from_slice(std::hint::black_box(&src));
                drop(std::hint::black_box(v));
            }));
            mem_t.push(median_per_call(1, 1, || {
                let t = Tensor::<u8>::new(&shape(w, h), Some(hwtensor::TensorMemory::Mem)).unwrap();
                t.map_write()
                    .unwrap()
                    .copy_from_slice(std::hint::black_box(&src));
                drop(std::hint::black_box(t));
            }));
        }
        let (v, m) = (median(&mut vec_t), median(&mut mem_t));
        let ratio = m.as_secs_f64() / v.as_secs_f64();
        let note = if matches!(name, "1080p" | "4k") {
            verdict(ratio <= FRESH_TARGET_RATIO)
        } else {
            ""
        };
        println!(
            "{name:<8} {:>12} {:>12} {ratio:>9.2}x  {note}",
            fmt(v),
            fmt(m)
        );
    }
    Ok(())
}
