//! The blob: a versioned, size-prefixed, little-endian description of a tensor that travels
//! with its fds (reference mode, Linux) or with its bytes (inline mode, every platform).
//!
//! The wire format (`wire.rs`: the header's field table, the checked reader and writer) imports
//! nothing from a device backend and compiles everywhere: [`export_inline`] and
//! [`import_inline`] are the inline transport on every platform. Only the fd path
//! (`reference.rs`: `export`, `import`, `import_with`) is Linux-only; the GPU section of a
//! reference blob is written and read by the GPU backend through two hooks (describe a buffer;
//! accept a peer's description and fence).
//!
//! A blob arrives from another process, and that process may be buggy or hostile. Parsing is
//! therefore total: every length and offset is bounded by the bytes present, every count by a
//! small maximum, every code by its enum, every fd index by the fd table, and every plane and
//! the tensor's extent by the real size of the fd. Any violation is an [`Error::Blob`] naming the
//! field; nothing panics, and every fd handed to `import` is either kept by the tensor or
//! closed before it returns.
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
//! Parsing trusts nothing: hostile bytes get an [`Error::Blob`]. What the fds may be is the
//! `ImportPolicy`'s: shm and DMA-BUF from anyone (a memfd must be sealable, and is sealed
//! before its size is read); GPU memory by reference only from a peer trusted as this process
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

use crate::backing::{ForeignHost, Storage};
use crate::buffer::Buffer;
use crate::image::ImageInfo;
use crate::tensor::{CheckedParts, Parts};
use crate::{
    CpuAccess, DType, Element, Error, Quantization, Result, Tensor, TensorDyn, TensorMemory,
};
use wire::{Cursor, GpuFields, Header, PlaneRecord, MODIFIER_HEADER_LEN, NO_FENCE, PLANE_LEN};

/// First four bytes of every blob.
pub const MAGIC: [u8; 4] = *b"HWTB";
/// The version this reader understands and this writer writes.
pub const VERSION: u16 = 1;
/// Length of the v1 fixed header.
pub const HEADER_LEN: usize = wire::V1_HEADER_LEN;
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
/// Bytes of one per-channel pair: f32 scale, i32 zero point.
const CHANNEL_LEN: usize = 8;

/// `mode` of a reference blob.
const MODE_REFERENCE: u8 = 0;
/// `mode` of an inline blob.
const MODE_INLINE: u8 = 1;

/// How the tensor's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// The buffer's fd travels beside the blob (SCM_RIGHTS, inheritance): zero-copy. Linux.
    Reference,
    /// The bytes travel inside the blob: for heap memory, and for crossing machines.
    Inline,
}

fn bad(what: impl Into<String>) -> Error {
    Error::Blob(what.into())
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
/// get an [`Error::Blob`] naming the field. A reference blob is refused: its fds are not here
/// (see `import` on Linux).
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

/// What a writer knows besides the tensor: how its bytes travel.
struct Outgoing {
    mode: u8,
    byte_offset: usize,
    buffer_len: usize,
    fd_count: usize,
    gpu: GpuFields,
    /// The timeline value the reader waits for, through fd 1.
    completion: Option<u64>,
    /// fd 1 is a sync_file the reader waits for.
    sync_file: bool,
    /// An image with an fd per plane: where each plane starts in its fd (required bit 8).
    plane_offsets: Option<Vec<usize>>,
}

impl Outgoing {
    /// A reference blob of `t`'s buffer with one fd or handle beside it (the device memory's
    /// fence, where there is one, is the caller's to add).
    fn reference<T: Element>(t: &Tensor<T>) -> Outgoing {
        Outgoing {
            mode: MODE_REFERENCE,
            byte_offset: t.byte_offset(),
            buffer_len: t.buffer_len(),
            fd_count: 1,
            gpu: GpuFields::default(),
            completion: None,
            sync_file: false,
            plane_offsets: None,
        }
    }

    /// An inline blob of `len` bytes of data.
    fn inline(len: usize) -> Outgoing {
        Outgoing {
            mode: MODE_INLINE,
            byte_offset: 0,
            buffer_len: len,
            fd_count: 0,
            gpu: GpuFields::default(),
            completion: None,
            sync_file: false,
            plane_offsets: None,
        }
    }

    /// The blob of `t` sent this way, followed by `data` inline.
    fn write<T: Element>(&self, t: &Tensor<T>, data: Option<&[u8]>) -> Result<Vec<u8>> {
        let mut planes = plane_records(t, self.byte_offset)?;
        if let Some(offsets) = &self.plane_offsets {
            for (k, (p, &offset)) in planes.iter_mut().zip(offsets).enumerate() {
                p.fd_index = k as u32;
                p.offset = offset as u64;
            }
        }
        let info = t.image_info().copied();
        let quant = t.quantization();
        let tiled = info.is_some_and(|i| !i.modifier.is_linear());
        let header_len = if tiled {
            MODIFIER_HEADER_LEN
        } else {
            HEADER_LEN
        };
        let mut required = 0;
        for (present, bit) in [
            (self.completion.is_some(), REQUIRES_COMPLETION),
            (self.sync_file, REQUIRES_SYNC_FILE),
            (info.is_some(), REQUIRES_IMAGE),
            (quant.is_some(), REQUIRES_QUANTIZATION),
            (
                quant.as_ref().is_some_and(|q| q.channels.is_some()),
                REQUIRES_PER_CHANNEL,
            ),
            (
                info.is_some_and(|i| i.colorimetry.is_specified()),
                REQUIRES_COLORIMETRY,
            ),
            (tiled, REQUIRES_DRM_MODIFIER),
            (
                info.is_some_and(|i| i.chroma_stride.is_some()),
                REQUIRES_CHROMA_STRIDE,
            ),
            (self.plane_offsets.is_some(), REQUIRES_PLANE_FDS),
        ] {
            if present {
                required |= bit;
            }
        }
        let rank = t.shape().len();
        let channels = quant.as_ref().and_then(|q| q.channels.as_ref());
        let channel_count = channels.map_or(0, |c| c.scales.len());
        let total = header_len
            + 2 * 8 * rank
            + PLANE_LEN * planes.len()
            + CHANNEL_LEN * channel_count
            + data.map_or(0, <[u8]>::len);
        if u32::try_from(total).is_err() {
            return Err(bad(format!(
                "a {total}-byte blob is past the 4 GiB format limit"
            )));
        }
        let q = quant
            .clone()
            .unwrap_or_else(|| Quantization::per_tensor(0.0, 0));
        let header = Header {
            header_len,
            total_len: total,
            required,
            dtype: T::DTYPE.code(),
            memory: t.memory().code(),
            mode: self.mode,
            rank,
            format: info.map_or(0, |i| i.format.code()),
            access: t.access() as u8,
            plane_count: planes.len(),
            fd_count: self.fd_count,
            byte_offset: self.byte_offset as u64,
            buffer_len: self.buffer_len as u64,
            width: info.map_or(0, |i| i.width as u64),
            height: info.map_or(0, |i| i.height as u64),
            colorimetry: info.map_or([0; 4], |i| i.colorimetry.codes()),
            row_stride: info.map_or(0, |i| i.row_stride as u64),
            quant_scale: q.scale,
            quant_zero_point: q.zero_point,
            quant_channels: channel_count as u32,
            quant_axis: channels.map_or(0, |c| c.axis as u32),
            completion_fd: match self.completion.is_some() || self.sync_file {
                true => 1,
                false => NO_FENCE,
            },
            completion_value: self.completion.unwrap_or(0),
            gpu: self.gpu,
            drm_modifier: info.map_or(0, |i| i.modifier.0),
        };
        let mut b = Vec::with_capacity(total);
        header.write_into(&mut b);
        for v in t.shape().iter().chain(t.strides()) {
            b.extend_from_slice(&(*v as u64).to_le_bytes());
        }
        for p in &planes {
            p.write(&mut b);
        }
        if let Some(c) = channels {
            for (s, z) in c.scales.iter().zip(&c.zero_points) {
                b.extend_from_slice(&s.to_le_bytes());
                b.extend_from_slice(&z.to_le_bytes());
            }
        }
        if let Some(data) = data {
            b.extend_from_slice(data);
        }
        debug_assert_eq!(b.len(), total);
        Ok(b)
    }
}

/// The plane records of a tensor whose first element sits at `byte_offset` of the buffer: the
/// image's planes, or one plane spanning a plain tensor.
fn plane_records<T: Element>(t: &Tensor<T>, byte_offset: usize) -> Result<Vec<PlaneRecord>> {
    match t.image_info().copied() {
        Some(info) => plane_records_of(&info, T::DTYPE.size(), byte_offset),
        None => Ok(vec![PlaneRecord {
            fd_index: 0,
            offset: byte_offset as u64,
            row_stride: 0,
            size: t.byte_extent() as u64,
        }]),
    }
}

/// The plane records an image implies: what the writer writes and what the reader demands.
fn plane_records_of(info: &ImageInfo, elem: usize, byte_offset: usize) -> Result<Vec<PlaneRecord>> {
    let planes = info.planes()?;
    let overflow = || bad("plane geometry overflows");
    planes
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let row = info
                .format
                .plane_row_bytes(info.width, elem, k)
                .ok_or_else(overflow)?;
            let size = match p.rows {
                0 => 0,
                rows => (rows - 1)
                    .checked_mul(p.row_stride)
                    .and_then(|s| s.checked_add(row))
                    .ok_or_else(overflow)?,
            };
            let offset = p.offset.checked_add(byte_offset).ok_or_else(overflow)?;
            Ok(PlaneRecord {
                fd_index: 0,
                offset: offset as u64,
                row_stride: p.row_stride as u64,
                size: size as u64,
            })
        })
        .collect()
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

/// Sets `image`'s chroma stride from the second plane record, as required bit 7 says: one the
/// format has room for, and not the one it derives (the bit would then say nothing).
fn chroma_stride_of(
    image: Option<&mut ImageInfo>,
    planes: &[PlaneRecord],
    dtype: DType,
) -> Result<()> {
    let (Some(info), Some(record)) = (image, planes.get(1)) else {
        return Err(bad(
            "the chroma stride bit on a tensor without chroma planes",
        ));
    };
    let chroma = wire::to_usize(record.row_stride, "the chroma planes' row_stride")?;
    info.chroma_stride = crate::image::check_chroma_stride(
        info.format,
        info.width,
        dtype.size(),
        info.row_stride,
        chroma,
    )
    .map_err(|e| bad(format!("chroma stride: {e}")))?;
    match info.chroma_stride {
        Some(_) => Ok(()),
        None => Err(bad(
            "the chroma stride bit with the chroma stride the format derives",
        )),
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

/// Everything a blob says, read and checked before anything is imported or waited for.
// The header, memory and length are what the fd and handle paths go on with.
struct Described<'a> {
    header: Header,
    dtype: DType,
    memory: TensorMemory,
    buffer_len: usize,
    parts: CheckedParts,
    /// Where each plane starts in its fd, for a blob with an fd per plane (required bit 8).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    plane_offsets: Vec<usize>,
    /// The data of an inline blob; `None` for a reference blob.
    inline: Option<&'a [u8]>,
}

impl<'a> Described<'a> {
    fn read(blob: &'a [u8]) -> Result<Described<'a>> {
        let h = Header::read(blob)?;
        let mut c = Cursor { bytes: blob, at: 0 };
        c.take(h.header_len, "the fixed header")?;
        let shape = (0..h.rank)
            .map(|_| c.usize("a dimension"))
            .collect::<Result<Vec<_>>>()?;
        let strides = (0..h.rank)
            .map(|_| c.usize("a stride"))
            .collect::<Result<Vec<_>>>()?;
        let planes = (0..h.plane_count)
            .map(|_| c.plane())
            .collect::<Result<Vec<_>>>()?;
        let dtype = DType::from_code(h.dtype)
            .ok_or_else(|| bad(format!("unknown dtype code {}", h.dtype)))?;
        let memory = TensorMemory::from_code(h.memory)
            .ok_or_else(|| bad(format!("unknown memory code {}", h.memory)))?;
        let access = access_from_code(h.access)?;
        let byte_offset = wire::to_usize(h.byte_offset, "byte_offset")?;
        let buffer_len = wire::to_usize(h.buffer_len, "buffer_len")?;
        let mut image = h.image_info()?;
        if h.required & REQUIRES_CHROMA_STRIDE != 0 {
            chroma_stride_of(image.as_mut(), &planes, dtype)?;
        }
        let quantization = read_quantization(&h, &mut c)?;
        if let Some(q) = &quantization {
            q.check(dtype)
                .map_err(|e| bad(format!("quantization: {e}")))?;
        }
        let has_fence = h.required & REQUIRES_COMPLETION != 0;
        let device_memory = matches!(memory, TensorMemory::Gpu | TensorMemory::Cuda);
        if has_fence && (h.completion_fd != 1 || !device_memory || h.mode != MODE_REFERENCE) {
            return Err(bad(format!(
                "a completion fence must be fd 1 of GPU or CUDA memory sent by reference (fd index {})",
                h.completion_fd
            )));
        }
        let has_sync_file = h.required & REQUIRES_SYNC_FILE != 0;
        if has_sync_file
            && (h.completion_fd != 1 || device_memory || has_fence || h.mode != MODE_REFERENCE)
        {
            return Err(bad(format!(
                "a sync_file must be fd 1 of shared memory or a DMA-BUF sent by reference, \
                 without a timeline completion (fd index {})",
                h.completion_fd
            )));
        }
        let plane_fds = h.required & REQUIRES_PLANE_FDS != 0;
        let expected = expected_planes(image.as_ref(), dtype, byte_offset, &shape, &strides)?;
        let plane_offsets = match plane_fds {
            true => check_plane_fds(&planes, &expected, buffer_len)?,
            false => {
                check_planes(&planes, &expected, buffer_len)?;
                Vec::new()
            }
        };
        let parts = Parts {
            offset: byte_offset,
            shape,
            strides,
            image,
            access,
            quantization,
        }
        .check(dtype.size(), buffer_len)?;
        let inline = match h.mode {
            MODE_REFERENCE => None,
            MODE_INLINE => {
                if h.fd_count != 0 {
                    return Err(bad(format!("an inline blob names {} fds", h.fd_count)));
                }
                Some(c.take(buffer_len, "the inline data")?)
            }
            m => return Err(bad(format!("unknown transport mode {m}"))),
        };
        if c.at != blob.len() {
            return Err(bad(format!(
                "{} bytes follow the last field",
                blob.len() - c.at
            )));
        }
        Ok(Described {
            header: h,
            dtype,
            memory,
            buffer_len,
            parts,
            plane_offsets,
            inline,
        })
    }

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

/// The quantization the header says, with the per-channel pairs read from `c`.
fn read_quantization(h: &Header, c: &mut Cursor<'_>) -> Result<Option<Quantization>> {
    if h.required & REQUIRES_QUANTIZATION == 0 {
        return Ok(None);
    }
    if h.required & REQUIRES_PER_CHANNEL == 0 {
        return Ok(Some(Quantization::per_tensor(
            h.quant_scale,
            h.quant_zero_point,
        )));
    }
    let count = h.quant_channels as usize; // bounded by the header check
    let bytes = c.take(count * CHANNEL_LEN, "the per-channel quantization")?;
    let word = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&bytes[at..at + 4]);
        w
    };
    let (scales, zero_points) = (0..count)
        .map(|i| {
            let at = i * CHANNEL_LEN;
            (
                f32::from_le_bytes(word(at)),
                i32::from_le_bytes(word(at + 4)),
            )
        })
        .unzip();
    Quantization::per_channel(h.quant_axis as usize, scales, zero_points)
        .map(Some)
        .map_err(|e| bad(format!("quantization: {e}")))
}

fn access_from_code(code: u8) -> Result<CpuAccess> {
    [
        CpuAccess::None,
        CpuAccess::Read,
        CpuAccess::Write,
        CpuAccess::ReadWrite,
    ]
    .into_iter()
    .find(|a| *a as u8 == code)
    .ok_or_else(|| bad(format!("unknown CPU access code {code}")))
}

/// The plane records the tensor implies: the image's planes, or one plane spanning a plain
/// tensor, all in fd 0 of one buffer with the first element at `byte_offset`.
fn expected_planes(
    image: Option<&ImageInfo>,
    dtype: DType,
    byte_offset: usize,
    shape: &[usize],
    strides: &[usize],
) -> Result<Vec<PlaneRecord>> {
    match image {
        Some(info) => plane_records_of(info, dtype.size(), byte_offset),
        None => {
            let extent = crate::geometry::extent(shape, strides, dtype.size())
                .map_err(|_| bad("the tensor's extent overflows"))?;
            Ok(vec![PlaneRecord {
                fd_index: 0,
                offset: byte_offset as u64,
                row_stride: 0,
                size: extent as u64,
            }])
        }
    }
}

/// The planes must be exactly what the tensor implies, all in the one buffer, inside it.
fn check_planes(planes: &[PlaneRecord], expected: &[PlaneRecord], buffer_len: usize) -> Result<()> {
    if planes.iter().any(|p| p.fd_index != 0) {
        return Err(bad(
            "a plane names an fd other than the first without the plane fds bit",
        ));
    }
    if planes != expected {
        return Err(bad(format!(
            "the plane table {planes:?} disagrees with the tensor, which implies {expected:?}"
        )));
    }
    for p in planes {
        if p.offset
            .checked_add(p.size)
            .is_none_or(|end| end > buffer_len as u64)
        {
            return Err(bad(format!(
                "a plane at {} of {} bytes runs past the {buffer_len}-byte buffer",
                p.offset, p.size
            )));
        }
    }
    Ok(())
}

/// Bytes from an image's first byte to the end of its last plane, were its planes in one
/// buffer: the `buffer_len` of a blob with an fd per plane.
fn one_buffer_extent(records: &[PlaneRecord]) -> u64 {
    records.iter().map(|p| p.offset + p.size).max().unwrap_or(0)
}

/// With an fd per plane (required bit 8): plane `k` in fd `k`, each with the row stride and
/// size the image implies, at any offset of its fd (the fd's size is checked when it is
/// mapped), and `buffer_len` the image's one-buffer extent. Where each plane starts in its fd.
fn check_plane_fds(
    planes: &[PlaneRecord],
    expected: &[PlaneRecord],
    buffer_len: usize,
) -> Result<Vec<usize>> {
    let extent = one_buffer_extent(expected);
    if buffer_len as u64 != extent {
        return Err(bad(format!(
            "buffer_len {buffer_len} of an image with an fd per plane, which spans {extent} bytes"
        )));
    }
    if planes.len() != expected.len() {
        return Err(bad(format!(
            "{} plane records for an image of {} planes",
            planes.len(),
            expected.len()
        )));
    }
    planes
        .iter()
        .zip(expected)
        .enumerate()
        .map(|(k, (p, e))| {
            if p.fd_index as usize != k {
                return Err(bad(format!(
                    "plane {k} names fd {}; with the plane fds bit plane k is in fd k",
                    p.fd_index
                )));
            }
            if (p.row_stride, p.size) != (e.row_stride, e.size) {
                return Err(bad(format!(
                    "plane {k}'s record {p:?} disagrees with the image, which implies a \
                     {}-byte row stride and {} bytes",
                    e.row_stride, e.size
                )));
            }
            wire::to_usize(p.offset, "a plane's offset in its fd")
        })
        .collect()
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
