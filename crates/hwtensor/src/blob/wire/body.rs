//! What follows the fixed header: dimensions and strides, the plane records, the per-channel
//! quantization pairs; and the rules that tie the plane records to the tensor they describe,
//! used alike by the writer (what it writes) and the reader (what it demands).

use super::header::Header;
use super::{bad, to_usize, REQUIRES_PER_CHANNEL, REQUIRES_QUANTIZATION};
use crate::image::ImageInfo;
use crate::{CpuAccess, DType, Element, Quantization, Result, Tensor};

/// Bytes of one plane record.
pub(super) const PLANE_LEN: usize = 32;
/// Bytes of one per-channel pair: f32 scale, i32 zero point.
pub(super) const CHANNEL_LEN: usize = 8;

/// One plane record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::blob) struct PlaneRecord {
    pub fd_index: u32,
    pub offset: u64,
    pub row_stride: u64,
    pub size: u64,
}

/// A bounds-checked little-endian reader of what follows the header.
pub(super) struct Cursor<'a> {
    pub bytes: &'a [u8],
    pub at: usize,
}

impl<'a> Cursor<'a> {
    pub(in crate::blob) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
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
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let mut v = [0u8; 8];
        v.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(v))
    }
    pub(in crate::blob) fn usize(&mut self, what: &str) -> Result<usize> {
        let v = self.u64(what)?;
        to_usize(v, what)
    }
    pub(in crate::blob) fn plane(&mut self) -> Result<PlaneRecord> {
        let fd_index = self.u32("a plane's fd index")?;
        if self.u32("a plane's reserved word")? != 0 {
            return Err(bad("a plane's reserved word is not zero"));
        }
        Ok(PlaneRecord {
            fd_index,
            offset: self.u64("a plane offset")?,
            row_stride: self.u64("a plane row stride")?,
            size: self.u64("a plane size")?,
        })
    }
}

impl PlaneRecord {
    /// The record's 32 bytes.
    pub(in crate::blob) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.fd_index.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [self.offset, self.row_stride, self.size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The plane records of a tensor whose first element sits at `byte_offset` of the buffer: the
/// image's planes, or one plane spanning a plain tensor.
pub(in crate::blob) fn plane_records<T: Element>(
    t: &Tensor<T>,
    byte_offset: usize,
) -> Result<Vec<PlaneRecord>> {
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
pub(super) fn plane_records_of(
    info: &ImageInfo,
    elem: usize,
    byte_offset: usize,
) -> Result<Vec<PlaneRecord>> {
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

/// Sets `image`'s chroma stride from the second plane record, as required bit 7 says: one the
/// format has room for, and not the one it derives (the bit would then say nothing).
pub(super) fn chroma_stride_of(
    image: Option<&mut ImageInfo>,
    planes: &[PlaneRecord],
    dtype: DType,
) -> Result<()> {
    let (Some(info), Some(record)) = (image, planes.get(1)) else {
        return Err(bad(
            "the chroma stride bit on a tensor without chroma planes",
        ));
    };
    let chroma = to_usize(record.row_stride, "the chroma planes' row_stride")?;
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

/// The quantization the header says, with the per-channel pairs read from `c`.
pub(super) fn read_quantization(h: &Header, c: &mut Cursor<'_>) -> Result<Option<Quantization>> {
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

pub(super) fn access_from_code(code: u8) -> Result<CpuAccess> {
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
pub(super) fn expected_planes(
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
pub(super) fn check_planes(
    planes: &[PlaneRecord],
    expected: &[PlaneRecord],
    buffer_len: usize,
) -> Result<()> {
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
pub(in crate::blob) fn one_buffer_extent(records: &[PlaneRecord]) -> u64 {
    records.iter().map(|p| p.offset + p.size).max().unwrap_or(0)
}

/// With an fd per plane (required bit 8): plane `k` in fd `k`, each with the row stride and
/// size the image implies, at any offset of its fd (the fd's size is checked when it is
/// mapped), and `buffer_len` the image's one-buffer extent. Where each plane starts in its fd.
pub(super) fn check_plane_fds(
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
            to_usize(p.offset, "a plane's offset in its fd")
        })
        .collect()
}
