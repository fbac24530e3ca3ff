//! The blob: a versioned, size-prefixed, little-endian description of a tensor that travels
//! with its fds (reference mode, Linux) or with its bytes (inline mode, every platform).
//!
//! The codec (`wire/`: the header's field table, each section's reader and writer, the feature
//! bits) touches no fd and no device, builds no buffer, and compiles everywhere:
//! [`export_inline`] and [`import_inline`] are the inline transport on every platform. Only the fd path
//! (`reference.rs`: `export`, `import`, `import_with`) is Linux-only; the GPU section of a
//! reference blob is written and read by the GPU backend through two hooks (describe a buffer;
//! accept a peer's description and fence).
//!
//! A blob arrives from another process, and that process may be buggy or hostile. Parsing is
//! therefore total: every length and offset is bounded by the bytes present, every count by a
//! small maximum, every code by its enum, every fd index by the fd table, and every plane and
//! the tensor's extent by the real size of the fd. Any violation is an
//! [`Error::Blob`](crate::Error::Blob) naming the field; nothing panics, and every fd handed to
//! `import` is either kept by the tensor or closed before it returns.
//!
//! # Format (version 1)
//!
//! All integers little-endian. The fixed header:
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | `"HWTB"` |
//! | 4 | 2 | version | 1; another value is refused |
//! | 6 | 2 | header_len | bytes of the fixed header; 168 in v1, larger when a later writer appended fields (a v1 reader skips them) |
//! | 8 | 4 | total_len | bytes of the whole blob, this header included |
//! | 12 | 4 | required | features the reader must understand (bit 0 image, 1 quantization, 2 completion, 3 colorimetry, 4 per-channel quantization, 5 DRM format modifier, 6 sync_file, 7 chroma stride: the second plane record's row stride is the chroma planes' own, 8 plane fds: each plane in an fd of its own, see below); unknown bits make a reader refuse instead of misread |
//! | 16 | 1 | dtype | [`DType`] code |
//! | 17 | 1 | memory | [`TensorMemory`] code of the exporter's buffer |
//! | 18 | 1 | mode | 0 reference, 1 inline |
//! | 19 | 1 | rank | at most 8 |
//! | 20 | 1 | format | [`PixelFormat`](crate::PixelFormat) code, 0 for a plain tensor |
//! | 21 | 1 | access | [`CpuAccess`] the exporter declared |
//! | 22 | 1 | plane_count | at most 4 |
//! | 23 | 1 | fd_count | fds that travel with the blob: 1 in reference mode (2 for GPU or CUDA memory with its fence, or shm or a DMA-BUF with its sync_file; one per plane with bit 8), 0 inline |
//! | 24 | 8 | byte_offset | of the first element in the buffer |
//! | 32 | 8 | buffer_len | bytes of the buffer (at most the fd's size; the inline data length) |
//! | 40 | 8 | width | image width in pixels (0 for a plain tensor) |
//! | 48 | 8 | height | image height in pixels |
//! | 56 | 8 | row_stride | image row stride in bytes |
//! | 64 | 4 | quant_scale | f32, with required bit 1 |
//! | 68 | 4 | quant_zero_point | i32, with required bit 1 |
//! | 72 | 4 | completion_fd | fd-table index of the completion fence (a timeline with bit 2, a sync_file with bit 6), `u32::MAX` for none |
//! | 76 | 4 | quant_channels | per-channel quantization: the channel count, with required bit 4 (else 0) |
//! | 80 | 8 | completion_value | timeline value to wait for, with required bit 2 |
//! | 88 | 4 | colorimetry | an image's colour primaries, transfer, matrix and range codes ([`Colorimetry`](crate::Colorimetry)), with required bit 3 |
//! | 92 | 4 | reserved | 0 |
//! | 96 | 16 | device_uuid | GPU or CUDA memory by reference: the Vulkan deviceUUID of the exporter's GPU; on Windows (a D3D11 texture by handle) the adapter's LUID, LowPart then HighPart, little-endian, the rest 0 (else 0) |
//! | 112 | 16 | driver_uuid | GPU or CUDA memory by reference: the Vulkan driverUUID of the exporter (else 0) |
//! | 128 | 8 | allocation_size | GPU or CUDA memory by reference: bytes of the exported allocation (else 0) |
//! | 136 | 4 | producer_pid | GPU or CUDA memory by reference: the allocating process (else 0) |
//! | 140 | 4 | quant_axis | per-channel quantization: the channel axis, with required bit 4 (else 0) |
//! | 144 | 8 | producer_start | GPU or CUDA memory by reference: that process's start time (else 0) |
//! | 152 | 8 | producer_serial | GPU or CUDA memory by reference: the allocation's serial there (else 0) |
//! | 160 | 8 | producer_semaphore | written 0; early v1 writers put their timeline's handle here, and readers ignore it (a handle value of another process proves nothing: under the validation layer every process has the same ones) |
//!
//! Appended after the v1 table, present only when `header_len` is 176 or more: `168 | 8 |
//! drm_modifier`, an image's DRM format modifier ([`DrmModifier`](crate::DrmModifier)), written
//! with required bit 5 when it is not LINEAR and absent otherwise (a linear image's blob is the
//! 168-byte header, byte for byte as before the field existed).
//!
//! The producer fields name the buffer (its [`BufferIdentity`](crate::BufferIdentity) in every
//! process) and let a receiver find its earlier import of a pooled buffer; the import is
//! reused only when the fd that came is provably the same file as the one it holds (`kcmp`),
//! so a blob that claims another buffer's identity gets nothing of that buffer.
//!
//! # Trust
//!
//! Parsing trusts nothing: hostile bytes get an [`Error::Blob`](crate::Error::Blob). What the
//! fds may be is the `ImportPolicy`'s: shm and DMA-BUF from anyone (a memfd must be sealable,
//! and is sealed before its size is read); GPU memory by reference only from a peer trusted as this process
//! is, because the driver trusts the fd's content (`import` refuses it, `import_with` and
//! `handoff::recv` accept it from a trusted or same-user peer). A
//! completion is waited for on the CPU through the fence that came with it, at most
//! ten seconds, before the tensor is returned.
//!
//! An image whose planes are in separate buffers (V4L2's `NM12`: luma and chroma each in a
//! DMA-BUF of its own; see `Tensor::image_from_planes`) travels by reference with required
//! bit 8: plane `k` is in fd `k` (`fd_count` = `plane_count`, at least 2), its record's offset
//! is where the plane starts in that fd, and the other record fields are what the image
//! implies. Such a blob describes the whole image, linear, with no fence; `byte_offset` is 0
//! and `buffer_len` is the image's extent as if its planes were in one buffer. The receiver maps
//! the fds side by side as `image_from_planes` does (each checked as any import is).
//!
//! GPU memory (and CUDA memory, whose fd is CUDA's POSIX export, imported into the receiver's
//! CUDA context) by reference carries the memory fd at index 0 and, where the exporter's device
//! can export its timeline, the fence fd at index 1 (`completion_fd` = 1) with the value of the
//! tensor's last GPU write. Where it cannot (lavapipe), the exporter waited for that write before
//! writing the blob, and the blob names no fence: a value is never paired with the wrong fence.
//!
//! Then, from `header_len`: `rank` u64 dimensions, `rank` u64 byte strides, `plane_count` plane
//! records of 32 bytes (u32 fd index, u32 reserved, u64 offset in the buffer, u64 row stride,
//! u64 bytes from the plane's first byte to its last), with required bit 4 `quant_channels`
//! pairs of f32 scale and i32 zero point, and in inline mode `buffer_len` bytes of data. A plane's handle is always an index into the fd table, never an fd number.
//!
//! # Example
//!
//! ```
//! use hwtensor::blob::{export_inline, import_inline};
//! use hwtensor::{Tensor, TensorDyn, TensorMemory};
//!
//! let t = Tensor::<u16>::new(&[2, 3], Some(TensorMemory::Mem))?;
//! t.map_write()?.copy_from_slice(&[1, 2, 3, 4, 5, 6]);
//! let bytes = export_inline(&TensorDyn::from(t))?;
//! let back = import_inline(&bytes)?.into_tensor::<u16>()?;
//! assert_eq!(back.to_vec()?, [1, 2, 3, 4, 5, 6]);
//! # Ok::<(), hwtensor::Error>(())
//! ```

#[cfg(target_os = "linux")]
mod reference;
#[cfg(windows)]
pub(crate) mod section;
mod wire;

#[cfg(target_os = "linux")]
pub use reference::{export, import, import_with};

pub use wire::{
    MAGIC, MAX_FDS, MAX_PLANES, MAX_RANK, REQUIRES_CHROMA_STRIDE, REQUIRES_COLORIMETRY,
    REQUIRES_COMPLETION, REQUIRES_DRM_MODIFIER, REQUIRES_IMAGE, REQUIRES_PER_CHANNEL,
    REQUIRES_PLANE_FDS, REQUIRES_QUANTIZATION, REQUIRES_SYNC_FILE, VERSION,
};

use crate::backing::{ForeignHost, Storage};
use crate::buffer::Buffer;
use crate::{CpuAccess, DType, Element, Result, Tensor, TensorDyn, TensorMemory};
use wire::{bad, Described, Outgoing, MODE_INLINE, MODE_REFERENCE};

/// Length of the v1 fixed header.
pub const HEADER_LEN: usize = wire::V1_HEADER_LEN;

/// How the tensor's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// The buffer's fd travels beside the blob (SCM_RIGHTS, inheritance): zero-copy. Linux.
    Reference,
    /// The bytes travel inside the blob: for heap memory, and for crossing machines.
    Inline,
}

/// Writes an inline blob of `tensor`: its description and its bytes. A view whose rows are
/// spread over its parent's (a crop of a padded image) travels packed, as a tight tensor of its
/// own: only the view's bytes, not the padding and the parent's pixels between its rows. Every
/// platform.
pub fn export_inline(tensor: &TensorDyn) -> Result<Vec<u8>> {
    each_tensor!(tensor, t => {
        let packed;
        let t = if is_spread_view(t) {
            packed = t.to_memory(TensorMemory::Mem)?;
            &packed
        } else {
            t
        };
        let map = t.map_span_read()?;
        let bytes = map.as_bytes();
        Outgoing::inline(bytes.len()).write(t, Some(bytes))
    })
}

/// Whether `t` is a view of part of its buffer whose elements are not contiguous.
fn is_spread_view<T: Element>(t: &Tensor<T>) -> bool {
    let part = t.byte_offset() != 0 || t.byte_extent() < t.buffer_len();
    part && !t.is_contiguous()
}

/// Turns an inline blob into a heap tensor holding its bytes. Every platform; hostile bytes
/// get an [`Error::Blob`](crate::Error::Blob) naming the field. A reference blob is refused:
/// its fds are not here (see `import` on Linux).
pub fn import_inline(blob: &[u8]) -> Result<TensorDyn> {
    let d = Described::read(blob)?;
    match d.inline {
        Some(data) => d.tensor(inline_buffer(data)?),
        None => Err(bad(
            "a reference blob names fds, and only an import with its fds can take it",
        )),
    }
}

/// [`import_inline`] without copying the bytes: the tensor is read-only memory inside `blob`,
/// which it keeps until its last view goes (a network receive buffer, say). Where the data
/// does not sit at an address its element type can be read at, they are copied after all.
/// `blob`'s bytes must stay where they are while it lives unchanged (as a `Vec`'s, a boxed
/// slice's or a shared byte buffer's do).
// One unsafe step: the blob's bytes read through a pointer while the box that owns them moves
// into the buffer (the heap bytes themselves do not move).
#[allow(unsafe_code)]
pub fn import_inline_from<B>(blob: B) -> Result<TensorDyn>
where
    B: AsRef<[u8]> + Send + Sync + 'static,
{
    let blob = Box::new(blob);
    let whole = (*blob).as_ref();
    let (at, len) = (whole.as_ptr(), whole.len());
    // SAFETY: the bytes belong to `blob`, which is boxed (never moves), owned from here on by
    // this function and then by the buffer, and never used mutably: they stay valid and
    // unchanged until the buffer drops it, after every use of this slice.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(at, len) };
    let d = Described::read(bytes)?;
    let Some(data) = d.inline else {
        return Err(bad(
            "a reference blob names fds, and only an import with its fds can take it",
        ));
    };
    if !(data.as_ptr() as usize).is_multiple_of(d.dtype.size()) {
        return d.tensor(inline_buffer(data)?);
    }
    // SAFETY: as above: the data lie inside `blob`, which the buffer keeps; lent read-only.
    let host = unsafe { ForeignHost::new(data.as_ptr().cast_mut(), data.len(), false, blob) }?;
    d.tensor(Buffer::new(Storage::Foreign(host))?)
}

/// Reads the length a blob claims from its first bytes, for a reader of a stream: `None` until
/// the first 12 bytes are there. The claim is checked only when the whole blob is imported.
pub fn claimed_len(prefix: &[u8]) -> Option<usize> {
    let f = wire::F_TOTAL_LEN;
    let bytes: [u8; 4] = prefix.get(f.at..f.at + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes) as usize)
}

/// Reads how a blob's bytes travel from its first bytes, for a reader of a stream: `None`
/// until the mode byte is there, or when it is not a mode this reader knows.
pub fn claimed_transport(prefix: &[u8]) -> Option<Transport> {
    match *prefix.get(wire::F_MODE.at)? {
        MODE_REFERENCE => Some(Transport::Reference),
        MODE_INLINE => Some(Transport::Inline),
        _ => None,
    }
}

/// Whether a blob's header says it is GPU or CUDA memory by reference (what only a trusted
/// peer may send), for a receiver deciding whom to trust before it imports.
pub fn claims_gpu_reference(header: &[u8]) -> bool {
    let device_memory = [TensorMemory::Gpu.code(), TensorMemory::Cuda.code()];
    claimed_transport(header) == Some(Transport::Reference)
        && header
            .get(wire::F_MEMORY.at)
            .is_some_and(|m| device_memory.contains(m))
}

impl Described<'_> {
    /// The tensor the blob describes, over `buffer`.
    fn tensor(self, buffer: Buffer) -> Result<TensorDyn> {
        for_dtype!(self.dtype, from_parts(buffer, self.parts))
    }

    /// The tensor the blob describes, over `buffer` with its first byte at `offset` (an image
    /// whose planes the receiver mapped side by side, starting where the first plane's fd
    /// offset puts it in a page).
    #[cfg(target_os = "linux")]
    fn tensor_at(self, buffer: Buffer, offset: usize) -> Result<TensorDyn> {
        let parts = self.parts.moved_to(offset, buffer.len())?;
        for_dtype!(self.dtype, from_parts(buffer, parts))
    }
}

fn inline_buffer(data: &[u8]) -> Result<Buffer> {
    let buffer = Buffer::allocate(TensorMemory::Mem, data.len(), None, true)?;
    let bytes = Tensor::<u8>::over(
        buffer.clone(),
        vec![data.len()],
        vec![1],
        None,
        CpuAccess::ReadWrite,
    );
    bytes.map_write()?.copy_from_slice(data);
    Ok(buffer)
}
