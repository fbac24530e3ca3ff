//! `hwtensor.Tensor`: a tensor of any dtype and memory, with its description as Python values.

use std::str::FromStr;

use hwtensor::{
    BufferIdentity, CpuAccess, DType, Direction, PixelFormat, Region, TensorDyn, TensorMemory,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dlpack;
use crate::errors::{InvalidArgument, OrPy};
use crate::map::Map;

/// A tensor in heap, shared, dma-buf, GPU or CUDA memory.
///
/// `Tensor(shape, dtype="uint8", memory=None)`: `memory` is "mem", "shm", "dmabuf", "gpu",
/// "cuda" or None (the best this machine has for a plain tensor). Strides are in bytes.
#[pyclass(name = "Tensor", module = "hwtensor", frozen)]
pub struct PyTensor {
    pub(crate) inner: TensorDyn,
}

// DLPack 1.3's C exchange API on the `Tensor` type (`dlpack::exchange_managed` says what it
// hands out).
//
// SAFETY: no borrowed `DLTensor` view is published (`HAS_DLTENSOR_VIEW` is false); each managed
// tensor owns a clone of the tensor, so its memory lives until the consumer's deleter runs; the
// work stream is CUDA's legacy default stream, valid in every context.
unsafe impl dlpark::python::DlpackExchangeProducer for PyTensor {
    fn managed_tensor_no_sync(
        &self,
        py: Python<'_>,
    ) -> PyResult<dlpark::Managed<dlpark::ffi::DLManagedTensorVersioned>> {
        dlpack::exchange_managed(&self.inner, py)
    }

    fn current_work_stream(
        _py: Python<'_>,
        _device: dlpark::ffi::DLDevice,
    ) -> PyResult<*mut std::ffi::c_void> {
        Ok(dlpack::EXCHANGE_WORK_STREAM)
    }
}

/// A dtype by NumPy's name or hwtensor's ("uint8" or "u8", "float32" or "f32", ...).
pub(crate) fn dtype_of(name: &str) -> PyResult<DType> {
    DType::from_str(name).or_py()
}

/// A dtype as a Python caller writes it: a name ("float32"), a NumPy scalar type
/// (`np.float32`), a NumPy dtype (`np.dtype("float32")`, `array.dtype`) or a PyTorch dtype
/// (`torch.float32`); None is uint8. Anything else is refused by the library's error, naming
/// what was given.
pub(crate) fn dtype_arg(dtype: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
    let Some(d) = dtype else {
        return Ok(DType::U8);
    };
    if let Ok(name) = d.extract::<String>() {
        return dtype_of(&name);
    }
    // `np.dtype(x)` is how NumPy itself reads a dtype-like; its `.name` is the canonical name.
    let numpy = d
        .py()
        .import("numpy")
        .and_then(|np| np.getattr("dtype")?.call1((d,))?.getattr("name"));
    let name = match numpy.and_then(|n| n.extract::<String>()) {
        Ok(n) => n,
        // A torch dtype prints as "torch.float32".
        Err(_) => d
            .str()?
            .to_string()
            .trim_start_matches("torch.")
            .to_string(),
    };
    dtype_of(&name)
}

/// A shape as Python gives it, each size checked: a negative size is the library's
/// `InvalidArgument`, not a bare `OverflowError`.
pub(crate) fn shape_arg(shape: Vec<i64>) -> PyResult<Vec<usize>> {
    shape
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| {
                crate::errors::InvalidArgument::new_err(format!(
                    "a shape holds sizes of 0 or more, not {d}"
                ))
            })
        })
        .collect()
}

/// NumPy's name of a dtype (its first alias: "uint8", "float16", ...).
pub(crate) fn numpy_name(d: DType) -> &'static str {
    d.aliases().first().copied().unwrap_or(d.name())
}

fn memory_of(name: Option<&str>) -> PyResult<Option<TensorMemory>> {
    name.map(TensorMemory::from_str).transpose().or_py()
}

fn access_of(name: &str) -> PyResult<CpuAccess> {
    match name.to_ascii_lowercase().replace('-', "_").as_str() {
        "none" => Ok(CpuAccess::None),
        "read" => Ok(CpuAccess::Read),
        "write" => Ok(CpuAccess::Write),
        "read_write" | "readwrite" => Ok(CpuAccess::ReadWrite),
        _ => Err(InvalidArgument::new_err(format!(
            "unknown CPU access {name:?} (known: none, read, write, read_write)"
        ))),
    }
}

impl PyTensor {
    pub(crate) fn wrap(inner: TensorDyn) -> PyTensor {
        PyTensor { inner }
    }
}

#[pymethods]
impl PyTensor {
    #[new]
    #[pyo3(signature = (shape, dtype = None, memory = None))]
    fn new(
        py: Python<'_>,
        shape: Vec<i64>,
        dtype: Option<&Bound<'_, PyAny>>,
        memory: Option<&str>,
    ) -> PyResult<Self> {
        let shape = shape_arg(shape)?;
        let (dtype, memory) = (dtype_arg(dtype)?, memory_of(memory)?);
        py.detach(|| TensorDyn::new(&shape, dtype, memory))
            .or_py()
            .map(Self::wrap)
    }

    /// A zeroed image as `spec` (an `ImageSpec`) describes it, elements of `dtype`, on
    /// `memory` (None: chosen), with `access` ("read", "write", "read_write", "none").
    #[staticmethod]
    #[pyo3(signature = (spec, dtype = None, memory = None, access = "read_write"))]
    fn image(
        py: Python<'_>,
        spec: &crate::image::ImageSpec,
        dtype: Option<&Bound<'_, PyAny>>,
        memory: Option<&str>,
        access: &str,
    ) -> PyResult<Self> {
        let (dtype, memory, access) = (dtype_arg(dtype)?, memory_of(memory)?, access_of(access)?);
        let spec = spec.0;
        py.detach(|| TensorDyn::image(&spec, dtype, memory, access))
            .or_py()
            .map(Self::wrap)
    }

    /// The row stride in bytes of the image's chroma planes (given, or derived from the row
    /// stride by the format's rule); None for a plain tensor or a format without chroma planes.
    #[getter]
    fn chroma_stride(&self) -> Option<usize> {
        self.inner
            .image_info()
            .filter(|i| i.format.has_chroma_planes())
            .map(|i| i.chroma_row_stride())
    }

    /// A tensor of `shape` over `fd` (a memfd, a DMA-BUF, a shared memory file) from byte
    /// `offset` on. The fd is duplicated: close your own when you like. A file of another kind,
    /// a closed fd, or one too small for the shape raises `HandoffError`.
    #[staticmethod]
    #[pyo3(signature = (fd, shape, dtype = None, offset = 0))]
    fn from_fd(
        py: Python<'_>,
        fd: i32,
        shape: Vec<i64>,
        dtype: Option<&Bound<'_, PyAny>>,
        offset: usize,
    ) -> PyResult<Self> {
        let shape = shape_arg(shape)?;
        crate::fd::tensor_from_fd(py, fd, &shape, dtype_arg(dtype)?, offset).map(Self::wrap)
    }

    /// The image `spec` describes over `fd` from byte `offset` on (V4L2's `data_offset`),
    /// rows tight unless `spec` gives a stride. The fd is duplicated.
    #[staticmethod]
    #[pyo3(signature = (fd, spec, dtype = None, offset = 0, access = "read_write"))]
    fn image_from_fd(
        py: Python<'_>,
        fd: i32,
        spec: &crate::image::ImageSpec,
        dtype: Option<&Bound<'_, PyAny>>,
        offset: usize,
        access: &str,
    ) -> PyResult<Self> {
        let (dtype, access) = (dtype_arg(dtype)?, access_of(access)?);
        crate::fd::image_from_fd(py, fd, offset, &spec.0, dtype, access).map(Self::wrap)
    }

    /// The image `spec` describes over one `(fd, offset, row_stride)` per plane (a decoder's
    /// NV12 in two DMA-BUFs, say); the planes say the strides. Each fd is duplicated.
    #[staticmethod]
    #[pyo3(signature = (planes, spec, dtype = None, access = "read_write"))]
    fn image_from_planes(
        py: Python<'_>,
        planes: Vec<(i32, usize, usize)>,
        spec: &crate::image::ImageSpec,
        dtype: Option<&Bound<'_, PyAny>>,
        access: &str,
    ) -> PyResult<Self> {
        let (dtype, access) = (dtype_arg(dtype)?, access_of(access)?);
        crate::fd::image_from_planes(py, planes, &spec.0, dtype, access).map(Self::wrap)
    }

    /// The buffer's fd number, borrowed: valid while the tensor lives, never to be closed
    /// (`clone_fd()` gives one to keep). Heap memory has none (`Unavailable`).
    fn fd(&self) -> PyResult<i32> {
        crate::fd::borrowed_fd(&self.inner)
    }

    /// A new fd of the buffer, yours to close (`os.close`).
    fn clone_fd(&self) -> PyResult<i32> {
        crate::fd::clone_fd(&self.inner)
    }

    /// A copy of the tensor in `memory` ("mem", "shm", "dmabuf", "gpu", "cuda"), with the
    /// same shape, description and quantization.
    fn to_memory(&self, py: Python<'_>, memory: &str) -> PyResult<Self> {
        let memory = memory_of(Some(memory))?.unwrap_or(TensorMemory::Mem);
        py.detach(|| self.inner.to_memory(memory))
            .or_py()
            .map(Self::wrap)
    }

    /// The affine quantization (`real = scale * (q - zero_point)`) as a dict, or None:
    /// `{"scale", "zero_point"}`, and per channel also `{"axis", "scales", "zero_points"}`.
    #[getter]
    fn quantization<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(q) = self.inner.quantization() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("scale", q.scale)?;
        d.set_item("zero_point", q.zero_point)?;
        if let Some(c) = &q.channels {
            d.set_item("axis", c.axis)?;
            d.set_item("scales", c.scales.clone())?;
            d.set_item("zero_points", c.zero_points.clone())?;
        }
        Ok(Some(d))
    }

    /// The same tensor (same buffer) quantized per tensor (`scale`, `zero_point`) or per channel
    /// along `axis` (`scales`, `zero_points`, one each per channel). An integer dtype only.
    #[pyo3(signature = (scale = None, zero_point = 0, *, axis = None, scales = None, zero_points = None))]
    fn with_quantization(
        &self,
        scale: Option<f32>,
        zero_point: i32,
        axis: Option<usize>,
        scales: Option<Vec<f32>>,
        zero_points: Option<Vec<i32>>,
    ) -> PyResult<Self> {
        let q =
            match (scale, axis, scales, zero_points) {
                (Some(scale), None, None, None) => {
                    hwtensor::Quantization::per_tensor(scale, zero_point)
                }
                (None, Some(axis), Some(scales), Some(zero_points)) => {
                    hwtensor::Quantization::per_channel(axis, scales, zero_points).or_py()?
                }
                _ => return Err(InvalidArgument::new_err(
                    "quantize per tensor with scale (and zero_point), or per channel with axis, \
                     scales and zero_points",
                )),
            };
        self.inner
            .with_quantization(Some(q))
            .or_py()
            .map(Self::wrap)
    }

    /// The image's DRM format modifier (`DRM_FORMAT_MOD_*`, an int; 0 is LINEAR, what every
    /// image hwtensor makes has).
    #[getter]
    fn drm_modifier(&self) -> u64 {
        self.inner.drm_modifier().0
    }

    /// The same image over the same buffer, its pixels laid out by DRM format `modifier` (a
    /// tiled frame imported by fd). A non-LINEAR one travels unchanged and leaves the image no
    /// CPU access: maps, views and copies raise `InvalidArgument` naming it.
    fn with_drm_modifier(&self, modifier: u64) -> PyResult<Self> {
        self.inner
            .with_drm_modifier(hwtensor::DrmModifier(modifier))
            .or_py()
            .map(Self::wrap)
    }

    /// The same tensor over the same buffer, its bytes complete only once the DMA-fence
    /// sync_file `fd` signals (a V4L2 or GPU producer's fence; duplicated, keep and close your
    /// own): CPU maps wait for it (bounded), a hand-off by reference carries it. An fd that is
    /// not a sync_file raises `HandoffError`.
    fn with_sync_file(&self, fd: i32) -> PyResult<Self> {
        let fence = hwtensor::SyncFile::from_fd(crate::fd::dup_in(fd)?).or_py()?;
        Ok(Self::wrap(self.inner.with_sync_file(fence)))
    }

    /// The tensor's pending GPU writes as a DMA-fence sync_file for a reader outside hwtensor
    /// (V4L2, DRM/KMS, Wayland): a new fd you own and close, or None when no write is pending.
    /// A device that cannot export sync_files waits for the writes instead (bounded) and
    /// returns None: either way the reader gets finished bytes.
    fn export_sync_file(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        let fence = py.detach(|| self.inner.export_sync_file()).or_py()?;
        Ok(fence.map(|f| std::os::fd::IntoRawFd::into_raw_fd(f.into_fd())))
    }

    /// The shape, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }

    /// The element type's NumPy name ("uint8", "float32", ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        numpy_name(self.inner.dtype())
    }

    /// Byte strides, one per dimension.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.strides())
    }

    /// Where the bytes live: "mem", "shm", "dmabuf", "gpu" or "cuda".
    #[getter]
    fn memory(&self) -> &'static str {
        self.inner.memory().name()
    }

    /// The CPU access the tensor was declared with: "none", "read", "write", "read_write".
    #[getter]
    fn access(&self) -> &'static str {
        match self.inner.access() {
            CpuAccess::None => "none",
            CpuAccess::Read => "read",
            CpuAccess::Write => "write",
            CpuAccess::ReadWrite => "read_write",
        }
    }

    /// The pixel format's name, or None for a plain tensor.
    #[getter]
    fn format(&self) -> Option<&'static str> {
        self.inner.image_info().map(|i| i.format.name())
    }

    /// Image width in pixels (None for a plain tensor).
    #[getter]
    fn width(&self) -> Option<usize> {
        self.inner.image_info().map(|i| i.width)
    }

    /// Image height in pixels (None for a plain tensor).
    #[getter]
    fn height(&self) -> Option<usize> {
        self.inner.image_info().map(|i| i.height)
    }

    /// Bytes from one image row to the next (None for a plain tensor).
    #[getter]
    fn row_stride(&self) -> Option<usize> {
        self.inner.image_info().map(|i| i.row_stride)
    }

    /// The image's colorimetry as names (`{"primaries": "bt709", "transfer": "bt709",
    /// "matrix": "bt709", "range": "limited"}`), or None for a plain tensor.
    #[getter]
    fn colorimetry<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(c) = self.inner.image_info().map(|i| i.colorimetry) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("primaries", c.primaries.name())?;
        d.set_item("transfer", c.transfer.name())?;
        d.set_item("matrix", c.matrix.name())?;
        d.set_item("range", c.range.name())?;
        Ok(Some(d))
    }

    /// This image with its colorimetry said (names as `colorimetry` gives; the parts not
    /// given are kept), sharing the buffer. It travels with the image in views and hand-offs.
    #[pyo3(signature = (*, primaries = None, transfer = None, matrix = None, range = None))]
    fn with_colorimetry(
        &self,
        primaries: Option<&str>,
        transfer: Option<&str>,
        matrix: Option<&str>,
        range: Option<&str>,
    ) -> PyResult<Self> {
        let mut c = self
            .inner
            .image_info()
            .map(|i| i.colorimetry)
            .unwrap_or_default();
        let given = [
            ("primaries", primaries),
            ("transfer", transfer),
            ("matrix", matrix),
            ("range", range),
        ];
        for (part, name) in given {
            if let Some(name) = name {
                crate::image::set_colour(&mut c, part, name)?;
            }
        }
        let mut t = self.inner.clone();
        t.set_colorimetry(c).or_py()?;
        Ok(Self::wrap(t))
    }

    /// The image's planes as `(offset, row_stride, rows, size)` tuples, in bytes.
    #[getter]
    fn plane_table(&self) -> PyResult<Vec<(usize, usize, usize, usize)>> {
        let planes = self.inner.plane_table().or_py()?;
        Ok(planes
            .iter()
            .map(|p| (p.offset, p.row_stride, p.rows, p.size))
            .collect())
    }

    /// What names the buffer across processes: `("file", dev, ino)`, `("heap", address)`,
    /// `("gpu", pid, start_time, serial)`, `("section", pid, serial)` (Windows shared memory),
    /// or `("other",)` for a kind this binding predates.
    #[getter]
    fn identity(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let id = match self.inner.identity() {
            BufferIdentity::File { dev, ino } => ("file", dev, ino).into_pyobject(py)?.into_any(),
            BufferIdentity::Heap { addr } => ("heap", addr).into_pyobject(py)?.into_any(),
            BufferIdentity::Gpu {
                pid,
                start_time,
                serial,
            } => ("gpu", pid, start_time, serial)
                .into_pyobject(py)?
                .into_any(),
            BufferIdentity::Section { pid, serial } => {
                ("section", pid, serial).into_pyobject(py)?.into_any()
            }
            _ => ("other",).into_pyobject(py)?.into_any(),
        };
        Ok(id.unbind())
    }

    /// Bytes from the first element to the last, padding included.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner
            .buffer_len()
            .saturating_sub(self.inner.byte_offset())
    }

    /// A view of the rectangle `x, y, w, h` of an image (or rows of a plain tensor), sharing
    /// the buffer.
    fn view(&self, x: usize, y: usize, w: usize, h: usize) -> PyResult<Self> {
        self.inner
            .view(Region::new(x, y, w, h))
            .or_py()
            .map(Self::wrap)
    }

    /// The `i`-th item along the first dimension, sharing the buffer.
    fn batch(&self, i: usize) -> PyResult<Self> {
        self.inner.batch(i).or_py().map(Self::wrap)
    }

    /// The same elements in another shape (C order), sharing the buffer (contiguous tensors).
    fn reshape(&self, shape: Vec<usize>) -> PyResult<Self> {
        self.inner.reshape(&shape).or_py().map(Self::wrap)
    }

    /// The whole buffer under a new shape, or (with `format`) as a `width` x `height` image:
    /// a pooled buffer re-pointed at a new geometry that fits its capacity.
    #[pyo3(signature = (shape = None, *, width = None, height = None, format = None, row_stride = None))]
    fn repoint(
        &self,
        shape: Option<Vec<usize>>,
        width: Option<usize>,
        height: Option<usize>,
        format: Option<&str>,
        row_stride: Option<usize>,
    ) -> PyResult<Self> {
        let t = match (shape, width, height, format) {
            (Some(shape), None, None, None) => self.inner.repoint(&shape),
            (None, Some(w), Some(h), Some(f)) => {
                let format = PixelFormat::from_str(f).or_py()?;
                self.inner.repoint_image(w, h, format, row_stride)
            }
            _ => {
                return Err(InvalidArgument::new_err(
                    "repoint takes a shape, or width, height and format",
                ))
            }
        };
        t.or_py().map(Self::wrap)
    }

    /// Copies `src` (same shape and dtype) into this tensor, on whatever engine reaches both.
    fn copy_from(&self, py: Python<'_>, src: &PyTensor) -> PyResult<()> {
        py.detach(|| self.inner.copy_from(&src.inner)).or_py()
    }

    /// A read map: `with t.map_read() as a:` gives a read-only NumPy array.
    fn map_read(&self) -> Map {
        Map::new(self.inner.clone(), Direction::Read)
    }

    /// A write map: `with t.map_write() as a:` gives a writable NumPy array.
    fn map_write(&self) -> Map {
        Map::new(self.inner.clone(), Direction::Write)
    }

    /// A read-write map: `with t.map_read_write() as a:` gives a writable NumPy array.
    fn map_read_write(&self) -> Map {
        Map::new(self.inner.clone(), Direction::ReadWrite)
    }

    /// The DLPack protocol: a capsule (versioned when `max_version` allows) over the tensor's
    /// memory, `kDLCPU` for heap and shm, `kDLCUDA` for GPU and CUDA memory; `stream` is the
    /// consumer's CUDA stream, made to wait GPU-side for the tensor's last write. A DMA-BUF
    /// exports `kDLCPU` read-only, to DLPack 1.0 consumers only, and stays mapped for reading
    /// (no write map) until the consumer frees the capsule's array.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = dlpack::ExportRequest::parse(stream, max_version, dl_device, copy)?;
        dlpack::export(&self.inner, py, request)
    }

    /// `np.asarray(t)` and `np.array(t)`: refused with a `TypeError` that names the ways in.
    /// NumPy would otherwise make a 0-d object array of the tensor, silently; and an implicit
    /// copy is not what a zero-copy library should hand out unasked.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(&self, dtype: Option<&Bound<'_, PyAny>>, copy: Option<bool>) -> PyResult<()> {
        let _ = (dtype, copy);
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a hwtensor.Tensor is not itself an array: read it with `with t.map_read() as a:` \
             (an array over its memory, valid inside the block), or take a NumPy view that \
             keeps the buffer with np.from_dlpack(t) (host memory)",
        ))
    }

    /// The CUDA Array Interface (v3) of a GPU or CUDA tensor where CUDA runs, for CuPy, Numba
    /// and `torch.as_tensor`: `stream` (the legacy default stream) already waits for the
    /// tensor's last write; call `cuda_done(stream)` after writing it on your stream. Host
    /// tensors have none (`AttributeError`).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        dlpack::cuda_array_interface(&self.inner, py)
    }

    /// `(device_type, device_id)`: `(1, 0)` for host memory, `(2, ordinal)` for CUDA, `(7, 0)`
    /// (Vulkan) for a GPU tensor where there is no CUDA.
    fn __dlpack_device__(&self) -> PyResult<(u32, i32)> {
        dlpack::device_pair(&self.inner)
    }

    /// Orders hwtensor's next use of the tensor (Vulkan work, CPU maps, other processes)
    /// after the work queued so far on CUDA `stream` (an int, or an object with
    /// `__cuda_stream__` such as `torch.cuda.Stream`; None or 1: the legacy default stream,
    /// 2: the per-thread one). Call it after a DLPack consumer wrote the tensor. Returns the
    /// timeline value that marks it.
    #[pyo3(signature = (stream = None))]
    fn cuda_done(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        dlpack::cuda_done(&self.inner, py, stream)
    }

    /// Says that the CUDA work queued so far on `stream` (as for `cuda_done`) only reads the
    /// tensor: records a CUDA event there, which hwtensor's later writes of it, and a channel
    /// frame's hand-back, wait for. No timeline value: call it, not `cuda_done`, to end a read
    /// of a frame you keep a view of (on NVIDIA the signal `cuda_done` queues stalls the
    /// producer process's CUDA work by ~250 us a frame; the event costs it nothing).
    #[pyo3(signature = (stream = None))]
    fn cuda_read_done(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        dlpack::cuda_read_done(&self.inner, py, stream)
    }

    /// A PyTorch tensor over this tensor's memory, in one call: what `torch.from_dlpack(t)`
    /// gives, for a fraction of its cost (it skips PyTorch's Python stream object). On the
    /// CPU for heap and shm memory; on the CUDA device for GPU and CUDA memory, with PyTorch's
    /// current stream made to wait GPU-side for the last write. Call `cuda_done()` on that
    /// stream after writing it. The view is valid while this tensor lives; a channel frame's
    /// memory is the producer's again once the frame is released, views kept or not.
    fn torch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::torch::view(&self.inner, py)
    }

    /// The CUDA device address of the first element (GPU, CUDA, and page-sized heap or shm
    /// tensors), with `stream` ordered like `__dlpack__` does: for CuPy's `UnownedMemory` and
    /// other raw-pointer consumers. Valid while the tensor lives.
    #[pyo3(signature = (stream = None))]
    fn cuda_ptr(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        dlpack::cuda_pointer(&self.inner, py, stream)
    }

    fn __repr__(&self) -> String {
        let format = self
            .inner
            .image_info()
            .map(|i| format!(", format={}", i.format.name()))
            .unwrap_or_default();
        format!(
            "hwtensor.Tensor(shape={:?}, dtype={}, memory={}{format})",
            self.inner.shape(),
            numpy_name(self.inner.dtype()),
            self.inner.memory().name()
        )
    }
}
