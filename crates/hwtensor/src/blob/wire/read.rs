//! A whole blob read and checked: the header, then each section in the order it is written,
//! then the rules that tie the sections together. The result, a [`Described`], is what every
//! transport builds its tensor from; nothing is imported or waited for before it exists.

use super::body::{
    access_from_code, check_plane_fds, check_planes, chroma_stride_of, expected_planes,
    read_quantization, Cursor, PlaneRecord,
};
use super::header::Header;
use super::{
    bad, to_usize, MODE_INLINE, MODE_REFERENCE, REQUIRES_CHROMA_STRIDE, REQUIRES_COMPLETION,
    REQUIRES_PLANE_FDS, REQUIRES_SYNC_FILE,
};
use crate::image::ImageInfo;
use crate::tensor::{CheckedParts, Parts};
use crate::{DType, Result, TensorMemory};

/// Everything a blob says, read and checked before anything is imported or waited for.
// The header, memory and length are what the fd and handle paths go on with.
pub(in crate::blob) struct Described<'a> {
    pub header: Header,
    pub dtype: DType,
    pub memory: TensorMemory,
    pub buffer_len: usize,
    pub parts: CheckedParts,
    /// Where each plane starts in its fd, for a blob with an fd per plane (required bit 8).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub plane_offsets: Vec<usize>,
    /// The data of an inline blob; `None` for a reference blob.
    pub inline: Option<&'a [u8]>,
}

/// The arrays after the header: dimensions, byte strides and plane records.
struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    planes: Vec<PlaneRecord>,
}

impl<'a> Described<'a> {
    /// Reads and checks all of `blob`; hostile bytes get an [`Error::Blob`](crate::Error::Blob)
    /// naming the field.
    pub(in crate::blob) fn read(blob: &'a [u8]) -> Result<Described<'a>> {
        let h = Header::read(blob)?;
        let mut c = Cursor { bytes: blob, at: 0 };
        c.take(h.header_len, "the fixed header")?;
        let layout = read_layout(&h, &mut c)?;
        let dtype = DType::from_code(h.dtype)
            .ok_or_else(|| bad(format!("unknown dtype code {}", h.dtype)))?;
        let memory = TensorMemory::from_code(h.memory)
            .ok_or_else(|| bad(format!("unknown memory code {}", h.memory)))?;
        let byte_offset = to_usize(h.byte_offset, "byte_offset")?;
        let buffer_len = to_usize(h.buffer_len, "buffer_len")?;
        let mut image = h.image_info()?;
        if h.required & REQUIRES_CHROMA_STRIDE != 0 {
            chroma_stride_of(image.as_mut(), &layout.planes, dtype)?;
        }
        let quantization = read_quantization(&h, &mut c)?;
        if let Some(q) = &quantization {
            q.check(dtype)
                .map_err(|e| bad(format!("quantization: {e}")))?;
        }
        check_fences(&h, memory)?;
        let plane_offsets = check_plane_table(
            &h,
            &layout,
            image.as_ref(),
            dtype,
            (byte_offset, buffer_len),
        )?;
        let parts = Parts {
            offset: byte_offset,
            shape: layout.shape,
            strides: layout.strides,
            image,
            access: access_from_code(h.access)?,
            quantization,
        }
        .check(dtype.size(), buffer_len)?;
        let inline = read_data(&h, &mut c, buffer_len)?;
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
}

/// Reads the dimensions, strides and plane records the header counts.
fn read_layout(h: &Header, c: &mut Cursor<'_>) -> Result<Layout> {
    let shape = (0..h.rank)
        .map(|_| c.usize("a dimension"))
        .collect::<Result<Vec<_>>>()?;
    let strides = (0..h.rank)
        .map(|_| c.usize("a stride"))
        .collect::<Result<Vec<_>>>()?;
    let planes = (0..h.plane_count)
        .map(|_| c.plane())
        .collect::<Result<Vec<_>>>()?;
    Ok(Layout {
        shape,
        strides,
        planes,
    })
}

/// A timeline completion comes only with GPU or CUDA memory by reference, a sync_file only
/// with shared memory or a DMA-BUF by reference, and either as fd 1.
fn check_fences(h: &Header, memory: TensorMemory) -> Result<()> {
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
    Ok(())
}

/// The plane records must be what the tensor implies, with its first element at `byte_offset`
/// of a `buffer_len`-byte buffer; with an fd per plane (bit 8), where each plane starts in its
/// fd (empty otherwise).
fn check_plane_table(
    h: &Header,
    layout: &Layout,
    image: Option<&ImageInfo>,
    dtype: DType,
    (byte_offset, buffer_len): (usize, usize),
) -> Result<Vec<usize>> {
    let expected = expected_planes(image, dtype, byte_offset, &layout.shape, &layout.strides)?;
    if h.required & REQUIRES_PLANE_FDS != 0 {
        return check_plane_fds(&layout.planes, &expected, buffer_len);
    }
    check_planes(&layout.planes, &expected, buffer_len)?;
    Ok(Vec::new())
}

/// The inline data of an inline blob (which names no fds); `None` for a reference blob.
fn read_data<'a>(h: &Header, c: &mut Cursor<'a>, buffer_len: usize) -> Result<Option<&'a [u8]>> {
    match h.mode {
        MODE_REFERENCE => Ok(None),
        MODE_INLINE => {
            if h.fd_count != 0 {
                return Err(bad(format!("an inline blob names {} fds", h.fd_count)));
            }
            Ok(Some(c.take(buffer_len, "the inline data")?))
        }
        m => Err(bad(format!("unknown transport mode {m}"))),
    }
}
