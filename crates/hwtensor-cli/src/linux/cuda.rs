//! `hwtensor bench`: the CUDA interop figures, and pinned `cuMemcpy` references measured in the
//! same run for the bandwidth ratios. Skipped, saying why, where there is no CUDA.

// The reference copies and the stream are made through the raw driver API.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use hwtensor::cuda::{self, CudaDevice};
use hwtensor::{CudaMap, ReadOnly, Tensor, TensorMemory};

use crate::bench::verdict;
use crate::timing::{fmt, median, median_per_call, side_by_side};

/// Targets from issue #13 (H200 medians).
const FIRST_MAP_TARGET: Duration = Duration::from_micros(500);
const LATER_MAP_TARGET: Duration = Duration::from_micros(2);
const VULKAN_TO_CUDA_TARGET: Duration = Duration::from_micros(30);
const CPU_SEES_CUDA_TARGET: Duration = Duration::from_micros(20);

/// Host tensor <-> CUDA memory copies must reach this fraction of pinned `cuMemcpy` (issue #27;
/// #13 asked for 0.8).
const TENSOR_COPY_TARGET_RATIO: f64 = 0.95;

/// Which way a reference copy goes.
#[derive(Clone, Copy)]
enum Way {
    /// Host to device.
    Up,
    /// Device to host.
    Down,
}

/// Pinned host and device buffers of each bandwidth size, in the bench's CUDA session: the
/// pinned `cuMemcpy` references, run alternately with hwtensor's own copies of the same bytes
/// so that both see the same machine (a shared machine's load moves between figures measured
/// minutes apart: the Vulkan copies used to be compared with references taken before them).
pub struct References {
    buffers: HashMap<usize, (*mut std::ffi::c_void, sys::CUdeviceptr)>,
    _session: Session,
}

impl References {
    fn allocate(session: Session) -> crate::Result<References> {
        let mut out = References {
            buffers: HashMap::new(),
            _session: session,
        };
        for (_, bytes) in super::BANDWIDTH_SIZES {
            let (mut host, mut dev) = (std::ptr::null_mut(), 0);
            // SAFETY: out-pointers to locals; each is recorded at once, so Drop frees it.
            unsafe {
                ok(sys::cuMemAllocHost_v2(&mut host, bytes), "cuMemAllocHost")?;
                out.buffers.insert(bytes, (host, 0));
                ok(sys::cuMemAlloc_v2(&mut dev, bytes), "cuMemAlloc")?;
            }
            out.buffers.insert(bytes, (host, dev));
        }
        Ok(out)
    }

    /// One synchronous pinned copy of `bytes` (a bandwidth size) the way `way` says.
    fn copy(&self, bytes: usize, way: Way) -> crate::Result<()> {
        let &(host, dev) = self
            .buffers
            .get(&bytes)
            .ok_or_else(|| format!("no reference buffers of {bytes} bytes"))?;
        // SAFETY: both allocations are `bytes` long and live as long as `self`; the copies are
        // synchronous.
        let r = unsafe {
            match way {
                Way::Up => sys::cuMemcpyHtoD_v2(dev, host, bytes),
                Way::Down => sys::cuMemcpyDtoH_v2(host, dev, bytes),
            }
        };
        ok(r, "the pinned cuMemcpy reference")
    }
}

impl Drop for References {
    fn drop(&mut self) {
        for &(host, dev) in self.buffers.values() {
            // SAFETY: allocated in `allocate` (0: never allocated), no copy in flight; the
            // session's context is still current (it drops after this).
            unsafe {
                if dev != 0 {
                    sys::cuMemFree_v2(dev);
                }
                sys::cuMemFreeHost(host);
            }
        }
    }
}

/// Copies between a heap tensor and device memory both ways, each beside the reference: GB/s
/// (medians) of ours and of pinned `cuMemcpy` of the same bytes.
pub struct BothWays {
    /// Ours, host to device.
    pub up: f64,
    /// The reference, host to device.
    pub h2d: f64,
    /// Ours, device to host.
    pub down: f64,
    /// The reference, device to host.
    pub d2h: f64,
}

impl BothWays {
    /// Times `device.copy_from(host)` and back, each alternated with the reference the same way.
    pub fn measure(
        references: &References,
        host: &Tensor<u8>,
        device: &Tensor<u8>,
        rounds: usize,
    ) -> crate::Result<BothWays> {
        let bytes = host.len();
        let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
        let (h2d, up) = beside_reference(references, bytes, Way::Up, rounds, || {
            device.copy_from(host)
        })?;
        let (d2h, down) = beside_reference(references, bytes, Way::Down, rounds, || {
            host.copy_from(device)
        })?;
        Ok(BothWays {
            up: rate(up),
            h2d: rate(h2d),
            down: rate(down),
            d2h: rate(d2h),
        })
    }

    /// Ours over the reference: (up, down).
    pub fn ratios(&self) -> (f64, f64) {
        (self.up / self.h2d, self.down / self.d2h)
    }

    /// Whether both ways reach `target` of the reference.
    pub fn meet(&self, target: f64) -> bool {
        let (up, down) = self.ratios();
        up >= target && down >= target
    }
}

/// Median times of `ours` (a copy of `bytes` one way) and of the pinned reference the same way,
/// timed alternately (reference, ours), `rounds` each: (reference, ours).
fn beside_reference(
    references: &References,
    bytes: usize,
    way: Way,
    rounds: usize,
    mut ours: impl FnMut() -> hwtensor::Result<()>,
) -> crate::Result<(Duration, Duration)> {
    // Each side keeps its first failure: a failed copy makes a meaningless figure.
    let mut reference_failed = None;
    let mut ours_failed = None;
    let (reference, mine) = side_by_side(
        rounds,
        || {
            if let Err(e) = references.copy(bytes, way) {
                reference_failed.get_or_insert(e);
            }
        },
        || {
            if let Err(e) = ours() {
                ours_failed.get_or_insert(e);
            }
        },
    );
    if let Some(e) = reference_failed {
        return Err(e);
    }
    match ours_failed {
        Some(e) => Err(e.into()),
        None => Ok((reference, mine)),
    }
}

/// Copies `bytes` from a heap tensor into CUDA memory and back, each beside the reference.
fn tensor_copies(
    references: &References,
    (name, bytes): (&str, usize),
    rounds: usize,
) -> crate::Result {
    let host = Tensor::<u8>::new(&[bytes], Some(TensorMemory::Mem))?;
    host.map_write()?.fill(3);
    let cuda = Tensor::<u8>::new(&[bytes], Some(TensorMemory::Cuda))?;
    let r = BothWays::measure(references, &host, &cuda, rounds)?;
    let (up, down) = r.ratios();
    println!(
        "{name:<7} pinned cuMemcpy h2d {:>5.1} d2h {:>5.1} GB/s | mem tensor -> cuda {:>5.1} ({up:.2}x), cuda -> mem {:>5.1} ({down:.2}x)  {}",
        r.h2d,
        r.d2h,
        r.up,
        r.down,
        verdict(r.meet(TENSOR_COPY_TARGET_RATIO))
    );
    Ok(())
}

/// Driver calls the bench makes beyond hwtensor's own (which hwtensor checked when it loaded
/// the driver): checked here before the first call, so a driver without one is a skip.
const BENCH_SYMBOLS: &[&str] = &[
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuMemsetD8Async",
    "cuMemcpyDtoHAsync_v2",
];

fn ok(r: sys::CUresult, what: &str) -> crate::Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {r:?}").into())
    }
}

/// The CUDA device, where it and every driver call the bench makes are there; else why not.
pub(super) fn usable() -> Result<&'static CudaDevice, String> {
    let cuda = cuda::device().map_err(|e| e.to_string())?;
    // SAFETY: hwtensor found the library, so culib() does not panic; lookups only.
    let lib = unsafe { sys::culib() };
    let present = |s: &&&str| {
        // SAFETY: a symbol lookup; nothing is called here.
        unsafe { lib.get::<*const std::ffi::c_void>(s.as_bytes()) }.is_ok()
    };
    match BENCH_SYMBOLS.iter().find(|s| !present(s)) {
        Some(missing) => Err(format!("the driver has no {missing}")),
        None => Ok(cuda),
    }
}

/// The CUDA figures; returns the pinned-copy references for the bandwidth table (none where
/// there is no CUDA).
pub fn bench(rounds: usize) -> crate::Result<Option<References>> {
    println!(
        "\n== CUDA interop (medians; copies in GB/s, each beside pinned cuMemcpy, alternated) =="
    );
    let cuda = match usable() {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: {e}");
            return Ok(None);
        }
    };
    println!("device: {} (CUDA {})", cuda.name(), cuda.driver_version());
    let session = Session::open(cuda)?;
    maps(&session, rounds)?;
    ordering(&session, cuda, rounds)?;
    let references = References::allocate(session)?;
    for size in super::BANDWIDTH_SIZES {
        tensor_copies(&references, size, rounds.min(super::BANDWIDTH_ROUNDS))?;
    }
    Ok(Some(references))
}

/// The primary context pushed on this thread and a stream of its own, for the bench's length.
pub(super) struct Session {
    stream: sys::CUstream,
}

impl Session {
    pub(super) fn open(cuda: &CudaDevice) -> crate::Result<Session> {
        let mut stream = std::ptr::null_mut();
        // SAFETY: the primary context hwtensor retained; an out-pointer to a local.
        unsafe {
            ok(
                sys::cuCtxPushCurrent_v2(cuda.context().cast()),
                "cuCtxPushCurrent",
            )?;
            ok(sys::cuStreamCreate(&mut stream, 1), "cuStreamCreate")?;
        }
        Ok(Session { stream })
    }

    pub(super) fn stream(&self) -> cuda::CudaStream {
        self.stream.cast()
    }

    /// Queues on the stream a write of `value` into the byte at `ptr` (a kernel's one-element
    /// write, as `x[0, 0, 0] = v` in PyTorch).
    pub(super) fn set_byte(&self, ptr: u64, value: u8) -> crate::Result<()> {
        // SAFETY: `ptr` is a mapped device address of at least one byte (the caller's map).
        let r = unsafe { sys::cuMemsetD8Async(ptr, value, 1, self.stream) };
        ok(r, "cuMemsetD8Async")
    }

    /// The byte at `ptr`, read through the stream and waited for (as `.item()` in PyTorch).
    pub(super) fn byte(&self, ptr: u64) -> crate::Result<u8> {
        let mut b = 0u8;
        // SAFETY: one byte into a local that outlives the copy (synchronised below).
        let r =
            unsafe { sys::cuMemcpyDtoHAsync_v2((&mut b as *mut u8).cast(), ptr, 1, self.stream) };
        ok(r, "cuMemcpyDtoHAsync")?;
        self.sync()?;
        Ok(b)
    }

    pub(super) fn sync(&self) -> crate::Result<()> {
        // SAFETY: the session's own stream.
        ok(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut popped = std::ptr::null_mut();
        // SAFETY: the stream made in `open`, then the context it pushed.
        unsafe {
            sys::cuStreamSynchronize(self.stream);
            sys::cuStreamDestroy_v2(self.stream);
            sys::cuCtxPopCurrent_v2(&mut popped);
        }
    }
}

/// One way to end a CUDA read map.
type EndOfRead = fn(CudaMap<'_, u8, ReadOnly>) -> hwtensor::Result<()>;

/// First map of a GPU tensor (the import) and later maps (a lookup), each with its end.
fn maps(s: &Session, rounds: usize) -> crate::Result<()> {
    let frame = [1080usize, 1920, 4];
    let mut first: Vec<Duration> = Vec::new();
    for _ in 0..rounds.min(21) {
        let t = Tensor::<u8>::new(&frame, Some(TensorMemory::Gpu))?;
        let started = Instant::now();
        t.cuda_map_read(s.stream())?.finish()?;
        first.push(started.elapsed());
        s.sync()?;
    }
    let first = median(&mut first);
    println!(
        "first cuda_map of a 1080p GPU tensor:  {:>10}  {}",
        fmt(first),
        verdict(first <= FIRST_MAP_TARGET)
    );
    let t = Tensor::<u8>::new(&frame, Some(TensorMemory::Gpu))?;
    // A read map's two ends: `finish` signals a timeline value, `end` (and a drop) records a
    // CUDA event, the end readers are told to use since #27.
    let ends: [(&str, EndOfRead); 2] = [
        ("finish, a signal", |m| m.finish().map(drop)),
        ("end, an event", |m| m.end()),
    ];
    for (name, end) in ends {
        let mut failed = None;
        let later = median_per_call(rounds, 100, || {
            if let Err(e) = t.cuda_map_read(s.stream()).and_then(end) {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        s.sync()?;
        println!(
            "later cuda_map (+ {name:<16}):  {:>10}  {}",
            fmt(later),
            verdict(later <= LATER_MAP_TARGET)
        );
    }
    Ok(())
}

/// How soon each side sees the other's work: a Vulkan copy seen by a CUDA stream (GPU-side
/// wait, then the stream drained), and a CUDA signal seen by the CPU.
fn ordering(s: &Session, cuda: &CudaDevice, rounds: usize) -> crate::Result<()> {
    let small = [4096usize];
    let src = Tensor::<u8>::new(&small, Some(TensorMemory::Gpu))?;
    let dst = Tensor::<u8>::new(&small, Some(TensorMemory::Gpu))?;
    drop(dst.cuda_map_read(s.stream())?); // the import, made outside the timing
    s.sync()?;
    let mut vk_to_cuda: Vec<Duration> = Vec::new();
    let mut cpu_sees: Vec<Duration> = Vec::new();
    for _ in 0..rounds * 4 {
        let started = Instant::now();
        dst.copy_from(&src)?; // a Vulkan copy: returns once submitted
        let map = dst.cuda_map_read(s.stream())?; // waits GPU-side for it
        s.sync()?;
        vk_to_cuda.push(started.elapsed());
        let value = map.finish()?;
        let started = Instant::now();
        cuda.gpu_wait(value)?;
        cpu_sees.push(started.elapsed());
    }
    let (a, b) = (median(&mut vk_to_cuda), median(&mut cpu_sees));
    println!(
        "Vulkan copy -> CUDA stream sees it:    {:>10}  {}",
        fmt(a),
        verdict(a <= VULKAN_TO_CUDA_TARGET)
    );
    println!(
        "CUDA signal -> CPU sees the value:     {:>10}  {}",
        fmt(b),
        verdict(b <= CPU_SEES_CUDA_TARGET)
    );
    Ok(())
}
