//! [`Element`]: the Rust types a tensor holds, each tied to its [`DType`] and to its variant of
//! [`TensorDyn`]. Apart from `dtype.rs` (the dtype codes are words every layer speaks; this
//! trait is the tensors layer's).

use std::fmt;

use half::f16;

use crate::{DType, Tensor, TensorDyn};

mod sealed {
    pub trait Sealed {}
}

/// A type a tensor can hold.
///
/// Sealed: every implementor is plain old data for which any bit pattern is a valid value, which
/// is what makes it sound to view memory that another process writes as `[T]`.
pub trait Element:
    sealed::Sealed + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// The dtype of this element type.
    const DTYPE: DType;
    /// Borrows a dtype-erased tensor as `Tensor<Self>` when it holds this type.
    fn from_dyn(t: &TensorDyn) -> Option<&Tensor<Self>>;
    /// Takes a dtype-erased tensor as `Tensor<Self>`, or gives it back (by design: see
    /// `TensorDyn::into_tensor`).
    #[allow(clippy::result_large_err)]
    fn from_dyn_owned(t: TensorDyn) -> Result<Tensor<Self>, TensorDyn>;
    /// Erases the element type.
    fn into_dyn(t: Tensor<Self>) -> TensorDyn;
}

macro_rules! element {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        // Imports check offsets against `DType::size` alone: it must be the alignment too.
        const _: () = assert!(
            std::mem::size_of::<$ty>() == DType::$variant.size()
                && std::mem::align_of::<$ty>() == DType::$variant.size()
        );
        impl Element for $ty {
            const DTYPE: DType = DType::$variant;
            fn from_dyn(t: &TensorDyn) -> Option<&Tensor<Self>> {
                match t {
                    TensorDyn::$variant(t) => Some(t),
                    _ => None,
                }
            }
            fn from_dyn_owned(t: TensorDyn) -> Result<Tensor<Self>, TensorDyn> {
                match t {
                    TensorDyn::$variant(t) => Ok(t),
                    other => Err(other),
                }
            }
            fn into_dyn(t: Tensor<Self>) -> TensorDyn {
                TensorDyn::$variant(t)
            }
        }
    )*};
}

element! {
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f16 => F16, f32 => F32, f64 => F64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_match_the_rust_types() {
        assert_eq!(<f16 as Element>::DTYPE.size(), std::mem::size_of::<f16>());
        assert_eq!(<u64 as Element>::DTYPE.size(), std::mem::size_of::<u64>());
        assert_eq!(<i8 as Element>::DTYPE.size(), 1);
    }
}
