//! The stream's description a producer may send each consumer with the pool: bytes of the
//! producer's own format (a GStreamer sink's caps: frame rate, colorimetry), so what a source
//! downstream negotiates describes the stream, not only its pictures. It travels as an inline
//! hand-off of a byte tensor, so both platforms carry it and it is read as the hostile input
//! every hand-off is.

use std::time::Instant;

use super::os::Link;
use crate::blob::Transport;
use crate::{handoff, DType, Error, Result, Tensor, TensorDyn, TensorMemory};

/// The most bytes a stream description holds: a caps string is a few hundred.
pub const MAX_STREAM_INFO: usize = 4096;

/// Sends `info` on `link`.
pub(crate) fn send(link: &Link, info: &[u8]) -> Result<()> {
    let t = Tensor::<u8>::new(&[info.len()], Some(TensorMemory::Mem))?;
    t.copy_from_flat(info)?;
    handoff::send_as(link, &TensorDyn::from(t), Transport::Inline)
}

/// Receives a stream description on `link` by `deadline`: a plain byte tensor of at most
/// [`MAX_STREAM_INFO`] bytes, anything else refused.
pub(crate) fn recv(link: &Link, deadline: Instant) -> Result<Vec<u8>> {
    let t = handoff::recv_by(link, deadline)?;
    let bad = |what: String| Error::Handoff(format!("the producer's stream description: {what}"));
    if t.dtype() != DType::U8 || t.shape().len() != 1 {
        return Err(bad(format!("a {:?} {} tensor", t.shape(), t.dtype())));
    }
    if t.len() > MAX_STREAM_INFO {
        return Err(bad(format!("{} bytes, past {MAX_STREAM_INFO}", t.len())));
    }
    t.as_tensor::<u8>()?.to_vec()
}
