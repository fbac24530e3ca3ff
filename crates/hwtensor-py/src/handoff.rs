//! Hand-off on Python sockets: `hwtensor.send(sock, t)` and `hwtensor.recv(sock)`, the fds
//! passed as hwtensor passes them in Rust. The GIL is released while the bytes move.

use std::mem::ManuallyDrop;
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hwtensor::blob::{self, Transport};
use hwtensor::handoff;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{timeout_error, HandoffError, OrPy};
use crate::tensor::PyTensor;

/// The caller's connected Unix stream socket (a socket object or an fd number), borrowed:
/// checked to be a socket, never closed here (see `handoff::borrow_socket`).
pub(crate) fn borrowed_stream(sock: &Bound<'_, PyAny>) -> PyResult<ManuallyDrop<UnixStream>> {
    let fd: RawFd = match sock.extract::<RawFd>() {
        Ok(fd) => fd,
        Err(_) => sock.call_method0("fileno")?.extract()?,
    };
    // SAFETY: the caller's socket, kept open by its Python object for this call.
    unsafe { handoff::borrow_socket(fd) }.or_py()
}

/// The socket's Python timeout (`sock.settimeout`), if it has one.
fn timeout_of(sock: &Bound<'_, PyAny>) -> Option<Duration> {
    let t: Option<f64> = sock.call_method0("gettimeout").ok()?.extract().ok()?;
    t.and_then(|s| crate::seconds(s).ok())
}

/// Waits until `stream` is readable, at most `timeout` (no timeout: until it is).
fn readable_within(stream: &UnixStream, timeout: Option<Duration>) -> PyResult<()> {
    let Some(limit) = timeout else { return Ok(()) };
    let mut fds = [rustix::event::PollFd::new(
        stream,
        rustix::event::PollFlags::IN,
    )];
    let t = rustix::event::Timespec::try_from(limit)
        .map_err(|_| HandoffError::new_err("timeout out of range"))?;
    match rustix::event::poll(&mut fds, Some(&t)) {
        Ok(0) => Err(timeout_error(format!("no tensor arrived within {limit:?}"))),
        Ok(_) => Ok(()),
        Err(e) => Err(HandoffError::new_err(format!("poll failed: {e}"))),
    }
}

/// Sends `tensor` on the connected Unix socket `sock` (a `socket.socket` or an fd): its
/// description and its fds, so the receiver maps the same memory; with `inline`, its bytes
/// instead (for memory without an fd: heap, or CUDA memory of another library).
#[pyfunction]
#[pyo3(signature = (sock, tensor, inline = false))]
pub fn send(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    tensor: &PyTensor,
    inline: bool,
) -> PyResult<()> {
    let stream = borrowed_stream(sock)?;
    let t = &tensor.inner;
    py.detach(|| match inline {
        true => handoff::send_as(&stream, t, hwtensor::blob::Transport::Inline),
        false => handoff::send(&stream, t),
    })
    .or_py()
}

/// Receives a tensor from `sock`, waiting at most `timeout` seconds (default: the socket's own
/// timeout; None: until one comes). A hostile or short message raises `HandoffError`.
#[pyfunction]
#[pyo3(signature = (sock, timeout = None))]
pub fn recv(py: Python<'_>, sock: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<PyTensor> {
    let stream = borrowed_stream(sock)?;
    let limit = match timeout {
        Some(s) if s >= 0.0 => Some(crate::seconds(s)?),
        Some(s) => {
            return Err(crate::errors::InvalidArgument::new_err(format!(
                "bad timeout {s}"
            )))
        }
        None => timeout_of(sock),
    };
    py.detach(|| {
        readable_within(&stream, limit)?;
        handoff::recv(&stream).or_py()
    })
    .map(PyTensor::wrap)
}

/// The blob that describes `tensor` and the fds that travel with it (new ones, the caller's to
/// close; none inline). With `inline`, the bytes travel in the blob instead: for memory without
/// an fd, or a peer on another machine.
#[pyfunction]
#[pyo3(signature = (tensor, inline = false))]
pub fn export_blob<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    inline: bool,
) -> PyResult<(Bound<'py, PyBytes>, Vec<RawFd>)> {
    let mode = if inline {
        Transport::Inline
    } else {
        Transport::Reference
    };
    let (bytes, fds) = blob::export(&tensor.inner, mode).or_py()?;
    // Owned until all are made: a failed dup closes those made before it.
    let owned = fds
        .iter()
        .map(|fd| fd.try_clone_to_owned())
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| crate::errors::HandoffError::new_err(format!("dup of a blob's fd: {e}")))?;
    let raw = owned.into_iter().map(IntoRawFd::into_raw_fd).collect();
    Ok((PyBytes::new(py, &bytes), raw))
}

/// The tensor a blob describes, with the fds that came with it (duplicated: the caller closes
/// its own). A hostile or short blob raises `HandoffError` naming the field; GPU memory by
/// reference is accepted only as `hwtensor.recv` accepts it (from a peer of this user), which
/// an fd list cannot prove, so here it is refused.
#[pyfunction]
#[pyo3(signature = (data, fds = Vec::new()))]
pub fn import_blob(py: Python<'_>, data: &[u8], fds: Vec<RawFd>) -> PyResult<PyTensor> {
    let fds = fds
        .into_iter()
        .map(crate::fd::dup_in)
        .collect::<PyResult<Vec<_>>>()?;
    let data = data.to_vec();
    py.detach(|| blob::import(&data, fds))
        .or_py()
        .map(PyTensor::wrap)
}
