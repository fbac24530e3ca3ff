//! CPU maps as context managers: `with t.map_write() as a:` gives a NumPy array over the
//! tensor's bytes, through NumPy's array interface (no copy for heap, shm and dma-buf memory).
//!
//! An array, and every view NumPy derives from it, can outlive the block; none may reach the
//! tensor's memory after the map ends, and none may read freed memory. So:
//! - a **read map of host memory** (heap, shm, DMA-BUF) is zero-copy and read-only: NumPy makes
//!   no writable view of a read-only array, and the memory stays valid as long as any view
//!   does (the array's base is this map, which keeps the tensor alive);
//! - a **write map of shared memory or a DMA-BUF** is zero-copy through a mapping of its own
//!   (`alias.rs`), replaced at the block's end by a private copy-on-write view: a view kept past
//!   the block still reads, but its writes never reach the buffer;
//! - a **write map of heap memory**, and any map of **GPU or CUDA memory** (whose CPU map is a
//!   staging buffer the core frees when the map ends), goes through a copy this map owns and
//!   keeps as long as any view does: filled from the tensor when the block starts, written back
//!   when it ends. A view kept past the block writes that copy, never the buffer.
//!
//! A write map's arrays are made read-only at the end as well, so the plain mistake raises.
//! For zero-copy device access use DLPack.

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
    access: Option<ByteMap<'static>>,
    tensor: Box<TensorDyn>,
    /// The bytes the arrays point at when they do not point at the tensor: kept until this
    /// map (every array's base) is freed, long after the block.
    copy: Option<OwnedBytes>,
    /// A write map's own mapping of shared memory, where the arrays point instead of a copy:
    /// revoked at the block's end, unmapped when this map (every array's base) is freed.
    alias: Option<crate::alias::Alias>,
    direction: Direction,
    ended: bool,
    arrays: Vec<Py<PyWeakrefReference>>,
}

/// The mapped bytes copied, in words so every element type is aligned in them.
struct OwnedBytes {
    words: Box<[u64]>,
    len: usize,
}

impl OwnedBytes {
    fn of(map: &ByteMap<'_>) -> OwnedBytes {
        let len = map.len();
        let mut words = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        // SAFETY: the map covers `len` readable bytes; the words hold at least `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), words.as_mut_ptr().cast(), len) };
        OwnedBytes { words, len }
    }

    fn write_back(&self, map: &ByteMap<'_>) {
        // SAFETY: a write map covers `len` writable bytes; the copy holds that many.
        unsafe {
            std::ptr::copy_nonoverlapping(self.words.as_ptr().cast(), map.as_ptr(), self.len)
        };
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

/// Whether a map's arrays must point at a copy rather than at the mapped bytes: a write map
/// (a view kept past the block must not write the buffer), or memory whose CPU map is a
/// staging buffer the core frees when the map ends.
fn through_copy(memory: TensorMemory, direction: Direction) -> bool {
    writes(direction) || matches!(memory, TensorMemory::Gpu | TensorMemory::Cuda)
}

impl Map {
    pub(crate) fn new(tensor: TensorDyn, direction: Direction) -> Map {
        Map {
            access: None,
            tensor: Box::new(tensor),
            copy: None,
            alias: None,
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
        if writes(self.direction) {
            self.alias = crate::alias::Alias::of(tensor, map.len());
        }
        let copied = self.alias.is_none() && through_copy(tensor.memory(), self.direction);
        self.copy = copied.then(|| OwnedBytes::of(&map));
        self.access = Some(map);
        Ok(())
    }

    /// Where the arrays point, and how many bytes.
    fn data(&self) -> (usize, usize) {
        if let (Some(alias), Some(map)) = (&self.alias, &self.access) {
            return (alias.ptr(), map.len());
        }
        match (&self.copy, &self.access) {
            (Some(copy), _) => (copy.words.as_ptr() as usize, copy.len),
            (None, Some(map)) => (map.as_ptr() as usize, map.len()),
            (None, None) => (0, 0),
        }
    }

    fn end(&mut self, py: Python<'_>) -> PyResult<()> {
        for weak in self.arrays.drain(..) {
            if let Some(array) = weak.bind(py).upgrade() {
                array.call_method1("setflags", ((), false))?;
            }
        }
        self.ended = true;
        if let Some(alias) = self.alias.as_mut() {
            alias.revoke();
        }
        if let Some(map) = self.access.take() {
            if let (Some(copy), true) = (&self.copy, writes(self.direction)) {
                copy.write_back(&map);
            }
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
        let (ptr, _) = self.data();
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
        Ok(self.data().1)
    }
}
