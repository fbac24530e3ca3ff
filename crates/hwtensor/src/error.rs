//! The one error type of the crate.
//!
//! Every variant names what was wrong and, where there is one, what to do instead: callers
//! print these to users who did not write the code that failed.

use std::borrow::Cow;
use std::cell::Cell;

use crate::{DType, TensorMemory};

/// Result alias used across hwtensor.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in hwtensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A backing was requested that this machine or build cannot provide.
    #[error("{memory} memory is not available here: {}", advice(.reason))]
    Unavailable {
        /// The backing asked for.
        memory: TensorMemory,
        /// Why it is not available, in words.
        reason: String,
    },

    /// Allocation of the backing memory failed.
    #[error("could not allocate {bytes} bytes of {memory} memory: {source}")]
    Alloc {
        /// The backing asked for.
        memory: TensorMemory,
        /// The bytes asked for.
        bytes: usize,
        #[source]
        /// What the allocator or the OS said.
        source: std::io::Error,
    },

    /// A shape, stride or region that does not describe valid memory.
    #[error("invalid shape: {0}")]
    Shape(String),

    /// A view, batch index or region that lies outside its parent (where no structured
    /// variant below says more: an offset that overflows).
    #[error("out of bounds: {0}")]
    OutOfBounds(String),

    /// A region that does not fit in the `width` x `height` it was applied to.
    #[error("out of bounds: {region:?} does not fit in {width} x {height} (width x height)")]
    RegionOutside {
        /// The region asked for.
        region: crate::Region,
        /// Width of what it was applied to.
        width: usize,
        /// Height of what it was applied to.
        height: usize,
    },

    /// An index past the end of a dimension (a batch item).
    #[error("out of bounds: index {index} of a dimension of {len}")]
    IndexOutside {
        /// The index asked for.
        index: usize,
        /// The dimension's length.
        len: usize,
    },

    /// A geometry that needs more bytes than the buffer holds (an import, a re-pointed pool
    /// buffer, wrapped foreign memory).
    #[error("out of bounds: the tensor needs {needed} bytes, the buffer holds {capacity}")]
    TooSmall {
        /// Bytes the geometry reaches, from the buffer's start.
        needed: usize,
        /// Bytes the buffer holds.
        capacity: usize,
    },

    /// A row stride below the format minimum, past the buffer, or misaligned.
    #[error("invalid row stride: {}", advice(.0))]
    RowStride(String),

    /// An image operation on a tensor that is not an image, or a format that cannot do it.
    #[error("image: {}", advice(.0))]
    Image(String),

    /// An fd that cannot back a tensor: wrong kind of file, too small, closed.
    #[error("unusable fd: {}", advice(.0))]
    Fd(String),

    /// A map in a direction the tensor's declared [`CpuAccess`](crate::CpuAccess) forbids.
    #[error("CPU {requested} access refused: the tensor was declared {declared:?}")]
    AccessDenied {
        /// The direction asked for ("read", "write", "read-write").
        requested: &'static str,
        /// What the tensor was declared with.
        declared: crate::CpuAccess,
    },

    /// A map that would alias a live write map of the same buffer (or a write map that would
    /// alias any live map).
    #[error("the buffer is already mapped {held}; drop that map first")]
    MapBusy {
        /// How the buffer is held now ("for writing", "for reading").
        held: &'static str,
    },

    /// A slice map of a tensor whose elements are not contiguous (a view of part of its rows,
    /// an image with padded rows): a slice would reach the bytes between the elements, which
    /// belong to another view or are padding. [`Tensor::map_strided`](crate::Tensor::map_strided)
    /// maps any tensor, by rows and ndarray views.
    #[error("the tensor's elements are not contiguous (shape {shape:?}, byte strides {strides:?}), so it has no slice map; map it with map_strided, map_strided_read or map_strided_write")]
    NotContiguous {
        /// The tensor's shape.
        shape: Vec<usize>,
        /// The tensor's byte strides.
        strides: Vec<usize>,
    },

    /// A typed borrow of a [`TensorDyn`](crate::TensorDyn) with the wrong element type.
    #[error("dtype mismatch: the tensor holds {actual}, {expected} was asked for")]
    DType {
        /// The element type asked for.
        expected: DType,
        /// The element type the tensor holds.
        actual: DType,
    },

    /// A destination slice of the wrong length.
    #[error("length mismatch: {0}")]
    Length(String),

    /// A blob that is malformed, hostile, or from a writer this reader cannot follow.
    #[error("bad blob: {}", advice(.0))]
    Blob(String),

    /// A hand-off over a socket that failed: the peer closed, sent too many fds, stalled.
    #[error("hand-off: {0}")]
    Handoff(String),

    /// The GPU device could not be made or used; `kind` says how callers should react.
    #[error("GPU{}: {message}", kind.label())]
    Gpu {
        /// What sort of failure it is.
        kind: GpuErrorKind,
        /// What failed, in words.
        message: String,
    },

    /// A name that is not one of its kind's (a dtype, a pixel format, a backing).
    #[error("unknown {what} {name:?} (known: {known})")]
    UnknownName {
        /// The kind of name.
        what: &'static str,
        /// The name given.
        name: String,
        /// The names that are known, comma-separated.
        known: String,
    },

    /// A CUDA driver call failed: the call and CUDA's name for the error
    /// (`CUDA_ERROR_INVALID_VALUE`, ...).
    #[error("CUDA: {call} failed: {name}")]
    Cuda {
        /// The driver call that failed.
        call: &'static str,
        /// CUDA's name for the error.
        name: String,
    },

    /// A call at the wrong time (for example installing a host device after first use).
    #[error("invalid operation: {0}")]
    InvalidOperation(String),

    /// A call with arguments that cannot work (null handles, a device that does not answer).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A bounded wait that ran out.
    #[error("timed out: {0}")]
    Timeout(String),

    /// An operating-system call failed.
    #[error("{op} failed: {source}")]
    Os {
        /// The call that failed.
        op: &'static str,
        #[source]
        /// What the OS said.
        source: std::io::Error,
    },

    /// The peer of a channel left (its socket hung up): the end of a stream, not a broken
    /// message. What it sent before leaving stays valid. A variant of its own so a consumer
    /// ends its loop on it without reading the message.
    #[error("the peer left: {0}")]
    PeerLeft(String),

    /// A peer the other side's policy does not admit, or a use it does not grant: a channel's
    /// producer refused this consumer (its user, or its asking to write), or refused a
    /// consumer it was asked to attach. The message says which and who can change it.
    #[error("not permitted: {}", advice(.0))]
    NotPermitted(String),

    /// A peer sent something that is not the protocol: garbage where a channel's set-up
    /// belongs, a version or flags this side does not speak. Unlike `Handoff` (a transfer that
    /// broke) or `PeerLeft`, the peer is there and speaks something else.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// The kinds of GPU failure, which callers handle differently: a lost device is rebuilt, an
/// allocation that did not fit is retried smaller or elsewhere, an unsupported feature takes
/// another path, a timeout may be waited out, a driver error is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GpuErrorKind {
    /// The device is lost (reset, removed, hung): nothing on it works any more.
    Lost,
    /// The device or the host ran out of memory for the request.
    OutOfMemory,
    /// The device, driver or build cannot do what was asked.
    Unsupported,
    /// A GPU wait ran out of time.
    Timeout,
    /// Any other failure the driver reported.
    Driver,
}

impl GpuErrorKind {
    /// The words the error's text puts after "GPU" (none for a plain driver error, so the text
    /// reads as it always did).
    fn label(self) -> &'static str {
        match self {
            GpuErrorKind::Lost => " device lost",
            GpuErrorKind::OutOfMemory => " out of memory",
            GpuErrorKind::Unsupported => " unsupported",
            GpuErrorKind::Timeout => " timeout",
            GpuErrorKind::Driver => "",
        }
    }
}

/// The language a caller reads an error in: the calls and flags its advice names are that
/// language's ([`Error::message_for`]). A C user told to call `send_as(.., Transport::Inline)`
/// has been told nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lang {
    /// The Rust API (what `Display` writes).
    Rust,
    /// The C ABI (`hwt_*` calls, `HWT_*` values).
    C,
    /// The Python package (`hwtensor.*`).
    Python,
}

/// Every "what to do instead" an error names, in each language ([`Lang`] order: Rust, C,
/// Python). A message names one as `[[key]]`; this table is the one place a binding's names
/// are written, and a key missing from it fails the test that renders every message.
const ADVICE: &[(&str, [&str; 3])] = &[
    (
        "give_row_stride",
        [
            "give the row stride too (ImageSpec::with_row_stride)",
            "set the spec's row_stride too",
            "give ImageSpec(row_stride=) too",
        ],
    ),
    (
        "send_inline",
        [
            "send_as(stream, tensor, Transport::Inline)",
            "hwt_send(socket, t, HWT_TRANSPORT_INLINE, timeout)",
            "hwtensor.send(sock, tensor, inline=True)",
        ],
    ),
    (
        "accept_gpu_reference",
        [
            "handoff::recv accepts it from processes of this user; with blob::import_with, say \
             ImportPolicy::TRUSTED_PEER when you know the sender",
            "hwt_recv accepts it from processes of this user; with hwt_recv or hwt_blob_import, \
             pass HWT_IMPORT_TRUSTED_PEER when you know the sender",
            "hwtensor.recv accepts it from processes of this user",
        ],
    ),
    (
        "accept_unsealed_shm",
        [
            "accept the risk with ImportPolicy::STRICT.with_unsealed_shm(true)",
            "no flag of the C ABI accepts that risk",
            "no argument of the Python package accepts that risk",
        ],
    ),
    (
        "image_batch",
        [
            "make it with Tensor::image_batch",
            "a batched image comes from Rust's Tensor::image_batch or an import of one",
            "a batched image comes from Rust's Tensor::image_batch or an import of one",
        ],
    ),
    (
        "plane_table",
        [
            "address its planes through plane_table()",
            "address its planes through hwt_tensor_plane_table",
            "address its planes through Tensor.plane_table",
        ],
    ),
    (
        "copy_planes",
        [
            "copy the frame with image_copied_from_planes",
            "copy the frame with hwt_tensor_image_copied_from_planes",
            "copy the frame (image_copied_from_planes in the Rust and C APIs)",
        ],
    ),
    (
        "new_image",
        [
            "allocate it with Tensor::image",
            "allocate it with hwt_tensor_new_image",
            "allocate it with hwtensor.Tensor.image",
        ],
    ),
    (
        "admit_peer",
        [
            "the producer's owner admits it with Producer::set_access \
             (Access::default().with_attach(Peers::own_user().with_uid(uid)))",
            "the producer's owner admits it with hwt_producer_admit(p, HWT_PEER_UID, uid, \
             HWT_RIGHT_ATTACH)",
            "the producer's owner admits it with producer.admit(uid=uid)",
        ],
    ),
    (
        "grant_write",
        [
            "the producer's owner lets it write with Producer::set_access \
             (Access::default().with_writers(..))",
            "the producer's owner lets it write with hwt_producer_admit(p, .., \
             HWT_RIGHT_ATTACH | HWT_RIGHT_WRITE)",
            "the producer's owner lets it write with producer.admit(.., write=True)",
        ],
    ),
];

thread_local! {
    /// The language `Display` writes advice in on this thread: Rust, except inside
    /// [`Error::message_for`].
    static READER: Cell<Lang> = const { Cell::new(Lang::Rust) };
}

/// `text` with each `[[key]]` written in the reader's language; an unknown key stays as it is.
fn advice(text: &str) -> Cow<'_, str> {
    if !text.contains("[[") {
        return Cow::Borrowed(text);
    }
    let lang = READER.with(Cell::get) as usize;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[[") {
        let Some(len) = rest[start..].find("]]") else {
            break;
        };
        let key = &rest[start + 2..start + len];
        out.push_str(&rest[..start]);
        match ADVICE.iter().find(|(k, _)| *k == key) {
            Some((_, words)) => out.push_str(words[lang]),
            None => out.push_str(&rest[start..start + len + 2]),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

impl Error {
    /// The message as a caller of `lang` should read it: what `Display` says, with the calls
    /// and flags it advises named in that language.
    pub fn message_for(&self, lang: Lang) -> String {
        let before = READER.with(|r| r.replace(lang));
        let message = self.to_string();
        READER.with(|r| r.set(before));
        message
    }

    /// A GPU failure of `kind`.
    pub fn gpu(kind: GpuErrorKind, message: impl Into<String>) -> Self {
        Error::Gpu {
            kind,
            message: message.into(),
        }
    }

    /// The kind of a GPU failure, `None` for every other error.
    pub fn gpu_kind(&self) -> Option<GpuErrorKind> {
        match self {
            Error::Gpu { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn os(op: &'static str, errno: rustix::io::Errno) -> Self {
        Error::Os {
            op,
            source: errno.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsendable() -> Error {
        Error::Unavailable {
            memory: TensorMemory::Mem,
            reason: "no fd; [[send_inline]] copies its bytes instead".into(),
        }
    }

    #[test]
    fn advice_names_the_call_of_the_language_the_caller_reads() {
        let e = unsendable();
        assert!(e
            .to_string()
            .contains("send_as(stream, tensor, Transport::Inline)"));
        assert!(e.message_for(Lang::Rust) == e.to_string());
        let c = e.message_for(Lang::C);
        assert!(
            c.contains("hwt_send(socket, t, HWT_TRANSPORT_INLINE, timeout)"),
            "{c}"
        );
        let py = e.message_for(Lang::Python);
        assert!(
            py.contains("hwtensor.send(sock, tensor, inline=True)"),
            "{py}"
        );
        assert!(!c.contains("[[") && !py.contains("Transport::"));
        // The language is set only while the message is written.
        assert!(e.to_string().contains("Transport::Inline"));
    }

    #[test]
    fn a_message_without_advice_and_an_unknown_key_read_as_written() {
        assert_eq!(advice("plain words"), "plain words");
        assert_eq!(advice("a [[no_such_key]] here"), "a [[no_such_key]] here");
        assert_eq!(advice("unclosed [[send_inline"), "unclosed [[send_inline");
    }

    #[test]
    fn every_advice_key_the_sources_name_is_in_the_table_and_every_entry_is_used() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut sources = String::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("error.rs")
                {
                    sources.push_str(&std::fs::read_to_string(path).unwrap());
                }
            }
        }
        let is_key =
            |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let keys = sources
            .split("[[")
            .skip(1)
            .filter_map(|s| s.split_once("]]"));
        for (key, _) in keys.filter(|(k, _)| is_key(k)) {
            assert!(
                ADVICE.iter().any(|(k, _)| *k == key),
                "no advice for [[{key}]]"
            );
        }
        for (key, _) in ADVICE {
            assert!(
                sources.contains(&format!("[[{key}]]")),
                "[[{key}]] is never used"
            );
        }
    }
}
