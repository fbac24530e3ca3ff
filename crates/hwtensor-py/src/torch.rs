//! `Tensor.torch()`: a PyTorch tensor over a hwtensor tensor's memory in one call.
//!
//! `torch.from_dlpack(t)` spends most of its time in PyTorch's own Python: before it calls
//! `__dlpack__` it builds a `torch.cuda.Stream` object for the current stream (4.9 of its
//! 7.0 us on the H100, where `__dlpack__` itself took 0.8 us). Here the current stream comes
//! as a raw handle from the call PyTorch's C++ makes for it, and the capsule goes straight to
//! `torch._C._from_dlpack`, where `torch.from_dlpack` ends. The ordering is the same: the
//! current stream waits GPU-side for the tensor's last write; nothing waits on the CPU.

use dlpark::ffi::DLDeviceType;
use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyInt;

use crate::dlpack::{self, ExportRequest};
use hwtensor::TensorDyn;

/// DLPack's stream value for CUDA's legacy default stream, whose raw handle (0) DLPack
/// reserves.
const DLPACK_LEGACY_DEFAULT_STREAM: usize = 1;
/// The DLPack version whose capsules PyTorch 2.9 and later take (`dltensor_versioned`).
const VERSIONED: (u32, u32) = (1, 0);

/// The PyTorch calls a view needs, looked up once per process.
struct Torch {
    /// `torch._C._from_dlpack(capsule)`: a tensor over the capsule's memory.
    from_dlpack: Py<PyAny>,
    /// `torch._C._cuda_getCurrentRawStream(device_index)`: the current stream's handle, absent
    /// from PyTorch builds without CUDA.
    current_stream: Option<Py<PyAny>>,
    /// Whether `_from_dlpack` takes versioned capsules, which carry the read-only flag. PyTorch
    /// 2.9 added them together with `_to_dlpack_versioned`; an older one gets the legacy kind.
    versioned: bool,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

fn torch(py: Python<'_>) -> PyResult<&Torch> {
    TORCH.get_or_try_init(py, || {
        let c = py.import("torch._C").map_err(|e| {
            PyImportError::new_err(format!(
                "Tensor.torch() needs PyTorch ({e}); without it, map_read() gives NumPy \
                 arrays and any DLPack consumer takes the tensor"
            ))
        })?;
        Ok(Torch {
            from_dlpack: c.getattr("_from_dlpack")?.unbind(),
            current_stream: c
                .getattr("_cuda_getCurrentRawStream")
                .ok()
                .map(Bound::unbind),
            versioned: c.hasattr("_to_dlpack_versioned")?,
        })
    })
}

/// A PyTorch tensor over `t`'s memory: on the CPU for heap and shm memory, on its CUDA device
/// for GPU and CUDA memory, where PyTorch's current stream is made to wait for the last write.
pub(crate) fn view<'py>(t: &TensorDyn, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let torch = torch(py)?;
    let (kind, index) = dlpack::device_pair(t)?;
    let stream = match kind == DLDeviceType::CUDA.0 {
        true => Some(current_stream(torch, py, index)?),
        false => None,
    };
    let stream = stream.map(|s| PyInt::new(py, s).into_any());
    let version = torch.versioned.then_some(VERSIONED);
    let request = ExportRequest::parse(stream.as_ref(), version, None, None)?;
    let capsule = dlpack::export(t, py, request)?;
    torch.from_dlpack.bind(py).call1((capsule,))
}

/// PyTorch's current stream on CUDA device `index`, as DLPack's stream argument names it.
fn current_stream(torch: &Torch, py: Python<'_>, index: i32) -> PyResult<usize> {
    let call = torch.current_stream.as_ref().ok_or_else(|| {
        PyRuntimeError::new_err(
            "this tensor is CUDA memory but this PyTorch has no CUDA: install a CUDA build \
             of PyTorch, or copy the tensor into heap memory first",
        )
    })?;
    let raw: usize = call.bind(py).call1((index,))?.extract()?;
    Ok(match raw {
        0 => DLPACK_LEGACY_DEFAULT_STREAM,
        handle => handle,
    })
}
