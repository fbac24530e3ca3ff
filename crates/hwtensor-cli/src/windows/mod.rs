//! What the command does on Windows: the D3D11 device's probe and figures, the demo
//! (`demo.rs`) and the channel's figures (`channel.rs`) over a named pipe.

use std::time::{Duration, Instant};

use hwtensor::gpu;
use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory};

use crate::bench::Samples;
use crate::timing::{fmt, median};

/// Host memories the core benchmarks measure: heap, and shared memory (a section here).
pub const HOST_MEMORIES: &[TensorMemory] = &[TensorMemory::Mem, TensorMemory::Shm];

/// Signals each thread makes when measuring throughput.
const SIGNALS_PER_THREAD: usize = 500;

pub mod channel;
pub mod demo;

/// The performance counter in nanoseconds: one clock for every process on the machine, so a
/// producer's send time and a consumer's receive time can be subtracted.
pub fn monotonic_ns() -> u64 {
    use windows::Win32::System::Performance::{QueryPerformanceCounter, QueryPerformanceFrequency};
    let (mut count, mut hz) = (0i64, 0i64);
    // SAFETY: valid out pointers; both calls cannot fail on Windows XP and later.
    #[allow(unsafe_code)]
    let _ = unsafe {
        (
            QueryPerformanceCounter(&mut count),
            QueryPerformanceFrequency(&mut hz),
        )
    };
    (count as u128 * 1_000_000_000 / hz.max(1) as u128) as u64
}

/// The adapters and the process device, as JSON.
pub fn probe_json() -> serde_json::Value {
    let adapters = match gpu::adapters() {
        Ok(list) => serde_json::json!(list
            .iter()
            .map(|a| serde_json::json!({
                "name": a.name, "kind": format!("{:?}", a.kind), "software": a.is_software(),
                "luid": format!("{}:{:#x}", a.luid.0, a.luid.1), "vendor_id": a.vendor_id,
                "device_id": a.device_id, "dedicated_video_memory": a.dedicated_video_memory,
            }))
            .collect::<Vec<_>>()),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    let device = crate::device::probe_json(
        |d| serde_json::json!({ "feature_level": format!("{:#x}", d.feature_level()) }),
    );
    serde_json::json!({ "adapters": adapters, "process_device": device })
}

/// The adapters and the process device, as text.
pub fn probe_text(out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "\nGPU adapters (DXGI):")?;
    match gpu::adapters() {
        Ok(list) if list.is_empty() => writeln!(out, "  none")?,
        Ok(list) => {
            for a in list {
                writeln!(out, "  {}", a.label())?;
            }
        }
        Err(e) => writeln!(out, "  cannot list: {e}")?,
    }
    crate::device::probe_text(out, |out, d| {
        writeln!(out, "  feature level {:#x}", d.feature_level())?;
        let fence = if d.fence().is_some() {
            "a shared ID3D11Fence"
        } else {
            "none (no ID3D11Device5): each signal finishes its work on the CPU"
        };
        writeln!(out, "  timeline fence: {fence}")
    })?;
    Ok(())
}

/// The Windows figures: the D3D11 device's, then the channel's.
pub fn bench(s: &Samples) -> crate::Result {
    device_figures(s)?;
    channel::bench(s.rounds < 50)
}

/// The D3D11 device's figures: the device call, the fence, and GPU images seen by the CPU.
fn device_figures(s: &Samples) -> crate::Result {
    println!("\n== GPU process device, D3D11 (medians) ==");
    let Some(d) = crate::device::bench(s.rounds)? else {
        return Ok(());
    };
    let per_second = crate::device::signal_throughput(d, SIGNALS_PER_THREAD, None)?;
    println!("signals/s, 4 threads:           {per_second:>10.0}");
    images(s)
}

/// A 1080p RGBA GPU image read and written through maps (texture -> staging -> host copy and
/// back), and copied texture to texture, beside a plain memcpy of the same bytes.
fn images(s: &Samples) -> crate::Result {
    println!("\n== 1080p RGBA GPU image (medians) ==");
    let (w, h) = (1920, 1080);
    let a = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(TensorMemory::Gpu),
        CpuAccess::ReadWrite,
    )?;
    let b = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(TensorMemory::Gpu),
        CpuAccess::ReadWrite,
    )?;
    let bytes = a.buffer_len();
    let (src, mut dst) = (vec![1u8; bytes], vec![0u8; bytes]);
    let memcpy = timed(s.rounds, || dst.copy_from_slice(std::hint::black_box(&src)));
    let read = timed(s.rounds, || {
        drop(std::hint::black_box(a.map_strided_read().unwrap()))
    });
    // Strided maps: a staging texture's pitch may pad its rows.
    let write = timed(s.rounds, || a.map_strided_write().unwrap().fill(3));
    let host = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, w, h),
        Some(TensorMemory::Mem),
        CpuAccess::ReadWrite,
    )?;
    let up = timed(s.rounds, || a.copy_from(&host).unwrap());
    // The path copy_from takes when it cannot use the staging texture directly: through maps.
    let up_mapped = timed(s.rounds, || {
        a.copy_from_flat(&host.to_vec().unwrap()).unwrap()
    });
    let down = timed(s.rounds, || host.copy_from(&a).unwrap());
    let copy = timed(s.rounds, || {
        b.copy_from(&a).unwrap();
        let v = gpu::device().unwrap().signal().unwrap();
        gpu::device()
            .unwrap()
            .wait(v, Duration::from_secs(5))
            .unwrap();
    });
    println!("memcpy of the same bytes:       {:>8}", fmt(memcpy));
    println!(
        "read map (download):            {:>8}  {:.1}x memcpy",
        fmt(read),
        ratio(read, memcpy)
    );
    println!(
        "write map + fill (down + up):   {:>8}  {:.1}x memcpy",
        fmt(write),
        ratio(write, memcpy)
    );
    println!(
        "copy_from host -> GPU image:    {:>8}  {:.1}x memcpy",
        fmt(up),
        ratio(up, memcpy)
    );
    println!(
        "  the same through maps:        {:>8}  {:.1}x memcpy ({:.1}x the direct path)",
        fmt(up_mapped),
        ratio(up_mapped, memcpy),
        ratio(up_mapped, up)
    );
    println!(
        "copy_from GPU image -> host:    {:>8}  {:.1}x memcpy",
        fmt(down),
        ratio(down, memcpy)
    );
    println!("copy_from GPU image to GPU image, waited: {:>8}", fmt(copy));
    Ok(())
}

fn timed(rounds: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..rounds.min(31))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    median(&mut times)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}
