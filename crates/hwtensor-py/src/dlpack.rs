//! DLPack out: `__dlpack__` and `__dlpack_device__`, through `dlpark` (both capsule kinds, the
//! argument rules, stream parsing).
//!
//! Heap and shm tensors export as `kDLCPU` over their own memory. DMA-BUF tensors do too, read
//! only and to DLPack 1.0 consumers only (whose read-only flag holds them to it): DLPack has no
//! begin and end of CPU access, which a DMA-BUF needs (`DMA_BUF_IOCTL_SYNC`; on boards whose
//! devices do not snoop the CPU's caches a reader outside it can see stale lines), so the
//! capsule holds a read map, its access begun at the export and ended when the consumer frees
//! it; meanwhile the tensor cannot be mapped for writing. GPU and CUDA tensors export
//! as `kDLCUDA` at their CUDA mapping (imported once per buffer): the consumer's stream is
//! made to wait GPU-side for the tensor's last write, never the CPU. Work the consumer then
//! queues on its stream is ordered before hwtensor's next use by `Tensor.cuda_done(stream)`.
//! The capsule keeps the buffer (and so its CUDA import) alive until the consumer frees it.

use dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
};
use dlpark::metadata::Dynamic;
use dlpark::python::consumer::{DlpackStream, StreamArg};
pub(crate) use dlpark::python::ExportRequest;
use dlpark::python::{export_dlpack, CudaStreamRequest, DlpackExporter};
use dlpark::python::{ImportRequest, ImportedDlpack};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use hwtensor::{ByteMap, DType, Direction, TensorDyn, TensorMemory};
use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::OrPy;

/// `CU_STREAM_PER_THREAD`: the handle CUDA's driver API takes for the per-thread default
/// stream, which DLPack's stream value 2 names.
const CU_STREAM_PER_THREAD: usize = 2;

/// The DLPack element type of a dtype.
fn dl_dtype(d: DType) -> PyResult<DLDataType> {
    let (code, bits) = match d {
        DType::U8 => (DLDataTypeCode::UINT, 8),
        DType::U16 => (DLDataTypeCode::UINT, 16),
        DType::U32 => (DLDataTypeCode::UINT, 32),
        DType::U64 => (DLDataTypeCode::UINT, 64),
        DType::I8 => (DLDataTypeCode::INT, 8),
        DType::I16 => (DLDataTypeCode::INT, 16),
        DType::I32 => (DLDataTypeCode::INT, 32),
        DType::I64 => (DLDataTypeCode::INT, 64),
        DType::F16 => (DLDataTypeCode::FLOAT, 16),
        DType::F32 => (DLDataTypeCode::FLOAT, 32),
        DType::F64 => (DLDataTypeCode::FLOAT, 64),
        other => {
            return Err(PyBufferError::new_err(format!(
                "dtype {other} has no DLPack type here"
            )))
        }
    };
    Ok(DLDataType::scalar(code, bits))
}

/// DLPack counts strides in elements: a byte stride that is not a whole number of elements
/// (an image row padded to an odd byte count, say) cannot be said, and is refused rather
/// than rounded.
pub(crate) fn element_strides(t: &TensorDyn) -> PyResult<Vec<i64>> {
    let size = t.dtype().size();
    t.strides()
        .iter()
        .map(|&s| {
            if s % size == 0 {
                Ok((s / size) as i64)
            } else {
                Err(PyBufferError::new_err(format!(
                    "byte stride {s} is not a whole number of {}-byte elements; DLPack cannot \
                     describe it (strides {:?})",
                    size,
                    t.strides()
                )))
            }
        })
        .collect()
}

/// Where a tensor's bytes are, for DLPack.
fn device_of(t: &TensorDyn) -> PyResult<DLDevice> {
    match t.memory() {
        TensorMemory::Mem | TensorMemory::Shm | TensorMemory::DmaBuf => Ok(DLDevice::CPU),
        TensorMemory::Gpu => match hwtensor::cuda::device() {
            Ok(cuda) => Ok(DLDevice::cuda(cuda.ordinal())),
            Err(e) => Err(crate::errors::Unavailable::new_err(format!(
                "a GPU tensor exports through DLPack as CUDA memory, and there is no CUDA here \
                 ({e}); read it on the CPU with `with t.map_read() as a:`"
            ))),
        },
        TensorMemory::Cuda => {
            let cuda = hwtensor::cuda::device().or_py()?;
            Ok(DLDevice::cuda(cuda.ordinal()))
        }
        other => Err(PyBufferError::new_err(format!(
            "a {other} tensor has no DLPack export; read it with map_read"
        ))),
    }
}

/// One export of one tensor: its description and, once prepared, the address to hand out.
struct Export<'a> {
    tensor: &'a TensorDyn,
    device: DLDevice,
    address: std::cell::Cell<u64>,
}

/// What the capsule owns: the tensor (so the buffer and its CUDA import outlive the capsule)
/// and, for a DMA-BUF, the read map that brackets the consumer's CPU access.
struct Keep {
    // Field order matters: the map borrows the boxed tensor and must drop first.
    bracket: Option<ByteMap<'static>>,
    _tensor: Box<TensorDyn>,
}

// SAFETY: the consumer's deleter may free the capsule on any thread. Keep never reads or
// writes through the map's pointer; dropping the map ends the access, an ioctl on the buffer's
// fd and the release of a claim counted in the buffer's shared state, neither tied to the
// thread that began it. The tensor is Send.
unsafe impl Send for Keep {}

impl Keep {
    fn of(t: &TensorDyn) -> PyResult<Keep> {
        let tensor = Box::new(t.clone());
        let bracket = match tensor.memory() {
            TensorMemory::DmaBuf => {
                // SAFETY: the map borrows the boxed tensor, which lives at a fixed address
                // until this struct drops, and `bracket` (declared first) drops before it.
                let tensor: &'static TensorDyn = unsafe { &*(&*tensor as *const TensorDyn) };
                Some(tensor.map_bytes(Direction::Read).or_py()?)
            }
            _ => None,
        };
        Ok(Keep {
            bracket,
            _tensor: tensor,
        })
    }
}

impl<'a> Export<'a> {
    /// An export of `t`, not yet prepared.
    fn of(t: &'a TensorDyn) -> PyResult<Export<'a>> {
        Ok(Export {
            tensor: t,
            device: device_of(t)?,
            address: std::cell::Cell::new(0),
        })
    }

    /// Finds the address to hand out: a host tensor's own, or the CUDA mapping with the raw
    /// `stream` made to wait for the last write.
    fn prepare_on(&self, py: Python<'_>, stream: usize) -> PyResult<()> {
        let address = match (self.device == DLDevice::CPU, is_dmabuf(self.tensor)) {
            // Its address comes from the read map the capsule holds (`managed`).
            (true, true) => 0,
            (true, false) => host_address(self.tensor)?,
            (false, _) => ready_on(self.tensor, py, stream)?,
        };
        self.address.set(address);
        Ok(())
    }

    fn managed<M: ManagedTensorBase>(&self) -> PyResult<Managed<M>> {
        let strides = element_strides(self.tensor)?;
        let shape: Vec<i64> = self.tensor.shape().iter().map(|&d| d as i64).collect();
        let prepared = Dynamic::new(shape, strides)
            .prepare_as::<M>()
            .map_err(|e| PyBufferError::new_err(format!("DLPack metadata: {e}")))?;
        let keep = Keep::of(self.tensor)?;
        let address = match &keep.bracket {
            Some(map) => map.as_ptr() as u64,
            None => self.address.get(),
        };
        let mut init = prepared.initialize(Box::new(keep));
        init.set_data(address as *mut std::ffi::c_void);
        init.set_device(self.device);
        init.set_dtype(dl_dtype(self.tensor.dtype())?);
        init.set_flags(self.flags())
            .map_err(|e| PyBufferError::new_err(format!("DLPack flags: {e}")))?;
        // SAFETY: the data pointer addresses the tensor's first element for as long as the
        // buffer lives, which the context (a clone of the tensor) guarantees; shape and strides
        // are copied into the managed tensor; READ_ONLY is set where CPU writes are not
        // allowed.
        Ok(unsafe { init.finish() })
    }
}

impl DlpackExporter for Export<'_> {
    fn device(&self) -> DLDevice {
        self.device
    }

    fn flags(&self) -> DlpackFlags {
        let cpu = self.device == DLDevice::CPU;
        let read_only = !self.tensor.access().allows(Direction::Write) || is_dmabuf(self.tensor);
        if cpu && read_only {
            DlpackFlags::READ_ONLY
        } else {
            DlpackFlags::empty()
        }
    }

    fn prepare_export(&self, py: Python<'_>, request: &ExportRequest<'_>) -> PyResult<()> {
        // Only device memory has a stream to follow: a host export ignores the argument.
        let stream = match self.device == DLDevice::CPU {
            true => 0,
            false => cuda_stream(request.cuda_stream()?),
        };
        self.prepare_on(py, stream)
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        // A read-only export (every DMA-BUF's) never comes here: dlpark refuses a legacy
        // capsule, which cannot carry the read-only flag.
        self.managed()
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.managed()
    }
}

/// Whether `t` is a DMA-BUF, whose export is read-only and bracketed (module docs).
fn is_dmabuf(t: &TensorDyn) -> bool {
    t.memory() == TensorMemory::DmaBuf
}

/// The stream DLPack's C exchange API names as hwtensor's current work stream: CUDA's legacy
/// default stream (a null handle), which an exchange export of a GPU or CUDA tensor makes wait
/// for its last write.
pub(crate) const EXCHANGE_WORK_STREAM: *mut std::ffi::c_void = std::ptr::null_mut();

/// The managed tensor DLPack 1.3's C exchange API hands a consumer (`__dlpack_c_exchange_api__`
/// on the `Tensor` type; `PyTensor` implements the producer by this): such as PyTorch takes it
/// through a C call instead of `__dlpack__`'s Python round trip. "No sync" there means no CPU
/// wait; a GPU or CUDA tensor's last write is still ordered, GPU-side, on
/// [`EXCHANGE_WORK_STREAM`]. Each managed tensor owns a clone of the tensor, so its memory lives
/// until the consumer's deleter runs.
pub(crate) fn exchange_managed(
    t: &TensorDyn,
    py: Python<'_>,
) -> PyResult<Managed<DLManagedTensorVersioned>> {
    let export = Export::of(t)?;
    export.prepare_on(py, EXCHANGE_WORK_STREAM as usize)?;
    export.managed()
}

/// The raw stream (as an address) DLPack's stream argument names (0: the legacy default
/// stream). With no stream, or -1 ("no synchronisation"), the legacy default stream waits:
/// more order, never less.
fn cuda_stream(request: CudaStreamRequest) -> usize {
    match request {
        CudaStreamRequest::Pointer(p) => p,
        CudaStreamRequest::PerThreadDefault => CU_STREAM_PER_THREAD,
        _ => 0,
    }
}

/// The first element's address of a host tensor. Heap and shm memory stay where they are for
/// the buffer's life, so the address outlives the brief map that reads it.
fn host_address(t: &TensorDyn) -> PyResult<u64> {
    let direction = if t.access().allows(Direction::Read) {
        Direction::Read
    } else {
        Direction::Write
    };
    let map = t.map_bytes(direction).or_py()?;
    Ok(map.as_ptr() as u64)
}

/// `__dlpack__`: a capsule (versioned when `max_version` allows) over the tensor's memory.
pub(crate) fn export<'py>(
    t: &TensorDyn,
    py: Python<'py>,
    request: ExportRequest<'py>,
) -> PyResult<Py<PyAny>> {
    export_dlpack(&Export::of(t)?, py, request)
}

/// The CUDA Array Interface's `stream` value for CUDA's legacy default stream (0 is not
/// allowed there: it would mean "no stream" to some consumers).
const CAI_LEGACY_DEFAULT_STREAM: usize = 1;
/// The version of the CUDA Array Interface spoken: 3 added `stream`.
const CAI_VERSION: u32 = 3;

/// `__cuda_array_interface__` (v3): the tensor's CUDA address, shape, byte strides and element
/// type, for CuPy, Numba and `torch.as_tensor`. The legacy default stream is made to wait
/// GPU-side for the tensor's last write (and read) and is named as `stream`, so a consumer on
/// another stream orders behind it, as the interface requires. Host memory, and GPU memory
/// where there is no CUDA, have no such interface: an `AttributeError`, so `hasattr` and the
/// consumers' own probes see it missing rather than fail.
pub(crate) fn cuda_array_interface<'py>(
    t: &TensorDyn,
    py: Python<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let cuda = matches!(t.memory(), TensorMemory::Gpu | TensorMemory::Cuda)
        && device_of(t).is_ok_and(|d| d.device_type == DLDeviceType::CUDA);
    if !cuda {
        return Err(PyAttributeError::new_err(format!(
            "a {} tensor has no __cuda_array_interface__ (only GPU and CUDA tensors where \
             CUDA runs do); read it with `with t.map_read() as a:` or np.from_dlpack(t)",
            t.memory()
        )));
    }
    let dtype = dl_dtype(t.dtype())?;
    let kind = match dtype.code {
        DLDataTypeCode::UINT => 'u',
        DLDataTypeCode::INT => 'i',
        _ => 'f',
    };
    let bytes = dtype.bits / 8;
    let order = if bytes == 1 { '|' } else { '<' };
    let address = ready_on(t, py, 0)?;
    let read_only = !t.access().allows(Direction::Write);
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, t.shape())?)?;
    d.set_item("typestr", format!("{order}{kind}{bytes}"))?;
    d.set_item("data", (address, read_only))?;
    d.set_item("strides", PyTuple::new(py, t.strides())?)?;
    d.set_item("version", CAI_VERSION)?;
    d.set_item("stream", CAI_LEGACY_DEFAULT_STREAM)?;
    Ok(d)
}

/// DLPack's `kDLVulkan`: what a GPU tensor is where no CUDA driver can map it.
const DL_VULKAN: u32 = 7;

/// `__dlpack_device__`: `(1, 0)` for host memory, `(2, ordinal)` for CUDA, and for a GPU
/// tensor without CUDA `(7, 0)` (Vulkan, the process device): where the tensor *is*, even when
/// no DLPack consumer can take it from there (its `__dlpack__` then says why).
pub(crate) fn device_pair(t: &TensorDyn) -> PyResult<(u32, i32)> {
    if t.memory() == TensorMemory::Gpu && hwtensor::cuda::device().is_err() {
        return Ok((DL_VULKAN, 0));
    }
    let d = device_of(t)?;
    Ok((d.device_type.0, d.device_id))
}

/// Orders hwtensor's next use of `t` after the work queued so far on `stream`; the value.
pub(crate) fn cuda_done(
    t: &TensorDyn,
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    Ok(ordered_on(t, py, stream)?.1)
}

/// [`TensorDyn::cuda_read_done`] on the stream a Python argument names (see [`stream_of`]),
/// the GIL released.
pub(crate) fn cuda_read_done(
    t: &TensorDyn,
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let stream = stream.map(stream_of).transpose()?.unwrap_or(0);
    py.detach(|| t.cuda_read_done(stream as *mut _)).or_py()
}

/// The CUDA address of `t`'s first element, `stream` ordered as `__dlpack__` orders it.
pub(crate) fn cuda_pointer(
    t: &TensorDyn,
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    ready_on(t, py, stream.map(stream_of).transpose()?.unwrap_or(0))
}

/// [`TensorDyn::cuda_ready`] on the raw stream `stream`, the GIL released: the stream waits
/// for the tensor's last write (if not done), nothing is signalled; the device address.
fn ready_on(t: &TensorDyn, py: Python<'_>, stream: usize) -> PyResult<u64> {
    py.detach(|| t.cuda_ready(Direction::ReadWrite, stream as *mut _))
        .or_py()
}

/// [`TensorDyn::cuda_order`] on the stream a Python argument names (see [`stream_of`]).
fn ordered_on(
    t: &TensorDyn,
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u64, u64)> {
    order_on(t, py, stream.map(stream_of).transpose()?.unwrap_or(0))
}

/// [`TensorDyn::cuda_order`] on the raw stream `stream` (0: the legacy default), the GIL
/// released: the device address and the timeline value.
fn order_on(t: &TensorDyn, py: Python<'_>, stream: usize) -> PyResult<(u64, u64)> {
    py.detach(|| t.cuda_order(Direction::ReadWrite, stream as *mut _))
        .or_py()
}

/// The raw `CUstream` a Python stream argument names: an int (None, 0, 1 and -1 the legacy
/// default stream, 2 the per-thread one, else the handle), or a stream object: PyTorch's
/// (`cuda_stream`), CuPy's (`ptr`), or one with the CUDA Python protocol's
/// `__cuda_stream__`, which gives `(version, handle)`.
pub(crate) fn stream_of(stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    let value: isize = if let Ok(v) = stream.extract() {
        v
    } else if let Ok(v) = stream.getattr("cuda_stream").and_then(|v| v.extract()) {
        v
    } else if let Ok(v) = stream.getattr("ptr").and_then(|v| v.extract()) {
        v
    } else {
        let protocol = stream.getattr("__cuda_stream__").map_err(|_| {
            PyBufferError::new_err(
                "a CUDA stream is an int or an object with cuda_stream, ptr or __cuda_stream__",
            )
        })?;
        let protocol = if protocol.is_callable() {
            protocol.call0()?
        } else {
            protocol
        };
        match protocol.extract::<(isize, isize)>() {
            Ok((_version, handle)) => handle,
            Err(_) => protocol.extract()?,
        }
    };
    Ok(match value {
        -1..=1 => 0,
        v if v > 0 => v as usize,
        v => return Err(PyBufferError::new_err(format!("{v} is not a CUDA stream"))),
    })
}

/// The dtype of a DLPack element type, if hwtensor has it.
fn dtype_of_dl(dt: DLDataType) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&d| dl_dtype(d).is_ok_and(|ours| ours == dt))
}

/// Keeps a DLPack producer's tensor until hwtensor's last use, then hands it back with the GIL
/// held: the last tensor may go on any thread, and a producer's deleter may touch Python
/// objects (NumPy's drops a reference to its array).
struct ProducerKeep(Option<dlpark::AllocationDeleter>);

impl Drop for ProducerKeep {
    fn drop(&mut self) {
        if let Some(deleter) = self.0.take() {
            Python::attach(|_| drop(deleter));
        }
    }
}

/// The stream a CUDA producer is asked to order its pending writes on: hwtensor's import
/// stream; no stream for host memory.
struct ImportStream(usize);

// SAFETY: the value is hwtensor's import stream, a live stream of the CUDA device the
// producer's device was checked against, for the process's life; host imports pass none.
unsafe impl DlpackStream for ImportStream {
    fn as_python_arg(&self, _py: Python<'_>, device: DLDevice) -> PyResult<StreamArg> {
        Ok(if device.device_type == DLDeviceType::CUDA {
            dlpark::python::consumer::stream::cuda(self.0 as *mut _)
        } else {
            dlpark::python::consumer::stream::none()
        })
    }
}

/// The memory a DLPack producer's tensor is in, as hwtensor wraps it.
enum Wrapped {
    Host,
    /// CUDA device memory, its pending writes ordered on this stream.
    Cuda(usize),
}

/// Checks the producer's device: host memory, or memory of the CUDA device hwtensor uses.
fn wrapped_as(device: DLDevice) -> PyResult<Wrapped> {
    match device.device_type {
        DLDeviceType::CPU | DLDeviceType::CUDAHOST => Ok(Wrapped::Host),
        DLDeviceType::CUDA => {
            let cuda = hwtensor::cuda::device().or_py()?;
            if device.device_id != cuda.ordinal() {
                return Err(crate::errors::Unavailable::new_err(format!(
                    "the tensor is on CUDA device {}; hwtensor works on device {} (the one \
                     matching the process GPU device)",
                    device.device_id,
                    cuda.ordinal()
                )));
            }
            Ok(Wrapped::Cuda(cuda.import_stream().or_py()? as usize))
        }
        other => Err(crate::errors::Unavailable::new_err(format!(
            "hwtensor wraps host and CUDA memory from DLPack; this tensor is on device type {}",
            other.0
        ))),
    }
}

/// The address of a DLPack tensor's first element: its data pointer plus its byte offset,
/// refused where that or the `len` bytes after it would pass `isize::MAX`, where no user-space
/// memory lies and past which Rust forbids a slice to reach (a hostile offset of 2^64 - 8
/// would otherwise wrap to the bytes before the buffer).
fn address_of(data: usize, byte_offset: u64, len: usize) -> Result<usize, String> {
    usize::try_from(byte_offset)
        .ok()
        .and_then(|offset| data.checked_add(offset))
        .filter(|start| {
            start
                .checked_add(len)
                .is_some_and(|end| end <= isize::MAX as usize)
        })
        .ok_or_else(|| {
            format!("a DLPack byte_offset of {byte_offset} from {data:#x} leaves the address space")
        })
}

/// The imported tensor's description, checked by dlpark.
fn validated(imported: &ImportedDlpack) -> PyResult<dlpark::TensorRef<'_>> {
    imported
        .validate()
        .map_err(|e| PyBufferError::new_err(format!("a malformed DLPack tensor: {e}")))
}

/// `hwtensor.from_dlpack(obj)`: a hwtensor tensor over the memory of a DLPack producer (a
/// NumPy array, a PyTorch CPU or CUDA tensor) without a copy, keeping the producer alive.
pub(crate) fn import(obj: &Bound<'_, PyAny>) -> PyResult<TensorDyn> {
    let request = ImportRequest::new(obj.as_borrowed())?;
    let (imported, wrapped) = match request.device() {
        Ok(device) => {
            let wrapped = wrapped_as(device)?;
            // Host memory needs no stream.
            let stream = match wrapped {
                Wrapped::Cuda(s) => Some(ImportStream(s)),
                Wrapped::Host => None,
            };
            let stream = stream.as_ref().map(|s| s as &dyn DlpackStream);
            (request.import(stream, None)?, wrapped)
        }
        // A capsule says its device only once opened, and negotiates no stream: its producer
        // readied it on the legacy default stream (DLPack's rule for "no stream").
        Err(_) => {
            let imported = request.import(None, None)?;
            let device = validated(&imported)?.device();
            let wrapped = match wrapped_as(device)? {
                Wrapped::Cuda(_) => Wrapped::Cuda(0),
                host => host,
            };
            (imported, wrapped)
        }
    };
    let view = validated(&imported)?;
    let dt = view.dtype();
    let dtype = dtype_of_dl(dt).ok_or_else(|| {
        crate::errors::InvalidArgument::new_err(format!(
            "DLPack element type (code {}, {} bits, {} lanes) has no hwtensor dtype",
            dt.code.0, dt.bits, dt.lanes
        ))
    })?;
    let elem = dtype.size();
    let shape = view
        .shape()
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| crate::errors::InvalidArgument::new_err("a negative DLPack dimension"))?;
    let element_strides = view
        .strides_or_compact()
        .map_err(|e| PyBufferError::new_err(format!("DLPack strides: {e}")))?;
    let strides = element_strides
        .iter()
        .map(|&s| usize::try_from(s).ok().and_then(|s| s.checked_mul(elem)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            crate::errors::InvalidArgument::new_err(format!(
                "strides {element_strides:?} cannot be wrapped (negative: a reversed view; copy \
                 it first, e.g. numpy.ascontiguousarray)"
            ))
        })?;
    let len = hwtensor::geometry::extent(&shape, &strides, elem).or_py()?;
    let address = address_of(view.data_ptr() as usize, view.byte_offset(), len)
        .map_err(crate::errors::InvalidArgument::new_err)?;
    let writable = !imported.flags().contains(DlpackFlags::READ_ONLY);
    let owner = Box::new(ProducerKeep(Some(imported.into_deleter())));
    match wrapped {
        // SAFETY: a DLPack producer keeps its tensor's memory valid, on the host (checked
        // above), until its deleter runs, which `owner` does when hwtensor's last use ends;
        // the memory is written only when the producer did not mark it read-only.
        Wrapped::Host => unsafe {
            TensorDyn::from_foreign(
                address as *mut u8,
                len,
                &shape,
                Some(&strides),
                dtype,
                writable,
                owner,
            )
        },
        Wrapped::Cuda(_) if !writable => Err(hwtensor::Error::InvalidArgument(
            "read-only CUDA memory from DLPack is not wrapped: hwtensor's CUDA maps could \
             write it"
                .into(),
        )),
        // SAFETY: as above, on the CUDA device hwtensor uses (checked above), its pending
        // writes ordered on the import stream the producer was given.
        Wrapped::Cuda(stream) => unsafe {
            TensorDyn::from_foreign_cuda(
                address as u64,
                len,
                &shape,
                Some(&strides),
                dtype,
                owner,
                stream as *mut _,
            )
        },
    }
    .or_py()
}
