//! [`TensorDyn`]: a tensor whose element type is known at run time (what C and Python see).

use std::os::fd::OwnedFd;

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

/// Runs `$body` with `$t` bound to the typed tensor inside `$self`, whatever its type.
macro_rules! each {
    ($self:expr, $t:ident => $body:expr) => {
        match $self {
            TensorDyn::U8($t) => $body,
            TensorDyn::I8($t) => $body,
            TensorDyn::U16($t) => $body,
            TensorDyn::I16($t) => $body,
            TensorDyn::U32($t) => $body,
            TensorDyn::I32($t) => $body,
            TensorDyn::U64($t) => $body,
            TensorDyn::I64($t) => $body,
            TensorDyn::F16($t) => $body,
            TensorDyn::F32($t) => $body,
            TensorDyn::F64($t) => $body,
        }
    };
}

/// Calls the generic constructor `$make::<T>(...)` for the `T` of a run-time dtype.
macro_rules! for_dtype {
    ($dtype:expr, $make:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::U8 => Tensor::<u8>::$make($($arg),*).map(TensorDyn::U8),
            DType::I8 => Tensor::<i8>::$make($($arg),*).map(TensorDyn::I8),
            DType::U16 => Tensor::<u16>::$make($($arg),*).map(TensorDyn::U16),
            DType::I16 => Tensor::<i16>::$make($($arg),*).map(TensorDyn::I16),
            DType::U32 => Tensor::<u32>::$make($($arg),*).map(TensorDyn::U32),
            DType::I32 => Tensor::<i32>::$make($($arg),*).map(TensorDyn::I32),
            DType::U64 => Tensor::<u64>::$make($($arg),*).map(TensorDyn::U64),
            DType::I64 => Tensor::<i64>::$make($($arg),*).map(TensorDyn::I64),
            DType::F16 => Tensor::<f16>::$make($($arg),*).map(TensorDyn::F16),
            DType::F32 => Tensor::<f32>::$make($($arg),*).map(TensorDyn::F32),
            DType::F64 => Tensor::<f64>::$make($($arg),*).map(TensorDyn::F64),
        }
    };
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

    /// See [`Tensor::from_fd`].
    pub fn from_fd(fd: OwnedFd, shape: &[usize], dtype: DType) -> Result<Self> {
        for_dtype!(dtype, from_fd(fd, shape))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        each!(self, t => t.dtype())
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
        each!(self, t => t.shape())
    }

    pub fn strides(&self) -> &[usize] {
        each!(self, t => t.strides())
    }

    pub fn len(&self) -> usize {
        each!(self, t => t.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn byte_offset(&self) -> usize {
        each!(self, t => t.byte_offset())
    }

    pub fn buffer_len(&self) -> usize {
        each!(self, t => t.buffer_len())
    }

    pub fn memory(&self) -> TensorMemory {
        each!(self, t => t.memory())
    }

    pub fn access(&self) -> CpuAccess {
        each!(self, t => t.access())
    }

    pub fn identity(&self) -> BufferIdentity {
        each!(self, t => t.identity())
    }

    pub fn liveness(&self) -> BufferLiveness {
        each!(self, t => t.liveness())
    }

    pub fn image_info(&self) -> Option<&ImageInfo> {
        each!(self, t => t.image_info())
    }

    pub fn clone_fd(&self) -> Result<OwnedFd> {
        each!(self, t => t.clone_fd())
    }

    pub fn view(&self, region: Region) -> Result<Self> {
        each!(self, t => t.view(region).map(Element::into_dyn))
    }

    pub fn batch(&self, index: usize) -> Result<Self> {
        each!(self, t => t.batch(index).map(Element::into_dyn))
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
