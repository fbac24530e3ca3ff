//! The frame marker from Python (see `hwtensor::stream::Marker`): what a media producer's
//! frame says (a frame, the end of the stream, a caps change) and its PTS and duration, so a
//! consumer of `hwtensorsink` reads `frame.marker()` instead of unpacking payload bytes.

use hwtensor::stream::{FrameKind, Marker as CoreMarker};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{InvalidArgument, OrPy};

/// The names Python gives the kinds, in code order.
const KINDS: [(FrameKind, &str); 3] = [
    (FrameKind::Frame, "frame"),
    (FrameKind::EndOfStream, "end_of_stream"),
    (FrameKind::CapsChange, "caps_change"),
];

/// What a frame of a media channel says: ``kind`` is "frame", "end_of_stream" or
/// "caps_change" (connect again: the producer's pool changed); ``pts_ns`` and ``duration_ns``
/// are the frame's presentation time and duration, ``None`` when it has none.
#[pyclass(module = "hwtensor", frozen, eq)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Marker(pub(crate) CoreMarker);

#[pymethods]
impl Marker {
    #[new]
    #[pyo3(signature = (kind = "frame", pts_ns = None, duration_ns = None))]
    fn new(kind: &str, pts_ns: Option<u64>, duration_ns: Option<u64>) -> PyResult<Marker> {
        let kind = KINDS
            .iter()
            .find(|(_, name)| *name == kind)
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                InvalidArgument::new_err(format!(
                    "kind={kind:?}: a marker's kind is \"frame\", \"end_of_stream\" or \"caps_change\""
                ))
            })?;
        Ok(Marker(CoreMarker {
            kind,
            pts_ns,
            duration_ns,
        }))
    }

    /// Reads a frame's payload; an empty one is a plain frame. A kind this library does not
    /// know raises HandoffError.
    #[staticmethod]
    fn decode(payload: &[u8]) -> PyResult<Marker> {
        CoreMarker::decode(payload).map(Marker).or_py()
    }

    /// The payload bytes (for ``Producer.send(..., payload=marker.encode())``).
    fn encode<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.0.encode())
    }

    /// "frame", "end_of_stream" or "caps_change".
    #[getter]
    fn kind(&self) -> &'static str {
        KINDS
            .iter()
            .find(|(k, _)| *k == self.0.kind)
            .map_or("frame", |(_, name)| name)
    }

    /// The presentation time in ns, or None.
    #[getter]
    fn pts_ns(&self) -> Option<u64> {
        self.0.pts_ns
    }

    /// The duration in ns, or None.
    #[getter]
    fn duration_ns(&self) -> Option<u64> {
        self.0.duration_ns
    }

    fn __repr__(&self) -> String {
        let time = |t: Option<u64>| t.map_or("None".to_string(), |t| t.to_string());
        format!(
            "Marker(kind={:?}, pts_ns={}, duration_ns={})",
            self.kind(),
            time(self.0.pts_ns),
            time(self.0.duration_ns)
        )
    }
}
