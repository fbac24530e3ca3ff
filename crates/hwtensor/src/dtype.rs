//! Element types: [`DType`] with fixed codes and the sealed [`Element`] trait.

use std::fmt;

use half::f16;

use crate::{Tensor, TensorDyn};

/// The element type of a tensor.
///
/// The numeric codes are part of the wire format (blobs, the C ABI): they never change, and new
/// types only ever take new codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
// New ones will come (BF16, P010, a backing, a kind of identity): outside this crate a
// match needs a wildcard arm, so adding one is not a breaking change.
#[non_exhaustive]
pub enum DType {
    /// Unsigned 8-bit integer (`u8`).
    U8 = 1,
    /// Signed 8-bit integer (`i8`).
    I8 = 2,
    /// Unsigned 16-bit integer (`u16`).
    U16 = 3,
    /// Signed 16-bit integer (`i16`).
    I16 = 4,
    /// Unsigned 32-bit integer (`u32`).
    U32 = 5,
    /// Signed 32-bit integer (`i32`).
    I32 = 6,
    /// Unsigned 64-bit integer (`u64`).
    U64 = 7,
    /// Signed 64-bit integer (`i64`).
    I64 = 8,
    /// IEEE half-precision float ([`f16`](crate::f16)).
    F16 = 9,
    /// IEEE single-precision float (`f32`).
    F32 = 10,
    /// IEEE double-precision float (`f64`).
    F64 = 11,
}

impl DType {
    /// Every dtype, in code order.
    pub const ALL: [DType; 11] = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element, which is also its alignment (asserted for every element type at
    /// compile time), so an offset that is a multiple of it is one a `&[T]` may start at.
    pub const fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The stable lower-case name (`"u8"`, `"f16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Other names users write for this dtype: NumPy's and C's.
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            DType::U8 => &["uint8"],
            DType::I8 => &["int8"],
            DType::U16 => &["uint16"],
            DType::I16 => &["int16"],
            DType::U32 => &["uint32"],
            DType::I32 => &["int32"],
            DType::U64 => &["uint64"],
            DType::I64 => &["int64"],
            DType::F16 => &["float16", "half"],
            DType::F32 => &["float32", "float"],
            DType::F64 => &["float64", "double"],
        }
    }
}

coded_enum!(DType, "dtype");

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
    fn codes_and_names_are_fixed_and_round_trip() {
        let expected = [
            (1, "u8"),
            (2, "i8"),
            (3, "u16"),
            (4, "i16"),
            (5, "u32"),
            (6, "i32"),
            (7, "u64"),
            (8, "i64"),
            (9, "f16"),
            (10, "f32"),
            (11, "f64"),
        ];
        for (d, (code, name)) in DType::ALL.into_iter().zip(expected) {
            assert_eq!((d.code(), d.name()), (code, name));
            assert_eq!(DType::from_code(code), Some(d));
            assert_eq!(name.parse::<DType>().unwrap(), d);
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_code(12), None);
        assert!("f8".parse::<DType>().is_err());
    }

    #[test]
    fn dtypes_parse_by_numpy_and_c_names_in_any_case_and_an_unknown_one_lists_the_names() {
        assert_eq!("float32".parse::<DType>().unwrap(), DType::F32);
        assert_eq!("UINT8".parse::<DType>().unwrap(), DType::U8);
        assert_eq!(" F16 ".parse::<DType>().unwrap(), DType::F16);
        assert_eq!("double".parse::<DType>().unwrap(), DType::F64);
        match "float8".parse::<DType>() {
            Err(crate::Error::UnknownName { what, name, known }) => {
                assert_eq!((what, name.as_str()), ("dtype", "float8"));
                assert!(known.contains("f32") && known.contains("u8"), "{known}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn element_sizes_match_the_rust_types() {
        assert_eq!(<f16 as Element>::DTYPE.size(), std::mem::size_of::<f16>());
        assert_eq!(<u64 as Element>::DTYPE.size(), std::mem::size_of::<u64>());
        assert_eq!(<i8 as Element>::DTYPE.size(), 1);
    }
}
