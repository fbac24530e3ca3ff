//! [`TensorMemory`]: which kind of memory backs a tensor, and the automatic choice.

/// The environment variable that forces automatic selection to heap memory.
///
/// For debugging a pipeline: it takes shared and DMA memory out of the picture without a rebuild.
pub const FORCE_MEM_ENV: &str = "HWTENSOR_FORCE_MEM";

/// The memory that backs a tensor.
///
/// Every variant exists on every platform and build, so code (and the C ABI) can name a backing
/// that is not present; [`TensorMemory::is_available`] answers at run time (asked of each
/// backing in `backing/`, the one list of them). The numeric codes are
/// part of the wire format and never change; `0` is left free for "choose for me" in C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
// New ones will come (BF16, P010, a backing, a kind of identity): outside this crate a
// match needs a wildcard arm, so adding one is not a breaking change.
#[non_exhaustive]
pub enum TensorMemory {
    /// Heap memory of this process: 64-byte aligned, page aligned from one page up.
    Mem = 1,
    /// Shared memory: a sealed memfd on Linux (shareable by fd), a pagefile-backed section on
    /// Windows.
    Shm = 2,
    /// A kernel DMA-BUF: allocated from a dma-heap, or imported from a driver.
    DmaBuf = 3,
    /// Memory on the process GPU device.
    Gpu = 4,
    /// CUDA device memory.
    Cuda = 5,
}

impl TensorMemory {
    /// Every backing, in code order.
    pub const ALL: [TensorMemory; 5] = [
        TensorMemory::Mem,
        TensorMemory::Shm,
        TensorMemory::DmaBuf,
        TensorMemory::Gpu,
        TensorMemory::Cuda,
    ];

    /// The stable name: `"mem"`, `"shm"`, `"dmabuf"`, `"gpu"`, `"cuda"`.
    pub const fn name(self) -> &'static str {
        match self {
            TensorMemory::Mem => "mem",
            TensorMemory::Shm => "shm",
            TensorMemory::DmaBuf => "dmabuf",
            TensorMemory::Gpu => "gpu",
            TensorMemory::Cuda => "cuda",
        }
    }

    /// Other names users write for this backing.
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            TensorMemory::Mem => &["heap"],
            TensorMemory::Shm => &["memfd"],
            TensorMemory::DmaBuf => &["dma-buf", "dma_buf"],
            TensorMemory::Gpu => &["vulkan"],
            TensorMemory::Cuda => &[],
        }
    }
}

coded_enum!(TensorMemory, "tensor memory");

/// What a tensor is for; it decides the order automatic selection tries backings in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    Plain,
    Image,
}

/// The backings automatic selection tries, in order, for `purpose`.
///
/// Images skip Shm: an image is worth sharing with a GPU or NPU only as a DMA-BUF, and a memfd
/// gives a display or codec driver nothing it can import, so heap memory is the honest fallback.
pub(crate) fn auto_candidates(purpose: Purpose, force_mem: bool) -> &'static [TensorMemory] {
    use TensorMemory::*;
    match (force_mem, purpose) {
        (true, _) => &[Mem],
        (false, Purpose::Plain) => &[DmaBuf, Shm, Mem],
        (false, Purpose::Image) => &[DmaBuf, Mem],
    }
}

/// Whether `HWTENSOR_FORCE_MEM` asks for heap memory (`1`, `true`, `yes`).
pub(crate) fn force_mem_requested() -> bool {
    std::env::var(FORCE_MEM_ENV)
        .map(|v| matches!(v.trim(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn codes_and_names_are_fixed_and_round_trip() {
        let expected = [
            (1, "mem"),
            (2, "shm"),
            (3, "dmabuf"),
            (4, "gpu"),
            (5, "cuda"),
        ];
        for (m, (code, name)) in TensorMemory::ALL.into_iter().zip(expected) {
            assert_eq!((m.code(), m.name()), (code, name));
            assert_eq!(TensorMemory::from_code(code), Some(m));
            assert_eq!(name.parse::<TensorMemory>().unwrap(), m);
        }
        assert_eq!(TensorMemory::from_code(0), None);
        assert!("vram".parse::<TensorMemory>().is_err());
    }

    #[test]
    fn plain_tensors_prefer_dmabuf_then_shm_then_heap() {
        use TensorMemory::*;
        assert_eq!(auto_candidates(Purpose::Plain, false), &[DmaBuf, Shm, Mem]);
    }

    #[test]
    fn images_prefer_dmabuf_then_heap() {
        use TensorMemory::*;
        assert_eq!(auto_candidates(Purpose::Image, false), &[DmaBuf, Mem]);
    }

    #[test]
    fn forcing_heap_memory_leaves_only_heap() {
        assert_eq!(auto_candidates(Purpose::Plain, true), &[TensorMemory::Mem]);
        assert_eq!(auto_candidates(Purpose::Image, true), &[TensorMemory::Mem]);
    }

    #[test]
    fn heap_is_always_available_and_cuda_only_where_a_cuda_device_is() {
        assert!(TensorMemory::Mem.is_available());
        #[cfg(target_os = "linux")]
        let cuda_here = crate::cuda::device().is_ok();
        #[cfg(not(target_os = "linux"))]
        let cuda_here = false;
        match TensorMemory::Cuda.ensure_available() {
            Ok(()) => assert!(cuda_here),
            Err(e) => {
                assert!(!cuda_here);
                assert!(matches!(
                    e,
                    Error::Unavailable {
                        memory: TensorMemory::Cuda,
                        ..
                    }
                ));
            }
        }
    }
}
