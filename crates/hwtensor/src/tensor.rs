//! [`Tensor<T>`]: a typed n-dimensional view of one buffer.

use std::marker::PhantomData;

use crate::buffer::{allocate_choosing, Buffer};
use crate::geometry::{byte_strides, element_count, extent};
use crate::identity::BufferIdentity;
use crate::image::ImageInfo;
use crate::memory::Purpose;
use crate::quantization::Quantization;
use crate::BufferLiveness;
use crate::{CpuAccess, Element, Error, Result, TensorMemory};

/// A tensor of `T` over heap, shared or DMA memory.
///
/// Cloning a tensor, taking a [`view`](Tensor::view) or a [`batch`](Tensor::batch) shares the
/// buffer: no bytes are copied, and every one of them has the same
/// [`identity`](Tensor::identity). The buffer is freed (and its fd closed) when the last one
/// goes.
#[derive(Clone, Debug)]
pub struct Tensor<T: Element> {
    pub(crate) buffer: Buffer,
    /// Byte offset of the first element in the buffer.
    pub(crate) offset: usize,
    pub(crate) shape: Vec<usize>,
    /// Byte strides, one per dimension.
    pub(crate) strides: Vec<usize>,
    pub(crate) image: Option<ImageInfo>,
    pub(crate) access: CpuAccess,
    pub(crate) quantization: Option<Quantization>,
    /// A sync_file its bytes are complete at (a V4L2 or GPU producer's), waited for before a
    /// CPU map and carried by blobs by reference.
    pub(crate) acquire: Option<crate::AcquireFence>,
    pub(crate) _elem: PhantomData<T>,
}

impl<T: Element> Tensor<T> {
    /// A zeroed tensor of `shape` on `memory`, or on the best backing here when `None`
    /// (DMA-BUF, then shared memory, then heap; heap only under `HWTENSOR_FORCE_MEM=1`).
    pub fn new(shape: &[usize], memory: Option<TensorMemory>) -> Result<Self> {
        let strides = byte_strides(shape, Self::elem(), None)?;
        let bytes = element_count(shape)?
            .checked_mul(Self::elem())
            .ok_or_else(|| {
                Error::Shape(format!("{shape:?} of {} overflows usize bytes", T::DTYPE))
            })?;
        let buffer = allocate_choosing(Purpose::Plain, memory, |_| Ok(bytes), None, true)?.0;
        Ok(Self::over(
            buffer,
            shape.to_vec(),
            strides,
            None,
            CpuAccess::ReadWrite,
        ))
    }

    pub(crate) fn over(
        buffer: Buffer,
        shape: Vec<usize>,
        strides: Vec<usize>,
        image: Option<ImageInfo>,
        access: CpuAccess,
    ) -> Self {
        Tensor {
            buffer,
            offset: 0,
            shape,
            strides,
            image,
            access,
            quantization: None,
            acquire: None,
            _elem: PhantomData,
        }
    }

    pub(crate) const fn elem() -> usize {
        T::DTYPE.size()
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The byte stride of each dimension.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte offset of the first element within the buffer (non-zero for views and batches).
    pub fn byte_offset(&self) -> usize {
        self.offset
    }

    /// Bytes from the first element to one past the last, padding included.
    ///
    /// On every map's path, so computed without `extent`'s overflow checks: every tensor's
    /// geometry passed them when it (or the tensor it is a view of) was made.
    #[inline(always)] // on every map's path
    pub fn byte_extent(&self) -> usize {
        let mut end = Self::elem();
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            if d == 0 {
                return 0;
            }
            end += (d - 1) * s;
        }
        match &self.image {
            Some(info) => end + crate::image::chroma_tail(info, Self::elem()),
            None => end,
        }
    }

    /// Size of the whole buffer in bytes.
    pub fn buffer_len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the elements follow one another without gaps, in C order.
    pub fn is_contiguous(&self) -> bool {
        byte_strides(&self.shape, Self::elem(), None).is_ok_and(|s| s == self.strides)
    }

    /// The backing this tensor lives on.
    pub fn memory(&self) -> TensorMemory {
        self.buffer.memory()
    }

    /// The declared CPU access.
    pub fn access(&self) -> CpuAccess {
        self.access
    }

    /// Which buffer the bytes live in; equal for views, batches and re-imports of one buffer.
    pub fn identity(&self) -> BufferIdentity {
        self.buffer.identity()
    }

    /// A weak handle that tells whether the buffer still exists.
    pub fn liveness(&self) -> BufferLiveness {
        self.buffer.liveness()
    }

    /// The quantization parameters, if any were set.
    pub fn quantization(&self) -> Option<Quantization> {
        self.quantization.clone()
    }

    /// Sets (or clears) the quantization parameters. Refused on floating-point tensors (their
    /// values are real already), for a scale that is not a positive finite number, and for a
    /// zero point the element type cannot hold.
    ///
    /// Per-channel parameters must name an axis of the tensor and one pair per index along it.
    pub fn set_quantization(&mut self, quantization: Option<Quantization>) -> Result<()> {
        if let Some(q) = &quantization {
            q.check(T::DTYPE)?;
            q.check_shape(&self.shape)?;
        }
        self.quantization = quantization;
        Ok(())
    }
}

/// The geometry a tensor is made from when it arrives from outside (a blob): every field is
/// checked against the others and against the buffer before a tensor exists.
#[derive(Debug)]
pub(crate) struct Parts {
    pub offset: usize,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub image: Option<ImageInfo>,
    pub access: CpuAccess,
    pub quantization: Option<Quantization>,
}

impl Parts {
    /// Checks the geometry against itself and a `buffer_len`-byte buffer, before any buffer
    /// exists (an import validates everything before it has side effects): whole,
    /// non-overlapping strides; no offset a view could reach that overflows
    /// ([`geometry::check_reach`](crate::geometry::check_reach)); the extent inside the
    /// buffer; an offset at a whole element (a map hands out `&[T]` from it, and a misaligned
    /// slice is undefined behaviour even in safe code); an image's shape and row stride in
    /// agreement with its format.
    pub(crate) fn check(self, elem: usize, buffer_len: usize) -> Result<CheckedParts> {
        let (shape, strides) = (&self.shape, &self.strides);
        check_strides(shape, strides, elem)?;
        if !self.offset.is_multiple_of(elem) {
            return Err(Error::Shape(format!(
                "byte offset {} is not a multiple of the {elem}-byte element's alignment",
                self.offset
            )));
        }
        if let Some(q) = &self.quantization {
            q.check_shape(shape)?;
        }
        crate::geometry::check_reach(shape, strides, self.offset, elem)?;
        let end = extent(shape, strides, elem)?
            .checked_add(self.offset)
            .ok_or_else(|| Error::Shape("offset plus extent overflows".into()))?;
        if !shape.contains(&0) && end > buffer_len {
            return Err(Error::TooSmall {
                needed: end,
                capacity: buffer_len,
            });
        }
        if let Some(info) = &self.image {
            check_image_parts(info, shape, strides, elem)?;
        }
        Ok(CheckedParts {
            parts: self,
            elem,
            buffer_len,
        })
    }
}

/// [`Parts`] that passed [`Parts::check`] for `elem`-byte elements in a buffer of at least
/// `buffer_len` bytes: what [`Tensor::from_parts`] takes, so an import checks once.
#[derive(Debug)]
pub(crate) struct CheckedParts {
    parts: Parts,
    elem: usize,
    buffer_len: usize,
}

impl CheckedParts {
    /// The image the parts describe, its chroma stride included.
    #[cfg(target_os = "linux")]
    pub(crate) fn image(&self) -> Option<&ImageInfo> {
        self.parts.image.as_ref()
    }

    /// The same parts with the first element at `offset` of a `buffer_len`-byte buffer,
    /// checked again there.
    #[cfg(target_os = "linux")]
    pub(crate) fn moved_to(self, offset: usize, buffer_len: usize) -> Result<CheckedParts> {
        let elem = self.elem;
        Parts {
            offset,
            ..self.parts
        }
        .check(elem, buffer_len)
    }
}

impl<T: Element> Tensor<T> {
    /// A tensor over `buffer` as checked `parts` describe it: they were checked for this
    /// element size and a buffer no longer than this one.
    pub(crate) fn from_parts(buffer: Buffer, checked: CheckedParts) -> Result<Self> {
        if checked.elem != Self::elem() || buffer.len() < checked.buffer_len {
            return Err(Error::InvalidArgument(format!(
                "parts checked for {}-byte elements in {} bytes, used for {}-byte elements in {}",
                checked.elem,
                checked.buffer_len,
                Self::elem(),
                buffer.len()
            )));
        }
        let Parts {
            offset,
            shape,
            strides,
            image,
            access,
            quantization,
        } = checked.parts;
        let access = access.narrowed_to(import_access(&buffer));
        Ok(Tensor {
            buffer,
            offset,
            shape,
            strides,
            image,
            access,
            quantization,
            acquire: None,
            _elem: PhantomData,
        })
    }
}

/// Strides must be whole elements and no two indices may name the same element: a mutable map
/// of an overlapping layout would hand out aliasing `&mut`.
fn check_strides(shape: &[usize], strides: &[usize], elem: usize) -> Result<()> {
    if shape.len() != strides.len() {
        return Err(Error::Shape(format!(
            "{} dimensions but {} strides",
            shape.len(),
            strides.len()
        )));
    }
    if strides.iter().any(|s| s % elem != 0) {
        return Err(Error::Shape(format!(
            "strides {strides:?} are not whole {elem}-byte elements"
        )));
    }
    let mut dims: Vec<(usize, usize)> = strides
        .iter()
        .copied()
        .zip(shape.iter().copied())
        .filter(|&(_, d)| d > 1)
        .collect();
    dims.sort_unstable();
    let mut reach = elem;
    for (stride, dim) in dims {
        if stride < reach {
            return Err(Error::Shape(format!(
                "strides {strides:?} of {shape:?} overlap"
            )));
        }
        reach = stride
            .checked_mul(dim)
            .ok_or_else(|| Error::Shape(format!("strides {strides:?} overflow")))?;
    }
    Ok(())
}

fn check_image_parts(
    info: &ImageInfo,
    shape: &[usize],
    strides: &[usize],
    elem: usize,
) -> Result<()> {
    let image_shape = info.format.allocation_shape(info.width, info.height);
    let batched = shape.len() == image_shape.len() + 1;
    if !(shape.ends_with(&image_shape) && (batched || shape.len() == image_shape.len())) {
        return Err(Error::Image(format!(
            "shape {shape:?} is not a {}x{} {} image",
            info.width, info.height, info.format
        )));
    }
    info.format.check_size(info.width, info.height)?;
    info.format.check_element(elem)?;
    let min = info
        .format
        .min_row_bytes(info.width, elem)
        .unwrap_or(usize::MAX);
    let row_dim = shape.len() - info.format.row_dim_from_end();
    if info.row_stride < min || strides[row_dim] != info.row_stride {
        return Err(Error::RowStride(format!(
            "row stride {} disagrees with the strides {strides:?} or is below the {min}-byte row",
            info.row_stride
        )));
    }
    Ok(())
}

/// A foreign buffer mapped read-only can only be read.
pub(crate) fn import_access(buffer: &Buffer) -> CpuAccess {
    if buffer.writable() {
        CpuAccess::ReadWrite
    } else {
        CpuAccess::Read
    }
}
