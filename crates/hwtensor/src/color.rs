//! [`Colorimetry`]: how an image's numbers become colours (primaries, transfer function, YUV
//! matrix, range), carried with the image through views and blobs, so a receiver converts
//! YUV to RGB the way the camera or decoder meant (a BT.709 limited-range frame read as BT.601
//! full range has washed-out blacks and shifted hues).
//!
//! Every part defaults to `Unspecified`: the receiver then chooses, as it had to before.
//! Codes are stable (they travel in blobs); unknown codes from a peer are refused.

/// Colour primaries (the RGB gamut).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum ColorPrimaries {
    /// Not said.
    #[default]
    Unspecified = 0,
    /// ITU-R BT.709 (HD video, sRGB).
    Bt709 = 1,
    /// SMPTE 170M / BT.601 525-line (SD video).
    Bt601 = 2,
    /// ITU-R BT.2020 (UHD, HDR).
    Bt2020 = 3,
    /// Display P3.
    DisplayP3 = 4,
}

/// Transfer function (how code values map to light).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum TransferFunction {
    /// Not said.
    #[default]
    Unspecified = 0,
    /// ITU-R BT.709 (also BT.601 and BT.2020 SDR).
    Bt709 = 1,
    /// sRGB.
    Srgb = 2,
    /// SMPTE ST 2084 (PQ, HDR10).
    Pq = 3,
    /// ARIB STD-B67 (HLG).
    Hlg = 4,
    /// Linear light.
    Linear = 5,
}

/// The YUV (Y'CbCr) matrix; RGB images say `Rgb`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum ColorMatrix {
    /// Not said.
    #[default]
    Unspecified = 0,
    /// No matrix: the values are RGB.
    Rgb = 1,
    /// ITU-R BT.709.
    Bt709 = 2,
    /// ITU-R BT.601.
    Bt601 = 3,
    /// ITU-R BT.2020 non-constant luminance.
    Bt2020 = 4,
}

/// Whether values use the full code range or the video (limited) one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum ColorRange {
    /// Not said.
    #[default]
    Unspecified = 0,
    /// Video range: 16-235 luma, 16-240 chroma at 8 bits.
    Limited = 1,
    /// Full range: 0-255 at 8 bits.
    Full = 2,
}

/// An image's colorimetry. `Colorimetry::default()` says nothing. `#[non_exhaustive]` (chroma
/// siting may join it): made by [`Colorimetry::new`] or taken from a constant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Colorimetry {
    /// The primaries.
    pub primaries: ColorPrimaries,
    /// The transfer function.
    pub transfer: TransferFunction,
    /// The YUV matrix.
    pub matrix: ColorMatrix,
    /// The range.
    pub range: ColorRange,
}

/// The stable codes and names of a part, and the part of a code or name.
macro_rules! color_codes {
    ($ty:ident, $what:literal: $($v:ident = $name:literal),*) => {
        impl $ty {
            /// Every value, in code order.
            pub const ALL: &'static [$ty] = &[$($ty::$v),*];

            /// The stable code.
            pub const fn code(self) -> u8 {
                self as u8
            }
            /// The value with this code, if any.
            pub fn from_code(code: u8) -> Option<$ty> {
                Self::ALL.iter().copied().find(|v| v.code() == code)
            }
            /// The stable lower-case name.
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name),*
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = crate::Error;
            fn from_str(s: &str) -> crate::Result<$ty> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(s.trim()))
                    .ok_or_else(|| crate::Error::UnknownName {
                        what: $what,
                        name: s.to_string(),
                        known: Self::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", "),
                    })
            }
        }
    };
}

color_codes!(ColorPrimaries, "colour primaries": Unspecified = "unspecified", Bt709 = "bt709", Bt601 = "bt601", Bt2020 = "bt2020", DisplayP3 = "display_p3");
color_codes!(TransferFunction, "transfer function": Unspecified = "unspecified", Bt709 = "bt709", Srgb = "srgb", Pq = "pq", Hlg = "hlg", Linear = "linear");
color_codes!(ColorMatrix, "colour matrix": Unspecified = "unspecified", Rgb = "rgb", Bt709 = "bt709", Bt601 = "bt601", Bt2020 = "bt2020");
color_codes!(ColorRange, "colour range": Unspecified = "unspecified", Limited = "limited", Full = "full");

impl Colorimetry {
    /// The colorimetry of these four parts.
    pub const fn new(
        primaries: ColorPrimaries,
        transfer: TransferFunction,
        matrix: ColorMatrix,
        range: ColorRange,
    ) -> Colorimetry {
        Colorimetry {
            primaries,
            transfer,
            matrix,
            range,
        }
    }

    /// HD video as cameras and decoders deliver it: BT.709 primaries, transfer and matrix,
    /// limited range.
    pub const BT709_LIMITED: Colorimetry = Colorimetry {
        primaries: ColorPrimaries::Bt709,
        transfer: TransferFunction::Bt709,
        matrix: ColorMatrix::Bt709,
        range: ColorRange::Limited,
    };

    /// sRGB images: BT.709 primaries, sRGB transfer, RGB values, full range.
    pub const SRGB: Colorimetry = Colorimetry {
        primaries: ColorPrimaries::Bt709,
        transfer: TransferFunction::Srgb,
        matrix: ColorMatrix::Rgb,
        range: ColorRange::Full,
    };

    /// Whether anything is said.
    pub fn is_specified(&self) -> bool {
        *self != Colorimetry::default()
    }

    /// The four codes, as a blob carries them.
    pub(crate) fn codes(&self) -> [u8; 4] {
        [
            self.primaries.code(),
            self.transfer.code(),
            self.matrix.code(),
            self.range.code(),
        ]
    }

    /// The colorimetry of four codes, naming the first unknown one.
    pub(crate) fn from_codes(c: [u8; 4]) -> Result<Colorimetry, String> {
        let unknown = |what: &str, code: u8| format!("unknown colour {what} code {code}");
        Ok(Colorimetry {
            primaries: ColorPrimaries::from_code(c[0]).ok_or_else(|| unknown("primaries", c[0]))?,
            transfer: TransferFunction::from_code(c[1]).ok_or_else(|| unknown("transfer", c[1]))?,
            matrix: ColorMatrix::from_code(c[2]).ok_or_else(|| unknown("matrix", c[2]))?,
            range: ColorRange::from_code(c[3]).ok_or_else(|| unknown("range", c[3]))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_an_unknown_code_is_named() {
        for c in [
            Colorimetry::default(),
            Colorimetry::BT709_LIMITED,
            Colorimetry::SRGB,
        ] {
            assert_eq!(Colorimetry::from_codes(c.codes()), Ok(c));
        }
        let err = Colorimetry::from_codes([1, 1, 9, 1]).unwrap_err();
        assert!(err.contains("matrix") && err.contains('9'), "{err}");
    }
}
