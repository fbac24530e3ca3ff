//! The blob's codec: every byte a blob holds, written and read here and nowhere else. Nothing
//! in this folder opens an fd, touches a device or builds a buffer, so it compiles, and is
//! fuzzed, on every platform; `blob/mod.rs` and the transports (`reference.rs`, `section.rs`)
//! turn what it reads into tensors.
//!
//! - `header.rs`: the fixed header's field table, its writer and its checked reader;
//! - `body.rs`: what follows the header (dimensions, strides, plane records, per-channel
//!   quantization) and the rules tying the plane records to the tensor;
//! - `read.rs`: a whole blob read and checked into a [`Described`];
//! - `write.rs`: a whole blob written from a tensor and an [`Outgoing`].
//!
//! The feature bits of `required` are defined here once; `blob` re-exports them.

mod body;
mod header;
mod read;
#[cfg(test)]
mod tests;
mod write;

#[cfg(target_os = "linux")]
pub(in crate::blob) use body::{one_buffer_extent, plane_records};
pub(super) use header::{F_MEMORY, F_MODE, F_TOTAL_LEN, V1_HEADER_LEN};
pub(in crate::blob) use read::Described;
pub(in crate::blob) use write::Outgoing;

use crate::{Error, Result};

/// First four bytes of every blob.
pub const MAGIC: [u8; 4] = *b"HWTB";
/// The version this reader understands and this writer writes.
pub const VERSION: u16 = 1;
/// Most dimensions a blob may describe: batched planar images need 4; 8 leaves room.
pub const MAX_RANK: usize = 8;
/// Most planes (planar RGBA has 4).
pub const MAX_PLANES: usize = 4;
/// Most fds one blob may carry (one per plane).
pub const MAX_FDS: usize = MAX_PLANES;

/// `required` bit: the blob describes an image.
pub const REQUIRES_IMAGE: u32 = 1 << 0;
/// `required` bit: the blob carries quantization parameters.
pub const REQUIRES_QUANTIZATION: u32 = 1 << 1;
/// `required` bit: the tensor may be read only after a completion fence signals.
pub const REQUIRES_COMPLETION: u32 = 1 << 2;
/// `required` bit: the image says its colorimetry (a reader that cannot keep it must not
/// drop it silently: the receiver would convert YUV wrongly).
pub const REQUIRES_COLORIMETRY: u32 = 1 << 3;
/// `required` bit: the quantization is per channel (with bit 1): `quant_channels` pairs of
/// scale and zero point follow the plane records.
pub const REQUIRES_PER_CHANNEL: u32 = 1 << 4;
/// `required` bit: the image's pixels are laid out by a DRM format modifier other than LINEAR
/// (the header then has the `drm_modifier` field): a reader that cannot keep it must refuse
/// rather than read tiles as rows.
pub const REQUIRES_DRM_MODIFIER: u32 = 1 << 5;
/// `required` bit: shared memory or a DMA-BUF by reference whose bytes are complete only when
/// the DMA-fence sync_file at fd index 1 (`completion_fd`) signals (a V4L2 or GPU producer's
/// fence). The reader waits for it, bounded, before it returns the tensor; never with bit 2.
pub const REQUIRES_SYNC_FILE: u32 = 1 << 6;
/// `required` bit: the image's chroma planes have a row stride of their own
/// ([`ImageInfo::chroma_stride`](crate::ImageInfo::chroma_stride)), which the second plane
/// record carries: a reader that derives chroma strides from the row stride would misread.
pub const REQUIRES_CHROMA_STRIDE: u32 = 1 << 7;
/// `required` bit: each plane of the image is in an fd of its own (plane `k` in fd `k`, at
/// its record's offset there): a reader that takes every plane from fd 0 would read the luma
/// buffer as chroma.
pub const REQUIRES_PLANE_FDS: u32 = 1 << 8;
/// Every `required` bit this reader understands.
const KNOWN_REQUIREMENTS: u32 = REQUIRES_IMAGE
    | REQUIRES_QUANTIZATION
    | REQUIRES_COMPLETION
    | REQUIRES_COLORIMETRY
    | REQUIRES_PER_CHANNEL
    | REQUIRES_DRM_MODIFIER
    | REQUIRES_SYNC_FILE
    | REQUIRES_CHROMA_STRIDE
    | REQUIRES_PLANE_FDS;

/// `mode` of a reference blob.
pub(super) const MODE_REFERENCE: u8 = 0;
/// `mode` of an inline blob.
pub(super) const MODE_INLINE: u8 = 1;

/// The error of a blob that says something wrong: `what` names the field.
pub(in crate::blob) fn bad(what: impl Into<String>) -> Error {
    Error::Blob(what.into())
}

/// A 64-bit field as this machine's size, refused where it does not fit.
fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| bad(format!("{what} {v} does not fit this machine")))
}
