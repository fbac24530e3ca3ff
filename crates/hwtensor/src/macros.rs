//! Dispatch over the element types of a [`TensorDyn`](crate::TensorDyn).

/// Runs `$body` with `$t` bound to the typed tensor inside `$self`, whatever its type.
macro_rules! each_tensor {
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
            DType::F16 => Tensor::<half::f16>::$make($($arg),*).map(TensorDyn::F16),
            DType::F32 => Tensor::<f32>::$make($($arg),*).map(TensorDyn::F32),
            DType::F64 => Tensor::<f64>::$make($($arg),*).map(TensorDyn::F64),
        }
    };
}

/// The stable-code plumbing of a `#[repr(u8)]` enum that has an `ALL` array, a `name()` and
/// `aliases()` (other spellings users write, such as NumPy's `"float32"`): `code`,
/// `from_code`, `Display` (the name, padded as asked) and `FromStr` (by name or alias, any
/// case; an unknown one is [`Error::UnknownName`](crate::Error::UnknownName) listing the names).
macro_rules! coded_enum {
    ($ty:ident, $what:literal) => {
        impl $ty {
            /// The stable numeric code.
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The value with this code, if any.
            pub fn from_code(code: u8) -> Option<$ty> {
                $ty::ALL.into_iter().find(|v| v.code() == code)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = crate::Error;
            fn from_str(s: &str) -> Result<Self, crate::Error> {
                let wanted = s.trim();
                $ty::ALL
                    .into_iter()
                    .find(|v| {
                        std::iter::once(v.name())
                            .chain(v.aliases().iter().copied())
                            .any(|n| n.eq_ignore_ascii_case(wanted))
                    })
                    .ok_or_else(|| crate::Error::UnknownName {
                        what: $what,
                        name: s.to_string(),
                        known: $ty::ALL.map(|v| v.name()).join(", "),
                    })
            }
        }
    };
}
