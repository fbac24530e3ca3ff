//! CPU maps as context managers: `with t.map_write() as a:` gives a NumPy array over the
//! tensor's bytes, through NumPy's array interface (no copy for heap, shm and dma-buf memory).
//!
//! The array cannot outlive the map's access: when the block ends the map ends (a write
//! reaches the buffer, other maps may start), and the arrays handed out are made read-only,
//! so a write after the block raises instead of racing the next user. Their memory stays
//! valid (the map keeps the tensor alive), so a late read never crashes.
//!
//! GPU and CUDA memory are mapped through a copy the map owns: their CPU maps are staging
//! buffers that the core frees when the map ends, and an array left pointing at one would
//! read freed memory. (For zero-copy device access use DLPack.)

use hwtensor::{ByteMap, DType, Direction, TensorDyn, TensorMemory};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyWeakrefReference};

use crate::errors::OrPy;

/// NumPy's array-interface version this module speaks.
const ARRAY_INTERFACE_VERSION: u32 = 3;

/// A CPU map of a tensor; use it as a context manager.
#[pyclass(name = "Map", module = "hwtensor", unsendable)]
pub struct Map {
    // Field order matters: the map borrows the tensor and must drop first.
    access: Option<Access>,
    tensor: Box<TensorDyn>,
    direction: Direction,
    ended: bool,
    arrays: Vec<Py<PyWeakrefReference>>,
}

/// A live map and, for device memory, the copy the arrays point at.
struct Access {
    map: ByteMap<'static>,
    copy: Option<Vec<u8>>,
}

impl Access {
    fn data(&self) -> (usize, usize) {
        match &self.copy {
            Some(copy) => (copy.as_ptr() as usize, copy.len()),
            None => (self.map.as_ptr() as usize, self.map.len()),
        }
    }
}

/// The array-interface type string of a dtype (little-endian, as every target we build is).
fn typestr(d: DType) -> &'static str {
    match d {
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::U16 => "<u2",
        DType::I16 => "<i2",
        DType::U32 => "<u4",
        DType::I32 => "<i4",
        DType::U64 => "<u8",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        _ => "|V1",
    }
}

fn writes(d: Direction) -> bool {
    d != Direction::Read
}

/// Whether CPU maps of this memory are staging copies the core frees when the map ends.
fn maps_through_staging(memory: TensorMemory) -> bool {
    matches!(memory, TensorMemory::Gpu | TensorMemory::Cuda)
}

impl Map {
    pub(crate) fn new(tensor: TensorDyn, direction: Direction) -> Map {
        Map {
            access: None,
            tensor: Box::new(tensor),
            direction,
            ended: false,
            arrays: Vec::new(),
        }
    }

    fn begin(&mut self) -> PyResult<()> {
        if self.ended {
            return Err(PyBufferError::new_err(
                "this map has ended; make a new one with map_read/map_write",
            ));
        }
        if self.access.is_some() {
            return Ok(());
        }
        // SAFETY: the map borrows the boxed tensor, which lives at a fixed address until this
        // struct drops, and `access` (declared first) drops before `tensor`.
        let tensor: &'static TensorDyn = unsafe { &*(&*self.tensor as *const TensorDyn) };
        let map = tensor.map_bytes(self.direction).or_py()?;
        let copy = maps_through_staging(tensor.memory()).then(|| {
            // SAFETY: the map covers `len` readable bytes while it lives.
            unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) }.to_vec()
        });
        self.access = Some(Access { map, copy });
        Ok(())
    }

    fn end(&mut self, py: Python<'_>) -> PyResult<()> {
        for weak in self.arrays.drain(..) {
            if let Some(array) = weak.bind(py).upgrade() {
                array.call_method1("setflags", ((), false))?;
            }
        }
        self.ended = true;
        if let Some(access) = self.access.take() {
            if let (Some(copy), true) = (&access.copy, writes(self.direction)) {
                // SAFETY: a write map covers `len` writable bytes; the copy has that length.
                unsafe {
                    std::ptr::copy_nonoverlapping(copy.as_ptr(), access.map.as_ptr(), copy.len())
                };
            }
            drop(access);
        }
        Ok(())
    }
}

#[pymethods]
impl Map {
    /// NumPy's array interface: the tensor's shape, dtype, byte strides and address.
    #[getter]
    fn __array_interface__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.begin()?;
        let (ptr, _) = self.access.as_ref().map(Access::data).unwrap_or_default();
        let d = PyDict::new(py);
        d.set_item("version", ARRAY_INTERFACE_VERSION)?;
        d.set_item("shape", PyTuple::new(py, self.tensor.shape())?)?;
        d.set_item("strides", PyTuple::new(py, self.tensor.strides())?)?;
        d.set_item("typestr", typestr(self.tensor.dtype()))?;
        d.set_item("data", (ptr, !writes(self.direction)))?;
        Ok(d)
    }

    /// Starts the map and returns a NumPy array over it (read-only for a read map).
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, PyAny>> {
        let py = slf.py();
        slf.borrow_mut().begin()?;
        let array = py.import("numpy")?.call_method1("asarray", (&slf,))?;
        let weak = PyWeakrefReference::new(&array)?.unbind();
        slf.borrow_mut().arrays.push(weak);
        Ok(array)
    }

    /// Ends the map: a write reaches the buffer; the arrays handed out become read-only.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.end(py)?;
        Ok(false)
    }

    /// Ends the map (what leaving the `with` block does).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.end(py)
    }

    /// The mapped bytes, from the first element to the last (row padding included).
    #[getter]
    fn nbytes(&mut self) -> PyResult<usize> {
        self.begin()?;
        Ok(self.access.as_ref().map(|a| a.data().1).unwrap_or(0))
    }
}
