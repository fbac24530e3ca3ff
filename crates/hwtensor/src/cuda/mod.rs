//! CUDA: tensors mapped into CUDA without a copy, ordered by the process timeline (Linux).
//!
//! The CUDA driver is loaded at run time (`cudarc`, API 11.4): nothing about CUDA is needed to
//! build hwtensor or to run it without CUDA, and [`unavailable_reason`] says why CUDA is not
//! usable here. The CUDA device is the one whose UUID equals the process GPU device's, and all
//! work runs in its primary context, so device addresses hwtensor hands out are valid in
//! PyTorch's and CuPy's.
//!
//! [`Tensor::cuda_map_read`](crate::Tensor::cuda_map_read) and its write and read-write
//! siblings map GPU tensors (their Vulkan memory imported once per buffer) and heap or shm
//! tensors (registered once per buffer, pinned and device-mapped) for kernels on a caller's
//! stream; the map waits on the stream for the tensor's last GPU write and, when it ends,
//! signals the process timeline (a write map, or any map's `finish`) or records a CUDA event
//! (a read map dropped or ended by `end`: a signal per frame stalls CUDA work in other
//! processes, see `event.rs`). No CPU wait anywhere on that path.
//!
//! `TensorMemory::Cuda` is CUDA device memory (`cuMemCreate`, exportable as a POSIX fd): CPU maps
//! go through a pinned staging buffer, CUDA maps are native, and `copy_from` between it and any
//! buffer CUDA reaches (GPU memory, heap or shm of whole pages) runs on CUDA's copy engines.
//!
//! # Example
//!
//! ```
//! use hwtensor::{Tensor, TensorMemory};
//!
//! match hwtensor::cuda::device() {
//!     Ok(cuda) => {
//!         let t = Tensor::<u8>::new(&[1080, 1920, 4], Some(TensorMemory::Gpu))?;
//!         let map = t.cuda_map_read(std::ptr::null_mut())?; // the default stream
//!         assert_ne!(map.device_ptr(), 0);
//!         let done = map.finish()?; // a timeline value: CPU maps and Vulkan work wait for it
//!         cuda.gpu_wait(done)?;
//!     }
//!     Err(e) => eprintln!("no CUDA here: {e}"),
//! }
//! # Ok::<(), hwtensor::Error>(())
//! ```

mod copy;
mod device;
mod driver;
mod event;
mod import;
mod memory;

pub(crate) use copy::run_copy;
pub use device::{device, unavailable_reason, CudaDevice, CUDA_ENV};
pub(crate) use event::{when_read, ReadMark};
pub(crate) use import::{BufferImport, Offer};
pub(crate) use memory::{CudaCpuAccess, CudaMemory};

/// Hooks for the CUDA integration tests, not API.
#[doc(hidden)]
pub mod testing {
    /// How many copies CUDA has run in this process (which engine a copy took).
    pub fn copies_run() -> u64 {
        super::copy::copies_run()
    }
}

/// A raw CUDA stream (`CUstream`); null is the default (legacy) stream.
pub type CudaStream = *mut std::ffi::c_void;

impl CudaDevice {
    /// hwtensor's own CUDA stream (non-blocking), on which it orders imports: a DLPack
    /// producer asked to sync with it makes hwtensor's first use of the memory follow its
    /// pending writes ([`Tensor::from_foreign_cuda`](crate::Tensor::from_foreign_cuda)).
    pub fn import_stream(&self) -> crate::Result<CudaStream> {
        self.own_stream().map(|s| s.cast())
    }

    /// Waits (CPU) until the process timeline reaches `value`, such as a value
    /// [`CudaMap::finish`](crate::CudaMap::finish) returned, at most [`GPU_WAIT`](crate::gpu::GPU_WAIT).
    pub fn gpu_wait(&self, value: u64) -> crate::Result<()> {
        self.gpu().wait(value, crate::gpu::GPU_WAIT)
    }
}
