//! CUDA from C: a tensor's device address on a caller's stream, ordered by the process
//! timeline (see `hwtensor::cuda`).

use std::ffi::c_void;
use std::sync::Arc;

use hwtensor::CudaMap;
use hwtensor::{Direction, Element, MapDirection, Tensor, TensorDyn};

use crate::codes::direction_of;
use crate::status::{guard, invalid, put, HwtStatus, OrStatus};
use crate::tensor::{share, HwtTensor};

/// A CUDA map with its element type and direction set aside.
trait AnyCudaMap {
    /// Ends the map: the timeline value its work completes at.
    fn finish(self: Box<Self>) -> hwtensor::Result<u64>;
    /// Ends the map as dropping it does (a read map records a CUDA event, no value).
    fn end(self: Box<Self>) -> hwtensor::Result<()>;
}

impl<T: Element, D: MapDirection> AnyCudaMap for CudaMap<'static, T, D> {
    fn finish(self: Box<Self>) -> hwtensor::Result<u64> {
        (*self).finish()
    }
    fn end(self: Box<Self>) -> hwtensor::Result<()> {
        (*self).end()
    }
}

/// A live CUDA map (opaque). It holds a reference to its tensor.
pub struct HwtCudaMap {
    /// Declared first: ended before the tensor reference below goes.
    map: Option<Box<dyn AnyCudaMap>>,
    _tensor: Arc<HwtTensor>,
}

impl Drop for HwtCudaMap {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            if let Err(e) = map.end() {
                log::error!("hwtensor: ending a CUDA map failed: {e}");
            }
        }
    }
}

type Begun = (Box<dyn AnyCudaMap>, u64);

fn begin<T: Element>(
    t: &'static Tensor<T>,
    d: Direction,
    stream: *mut c_void,
) -> hwtensor::Result<Begun> {
    fn boxed<M: AnyCudaMap + 'static>(m: M, ptr: u64) -> Begun {
        (Box::new(m), ptr)
    }
    Ok(match d {
        Direction::Read => {
            let m = t.cuda_map_read(stream)?;
            let p = m.device_ptr();
            boxed(m, p)
        }
        Direction::Write => {
            let m = t.cuda_map_write(stream)?;
            let p = m.device_ptr();
            boxed(m, p)
        }
        Direction::ReadWrite => {
            let m = t.cuda_map_read_write(stream)?;
            let p = m.device_ptr();
            boxed(m, p)
        }
    })
}

fn begin_any(t: &'static TensorDyn, d: Direction, stream: *mut c_void) -> hwtensor::Result<Begun> {
    match t {
        TensorDyn::U8(t) => begin(t, d, stream),
        TensorDyn::I8(t) => begin(t, d, stream),
        TensorDyn::U16(t) => begin(t, d, stream),
        TensorDyn::I16(t) => begin(t, d, stream),
        TensorDyn::U32(t) => begin(t, d, stream),
        TensorDyn::I32(t) => begin(t, d, stream),
        TensorDyn::U64(t) => begin(t, d, stream),
        TensorDyn::I64(t) => begin(t, d, stream),
        TensorDyn::F16(t) => begin(t, d, stream),
        TensorDyn::F32(t) => begin(t, d, stream),
        TensorDyn::F64(t) => begin(t, d, stream),
        other => Err(hwtensor::Error::InvalidArgument(format!(
            "CUDA maps of {} tensors are not supported by this C library",
            other.dtype()
        ))),
    }
}

/// Maps `t` for CUDA kernels on `stream` (a `CUstream`; NULL: the legacy default stream) in
/// `mode` (an `HwtAccess`): `*out_device_ptr` is the `CUdeviceptr` of its first element (use
/// the byte strides), valid in the primary context of the CUDA device matched to the process
/// GPU device (the context PyTorch and CuPy use). The stream waits GPU-side for the tensor's
/// earlier work; `hwt_cuda_map_end` marks the end that later work orders behind. GPU,
/// CUDA, and heap or shm tensors of whole pages can be mapped; `HWT_STATUS_UNAVAILABLE` without
/// CUDA, with the reason in `hwt_last_error`.
///
/// # Safety
/// `t` must be a live handle; `stream` a stream of that context or NULL; the out-pointers
/// valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_cuda_map(
    t: *const HwtTensor,
    mode: u32,
    stream: *mut c_void,
    out_map: *mut *mut HwtCudaMap,
    out_device_ptr: *mut u64,
) -> HwtStatus {
    guard(|| {
        let direction = direction_of(mode)?;
        if out_map.is_null() || out_device_ptr.is_null() {
            return Err(invalid("an out-pointer of hwt_tensor_cuda_map is null"));
        }
        let owner = share(t)?;
        // SAFETY: points into the Arc's allocation, which never moves and which the map object
        // keeps alive (its second field, dropped after the map).
        let tensor: &'static TensorDyn = unsafe { &*std::ptr::addr_of!(owner.tensor) };
        let (map, ptr) = begin_any(tensor, direction, stream).or_status()?;
        let handle = Box::into_raw(Box::new(HwtCudaMap {
            map: Some(map),
            _tensor: owner,
        }));
        put(out_device_ptr, "out_device_ptr", ptr)?;
        put(out_map, "out_map", handle)
    })
}

/// Ends a CUDA map. With `out_value`: queues on its stream the signal of a new timeline value,
/// which the tensor records as its last access, and writes it there. With `out_value` NULL, a
/// read map records a CUDA event instead (later writes of the tensor, and a channel frame's
/// hand-back, follow it): on NVIDIA a signal per frame stalls the CUDA work of other processes
/// on the GPU, an event does not; a write map signals either way. Null maps are ignored; ending
/// a map twice is undefined behaviour.
///
/// # Safety
/// `map` must be null or a map from `hwt_tensor_cuda_map` not yet ended; `out_value` null or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_cuda_map_end(map: *mut HwtCudaMap, out_value: *mut u64) -> HwtStatus {
    guard(|| {
        if map.is_null() {
            return Ok(());
        }
        // SAFETY: made by Box::into_raw in hwt_tensor_cuda_map, ended once (the contract).
        let mut owned = unsafe { Box::from_raw(map) };
        let Some(map) = owned.map.take() else {
            return Ok(());
        };
        if out_value.is_null() {
            return map.end().or_status();
        }
        let value = map.finish().or_status()?;
        put(out_value, "out_value", value)
    })
}

/// `HWT_STATUS_OK` when CUDA is usable here, else `HWT_STATUS_UNAVAILABLE` with the reason
/// ("no libcuda.so.1", "no CUDA device matches ...", "HWTENSOR_CUDA turns CUDA off ...") in
/// `hwt_last_error`.
#[no_mangle]
pub extern "C" fn hwt_cuda_check() -> HwtStatus {
    guard(|| hwtensor::cuda::device().map(|_| ()).or_status())
}
