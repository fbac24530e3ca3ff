//! Element types: [`DType`] with fixed codes and the sealed [`Element`] trait.

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
}
