//! The Python package `hwtensor`'s native module (`hwtensor._native`): tensors, NumPy maps,
//! DLPack, hand-off and the process GPU device. The pure-Python package on top
//! (`python/hwtensor`) re-exports it with stubs.
#![cfg(target_os = "linux")]
// The extension's unsafe is confined to two places, each with its SAFETY line: the map's
// borrow of its own boxed tensor, and DLPack's managed tensor.
#![allow(unsafe_code)]

mod alias;
mod dlpack;
mod errors;
mod fd;
mod gpu;
mod handoff;
mod image;
mod map;
mod marker;
mod stream;
mod tensor;
mod torch;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<tensor::PyTensor>()?;
    dlpark::python::install_exchange_api::<tensor::PyTensor>(m.py())?;
    m.add_class::<map::Map>()?;
    m.add_class::<gpu::GpuDevice>()?;
    m.add_class::<stream::Consumer>()?;
    m.add_class::<stream::Frame>()?;
    m.add_class::<marker::Marker>()?;
    m.add_class::<image::ImageSpec>()?;
    m.add_class::<stream::Producer>()?;
    m.add_class::<stream::Listener>()?;
    m.add_function(wrap_pyfunction!(handoff::send, m)?)?;
    m.add_function(wrap_pyfunction!(handoff::recv, m)?)?;
    m.add_function(wrap_pyfunction!(handoff::export_blob, m)?)?;
    m.add_function(wrap_pyfunction!(handoff::import_blob, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::device, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(from_dlpack, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// A timeout in seconds as a `Duration`; a negative or NaN one is refused. One past what a
/// `Duration` holds (`float("inf")`, `1e300`) waits for ever, still woken by a peer that leaves.
pub(crate) fn seconds(s: f64) -> PyResult<std::time::Duration> {
    match s >= 0.0 {
        true => Ok(std::time::Duration::try_from_secs_f64(s).unwrap_or(std::time::Duration::MAX)),
        false => Err(errors::InvalidArgument::new_err(format!(
            "bad timeout {s} (seconds, >= 0)"
        ))),
    }
}

/// A hwtensor tensor over the memory of a DLPack producer on the host (a NumPy array, a
/// PyTorch CPU tensor), without a copy; the producer stays alive while the tensor does.
/// Read-only when the producer says so.
#[pyfunction]
fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<tensor::PyTensor> {
    dlpack::import(obj).map(tensor::PyTensor::wrap)
}

/// Why CUDA is not usable here ("no libcuda.so.1", ...), or None when it is.
#[pyfunction]
fn cuda_unavailable_reason() -> Option<String> {
    hwtensor::cuda::unavailable_reason()
}
