//! [`TensorDyn`]: a tensor whose element type is known at run time (what C and Python see).

use half::f16;

use crate::identity::{BufferIdentity, BufferLiveness};
use crate::image::ImageInfo;
use crate::{CpuAccess, DType, Element, Error, PixelFormat, Region, Result, Tensor, TensorMemory};

/// A tensor of any [`DType`].
#[derive(Clone, Debug)]
pub enum TensorDyn {
    U8(Tensor<u8>),
    I8(Tensor<i8>),
    U16(Tensor<u16>),
    I16(Tensor<i16>),
    U32(Tensor<u32>),
    I32(Tensor<i32>),
    U64(Tensor<u64>),
    I64(Tensor<i64>),
    F16(Tensor<f16>),
    F32(Tensor<f32>),
    F64(Tensor<f64>),
}

impl TensorDyn {
    /// See [`Tensor::new`].
    pub fn new(shape: &[usize], dtype: DType, memory: Option<TensorMemory>) -> Result<Self> {
        for_dtype!(dtype, new(shape, memory))
    }

    /// See [`Tensor::image`].
    pub fn image(
        w: usize,
        h: usize,
        format: PixelFormat,
        dtype: DType,
        memory: Option<TensorMemory>,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, image(w, h, format, memory, access))
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

    /// Takes the typed tensor out, or gives `self` back.
    pub fn into_tensor<T: Element>(self) -> std::result::Result<Tensor<T>, TensorDyn> {
        T::from_dyn_owned(self)
    }

    pub fn shape(&self) -> &[usize] {
        each_tensor!(self, t => t.shape())
    }

    pub fn strides(&self) -> &[usize] {
        each_tensor!(self, t => t.strides())
    }

    pub fn len(&self) -> usize {
        each_tensor!(self, t => t.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn byte_offset(&self) -> usize {
        each_tensor!(self, t => t.byte_offset())
    }

    pub fn buffer_len(&self) -> usize {
        each_tensor!(self, t => t.buffer_len())
    }

    pub fn memory(&self) -> TensorMemory {
        each_tensor!(self, t => t.memory())
    }

    pub fn access(&self) -> CpuAccess {
        each_tensor!(self, t => t.access())
    }

    pub fn identity(&self) -> BufferIdentity {
        each_tensor!(self, t => t.identity())
    }

    pub fn liveness(&self) -> BufferLiveness {
        each_tensor!(self, t => t.liveness())
    }

    pub fn image_info(&self) -> Option<&ImageInfo> {
        each_tensor!(self, t => t.image_info())
    }

    pub fn quantization(&self) -> Option<crate::Quantization> {
        each_tensor!(self, t => t.quantization())
    }

    pub fn view(&self, region: Region) -> Result<Self> {
        each_tensor!(self, t => t.view(region).map(Element::into_dyn))
    }

    pub fn batch(&self, index: usize) -> Result<Self> {
        each_tensor!(self, t => t.batch(index).map(Element::into_dyn))
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
