//! The exception hierarchy: `hwtensor.Error` and the subclasses a user catches separately.
//! Each carries the library's message unchanged.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

create_exception!(
    hwtensor,
    Error,
    PyException,
    "Every error hwtensor raises; the message is the library's own."
);
create_exception!(
    hwtensor,
    InvalidArgument,
    Error,
    "A shape, dtype, format, region, stride or value that does not describe valid memory."
);
create_exception!(
    hwtensor,
    Unavailable,
    Error,
    "A backing (shm, dmabuf, gpu, cuda) this machine or build cannot provide, with the reason."
);
create_exception!(
    hwtensor,
    BusyError,
    Error,
    "A map that would alias a live write map of the same buffer (or a write map of a mapped one)."
);
create_exception!(
    hwtensor,
    AccessError,
    Error,
    "An access the tensor was not declared for, or an operation its memory cannot do."
);
create_exception!(
    hwtensor,
    HandoffError,
    Error,
    "A hand-off that failed: a bad fd or socket, a hostile or short blob, a peer that went away."
);
create_exception!(
    hwtensor,
    PeerGone,
    HandoffError,
    "The peer of a channel left (its socket hung up): the end of a stream; what it sent before \
     stays valid."
);

create_exception!(
    hwtensor,
    NotPermittedError,
    Error,
    "A channel's producer refused this consumer (its user, or its asking to write), or a \
     producer refused a consumer it was asked to attach."
);

/// `hwtensor.TimeoutError`: a subclass of both `hwtensor.Error` and the builtin
/// `TimeoutError`, so `except TimeoutError:` written for any library catches ours too. Python's
/// `type()` makes it, since an exception of two bases is beyond `create_exception!`; it is made
/// once, when the module loads.
static TIMEOUT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The doc of `hwtensor.TimeoutError`.
const TIMEOUT_DOC: &str = "A bounded wait that ran out (a GPU value, a receive, a channel \
                           frame); also a builtin TimeoutError.";

fn timeout_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let ty = TIMEOUT_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let builtins = py.import("builtins")?;
        let bases = (py.get_type::<Error>(), builtins.getattr("TimeoutError")?);
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "hwtensor")?;
        namespace.set_item("__doc__", TIMEOUT_DOC)?;
        let made = builtins
            .getattr("type")?
            .call1(("TimeoutError", bases, namespace))?;
        Ok(made.cast_into::<PyType>()?.unbind())
    })?;
    Ok(ty.bind(py))
}

/// A `hwtensor.TimeoutError` with `message`.
pub fn timeout_error(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match timeout_type(py) {
        Ok(ty) => PyErr::from_type(ty.clone(), message),
        Err(e) => e,
    })
}
create_exception!(
    hwtensor,
    GpuError,
    Error,
    "The GPU device or driver refused or lost something; `kind` says which way: 'lost', \
     'out_of_memory', 'unsupported', 'timeout' or 'driver'."
);
create_exception!(hwtensor, CudaError, Error, "A CUDA driver call failed.");

/// The Python exception for a library error.
pub fn to_py(e: hwtensor::Error) -> PyErr {
    use hwtensor::Error as E;
    let message = e.message_for(hwtensor::Lang::Python);
    match e {
        E::Shape(_)
        | E::OutOfBounds(_)
        | E::RegionOutside { .. }
        | E::IndexOutside { .. }
        | E::TooSmall { .. }
        | E::RowStride(_)
        | E::Image(_)
        | E::UnknownName { .. }
        | E::InvalidArgument(_)
        | E::DType { .. }
        | E::Length(_) => InvalidArgument::new_err(message),
        E::Unavailable { .. } => Unavailable::new_err(message),
        E::MapBusy { .. } => BusyError::new_err(message),
        E::AccessDenied { .. } | E::InvalidOperation(_) => AccessError::new_err(message),
        E::Fd(_) | E::Blob(_) | E::Handoff(_) | E::Protocol(_) => HandoffError::new_err(message),
        E::PeerLeft(_) => PeerGone::new_err(message),
        E::NotPermitted(_) => NotPermittedError::new_err(message),
        E::Timeout(_) => timeout_error(message),
        E::Gpu { kind, .. } => gpu_error(message, kind),
        E::Cuda { .. } => CudaError::new_err(message),
        _ => Error::new_err(message),
    }
}

/// The name Python code compares `GpuError.kind` with: a device that is lost needs a restart,
/// memory that ran out a smaller request, an unsupported feature another path, so a caller
/// must tell them apart without parsing the message.
fn kind_name(kind: hwtensor::GpuErrorKind) -> &'static str {
    use hwtensor::GpuErrorKind as K;
    match kind {
        K::Lost => "lost",
        K::OutOfMemory => "out_of_memory",
        K::Unsupported => "unsupported",
        K::Timeout => "timeout",
        K::Driver => "driver",
        _ => "driver",
    }
}

/// A `GpuError` carrying its kind as the attribute `kind`.
fn gpu_error(message: String, kind: hwtensor::GpuErrorKind) -> PyErr {
    Python::attach(|py| {
        let err = GpuError::new_err(message);
        // Setting an attribute on a fresh exception object cannot fail short of no memory;
        // the exception then still says what went wrong, without its kind.
        let _ = err.value(py).setattr("kind", kind_name(kind));
        err
    })
}

/// `Result` → `PyResult` with [`to_py`].
pub trait OrPy<T> {
    /// The value, or the Python exception for the error.
    fn or_py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for hwtensor::Result<T> {
    fn or_py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("AccessError", py.get_type::<AccessError>())?;
    m.add("HandoffError", py.get_type::<HandoffError>())?;
    m.add("PeerGone", py.get_type::<PeerGone>())?;
    m.add("NotPermittedError", py.get_type::<NotPermittedError>())?;
    m.add("TimeoutError", timeout_type(py)?)?;
    m.add("GpuError", py.get_type::<GpuError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    Ok(())
}
