//! DMA-BUF: allocation from the kernel's dma-heaps and CPU-access brackets.
//!
//! A DMA-BUF is memory a device can DMA to and from. Its CPU mapping may be uncached or sit
//! behind a cache the device does not snoop, so every CPU access is bracketed with
//! `DMA_BUF_IOCTL_SYNC` start/end in the direction of the access; without the brackets a CPU
//! reader can see stale lines and a CPU writer's bytes can stay in its cache while the NPU reads.

// The DMA-BUF sync ioctl has no safe wrapper.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags};
use rustix::ioctl::{opcode, Opcode, Setter, Updater};

use crate::Direction;
use crate::{Error, Result, TensorMemory};

/// Where the kernel exposes its dma-heaps.
pub(crate) const DMA_HEAP_DIR: &str = "/dev/dma_heap";

/// Names the contiguous (CMA) heap goes by on the kernels and boards we know of. Contiguous
/// memory comes first because display controllers and many NPUs without an IOMMU cannot use
/// scattered pages.
pub(crate) const CMA_HEAP_NAMES: &[&str] = &["linux,cma", "default_cma_region", "reserved", "cma"];

/// The scattered-page heap every dma-heap kernel has: the fallback.
pub(crate) const SYSTEM_HEAP_NAME: &str = "system";

/// `struct dma_heap_allocation_data` of linux/dma-heap.h.
#[repr(C)]
#[derive(Debug, Default)]
struct DmaHeapAllocationData {
    len: u64,
    fd: u32,
    fd_flags: u32,
    heap_flags: u64,
}

/// `struct dma_buf_sync` of linux/dma-buf.h.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DmaBufSync {
    flags: u64,
}

/// `DMA_HEAP_IOCTL_ALLOC`: `_IOWR('H', 0x0, struct dma_heap_allocation_data)`.
pub(crate) const DMA_HEAP_IOCTL_ALLOC: Opcode =
    opcode::read_write::<DmaHeapAllocationData>(b'H', 0);
/// `DMA_BUF_IOCTL_SYNC`: `_IOW('b', 0, struct dma_buf_sync)`.
pub(crate) const DMA_BUF_IOCTL_SYNC: Opcode = opcode::write::<DmaBufSync>(b'b', 0);

/// `DMA_BUF_SYNC_*` flags.
pub(crate) mod sync_flags {
    pub const READ: u64 = 1 << 0;
    pub const WRITE: u64 = 1 << 1;
    pub const START: u64 = 0 << 2;
    pub const END: u64 = 1 << 2;
}

/// The `DMA_BUF_SYNC_*` direction bits of a CPU access.
pub(crate) fn direction_flags(direction: Direction) -> u64 {
    match direction {
        Direction::Read => sync_flags::READ,
        Direction::Write => sync_flags::WRITE,
        Direction::ReadWrite => sync_flags::READ | sync_flags::WRITE,
    }
}

/// Heaps that hand out write-combined (uncached) memory: right for buffers the CPU writes or
/// never touches (a CPU read of uncached memory is ~10x slower), and no cache maintenance.
pub(crate) const UNCACHED_MARK: &str = "uncached";

/// `HWTENSOR_DMA_HEAP`: `contiguous` forbids the scattered-page fallback (a device without an
/// IOMMU cannot use scattered pages, and would fail in its DMA rather than here); a heap's
/// name (as in /dev/dma_heap) allows only that heap.
pub const DMA_HEAP_ENV: &str = "HWTENSOR_DMA_HEAP";

/// Which heaps a DMA-BUF allocation may come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeapPolicy {
    /// Contiguous first, scattered pages as the fallback.
    Any,
    /// Contiguous (CMA) heaps only.
    ContiguousOnly,
    /// This heap only.
    Named(String),
}

impl HeapPolicy {
    /// The policy `HWTENSOR_DMA_HEAP` sets (`Any` without it).
    pub(crate) fn from_env() -> HeapPolicy {
        match std::env::var(DMA_HEAP_ENV) {
            Ok(v) if v.eq_ignore_ascii_case("contiguous") => HeapPolicy::ContiguousOnly,
            Ok(v) if !v.trim().is_empty() => HeapPolicy::Named(v.trim().to_string()),
            _ => HeapPolicy::Any,
        }
    }
}

/// The heaps to try, best first, among the heap names present on this machine, for a buffer
/// the CPU reads (`cpu_reads`) or not, under `policy`. Contiguous memory comes first; for a
/// buffer the CPU never reads, uncached heaps come before cached ones; for one it reads, they
/// come last (they still beat no buffer at all).
pub(crate) fn heap_order(present: &[String], cpu_reads: bool, policy: &HeapPolicy) -> Vec<String> {
    if let HeapPolicy::Named(name) = policy {
        return present.iter().filter(|p| *p == name).cloned().collect();
    }
    let has = |name: &str| present.iter().any(|p| p == name);
    let mut contiguous: Vec<String> = CMA_HEAP_NAMES
        .iter()
        .filter(|n| has(n))
        .map(|n| n.to_string())
        .collect();
    // A board-specific CMA region we do not know by name is still contiguous memory.
    let unknown_cma: Vec<String> = present
        .iter()
        .filter(|p| p.contains("cma") && !contiguous.contains(p))
        .cloned()
        .collect();
    contiguous.extend(unknown_cma);
    let mut scattered: Vec<String> = match policy {
        HeapPolicy::ContiguousOnly => Vec::new(),
        _ => present
            .iter()
            .filter(|p| p.starts_with(SYSTEM_HEAP_NAME))
            .cloned()
            .collect(),
    };
    // Cached first where the CPU reads, uncached first where it does not (stable: the
    // known-name order within each kind is kept).
    let uncached_first =
        |v: &mut Vec<String>| v.sort_by_key(|n| n.contains(UNCACHED_MARK) == cpu_reads);
    uncached_first(&mut contiguous);
    uncached_first(&mut scattered);
    let mut order = contiguous;
    if cpu_reads {
        // Uncached memory of any kind after every cached heap.
        let (cached, uncached): (Vec<_>, Vec<_>) = order
            .into_iter()
            .chain(scattered)
            .partition(|n| !n.contains(UNCACHED_MARK));
        order = cached.into_iter().chain(uncached).collect();
    } else {
        order.extend(scattered);
    }
    order
}

fn present_heaps() -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(DMA_HEAP_DIR)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Why no DMA-BUF can be allocated here, probed once.
pub(crate) fn unavailable_reason() -> Option<String> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    REASON.get_or_init(probe).clone()
}

fn probe() -> Option<String> {
    let present = match present_heaps() {
        Ok(p) => p,
        Err(e) => return Some(format!("no dma-heap: cannot list {DMA_HEAP_DIR} ({e})")),
    };
    let order = heap_order(&present, true, &HeapPolicy::from_env());
    if order.is_empty() {
        return Some(format!(
            "{DMA_HEAP_DIR} has no CMA or system heap (found: {present:?})"
        ));
    }
    let openable = order.iter().any(|name| open_heap(name).is_ok());
    (!openable).then(|| format!("no heap in {DMA_HEAP_DIR} can be opened (tried {order:?})"))
}

fn open_heap(name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        Path::new(DMA_HEAP_DIR).join(name),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Allocates a DMA-BUF of `len` bytes from the best heap that will give one (see
/// [`heap_order`]); returns it with the heap's name.
pub(crate) fn allocate(len: usize, cpu_reads: bool) -> Result<(OwnedFd, String)> {
    let present = present_heaps().unwrap_or_default();
    let order = heap_order(&present, cpu_reads, &HeapPolicy::from_env());
    let mut last = None;
    for name in &order {
        match open_heap(name).and_then(|heap| allocate_from(heap.as_fd(), len)) {
            Ok(fd) => return Ok((fd, name.clone())),
            Err(e) => {
                log::debug!("dma-heap {name}: allocation of {len} bytes failed: {e}");
                last = Some(e);
            }
        }
    }
    Err(Error::Alloc {
        memory: TensorMemory::DmaBuf,
        bytes: len,
        source: match last {
            Some(e) => e.into(),
            None => std::io::Error::other(format!("no usable heap in {DMA_HEAP_DIR}")),
        },
    })
}

fn allocate_from(heap: BorrowedFd<'_>, len: usize) -> rustix::io::Result<OwnedFd> {
    let mut data = DmaHeapAllocationData {
        len: len as u64,
        fd_flags: (OFlags::RDWR | OFlags::CLOEXEC).bits(),
        ..Default::default()
    };
    // SAFETY: DMA_HEAP_IOCTL_ALLOC reads and writes exactly one dma_heap_allocation_data, which
    // is what `data` is (same layout, repr(C)), and it lives across the call.
    unsafe {
        let op = Updater::<{ DMA_HEAP_IOCTL_ALLOC }, DmaHeapAllocationData>::new(&mut data);
        rustix::ioctl::ioctl(heap, op)?;
    }
    // SAFETY: on success the kernel installed a new fd for us in `data.fd`; nothing else owns it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(data.fd as i32) })
}

/// One `DMA_BUF_IOCTL_SYNC` call with `flags`.
pub(crate) fn sync(fd: BorrowedFd<'_>, flags: u64) -> rustix::io::Result<()> {
    // SAFETY: DMA_BUF_IOCTL_SYNC reads one dma_buf_sync, which the Setter passes by pointer.
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            Setter::<{ DMA_BUF_IOCTL_SYNC }, DmaBufSync>::new(DmaBufSync { flags }),
        )
    }
}

/// An open CPU-access bracket on a DMA-BUF: `SYNC_START` when made, `SYNC_END` when dropped.
#[derive(Debug)]
pub(crate) struct SyncBracket<'a> {
    fd: BorrowedFd<'a>,
    direction: Direction,
}

impl<'a> SyncBracket<'a> {
    pub(crate) fn begin(fd: BorrowedFd<'a>, direction: Direction) -> Result<Self> {
        sync(fd, sync_flags::START | direction_flags(direction))
            .map_err(|e| Error::os("DMA_BUF_IOCTL_SYNC start", e))?;
        Ok(SyncBracket { fd, direction })
    }
}

impl Drop for SyncBracket<'_> {
    fn drop(&mut self) {
        if let Err(e) = sync(self.fd, sync_flags::END | direction_flags(self.direction)) {
            log::warn!("DMA_BUF_IOCTL_SYNC end failed: {e}; a device may read stale CPU writes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // Values printed by a C program including linux/dma-heap.h and linux/dma-buf.h.
        assert_eq!(DMA_HEAP_IOCTL_ALLOC as u64, 0xc018_4800);
        assert_eq!(DMA_BUF_IOCTL_SYNC as u64, 0x4008_6200);
        assert_eq!(std::mem::size_of::<DmaHeapAllocationData>(), 24);
    }

    #[test]
    fn sync_flags_match_the_kernel_headers() {
        assert_eq!(sync_flags::START | direction_flags(Direction::Read), 1);
        assert_eq!(sync_flags::END | direction_flags(Direction::Write), 6);
        assert_eq!(sync_flags::END | direction_flags(Direction::ReadWrite), 7);
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    const ANY: HeapPolicy = HeapPolicy::Any;

    #[test]
    fn the_cma_heap_comes_before_the_system_heap() {
        let order = heap_order(&names(&["system", "linux,cma"]), true, &ANY);
        assert_eq!(order, names(&["linux,cma", "system"]));
    }

    #[test]
    fn an_unknown_cma_region_still_counts_as_contiguous() {
        let order = heap_order(&names(&["system", "vendor-cma@0"]), true, &ANY);
        assert_eq!(order, names(&["vendor-cma@0", "system"]));
    }

    #[test]
    fn a_buffer_the_cpu_never_reads_takes_uncached_memory_first_and_one_it_reads_last() {
        let present = names(&[
            "system",
            "system-uncached",
            "linux,cma",
            "linux,cma-uncached",
        ]);
        assert_eq!(
            heap_order(&present, false, &ANY),
            names(&[
                "linux,cma-uncached",
                "linux,cma",
                "system-uncached",
                "system"
            ])
        );
        assert_eq!(
            heap_order(&present, true, &ANY),
            names(&[
                "linux,cma",
                "system",
                "linux,cma-uncached",
                "system-uncached"
            ])
        );
    }

    #[test]
    fn a_device_without_an_iommu_can_forbid_scattered_pages_or_name_its_heap() {
        let present = names(&["system", "linux,cma", "vendor-cma@0"]);
        let contiguous = heap_order(&present, true, &HeapPolicy::ContiguousOnly);
        assert_eq!(contiguous, names(&["linux,cma", "vendor-cma@0"]));
        let named = HeapPolicy::Named("vendor-cma@0".into());
        assert_eq!(
            heap_order(&present, false, &named),
            names(&["vendor-cma@0"])
        );
        assert!(heap_order(&present, false, &HeapPolicy::Named("nope".into())).is_empty());
    }

    #[test]
    fn no_heaps_means_no_candidates() {
        assert!(heap_order(&[], true, &ANY).is_empty());
        assert!(heap_order(&names(&["secure"]), true, &ANY).is_empty());
    }

    #[test]
    fn without_a_dma_heap_the_backing_says_so() {
        if Path::new(DMA_HEAP_DIR).exists() {
            eprintln!(
                "SKIPPED: without_a_dma_heap_the_backing_says_so - this machine has {DMA_HEAP_DIR}"
            );
            return;
        }
        let reason = unavailable_reason().expect("no dma-heap, so unavailable");
        assert!(reason.contains(DMA_HEAP_DIR), "{reason}");
        assert!(matches!(
            allocate(4096, true),
            Err(Error::Alloc {
                memory: TensorMemory::DmaBuf,
                ..
            })
        ));
    }
}
