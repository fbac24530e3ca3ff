//! Hand-off over a Unix stream socket: a blob and its fds (SCM_RIGHTS) in one message.
//!
//! The blob is size-prefixed, so a receiver reads exactly one message and never eats into the
//! next. fds arrive close-on-exec (`MSG_CMSG_CLOEXEC`), so a consumer that spawns a child does
//! not leak every frame buffer into it. A peer that closes mid-message, stalls mid-message,
//! sends more fds than the blob names, or a blob longer than any tensor needs gets a clear
//! [`Error::Handoff`](crate::Error::Handoff) (no message at all within the stream's read
//! timeout is [`Error::Timeout`](crate::Error::Timeout)); any fds received are closed on the way out. Memory for a message is
//! allocated as its bytes arrive, so a length prefix alone pins nothing.
//!
//! `recv` applies hwtensor's trust model (see `ImportPolicy`): GPU memory by reference only
//! from a peer of this user, as `SO_PEERCRED` reports it; `recv_with` takes the caller's
//! policy instead.
//!
//! # Example
//!
//! ```
//! use std::os::unix::net::UnixStream;
//! use hwtensor::handoff::{recv, send};
//! use hwtensor::{Tensor, TensorMemory};
//!
//! let (producer, consumer) = UnixStream::pair()?;
//! let frame = Tensor::<u8>::new(&[64], Some(TensorMemory::Shm))?;
//! frame.map_write()?.fill(9);
//! send(&producer, &frame.into())?; // the memfd goes by SCM_RIGHTS: no copy
//! let got = recv(&consumer)?.into_tensor::<u8>()?;
//! assert!(got.to_vec()?.iter().all(|&b| b == 9));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On Windows the same `send` and `recv` run over a connected named pipe (`Pipe`,
//! `PipeListener`): shared memory (a section) goes by handle, which the receiver duplicates
//! out of the sender's process (so it only ever closes handles it made itself) and
//! acknowledges, so the sender may drop the tensor when `send` returns.

use std::time::Duration;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// How long the rest of a message may take once its first byte has arrived. A live peer writes
/// a blob in microseconds (an inline 4K frame in milliseconds); a peer silent for this long has
/// hung or died holding the socket, and waiting longer would hang the consumer with it.
pub const MID_MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest blob a receiver accepts: room for an inline 4K RGBA f32 frame (133 MB) several
/// times over, while a hostile length prefix cannot make it allocate gigabytes.
pub const MAX_BLOB_LEN: usize = 1 << 30;

/// The largest reference blob: it carries only the description (424 bytes in v1 at most:
/// header, 8 dimensions and strides, 4 planes); 4 KiB leaves room for headers later versions
/// append, and keeps a stalling peer from pinning more than that per connection.
pub const MAX_REFERENCE_BLOB_LEN: usize = 4096;
