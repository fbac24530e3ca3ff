//! The one error type of the crate.
//!
//! Every variant names what was wrong and, where there is one, what to do instead: callers
//! print these to users who did not write the code that failed.

use crate::{DType, TensorMemory};

/// Result alias used across hwtensor.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in hwtensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A backing was requested that this machine or build cannot provide.
    #[error("{memory} memory is not available here: {reason}")]
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
    #[error("invalid row stride: {0}")]
    RowStride(String),

    /// An image operation on a tensor that is not an image, or a format that cannot do it.
    #[error("image: {0}")]
    Image(String),

    /// An fd that cannot back a tensor: wrong kind of file, too small, closed.
    #[error("unusable fd: {0}")]
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
    #[error("bad blob: {0}")]
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

impl Error {
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
