//! The blob: a versioned, size-prefixed, little-endian description of a tensor that travels
//! with its fds (reference mode) or with its bytes (inline mode).
//!
//! A blob arrives from another process, and that process may be buggy or hostile. Parsing is
//! therefore total: every length and offset is bounded by the bytes present, every count by a
//! small maximum, every code by its enum, every fd index by the fd table, and every plane and
//! the tensor's extent by the real size of the fd. Any violation is an [`Error::Blob`] naming the
//! field; nothing panics, and every fd handed to [`import`] is either kept by the tensor or
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
//! | 12 | 4 | required | features the reader must understand (bit 0 image, 1 quantization, 2 completion); unknown bits make a reader refuse instead of misread |
//! | 16 | 1 | dtype | [`DType`] code |
//! | 17 | 1 | memory | [`TensorMemory`] code of the exporter's buffer |
//! | 18 | 1 | mode | 0 reference, 1 inline |
//! | 19 | 1 | rank | at most 8 |
//! | 20 | 1 | format | [`PixelFormat`] code, 0 for a plain tensor |
//! | 21 | 1 | access | [`CpuAccess`] the exporter declared |
//! | 22 | 1 | plane_count | at most 4 |
//! | 23 | 1 | fd_count | fds that travel with the blob: 1 in reference mode (2 for GPU memory with its fence), 0 inline |
//! | 24 | 8 | byte_offset | of the first element in the buffer |
//! | 32 | 8 | buffer_len | bytes of the buffer (at most the fd's size; the inline data length) |
//! | 40 | 8 | width | image width in pixels (0 for a plain tensor) |
//! | 48 | 8 | height | image height in pixels |
//! | 56 | 8 | row_stride | image row stride in bytes |
//! | 64 | 4 | quant_scale | f32, with required bit 1 |
//! | 68 | 4 | quant_zero_point | i32, with required bit 1 |
//! | 72 | 4 | completion_fd | fd-table index of the completion fence, `u32::MAX` for none |
//! | 76 | 4 | reserved | 0 |
//! | 80 | 8 | completion_value | timeline value to wait for, with required bit 2 |
//! | 88 | 8 | reserved | 0 |
//! | 96 | 16 | device_uuid | GPU memory by reference: the Vulkan deviceUUID of the exporter (else 0) |
//! | 112 | 16 | driver_uuid | GPU memory by reference: the driverUUID of the exporter (else 0) |
//! | 128 | 8 | allocation_size | GPU memory by reference: bytes of the exported allocation (else 0) |
//! | 136 | 4 | producer_pid | GPU memory by reference: the allocating process (else 0) |
//! | 140 | 4 | reserved | 0 |
//! | 144 | 8 | producer_start | GPU memory by reference: that process's start time (else 0) |
//! | 152 | 8 | producer_serial | GPU memory by reference: the allocation's serial there (else 0) |
//! | 160 | 8 | producer_semaphore | written 0; early v1 writers put their timeline's handle here, and readers ignore it (a handle value of another process proves nothing: under the validation layer every process has the same ones) |
//!
//! The producer fields name the buffer (its [`BufferIdentity`](crate::BufferIdentity) in every
//! process) and let a receiver find its earlier import of a pooled buffer; the import is
//! reused only when the fd that came is provably the same file as the one it holds (`kcmp`),
//! so a blob that claims another buffer's identity gets nothing of that buffer.
//!
//! # Trust
//!
//! Parsing trusts nothing: hostile bytes get an [`Error::Blob`]. What the fds may be is the
//! [`ImportPolicy`]'s: shm and DMA-BUF from anyone (a memfd must be sealable, and is sealed
//! before its size is read); GPU memory by reference only from a peer trusted as this process
//! is, because the driver trusts the fd's content ([`import`] refuses it, [`import_with`] and
//! [`handoff::recv`](crate::handoff::recv) accept it from a trusted or same-user peer). A
//! completion is waited for on the CPU through the fence that came with it, at most
//! ten seconds, before the tensor is returned.
//!
//! GPU memory by reference carries the memory fd at index 0 and, where the exporter's device
//! can export its timeline, the fence fd at index 1 (`completion_fd` = 1) with the value of the
//! tensor's last GPU write. Where it cannot (lavapipe), the exporter waited for that write before
//! writing the blob, and the blob names no fence: a value is never paired with the wrong fence.
//!
//! Then, from `header_len`: `rank` u64 dimensions, `rank` u64 byte strides, `plane_count` plane
//! records of 32 bytes (u32 fd index, u32 reserved, u64 offset in the buffer, u64 row stride,
//! u64 bytes from the plane's first byte to its last), and in inline mode `buffer_len` bytes of
//! data. A plane's handle is always an index into the fd table, never an fd number.
//!
//! # Example
//!
//! ```
//! use hwtensor::blob::{export, import, Transport};
//! use hwtensor::{Tensor, TensorDyn, TensorMemory};
//!
//! let t = Tensor::<u16>::new(&[2, 3], Some(TensorMemory::Mem))?;
//! t.map_write()?.copy_from_slice(&[1, 2, 3, 4, 5, 6]);
//! let t: TensorDyn = t.into();
//! let (bytes, fds) = export(&t, Transport::Inline)?;
//! assert!(fds.is_empty());
//! let back = import(&bytes, vec![])?.into_tensor::<u16>().unwrap();
//! assert_eq!(back.to_vec()?, [1, 2, 3, 4, 5, 6]);
//! # Ok::<(), hwtensor::Error>(())
//! ```

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::backing::Storage;
use crate::buffer::Buffer;
use crate::gpu::format_uuid;
use crate::gpu::memory::{GpuMemory, GpuOrigin, GPU_WAIT};
use crate::image::ImageInfo;
use crate::os::same_file;
use crate::tensor::Parts;
use crate::{
    CpuAccess, DType, Element, Error, ImportPolicy, PixelFormat, Quantization, Result, Tensor,
    TensorDyn, TensorMemory,
};

/// First four bytes of every blob.
pub const MAGIC: [u8; 4] = *b"HWTB";
/// The version this reader understands and this writer writes.
pub const VERSION: u16 = 1;
/// Length of the v1 fixed header.
pub const HEADER_LEN: usize = 168;
/// Most dimensions a blob may describe: batched planar images need 4; 8 leaves room.
pub const MAX_RANK: usize = 8;
/// Most planes (planar RGBA has 4).
pub const MAX_PLANES: usize = 4;
/// Most fds one blob may carry (one per plane).
pub const MAX_FDS: usize = MAX_PLANES;
/// Bytes of one plane record.
const PLANE_LEN: usize = 32;
/// Offset of the `memory` byte in the header.
const MEMORY_AT: usize = 17;
/// Offset of the `mode` byte in the header.
const MODE_AT: usize = 18;

/// `required` bit: the blob describes an image.
pub const REQUIRES_IMAGE: u32 = 1 << 0;
/// `required` bit: the blob carries quantization parameters.
pub const REQUIRES_QUANTIZATION: u32 = 1 << 1;
/// `required` bit: the tensor may be read only after a completion fence signals.
pub const REQUIRES_COMPLETION: u32 = 1 << 2;
/// Every `required` bit this reader understands.
const KNOWN_REQUIREMENTS: u32 = REQUIRES_IMAGE | REQUIRES_QUANTIZATION | REQUIRES_COMPLETION;

/// How the tensor's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The buffer's fd travels beside the blob (SCM_RIGHTS, inheritance): zero-copy.
    Reference,
    /// The bytes travel inside the blob: for heap memory, and for crossing machines.
    Inline,
}

/// The fixed header, as read.
#[derive(Debug, Default)]
struct Header {
    header_len: usize,
    total_len: usize,
    required: u32,
    dtype: u8,
    memory: u8,
    mode: u8,
    rank: usize,
    format: u8,
    access: u8,
    plane_count: usize,
    fd_count: usize,
    byte_offset: u64,
    buffer_len: u64,
    width: u64,
    height: u64,
    row_stride: u64,
    quant_scale: f32,
    quant_zero_point: i32,
    completion_fd: u32,
    completion_value: u64,
    device_uuid: [u8; 16],
    driver_uuid: [u8; 16],
    allocation_size: u64,
    producer: GpuOrigin,
    producer_semaphore: u64,
}

/// What a GPU tensor sent by reference adds to the header.
#[derive(Default)]
struct GpuSection {
    device_uuid: [u8; 16],
    driver_uuid: [u8; 16],
    allocation_size: u64,
    producer: GpuOrigin,
    producer_semaphore: u64,
    /// `(fd index, value)` of the completion fence.
    completion: Option<(u32, u64)>,
}

/// One plane record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PlaneRecord {
    fd_index: u32,
    offset: u64,
    row_stride: u64,
    size: u64,
}

fn bad(what: impl Into<String>) -> Error {
    Error::Blob(what.into())
}

/// Writes the blob that describes `tensor`, and the fds that must travel with it (borrowed from
/// the tensor: send them before it is dropped).
pub fn export(tensor: &TensorDyn, mode: Transport) -> Result<(Vec<u8>, Vec<BorrowedFd<'_>>)> {
    each_tensor!(tensor, t => export_typed(t, mode))
}

fn export_typed<T: Element>(
    t: &Tensor<T>,
    mode: Transport,
) -> Result<(Vec<u8>, Vec<BorrowedFd<'_>>)> {
    let extent = t.byte_extent();
    let mut gpu = GpuSection::default();
    let (mut fds, inline, byte_offset, buffer_len) = match mode {
        Transport::Reference => {
            let fd = t.as_fd().ok_or_else(|| Error::Unavailable {
                memory: t.memory(),
                reason: "this memory has no fd to send by reference; export it inline, or allocate it on shm".into(),
            })?;
            (vec![fd], None, t.byte_offset(), t.buffer_len())
        }
        Transport::Inline => {
            let map = t.map_read()?;
            (vec![], Some(map.as_bytes().to_vec()), 0, extent)
        }
    };
    if let (Transport::Reference, Some(mem)) = (mode, t.buffer.gpu()) {
        gpu = gpu_section(mem)?;
        if let Some(fence) = gpu.completion.and_then(|_| mem.device().fence_fd()) {
            fds.push(fence);
        }
    }
    let planes = plane_records(t, byte_offset)?;
    let mut required = 0;
    if gpu.completion.is_some() {
        required |= REQUIRES_COMPLETION;
    }
    let info = t.image_info().copied();
    if info.is_some() {
        required |= REQUIRES_IMAGE;
    }
    let quant = t.quantization();
    if quant.is_some() {
        required |= REQUIRES_QUANTIZATION;
    }
    let rank = t.shape().len();
    let arrays = 2 * 8 * rank + PLANE_LEN * planes.len();
    let total = HEADER_LEN + arrays + inline.as_ref().map_or(0, Vec::len);
    let total_len = u32::try_from(total).map_err(|_| {
        bad(format!(
            "a {total}-byte blob is past the 4 GiB format limit"
        ))
    })?;

    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    b.extend_from_slice(&total_len.to_le_bytes());
    b.extend_from_slice(&required.to_le_bytes());
    b.extend_from_slice(&[
        T::DTYPE.code(),
        t.memory().code(),
        (mode == Transport::Inline) as u8,
        rank as u8,
        info.map_or(0, |i| i.format.code()),
        t.access() as u8,
        planes.len() as u8,
        fds.len() as u8,
    ]);
    for v in [byte_offset, buffer_len] {
        b.extend_from_slice(&(v as u64).to_le_bytes());
    }
    for v in info.map_or([0; 3], |i| [i.width, i.height, i.row_stride]) {
        b.extend_from_slice(&(v as u64).to_le_bytes());
    }
    let q = quant.unwrap_or(Quantization {
        scale: 0.0,
        zero_point: 0,
    });
    b.extend_from_slice(&q.scale.to_le_bytes());
    b.extend_from_slice(&q.zero_point.to_le_bytes());
    let (fence_index, value) = gpu.completion.unwrap_or((u32::MAX, 0));
    b.extend_from_slice(&fence_index.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&value.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&gpu.device_uuid);
    b.extend_from_slice(&gpu.driver_uuid);
    b.extend_from_slice(&gpu.allocation_size.to_le_bytes());
    b.extend_from_slice(&gpu.producer.pid.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    for v in [
        gpu.producer.start_time,
        gpu.producer.serial,
        gpu.producer_semaphore,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    debug_assert_eq!(b.len(), HEADER_LEN);
    for v in t.shape().iter().chain(t.strides()) {
        b.extend_from_slice(&(*v as u64).to_le_bytes());
    }
    for p in &planes {
        b.extend_from_slice(&p.fd_index.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [p.offset, p.row_stride, p.size] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    if let Some(data) = inline {
        b.extend_from_slice(&data);
    }
    debug_assert_eq!(b.len(), total);
    Ok((b, fds))
}

/// The GPU fields of a GPU tensor sent by reference. Where the device cannot export its fence,
/// waits for the tensor's last GPU write first, so the receiver reads finished bytes.
fn gpu_section(mem: &GpuMemory) -> Result<GpuSection> {
    let device = mem.device();
    let last = mem.last_write();
    let completion = if device.fence_fd().is_some() {
        Some((1, last))
    } else {
        device.wait(last, crate::gpu::memory::GPU_WAIT)?;
        None
    };
    Ok(GpuSection {
        device_uuid: device.device_uuid(),
        driver_uuid: device.driver_uuid(),
        allocation_size: mem.allocation_size(),
        producer: mem.origin(),
        producer_semaphore: 0,
        completion,
    })
}

/// The plane records of a tensor whose first element sits at `byte_offset` of the buffer: the
/// image's planes, or one plane spanning a plain tensor.
fn plane_records<T: Element>(t: &Tensor<T>, byte_offset: usize) -> Result<Vec<PlaneRecord>> {
    let elem = T::DTYPE.size();
    let Some(info) = t.image_info().copied() else {
        return Ok(vec![PlaneRecord {
            fd_index: 0,
            offset: byte_offset as u64,
            row_stride: 0,
            size: t.byte_extent() as u64,
        }]);
    };
    plane_records_of(&info, elem, byte_offset)
}

/// The plane records an image implies: what the writer writes and what the reader demands.
fn plane_records_of(info: &ImageInfo, elem: usize, byte_offset: usize) -> Result<Vec<PlaneRecord>> {
    let planes = info
        .format
        .plane_table(info.width, info.height, info.row_stride)?;
    let luma_row = info
        .format
        .min_row_bytes(info.width, elem)
        .ok_or_else(|| bad("row size overflows"))?;
    let overflow = || bad("plane geometry overflows");
    planes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // NV24 chroma rows carry two bytes per pixel; every other plane row is the luma row.
            let row = if info.format == PixelFormat::Nv24 && i == 1 {
                luma_row.checked_mul(2).ok_or_else(overflow)?
            } else {
                luma_row
            };
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

/// A bounds-checked little-endian reader.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            bad(format!(
                "truncated: {what} needs {n} bytes at offset {}, the blob has {}",
                self.at,
                self.bytes.len()
            ))
        })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self
            .take(N, what)?
            .try_into()
            .expect("take returned N bytes"))
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }
    fn usize(&mut self, what: &str) -> Result<usize> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| bad(format!("{what} {v} does not fit this machine")))
    }
}

/// Reads the fixed header and checks everything it can say on its own.
fn read_header(bytes: &[u8]) -> Result<Header> {
    let mut c = Cursor { bytes, at: 0 };
    if c.array::<4>("magic")? != MAGIC {
        return Err(bad("not an hwtensor blob (bad magic)"));
    }
    let version = c.u16("version")?;
    if version != VERSION {
        return Err(bad(format!(
            "version {version} is not the version {VERSION} this reader understands"
        )));
    }
    let mut h = Header {
        header_len: c.u16("header_len")? as usize,
        total_len: c.u32("total_len")? as usize,
        ..Header::default()
    };
    if h.header_len < HEADER_LEN {
        return Err(bad(format!(
            "header_len {} is below the {HEADER_LEN}-byte v1 header",
            h.header_len
        )));
    }
    if h.total_len != bytes.len() {
        return Err(bad(format!(
            "total_len says {} bytes, {} arrived",
            h.total_len,
            bytes.len()
        )));
    }
    h.required = c.u32("required")?;
    if h.required & !KNOWN_REQUIREMENTS != 0 {
        return Err(bad(format!(
            "written by a newer hwtensor: it requires features {:#x} this reader does not know",
            h.required & !KNOWN_REQUIREMENTS
        )));
    }
    [h.dtype, h.memory, h.mode] = [c.u8("dtype")?, c.u8("memory")?, c.u8("mode")?];
    h.rank = c.u8("rank")? as usize;
    [h.format, h.access] = [c.u8("format")?, c.u8("access")?];
    h.plane_count = c.u8("plane_count")? as usize;
    h.fd_count = c.u8("fd_count")? as usize;
    [h.byte_offset, h.buffer_len, h.width, h.height, h.row_stride] = [
        c.u64("byte_offset")?,
        c.u64("buffer_len")?,
        c.u64("width")?,
        c.u64("height")?,
        c.u64("row_stride")?,
    ];
    h.quant_scale = f32::from_bits(c.u32("quant_scale")?);
    h.quant_zero_point = c.u32("quant_zero_point")? as i32;
    h.completion_fd = c.u32("completion_fd")?;
    let reserved = [c.u32("reserved")? as u64, 0];
    h.completion_value = c.u64("completion_value")?;
    let reserved = [reserved[0], c.u64("reserved")?];
    h.device_uuid = c.array("device_uuid")?;
    h.driver_uuid = c.array("driver_uuid")?;
    h.allocation_size = c.u64("allocation_size")?;
    h.producer.pid = c.u32("producer_pid")?;
    let producer_pad = c.u32("reserved")?;
    h.producer.start_time = c.u64("producer_start")?;
    h.producer.serial = c.u64("producer_serial")?;
    h.producer_semaphore = c.u64("producer_semaphore")?;
    if producer_pad != 0 {
        return Err(bad("reserved header fields are not zero"));
    }
    let gpu_reference = h.memory == TensorMemory::Gpu.code() && h.mode == 0;
    let producer = (
        h.producer.pid,
        h.producer.start_time,
        h.producer.serial,
        h.producer_semaphore,
    );
    let gpu_fields = (h.device_uuid, h.driver_uuid, h.allocation_size);
    if !gpu_reference && (gpu_fields != ([0; 16], [0; 16], 0) || producer != (0, 0, 0, 0)) {
        return Err(bad(
            "GPU fields are set on a blob that is not GPU memory by reference",
        ));
    }
    // Unused fields must be zero: a writer that fills them is one this reader does not
    // understand, and silently ignoring what it meant is how misreads happen.
    if reserved != [0, 0] {
        return Err(bad("reserved header fields are not zero"));
    }
    if h.required & REQUIRES_QUANTIZATION == 0
        && (h.quant_scale.to_bits() != 0 || h.quant_zero_point != 0)
    {
        return Err(bad(
            "quantization fields are set without the quantization bit",
        ));
    }
    if h.required & REQUIRES_COMPLETION == 0
        && (h.completion_fd != u32::MAX || h.completion_value != 0)
    {
        return Err(bad("completion fields are set without the completion bit"));
    }
    if h.required & REQUIRES_IMAGE == 0 && (h.width, h.height, h.row_stride) != (0, 0, 0) {
        return Err(bad("image fields are set without the image bit"));
    }
    if h.rank > MAX_RANK {
        return Err(bad(format!(
            "rank {} is past the maximum of {MAX_RANK}",
            h.rank
        )));
    }
    if h.plane_count == 0 || h.plane_count > MAX_PLANES {
        return Err(bad(format!(
            "{} planes (1 to {MAX_PLANES} allowed)",
            h.plane_count
        )));
    }
    if h.fd_count > MAX_FDS {
        return Err(bad(format!(
            "{} fds (at most {MAX_FDS} allowed)",
            h.fd_count
        )));
    }
    Ok(h)
}

/// Reads the length a blob claims from its first bytes, for a reader of a stream: `None` until
/// the first 12 bytes are there. The claim is checked only when the whole blob is imported.
pub fn claimed_len(prefix: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = prefix.get(8..12)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes) as usize)
}

/// Reads how a blob's bytes travel from its first bytes, for a reader of a stream: `None`
/// until the mode byte is there, or when it is not a mode this reader knows.
pub fn claimed_transport(prefix: &[u8]) -> Option<Transport> {
    match prefix.get(MODE_AT)? {
        0 => Some(Transport::Reference),
        1 => Some(Transport::Inline),
        _ => None,
    }
}

/// Whether a blob's header says it is GPU memory by reference (what only a trusted peer may
/// send), for a receiver deciding whom to trust before it imports.
pub fn claims_gpu_reference(header: &[u8]) -> bool {
    claimed_transport(header) == Some(Transport::Reference)
        && header.get(MEMORY_AT) == Some(&TensorMemory::Gpu.code())
}

/// Turns a blob and the fds that came with it into a tensor, under the strict
/// [`ImportPolicy`]: GPU memory by reference is refused, since nothing here says where the fds
/// came from (see [`import_with`] and the trust model in [`ImportPolicy`]'s module).
///
/// Takes every fd: the ones the tensor keeps live as long as it does, the others (and all of
/// them on an error) are closed before this returns.
pub fn import(blob: &[u8], fds: Vec<OwnedFd>) -> Result<TensorDyn> {
    import_with(blob, fds, &ImportPolicy::STRICT)
}

/// [`import`] under `policy`: what the caller knows of the fds' sender. Everything the blob
/// says is validated before anything is imported; a completion the sender claims is waited
/// for through the fence it sent (at most ten seconds), never taken on its word.
pub fn import_with(blob: &[u8], fds: Vec<OwnedFd>, policy: &ImportPolicy) -> Result<TensorDyn> {
    let h = read_header(blob)?;
    let mut c = Cursor { bytes: blob, at: 0 };
    c.take(h.header_len, "the fixed header")?;
    let shape = (0..h.rank)
        .map(|_| c.usize("a dimension"))
        .collect::<Result<Vec<_>>>()?;
    let strides = (0..h.rank)
        .map(|_| c.usize("a stride"))
        .collect::<Result<Vec<_>>>()?;
    let planes = (0..h.plane_count)
        .map(|_| read_plane(&mut c))
        .collect::<Result<Vec<_>>>()?;
    let dtype =
        DType::from_code(h.dtype).ok_or_else(|| bad(format!("unknown dtype code {}", h.dtype)))?;
    let memory = TensorMemory::from_code(h.memory)
        .ok_or_else(|| bad(format!("unknown memory code {}", h.memory)))?;
    let access = access_from_code(h.access)?;
    let byte_offset = to_usize(h.byte_offset, "byte_offset")?;
    let buffer_len = to_usize(h.buffer_len, "buffer_len")?;
    let image = image_info(&h)?;
    let quantization = (h.required & REQUIRES_QUANTIZATION != 0).then_some(Quantization {
        scale: h.quant_scale,
        zero_point: h.quant_zero_point,
    });
    let has_fence = h.required & REQUIRES_COMPLETION != 0;
    if has_fence && (h.completion_fd != 1 || memory != TensorMemory::Gpu || h.mode != 0) {
        return Err(bad(format!(
            "a completion fence must be fd 1 of GPU memory sent by reference (fd index {})",
            h.completion_fd
        )));
    }
    check_planes(
        &planes,
        image.as_ref(),
        dtype,
        byte_offset,
        buffer_len,
        &shape,
        &strides,
    )?;
    let parts = Parts {
        offset: byte_offset,
        shape,
        strides,
        image,
        access,
        quantization,
    }
    // Everything the blob says is checked before anything is imported or waited for.
    .check(dtype.size(), buffer_len)?;

    let buffer = match h.mode {
        0 => reference_buffer(&h, memory, buffer_len, fds, policy)?,
        1 => {
            if !fds.is_empty() || h.fd_count != 0 {
                return Err(bad(format!(
                    "an inline blob came with {} fds (it names {})",
                    fds.len(),
                    h.fd_count
                )));
            }
            let data = c.take(buffer_len, "the inline data")?;
            inline_buffer(data)?
        }
        m => return Err(bad(format!("unknown transport mode {m}"))),
    };
    if c.at != blob.len() {
        return Err(bad(format!(
            "{} bytes follow the last field",
            blob.len() - c.at
        )));
    }
    for_dtype!(dtype, from_parts(buffer, parts))
}

fn read_plane(c: &mut Cursor<'_>) -> Result<PlaneRecord> {
    let fd_index = c.u32("a plane's fd index")?;
    if c.u32("a plane's reserved word")? != 0 {
        return Err(bad("a plane's reserved word is not zero"));
    }
    Ok(PlaneRecord {
        fd_index,
        offset: c.u64("a plane offset")?,
        row_stride: c.u64("a plane row stride")?,
        size: c.u64("a plane size")?,
    })
}

fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| bad(format!("{what} {v} does not fit this machine")))
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

fn image_info(h: &Header) -> Result<Option<ImageInfo>> {
    let is_image = h.required & REQUIRES_IMAGE != 0;
    if is_image != (h.format != 0) {
        return Err(bad("the image bit and the pixel format disagree"));
    }
    if !is_image {
        return Ok(None);
    }
    let format = PixelFormat::from_code(h.format)
        .ok_or_else(|| bad(format!("unknown pixel format code {}", h.format)))?;
    Ok(Some(ImageInfo {
        format,
        width: to_usize(h.width, "width")?,
        height: to_usize(h.height, "height")?,
        row_stride: to_usize(h.row_stride, "row_stride")?,
    }))
}

/// The planes must be exactly what the tensor implies, all in the one buffer, inside it.
fn check_planes(
    planes: &[PlaneRecord],
    image: Option<&ImageInfo>,
    dtype: DType,
    byte_offset: usize,
    buffer_len: usize,
    shape: &[usize],
    strides: &[usize],
) -> Result<()> {
    let expected = match image {
        Some(info) => plane_records_of(info, dtype.size(), byte_offset)?,
        None => {
            let extent = crate::geometry::extent(shape, strides, dtype.size())
                .map_err(|_| bad("the tensor's extent overflows"))?;
            vec![PlaneRecord {
                fd_index: 0,
                offset: byte_offset as u64,
                row_stride: 0,
                size: extent as u64,
            }]
        }
    };
    if planes.iter().any(|p| p.fd_index != 0) {
        return Err(bad(
            "a plane names an fd other than the first; multi-buffer tensors are not supported",
        ));
    }
    if planes != expected.as_slice() {
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

fn reference_buffer(
    h: &Header,
    memory: TensorMemory,
    buffer_len: usize,
    mut fds: Vec<OwnedFd>,
    policy: &ImportPolicy,
) -> Result<Buffer> {
    if memory == TensorMemory::Gpu && !policy.gpu_memory {
        return Err(bad(
            "GPU memory by reference is accepted only from a trusted peer (the driver trusts \
             the fd's content): handoff::recv accepts it from processes of this user; with \
             blob::import_with, say ImportPolicy::TRUSTED_PEER when you know the sender",
        ));
    }
    let needed = 1 + (h.required & REQUIRES_COMPLETION != 0) as usize;
    if h.fd_count != needed || fds.len() != needed {
        return Err(bad(format!(
            "a reference blob of this kind needs exactly {needed} fd(s): it names {}, {} arrived",
            h.fd_count,
            fds.len()
        )));
    }
    let fence = (needed == 2).then(|| fds.pop().expect("two fds"));
    let fd = fds.pop().expect("one fd");
    if memory == TensorMemory::Gpu {
        return gpu_buffer(h, buffer_len, fd, fence);
    }
    if !matches!(memory, TensorMemory::Shm | TensorMemory::DmaBuf) {
        return Err(bad(format!(
            "a reference blob of {memory} memory cannot be imported by fd"
        )));
    }
    let buffer = Buffer::import(fd, buffer_len, policy)?;
    if buffer.memory() != memory {
        return Err(bad(format!(
            "the blob says {memory} but the fd is {}",
            buffer.memory()
        )));
    }
    Ok(buffer)
}

/// Imports GPU memory on this process's device, once the sender's last write has completed.
///
/// The completion is validated first (a fence this device can import, of the kind it
/// exports) and waited for on the CPU through that fence, bounded: a value the sender chose
/// never lands on this process's timeline, where a far-off one would stall all our GPU work.
/// A pooled buffer seen before reuses its import only when the fd sent is provably the same
/// file as the one the import holds; the identity the blob claims alone proves nothing.
fn gpu_buffer(
    h: &Header,
    buffer_len: usize,
    fd: OwnedFd,
    fence: Option<OwnedFd>,
) -> Result<Buffer> {
    let device = crate::gpu::device()?;
    if (device.device_uuid(), device.driver_uuid()) != (h.device_uuid, h.driver_uuid) {
        return Err(bad(format!(
            "the tensor lives on GPU {} (driver {}), but this process's device is {} = {} (driver {})",
            format_uuid(&h.device_uuid),
            format_uuid(&h.driver_uuid),
            device.adapter_label(),
            format_uuid(&device.device_uuid()),
            format_uuid(&device.driver_uuid())
        )));
    }
    let completion = match fence {
        Some(fence) => Some(device.foreign_timeline(fence)?),
        None => None,
    };
    let cached = device.cached_import(&h.producer).filter(|b| {
        b.len() == buffer_len
            && b.gpu().is_some_and(|g| {
                g.allocation_size() == h.allocation_size
                    && g.fd().is_some_and(|ours| same_file(ours, fd.as_fd()))
            })
    });
    let buffer = match cached {
        Some(b) => b, // `fd` is dropped: it is the very file our import holds
        None => {
            let mem = GpuMemory::import(fd, h.allocation_size, buffer_len, h.producer)?;
            let b = Buffer::new(Storage::Gpu(mem))?;
            device.remember_import(h.producer, &b);
            b
        }
    };
    if let Some(timeline) = completion {
        timeline.wait(h.completion_value, GPU_WAIT)?;
    }
    Ok(buffer)
}

fn inline_buffer(data: &[u8]) -> Result<Buffer> {
    let buffer = Buffer::allocate(TensorMemory::Mem, data.len(), None)?;
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
