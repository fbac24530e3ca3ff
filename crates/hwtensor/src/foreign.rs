//! Tensors over host memory someone else owns (a NumPy array, a PyTorch CPU tensor, an
//! inference runtime's arena, `cudaHostAlloc` memory), without a copy.
//!
//! The memory is heap memory to hwtensor (`TensorMemory::Mem`): maps, views and copies work
//! as for any heap tensor, and it travels to another process inline (it has no fd). The owner
//! is dropped when the last tensor over the memory goes: that is where the memory goes back.

// One unsafe entry point: the caller vouches for a raw pointer.
#![allow(unsafe_code)]

pub use crate::backing::foreign::ForeignOwner;

use crate::backing::{ForeignHost, Storage};
use crate::buffer::Buffer;
use crate::geometry::byte_strides;
use crate::tensor::{import_access, CheckedParts, Parts};
use crate::{CpuAccess, DType, Element, Error, Result, Tensor, TensorDyn};

impl<T: Element> Tensor<T> {
    /// A tensor of `shape` over `len` bytes at `ptr` that `owner` keeps alive, with byte
    /// `strides` (C order when `None`). Read-only unless `writable`. The geometry is checked
    /// against `len` (whole, non-overlapping strides; the last element inside), and `ptr`
    /// must be aligned for `T`.
    ///
    /// # Safety
    /// The `len` bytes at `ptr` must stay valid for reads (and for writes, with `writable`),
    /// neither freed nor moved, from any thread, until `owner` is dropped; while a map of the
    /// tensor is live, nothing outside hwtensor may write them.
    pub unsafe fn from_foreign(
        ptr: *mut u8,
        len: usize,
        shape: &[usize],
        strides: Option<&[usize]>,
        writable: bool,
        owner: ForeignOwner,
    ) -> Result<Self> {
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::InvalidArgument(format!(
                "foreign memory at {ptr:p} is not aligned for {} elements",
                T::DTYPE
            )));
        }
        let access = if writable {
            CpuAccess::ReadWrite
        } else {
            CpuAccess::Read
        };
        let checked = Self::foreign_parts(len, shape, strides, access)?;
        // SAFETY: the caller's contract, passed on.
        let host = unsafe { ForeignHost::new(ptr, len, writable, owner) }?;
        let buffer = Buffer::new(Storage::Foreign(host))?;
        debug_assert_eq!(import_access(&buffer), access);
        Self::from_parts(buffer, checked)
    }

    /// The geometry of a foreign buffer of `len` bytes, checked (C order when no `strides`).
    fn foreign_parts(
        len: usize,
        shape: &[usize],
        strides: Option<&[usize]>,
        access: CpuAccess,
    ) -> Result<CheckedParts> {
        let strides = match strides {
            Some(s) => s.to_vec(),
            None => byte_strides(shape, Self::elem(), None)?,
        };
        let parts = Parts {
            offset: 0,
            shape: shape.to_vec(),
            strides,
            image: None,
            access,
            quantization: None,
        };
        parts.check(Self::elem(), len)
    }
}

#[cfg(target_os = "linux")]
impl<T: Element> Tensor<T> {
    /// A tensor of `shape` over `len` bytes of CUDA device memory at `device_ptr` that `owner`
    /// keeps alive (a PyTorch or CuPy tensor's, through DLPack), with byte `strides` (C order
    /// when `None`). It is `TensorMemory::Cuda`: CUDA maps are native, CPU maps go through
    /// pinned staging, `copy_from` runs on CUDA's copy engines. It has no fd, so it travels to
    /// another process only inline. Writes pending on it must be ordered on `ready` (ask the
    /// producer to sync with [`CudaDevice::import_stream`](crate::cuda::CudaDevice::import_stream)):
    /// hwtensor's first use follows what that stream has queued.
    ///
    /// # Safety
    /// `device_ptr` must address `len` bytes of memory of the CUDA device hwtensor uses, valid
    /// in its primary context until `owner` is dropped.
    pub unsafe fn from_foreign_cuda(
        device_ptr: u64,
        len: usize,
        shape: &[usize],
        strides: Option<&[usize]>,
        owner: ForeignOwner,
        ready: crate::cuda::CudaStream,
    ) -> Result<Self> {
        if !device_ptr.is_multiple_of(std::mem::align_of::<T>() as u64) {
            return Err(Error::InvalidArgument(format!(
                "CUDA memory at {device_ptr:#x} is not aligned for {} elements",
                T::DTYPE
            )));
        }
        let checked = Self::foreign_parts(len, shape, strides, CpuAccess::ReadWrite)?;
        // SAFETY: the caller's contract, passed on.
        let mem =
            unsafe { crate::cuda::CudaMemory::foreign(device_ptr, len, owner, ready.cast()) }?;
        Self::from_parts(Buffer::new(Storage::Cuda(mem))?, checked)
    }
}

#[cfg(target_os = "linux")]
impl TensorDyn {
    /// See [`Tensor::from_foreign_cuda`].
    ///
    /// # Safety
    /// As for [`Tensor::from_foreign_cuda`].
    pub unsafe fn from_foreign_cuda(
        device_ptr: u64,
        len: usize,
        shape: &[usize],
        strides: Option<&[usize]>,
        dtype: DType,
        owner: ForeignOwner,
        ready: crate::cuda::CudaStream,
    ) -> Result<Self> {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            for_dtype!(
                dtype,
                from_foreign_cuda(device_ptr, len, shape, strides, owner, ready)
            )
        }
    }
}

impl TensorDyn {
    /// See [`Tensor::from_foreign`].
    ///
    /// # Safety
    /// As for [`Tensor::from_foreign`].
    pub unsafe fn from_foreign(
        ptr: *mut u8,
        len: usize,
        shape: &[usize],
        strides: Option<&[usize]>,
        dtype: DType,
        writable: bool,
        owner: ForeignOwner,
    ) -> Result<Self> {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            for_dtype!(
                dtype,
                from_foreign(ptr, len, shape, strides, writable, owner)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// An owner that says when it is dropped.
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn wrapped(data: &mut [f32], dropped: &Arc<AtomicBool>, writable: bool) -> Tensor<f32> {
        let len = std::mem::size_of_val(data);
        // SAFETY: `data` outlives every tensor in these tests (each drops its tensor first).
        unsafe {
            Tensor::<f32>::from_foreign(
                data.as_mut_ptr().cast(),
                len,
                &[2, 3],
                None,
                writable,
                Box::new(Flag(dropped.clone())),
            )
        }
        .unwrap()
    }

    #[test]
    fn a_foreign_buffer_is_the_callers_bytes_and_its_owner_goes_with_the_last_tensor() {
        let mut data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let dropped = Arc::new(AtomicBool::new(false));
        let t = wrapped(&mut data, &dropped, true);
        assert_eq!(t.memory(), crate::TensorMemory::Mem);
        assert_eq!(t.map_read().unwrap()[4], 5.0);
        t.map_write().unwrap()[0] = 9.0;
        let view = t.batch(1).unwrap();
        drop(t);
        assert!(!dropped.load(Ordering::SeqCst), "a view keeps the owner");
        drop(view);
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(data[0], 9.0, "the write went to the caller's memory");
    }

    #[test]
    fn a_read_only_foreign_buffer_refuses_a_write_map() {
        let mut data = [0.0f32; 6];
        let dropped = Arc::new(AtomicBool::new(false));
        let t = wrapped(&mut data, &dropped, false);
        assert_eq!(t.access(), CpuAccess::Read);
        assert!(matches!(t.map_write(), Err(Error::AccessDenied { .. })));
    }

    #[test]
    fn a_geometry_past_the_foreign_bytes_or_a_misaligned_pointer_is_refused() {
        let mut data = [0u32; 4];
        let ptr = data.as_mut_ptr().cast::<u8>();
        // SAFETY: `data` outlives the call; refused calls drop their owner at once.
        let past = unsafe { Tensor::<u32>::from_foreign(ptr, 16, &[5], None, true, Box::new(())) };
        assert!(
            matches!(
                past,
                Err(Error::TooSmall {
                    needed: 20,
                    capacity: 16
                })
            ),
            "{past:?}"
        );
        // SAFETY: as above.
        let odd = unsafe {
            Tensor::<u32>::from_foreign(ptr.wrapping_add(1), 8, &[2], None, true, Box::new(()))
        };
        assert!(matches!(odd, Err(Error::InvalidArgument(_))), "{odd:?}");
        // SAFETY: as above.
        let overlap = unsafe {
            Tensor::<u32>::from_foreign(ptr, 16, &[2, 2], Some(&[4, 4]), true, Box::new(()))
        };
        assert!(overlap.is_err(), "overlapping strides are refused");
    }
}
