//! The GPU parts of `probe` and `bench`.

// The bench loads a second copy of the library (dlopen) and calls it.
#![allow(unsafe_code)]

use std::time::Duration;

use hwtensor::gpu::{self, format_uuid};
use hwtensor::{Tensor, TensorMemory};
use libloading::os::unix::{Library, Symbol};

use super::cuda::{BothWays, References};
use crate::device::signal_throughput;
use crate::timing::median_per_call;

/// Signals each thread makes when measuring throughput.
const SIGNALS_PER_THREAD: usize = 2000;

/// The adapters and the process device, as JSON.
pub fn probe_json() -> serde_json::Value {
    let adapters = match gpu::adapters() {
        Ok(list) => serde_json::json!(list
            .iter()
            .enumerate()
            .map(|(i, a)| serde_json::json!({
                "index": i, "pci": a.pci.map(|p| p.to_string()),
                "name": a.name, "kind": format!("{:?}", a.kind), "software": a.is_software(),
                "device_uuid": format_uuid(&a.device_uuid), "driver_uuid": format_uuid(&a.driver_uuid),
                "driver": a.driver_name, "driver_info": a.driver_info, "vendor_id": a.vendor_id, "device_id": a.device_id,
            }))
            .collect::<Vec<_>>()),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    let device = crate::device::probe_json(|d| {
        serde_json::json!({
            "queue_family": d.queue_family(), "transfer_queue_family": d.transfer_queue_family(),
        })
    });
    let cuda = match hwtensor::cuda::device() {
        Ok(c) => serde_json::json!({
            "name": c.name(), "ordinal": c.ordinal(), "uuid": format_uuid(&c.uuid()),
            "driver_version": c.driver_version(),
        }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    serde_json::json!({ "adapters": adapters, "process_device": device, "cuda": cuda })
}

/// The adapters and the process device, as text.
pub fn probe_text(out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "\nGPU adapters (Vulkan):")?;
    match gpu::adapters() {
        Ok(list) if list.is_empty() => writeln!(out, "  none")?,
        Ok(list) => {
            for (i, a) in list.iter().enumerate() {
                writeln!(
                    out,
                    "  #{i} {} [{:?}{}]{}",
                    a.name,
                    a.kind,
                    if a.is_software() { ", software" } else { "" },
                    a.pci.map(|p| format!(" at PCI {p}")).unwrap_or_default()
                )?;
                writeln!(
                    out,
                    "    device UUID {}  driver UUID {}",
                    format_uuid(&a.device_uuid),
                    format_uuid(&a.driver_uuid)
                )?;
                writeln!(out, "    driver {} {}", a.driver_name, a.driver_info)?;
            }
        }
        Err(e) => writeln!(out, "  none: {e}")?,
    }
    let requested = std::env::var(gpu::ADAPTER_ENV).unwrap_or_default();
    writeln!(
        out,
        "requested: {}={}",
        gpu::ADAPTER_ENV,
        if requested.trim().is_empty() {
            "(unset: hardware first, discrete before integrated, the lowest PCI address among \
             equals; software when there is none)"
        } else {
            requested.as_str()
        }
    )?;
    crate::device::probe_text(out, |out, d| {
        let fence = if d.export_fence().is_some() {
            "yes"
        } else {
            "no (the driver cannot export it)"
        };
        writeln!(out, "  timeline fence exportable: {fence}")?;
        let transfer = d
            .transfer_queue_family()
            .map_or("none (copies share the main queue)".to_string(), |f| {
                format!("family {f}")
            });
        writeln!(
            out,
            "  queues: main family {}, transfer-only {transfer}",
            d.queue_family()
        )
    })?;
    match hwtensor::cuda::device() {
        Ok(c) => writeln!(
            out,
            "CUDA device: {} (ordinal {}, UUID {}, driver CUDA {}.{}), primary context",
            c.name(),
            c.ordinal(),
            format_uuid(&c.uuid()),
            c.driver_version() / 1000,
            c.driver_version() % 1000 / 10
        )?,
        Err(e) => writeln!(out, "CUDA device: none: {e}")?,
    }
    Ok(())
}

/// Host <-> GPU copies from tensors must reach this fraction of pinned `cuMemcpy` (issue #27;
/// #13 asked for 0.8).
const BANDWIDTH_TARGET_RATIO: f64 = 0.95;

/// Host <-> GPU bandwidth from heap tensors, each copy timed alternately with a pinned
/// `cuMemcpy` of the same bytes (`references`; without CUDA the rates alone). Two rows a size
/// where CUDA runs: a GPU tensor CUDA does not map (Vulkan's copy engine), and one it maps
/// (CUDA's, see `Tensor::copy_from`).
pub fn bandwidth(rounds: usize, references: Option<&References>) -> crate::Result {
    if gpu::device().is_err() {
        return Ok(());
    }
    println!("\n== host <-> GPU bandwidth from mem tensors (medians, GB/s; pinned cuMemcpy alternated) ==");
    println!(
        "{:<15} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "size", "host->gpu", "CUDA h2d", "gpu->host", "CUDA d2h", "h2d", "d2h"
    );
    let rounds = rounds.min(super::BANDWIDTH_ROUNDS);
    for (name, bytes) in super::BANDWIDTH_SIZES {
        let host = Tensor::<u8>::new(&[bytes], Some(TensorMemory::Mem))?;
        host.map_write()?.fill(1);
        let dev = Tensor::<u8>::new(&[bytes], Some(TensorMemory::Gpu))?;
        let Some(refs) = references else {
            let u = median_per_call(rounds, 1, || dev.copy_from(&host).expect("upload"));
            let d = median_per_call(rounds, 1, || host.copy_from(&dev).expect("download"));
            let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
            println!("{name:<15} {:>10.1} {:>10} {:>10.1}", rate(u), "-", rate(d));
            continue;
        };
        bandwidth_row(name, refs, &host, &dev, rounds)?;
        dev.cuda_map_read(std::ptr::null_mut())?.finish()?;
        bandwidth_row(&format!("{name}, CUDA maps"), refs, &host, &dev, rounds)?;
    }
    Ok(())
}

/// One row of the bandwidth table: `host` into `dev` and back, each beside the reference.
fn bandwidth_row(
    name: &str,
    refs: &References,
    host: &Tensor<u8>,
    dev: &Tensor<u8>,
    rounds: usize,
) -> crate::Result {
    let r = BothWays::measure(refs, host, dev, rounds)?;
    let (up, down) = r.ratios();
    println!(
        "{name:<15} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {up:>7.2}x {down:>7.2}x  {}",
        r.up,
        r.h2d,
        r.down,
        r.d2h,
        crate::bench::verdict(r.meet(BANDWIDTH_TARGET_RATIO)),
    );
    Ok(())
}

/// The device benchmarks: `device()` hot path, signal + wait, signals per second from one copy
/// of the library and from two.
pub fn bench(rounds: usize) -> crate::Result {
    println!("\n== GPU process device (medians) ==");
    let Some(d) = crate::device::bench(rounds)? else {
        return Ok(());
    };
    let one_copy = signal_throughput(d, SIGNALS_PER_THREAD, None)?;
    println!("signals/s, 4 threads, 1 copy:   {one_copy:>10.0}");
    match OtherCopy::load() {
        Ok(other) => {
            let signal = || other.signal().is_some();
            let two = signal_throughput(d, SIGNALS_PER_THREAD, Some(&signal))?;
            println!("signals/s, 4 threads, 2 copies: {two:>10.0}  (2 threads in a dlopened libhwtensor_capi.so)");
        }
        Err(e) => println!("signals/s across 2 copies: skipped ({e})"),
    }
    Ok(())
}

type SignalFn = unsafe extern "C" fn(*mut u64) -> i32;

/// The C ABI library loaded with RTLD_LOCAL: a second, independently linked copy of hwtensor.
struct OtherCopy {
    _lib: Library,
    signal: Symbol<SignalFn>,
}

impl OtherCopy {
    fn load() -> Result<OtherCopy, String> {
        let lib = super::capi::load()?;
        // SAFETY: the symbol has this signature (include/hwtensor.h).
        let signal = unsafe { lib.get(b"hwt_gpu_signal") }.map_err(|e| e.to_string())?;
        Ok(OtherCopy { _lib: lib, signal })
    }

    fn signal(&self) -> Option<u64> {
        let mut v = 0;
        // SAFETY: a valid out-pointer to a C ABI function of the loaded library.
        (unsafe { (self.signal)(&mut v) } == 0).then_some(v)
    }
}
