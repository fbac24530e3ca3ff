//! [`TensorDyn`]: a tensor whose element type is known at run time (what C and Python see).

use half::f16;

use crate::identity::BufferIdentity;
use crate::image::ImageInfo;
use crate::BufferLiveness;
use crate::{
    CpuAccess, DType, Element, Error, ImageSpec, PixelFormat, Region, Result, Tensor, TensorMemory,
};

/// A tensor of any [`DType`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TensorDyn {
    /// A `u8` tensor.
    U8(Tensor<u8>),
    /// An `i8` tensor.
    I8(Tensor<i8>),
    /// A `u16` tensor.
    U16(Tensor<u16>),
    /// An `i16` tensor.
    I16(Tensor<i16>),
    /// A `u32` tensor.
    U32(Tensor<u32>),
    /// An `i32` tensor.
    I32(Tensor<i32>),
    /// A `u64` tensor.
    U64(Tensor<u64>),
    /// An `i64` tensor.
    I64(Tensor<i64>),
    /// An `f16` tensor.
    F16(Tensor<f16>),
    /// An `f32` tensor.
    F32(Tensor<f32>),
    /// An `f64` tensor.
    F64(Tensor<f64>),
}

impl TensorDyn {
    /// See [`Tensor::new`].
    pub fn new(shape: &[usize], dtype: DType, memory: Option<TensorMemory>) -> Result<Self> {
        for_dtype!(dtype, new(shape, memory))
    }

    /// See [`Tensor::image`].
    pub fn image(
        spec: &ImageSpec,
        dtype: DType,
        memory: Option<TensorMemory>,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, image(spec, memory, access))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        each_tensor!(self, t => t.dtype())
    }

    /// Borrows the typed tensor, or says which type it holds.
    pub fn as_tensor<T: Element>(&self) -> Result<&Tensor<T>> {
        T::from_dyn(self).ok_or(Error::DType {
            expected: T::DTYPE,
            actual: self.dtype(),
        })
    }

    /// Takes the typed tensor out. On a mismatch the error holds the tensor (nothing is lost)
    /// and converts into [`Error::DType`] with `?`.
    // The tensor itself comes back on a mismatch, by design: boxing it would cost every caller.
    #[allow(clippy::result_large_err)]
    pub fn into_tensor<T: Element>(self) -> std::result::Result<Tensor<T>, WrongDType> {
        T::from_dyn_owned(self).map_err(|tensor| WrongDType {
            tensor,
            expected: T::DTYPE,
        })
    }

    /// See [`Tensor::shape`].
    pub fn shape(&self) -> &[usize] {
        each_tensor!(self, t => t.shape())
    }

    /// See [`Tensor::strides`] (bytes).
    pub fn strides(&self) -> &[usize] {
        each_tensor!(self, t => t.strides())
    }

    /// See [`Tensor::len`].
    pub fn len(&self) -> usize {
        each_tensor!(self, t => t.len())
    }

    /// See [`Tensor::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// See [`Tensor::byte_offset`].
    pub fn byte_offset(&self) -> usize {
        each_tensor!(self, t => t.byte_offset())
    }

    /// See [`Tensor::buffer_len`].
    pub fn buffer_len(&self) -> usize {
        each_tensor!(self, t => t.buffer_len())
    }

    /// See [`Tensor::memory`].
    pub fn memory(&self) -> TensorMemory {
        each_tensor!(self, t => t.memory())
    }

    /// See [`Tensor::access`].
    pub fn access(&self) -> CpuAccess {
        each_tensor!(self, t => t.access())
    }

    /// The same tensor declared for reading only: its maps refuse writing. How a channel's
    /// reading consumer holds a buffer the producer lent it writable.
    pub(crate) fn read_only(self) -> Self {
        each_tensor!(self, t => {
            let mut t = t;
            t.access = t.access.narrowed_to(CpuAccess::Read);
            Element::into_dyn(t)
        })
    }

    /// See [`Tensor::identity`].
    pub fn identity(&self) -> BufferIdentity {
        each_tensor!(self, t => t.identity())
    }

    /// See [`Tensor::liveness`].
    pub fn liveness(&self) -> BufferLiveness {
        each_tensor!(self, t => t.liveness())
    }

    /// See [`Tensor::image_info`].
    pub fn image_info(&self) -> Option<&ImageInfo> {
        each_tensor!(self, t => t.image_info())
    }

    /// See [`Tensor::quantization`].
    pub fn quantization(&self) -> Option<crate::Quantization> {
        each_tensor!(self, t => t.quantization())
    }

    /// The same tensor over the same buffer with `quantization` (see
    /// [`Tensor::set_quantization`], which checks it against the dtype and shape).
    pub fn with_quantization(&self, quantization: Option<crate::Quantization>) -> Result<Self> {
        each_tensor!(self, t => {
            let mut t = t.clone();
            t.set_quantization(quantization)?;
            Ok(t.into())
        })
    }

    /// See [`Tensor::view`].
    pub fn view(&self, region: Region) -> Result<Self> {
        each_tensor!(self, t => t.view(region).map(Element::into_dyn))
    }

    /// See [`Tensor::map_bytes`]. Inlined into the caller's crate (the C ABI, the Python
    /// binding), down to the claim: a plain `#[inline]` was not taken in the C library, whose
    /// byte map then cost 44 ns against 17 ns in a Rust binary (20 ns inlined).
    #[inline(always)]
    pub fn map_bytes(&self, direction: crate::Direction) -> Result<crate::map::ByteMap<'_>> {
        // Only the site depends on the element type: the claim is one body for all.
        each_tensor!(self, t => t.map_site())
            .byte_map(direction)
            .map_err(|e| each_tensor!(self, t => t.why_not_mapped(e)))
    }

    /// See [`Tensor::drop_would_free_a_mapped_buffer`].
    pub fn drop_would_free_a_mapped_buffer(&self) -> bool {
        each_tensor!(self, t => t.drop_would_free_a_mapped_buffer())
    }

    /// See [`Tensor::plane_table`].
    pub fn plane_table(&self) -> Result<Vec<crate::Plane>> {
        each_tensor!(self, t => t.plane_table())
    }

    /// See [`Tensor::copy_from`]; both tensors must have the same element type.
    pub fn copy_from(&self, src: &TensorDyn) -> Result<()> {
        each_tensor!(self, t => t.copy_from(src.as_tensor()?))
    }

    /// See [`Tensor::batch`].
    pub fn batch(&self, index: usize) -> Result<Self> {
        each_tensor!(self, t => t.batch(index).map(Element::into_dyn))
    }

    /// See [`Tensor::set_colorimetry`].
    pub fn set_colorimetry(&mut self, colorimetry: crate::Colorimetry) -> Result<()> {
        each_tensor!(self, t => t.set_colorimetry(colorimetry))
    }

    /// See [`Tensor::drm_modifier`].
    pub fn drm_modifier(&self) -> crate::DrmModifier {
        each_tensor!(self, t => t.drm_modifier())
    }

    /// See [`Tensor::with_drm_modifier`].
    pub fn with_drm_modifier(&self, modifier: crate::DrmModifier) -> Result<Self> {
        each_tensor!(self, t => t.with_drm_modifier(modifier).map(Element::into_dyn))
    }

    /// See [`Tensor::to_memory`].
    pub fn to_memory(&self, memory: TensorMemory) -> Result<Self> {
        each_tensor!(self, t => t.to_memory(memory).map(Element::into_dyn))
    }

    /// See [`Tensor::reshape`].
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        each_tensor!(self, t => t.reshape(shape).map(Element::into_dyn))
    }

    /// See [`Tensor::repoint`].
    pub fn repoint(&self, shape: &[usize]) -> Result<Self> {
        each_tensor!(self, t => t.repoint(shape).map(Element::into_dyn))
    }

    /// See [`Tensor::repoint_image`].
    pub fn repoint_image(
        &self,
        w: usize,
        h: usize,
        format: PixelFormat,
        row_stride: Option<usize>,
    ) -> Result<Self> {
        each_tensor!(self, t => t.repoint_image(w, h, format, row_stride).map(Element::into_dyn))
    }
}

impl<T: Element> Tensor<T> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }
}

impl<T: Element> From<Tensor<T>> for TensorDyn {
    fn from(t: Tensor<T>) -> Self {
        T::into_dyn(t)
    }
}

/// A tensor of another element type than [`TensorDyn::into_tensor`] asked for. It gives the
/// tensor back ([`WrongDType::tensor`]), and `?` turns it into [`Error::DType`], so a caller
/// that only wants to fail need not handle a tensor.
#[derive(Debug)]
pub struct WrongDType {
    /// The tensor, unchanged.
    pub tensor: TensorDyn,
    /// The element type asked for.
    pub expected: DType,
}

impl std::fmt::Display for WrongDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Error::from_wrong(self).fmt(f)
    }
}

impl std::error::Error for WrongDType {}

impl From<WrongDType> for Error {
    fn from(e: WrongDType) -> Error {
        Error::from_wrong(&e)
    }
}

impl Error {
    fn from_wrong(e: &WrongDType) -> Error {
        Error::DType {
            expected: e.expected,
            actual: e.tensor.dtype(),
        }
    }
}
