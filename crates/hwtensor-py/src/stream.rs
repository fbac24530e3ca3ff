//! The pooled channel from Python: `hwtensor.Consumer` and `hwtensor.Producer`. After the pool
//! is lent once over the socket, a frame is a buffer id in shared memory; the GIL is released
//! while a receive or an acquire waits.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use hwtensor::stream::{
    Consumer as RustConsumer, Frame as RustFrame, FrameMeta, Lending, Listener as RustListener,
    Peers, Producer as RustProducer, Wait,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors::{InvalidArgument, OrPy};
use crate::handoff::borrowed_stream;
use crate::tensor::PyTensor;

/// The channel keeps its own copy of the caller's socket: Python may close its object.
fn own_stream(sock: &Bound<'_, PyAny>) -> PyResult<UnixStream> {
    let borrowed = borrowed_stream(sock)?;
    let fd: OwnedFd = borrowed
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| crate::errors::HandoffError::new_err(format!("dup of the socket: {e}")))?;
    Ok(UnixStream::from(fd))
}

/// `Consumer`'s default bound on a set-up, in seconds: the Rust one.
const CONNECT_SECONDS: f64 = hwtensor::stream::CONNECT_TIMEOUT.as_secs_f64();

fn wait_of(timeout: Option<f64>) -> PyResult<Wait> {
    timeout.map_or(Ok(Wait::Block), |s| Ok(Wait::For(crate::seconds(s)?)))
}

/// The receiving side of a channel: `Consumer(sock)` attaches to a producer on a connected
/// Unix socket and imports its pool.
#[pyclass(name = "Consumer", module = "hwtensor")]
pub struct Consumer {
    inner: RustConsumer,
}

#[pymethods]
impl Consumer {
    /// Attaches within `timeout` seconds (default 10): a producer that sends nothing by then
    /// raises `TimeoutError`, one that stalls mid-message `HandoffError`, whatever the socket's
    /// own timeout.
    ///
    /// The pool is read-only (its maps refuse writing) unless `write=True`, which the producer
    /// must grant (`producer.admit(write=True)`); a refusal raises `NotPermittedError`, as does
    /// a producer whose policy does not admit this process's user.
    #[new]
    #[pyo3(signature = (sock, timeout = CONNECT_SECONDS, write = false))]
    fn new(py: Python<'_>, sock: &Bound<'_, PyAny>, timeout: f64, write: bool) -> PyResult<Self> {
        let timeout = crate::seconds(timeout)?;
        let stream = own_stream(sock)?;
        let lending = if write { Lending::Write } else { Lending::Read };
        let inner = py
            .detach(|| RustConsumer::connect_with(stream, timeout, lending))
            .or_py()?;
        Ok(Consumer { inner })
    }

    /// Connects to the producer listening on `address` (a path, or "@name" for an abstract
    /// socket) and attaches, as `Consumer(sock, ...)` does.
    #[staticmethod]
    #[pyo3(signature = (address, timeout = CONNECT_SECONDS, write = false))]
    fn connect(py: Python<'_>, address: &str, timeout: f64, write: bool) -> PyResult<Self> {
        let timeout = crate::seconds(timeout)?;
        let lending = if write { Lending::Write } else { Lending::Read };
        let inner = py
            .detach(|| {
                let stream = hwtensor::stream::connect(address)?;
                RustConsumer::connect_with(stream, timeout, lending)
            })
            .or_py()?;
        Ok(Consumer { inner })
    }

    /// Whether the pool is writable here (`write=True`, granted).
    #[getter]
    fn writable(&self) -> bool {
        self.inner.lending() == Lending::Write
    }

    /// The producer's description of its stream (`hwtensorsink` sends its caps as text);
    /// empty bytes where it sent none.
    #[getter]
    fn stream_info<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.stream_info())
    }

    /// The next frame, waiting at most `timeout` seconds (None: until one comes). A producer
    /// that left raises `HandoffError`; no frame in time raises `TimeoutError`.
    #[pyo3(signature = (timeout = None))]
    fn recv(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Frame> {
        let wait = wait_of(timeout)?;
        let inner = &mut self.inner;
        let frame = py.detach(|| inner.recv(wait)).or_py()?;
        Ok(Frame { inner: Some(frame) })
    }

    /// The pool's buffers, as this process imported them.
    #[getter]
    fn pool(&self) -> Vec<PyTensor> {
        self.inner
            .pool()
            .iter()
            .cloned()
            .map(PyTensor::wrap)
            .collect()
    }
}

/// A received frame; leaving `with consumer.recv() as frame:` (or `release()`) hands the
/// buffer back to the producer, after the GPU work hwtensor knows of on it. CUDA work you
/// queued on the frame's tensor (through DLPack or `__cuda_array_interface__`) is known once
/// you call `frame.tensor.cuda_read_done(stream)` (reads) or `cuda_done(stream)` (writes): do
/// so before handing back a frame your stream may still be reading, or the producer may
/// rewrite the buffer under it; the hand-back then waits for that work, off your thread. A
/// torch view kept after the hand-back sees whatever the producer writes next: that is the
/// contract.
#[pyclass(name = "Frame", module = "hwtensor")]
pub struct Frame {
    inner: Option<RustFrame>,
}

impl Frame {
    fn live(&self) -> PyResult<&RustFrame> {
        self.inner
            .as_ref()
            .ok_or_else(|| InvalidArgument::new_err("this frame was handed back"))
    }
}

#[pymethods]
impl Frame {
    /// The frame's tensor. Do not touch it after the frame is handed back: the producer
    /// reuses the buffer.
    #[getter]
    fn tensor(&self) -> PyResult<PyTensor> {
        Ok(PyTensor::wrap(self.live()?.tensor().clone()))
    }

    /// The producer's sequence number.
    #[getter]
    fn seq(&self) -> PyResult<u64> {
        Ok(self.live()?.meta().seq)
    }

    /// The producer's timestamp (CLOCK_MONOTONIC nanoseconds, by convention).
    #[getter]
    fn timestamp_ns(&self) -> PyResult<u64> {
        Ok(self.live()?.meta().timestamp_ns)
    }

    /// The small user payload that travelled with the frame.
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.live()?.meta().payload()))
    }

    /// The frame's marker (what a media producer such as hwtensorsink says of it: a frame, the
    /// end of the stream, a caps change, with its PTS and duration). A plain payload reads as a
    /// frame; a kind this library does not know raises HandoffError.
    fn marker(&self) -> PyResult<crate::marker::Marker> {
        self.live()?
            .meta()
            .marker()
            .map(crate::marker::Marker)
            .or_py()
    }

    /// The buffer's index in the pool.
    #[getter]
    fn slot(&self) -> PyResult<usize> {
        Ok(self.live()?.slot())
    }

    /// Hands the buffer back (once; later calls do nothing).
    fn release(&mut self, py: Python<'_>) {
        if let Some(frame) = self.inner.take() {
            py.detach(move || drop(frame));
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.release(py);
        false
    }
}

/// The sending side: `Producer(pool, room=None)` over a list of tensors (any fd-backed kind,
/// or GPU memory); `attach(sock)` lends the pool to a consumer. With `room`, `add(tensor)` grows
/// the pool up to that many buffers after consumers attached.
#[pyclass(name = "Producer", module = "hwtensor")]
pub struct Producer {
    inner: RustProducer,
}

#[pymethods]
impl Producer {
    #[new]
    #[pyo3(signature = (pool, room = None))]
    fn new(pool: Vec<PyRef<'_, PyTensor>>, room: Option<usize>) -> PyResult<Self> {
        let pool: Vec<_> = pool.iter().map(|t| t.inner.clone()).collect();
        let room = room.unwrap_or(pool.len());
        Ok(Producer {
            inner: RustProducer::with_room(pool, room).or_py()?,
        })
    }

    /// Adds `tensor` to the pool: attached consumers receive it now. Returns its slot, which
    /// `acquire` never hands out: take it with `acquire_slot(slot)`.
    fn add(&mut self, py: Python<'_>, tensor: PyRef<'_, PyTensor>) -> PyResult<usize> {
        let t = tensor.inner.clone();
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.add(t)).or_py()?.index())
    }

    /// Acquires the added buffer `slot` once no consumer holds it, waiting at most `timeout`
    /// seconds.
    #[pyo3(signature = (slot, timeout = 5.0))]
    fn acquire_slot(&mut self, py: Python<'_>, slot: usize, timeout: f64) -> PyResult<()> {
        let s = self.slot(slot)?;
        let limit = crate::seconds(timeout)?;
        let inner = &mut self.inner;
        py.detach(|| inner.acquire_slot(s, limit)).or_py()
    }

    /// Lends the pool to the consumer on the connected Unix socket `sock`, read-only unless
    /// the policy lets it write. A consumer the policy does not admit is told so and raises
    /// `NotPermittedError` here (counted in `refused`).
    fn attach(&mut self, py: Python<'_>, sock: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = own_stream(sock)?;
        let inner = &mut self.inner;
        py.detach(|| inner.attach(stream)).or_py()
    }

    /// Widens who may attach: by default only this process's user. `uid` / `gid` admit that
    /// user or primary group, `anyone` every process that reaches the socket; with none of
    /// them, this process's user. `write=True` also lets them write the pool when they connect
    /// with `write=True` (consumers read only by default).
    #[pyo3(signature = (uid = None, gid = None, anyone = false, write = false))]
    fn admit(&mut self, uid: Option<u32>, gid: Option<u32>, anyone: bool, write: bool) {
        let mut who = if anyone { Peers::any() } else { Peers::none() };
        if let Some(u) = uid {
            who = who.with_uid(u);
        }
        if let Some(g) = gid {
            who = who.with_gid(g);
        }
        if uid.is_none() && gid.is_none() && !anyone {
            who = Peers::own_user();
        }
        let access = self.inner.access().clone().admitting(who, write);
        self.inner.set_access(access);
    }

    /// Consumers the attach policy refused so far.
    #[getter]
    fn refused(&self) -> u64 {
        self.inner.refused()
    }

    /// Sets the stream's description (at most 4096 bytes of your own format), which each
    /// consumer attaching from now on reads as `consumer.stream_info`.
    fn set_stream_info(&mut self, info: &[u8]) -> PyResult<()> {
        self.inner.set_stream_info(info).or_py()
    }

    /// Waits at most `timeout` seconds for a consumer on `listener` (a `Listener`) and
    /// attaches it (the policy applies). Returns False when nobody came in time.
    #[pyo3(signature = (listener, timeout = 5.0))]
    fn accept(&mut self, py: Python<'_>, listener: &Listener, timeout: f64) -> PyResult<bool> {
        let limit = crate::seconds(timeout)?;
        let inner = &mut self.inner;
        let socket = &listener.inner;
        match py.detach(|| socket.accept(limit)) {
            Ok(stream) => py.detach(|| inner.attach(stream)).or_py().map(|()| true),
            Err(hwtensor::Error::Timeout(_)) => Ok(false),
            Err(e) => Err(crate::errors::to_py(e)),
        }
    }

    /// A free buffer's slot index, waiting at most `timeout` seconds for one to come back.
    #[pyo3(signature = (timeout = 5.0))]
    fn acquire(&mut self, py: Python<'_>, timeout: f64) -> PyResult<usize> {
        let limit = crate::seconds(timeout)?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.acquire(limit)).or_py()?.index())
    }

    /// The tensor of pool slot `slot`.
    fn tensor(&self, slot: usize) -> PyResult<PyTensor> {
        let s = self.slot(slot)?;
        Ok(PyTensor::wrap(self.inner.tensor(s).clone()))
    }

    /// Sends the acquired buffer `slot` as a frame with its sequence number, timestamp and
    /// an optional small payload, or a marker (not both).
    #[pyo3(signature = (slot, seq, timestamp_ns = 0, payload = None, marker = None))]
    fn send(
        &mut self,
        slot: usize,
        seq: u64,
        timestamp_ns: u64,
        payload: Option<&[u8]>,
        marker: Option<PyRef<'_, crate::marker::Marker>>,
    ) -> PyResult<()> {
        let s = self.slot(slot)?;
        let mut meta = FrameMeta::new(seq, timestamp_ns);
        match (payload, marker) {
            (Some(_), Some(_)) => {
                return Err(InvalidArgument::new_err(
                    "send takes payload= or marker=, not both: a marker is the payload",
                ))
            }
            (Some(p), None) => meta = meta.with_payload(p).or_py()?,
            (None, Some(m)) => meta = meta.with_marker(&m.0),
            (None, None) => {}
        }
        self.inner.send(s, meta).or_py()
    }

    /// Gives an acquired buffer back to the free list without sending it.
    fn release(&mut self, slot: usize) -> PyResult<()> {
        let s = self.slot(slot)?;
        self.inner.release(s);
        Ok(())
    }

    /// How many consumers are attached.
    #[getter]
    fn consumers(&self) -> usize {
        self.inner.consumers()
    }
}

/// Where a producer listens: `Listener("@name")` (abstract) or `Listener("/run/user/1000/cam")`;
/// `producer.accept(listener, timeout)` attaches whoever connects, as the policy allows.
#[pyclass(name = "Listener", module = "hwtensor")]
pub struct Listener {
    inner: RustListener,
}

#[pymethods]
impl Listener {
    #[new]
    fn new(address: &str) -> PyResult<Self> {
        Ok(Listener {
            inner: RustListener::bind(address).or_py()?,
        })
    }

    /// The address it listens on.
    #[getter]
    fn address(&self) -> &str {
        self.inner.address()
    }
}

impl Producer {
    fn slot(&self, index: usize) -> PyResult<hwtensor::stream::Slot> {
        self.inner
            .slot(index)
            .ok_or_else(|| InvalidArgument::new_err(format!("slot {index} is not in the pool")))
    }
}
