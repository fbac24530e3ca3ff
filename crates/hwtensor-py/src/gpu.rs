//! `hwtensor.gpu`: the process GPU device and its timeline, one per process whichever copies
//! of hwtensor (this extension, the C library through ctypes) are loaded.

use std::os::fd::IntoRawFd;

use hwtensor::gpu;
use pyo3::prelude::*;

use crate::errors::OrPy;

/// The process GPU device (`hwtensor.gpu.device()`).
#[pyclass(name = "GpuDevice", module = "hwtensor.gpu", frozen)]
pub struct GpuDevice {
    device: &'static gpu::GpuDevice,
}

/// The process GPU device, made on first use (or found, when another copy made it).
#[pyfunction]
pub fn device(py: Python<'_>) -> PyResult<GpuDevice> {
    let device = py.detach(gpu::device).or_py()?;
    Ok(GpuDevice { device })
}

#[pymethods]
impl GpuDevice {
    /// `(pending, slept)`: how many CPU waits on a timeline this process has made that found
    /// their value not yet reached, and how many of those slept past their spin. A frame loop
    /// in its steady state adds to neither; no wait ever blocks in the driver.
    fn cpu_waits(&self) -> (u64, u64) {
        hwtensor::gpu::cpu_waits()
    }

    /// Allocates the next timeline value and submits its signal; it covers all work queued
    /// before it.
    fn signal(&self, py: Python<'_>) -> PyResult<u64> {
        let d = self.device;
        py.detach(|| d.signal()).or_py()
    }

    /// Waits until the timeline reaches `value`, at most `timeout` seconds (the GIL released).
    #[pyo3(signature = (value, timeout = 5.0))]
    fn wait(&self, py: Python<'_>, value: u64, timeout: f64) -> PyResult<()> {
        let (d, limit) = (self.device, crate::seconds(timeout)?);
        py.detach(|| d.wait(value, limit)).or_py()
    }

    /// An fd (an int the caller closes with `os.close`) that becomes readable when `value`
    /// completes: hand it to `asyncio`'s `loop.add_reader`.
    fn completion_fd(&self, py: Python<'_>, value: u64) -> PyResult<i32> {
        let d = self.device;
        Ok(py.detach(|| d.completion_fd(value)).or_py()?.into_raw_fd())
    }

    /// The value the GPU has reached.
    #[getter]
    fn completed_value(&self) -> PyResult<u64> {
        self.device.completed_value().or_py()
    }

    /// The newest value allocated by any copy.
    #[getter]
    fn last_signalled(&self) -> u64 {
        self.device.last_signalled()
    }

    /// The adapter's name and kind.
    #[getter]
    fn adapter(&self) -> String {
        self.device.adapter_label()
    }

    /// The device UUID (16 bytes), the same one CUDA and other processes see.
    #[getter]
    fn uuid(&self) -> [u8; 16] {
        self.device.device_uuid()
    }

    /// Whether this copy made the device ("created") or found it ("joined").
    #[getter]
    fn origin(&self) -> String {
        format!("{:?}", self.device.origin()).to_lowercase()
    }

    fn __repr__(&self) -> String {
        format!("hwtensor.gpu.GpuDevice({})", self.device.adapter_label())
    }
}
