//! The vocabulary of EdgeFirst messages and hwtensor's, both ways: element types and storage
//! kinds (the codes of the EdgeFirst HAL tensor ABI, `edgefirst-tensor-abi`), pixel formats
//! (the format strings EdgeFirst nodes write) and colorimetry names. Pure tables.

use hwtensor::{
    ColorMatrix, ColorPrimaries, ColorRange, Colorimetry, DType, PixelFormat, TransferFunction,
};

/// `EfStorageKind::Mem`: heap bytes, which travel inline.
pub(crate) const STORAGE_MEM: u32 = 0;
/// `EfStorageKind::Shm`: a memfd or shared-memory file.
pub(crate) const STORAGE_SHM: u32 = 1;
/// `EfStorageKind::DmaBuf`.
pub(crate) const STORAGE_DMA_BUF: u32 = 2;

/// The HAL's dtype code of `dtype`: the same eleven types in the same order, counted from 0
/// where hwtensor counts from 1.
pub(crate) fn dtype_code(dtype: DType) -> u32 {
    u32::from(dtype.code()) - 1
}

/// The dtype of a HAL dtype code.
pub(crate) fn dtype_of(code: u32) -> Option<DType> {
    u8::try_from(code.checked_add(1)?)
        .ok()
        .and_then(DType::from_code)
}

/// The format strings EdgeFirst nodes write (ROS image encodings for RGB and grey, FourCC
/// names for YUV, `_planar_nchw` for planar RGB), one per format hwtensor lays out.
const FORMAT_NAMES: &[(PixelFormat, &str)] = &[
    (PixelFormat::Rgb, "rgb8"),
    (PixelFormat::Rgba, "rgba8"),
    (PixelFormat::Bgra, "bgra8"),
    (PixelFormat::Bgr, "bgr8"),
    (PixelFormat::Bgrx, "bgrx8"),
    (PixelFormat::Grey, "mono8"),
    (PixelFormat::Gray16, "mono16"),
    (PixelFormat::Yuyv, "YUYV"),
    (PixelFormat::Vyuy, "VYUY"),
    (PixelFormat::Uyvy, "UYVY"),
    (PixelFormat::Nv12, "NV12"),
    (PixelFormat::Nv21, "NV21"),
    (PixelFormat::Nv16, "NV16"),
    (PixelFormat::Nv24, "NV24"),
    (PixelFormat::I420, "I420"),
    (PixelFormat::Yv12, "YV12"),
    (PixelFormat::P010, "P010"),
    (PixelFormat::PlanarRgb, "rgb8_planar_nchw"),
    (PixelFormat::PlanarRgba, "rgba8_planar_nchw"),
];

/// ROS's names for the packed 4:2:2 formats, which differ from their FourCCs.
const ROS_YUV_NAMES: &[(PixelFormat, &str)] = &[
    (PixelFormat::Uyvy, "yuv422"),
    (PixelFormat::Yuyv, "yuv422_yuy2"),
];

/// The format string written for `format`.
pub(crate) fn format_name(format: PixelFormat) -> &'static str {
    FORMAT_NAMES
        .iter()
        .find(|(f, _)| *f == format)
        .map_or(format.name(), |(_, n)| n)
}

/// The format a string names: EdgeFirst's names and ROS's in any case, then hwtensor's own
/// names and aliases, then GStreamer's.
pub(crate) fn format_of(name: &str) -> Option<PixelFormat> {
    FORMAT_NAMES
        .iter()
        .chain(ROS_YUV_NAMES)
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(f, _)| *f)
        .or_else(|| name.parse().ok())
        .or_else(|| PixelFormat::from_gst_name(name))
}

/// The four colorimetry strings of `c` (`""` for what is unspecified; an RGB matrix is `""`,
/// which the schema defines as "not applicable").
pub(crate) fn color_names(c: Colorimetry) -> [&'static str; 4] {
    let primaries = match c.primaries {
        ColorPrimaries::Bt709 => "bt709",
        ColorPrimaries::Bt601 => "smpte170m",
        ColorPrimaries::Bt2020 => "bt2020",
        ColorPrimaries::DisplayP3 => "display_p3",
        _ => "",
    };
    let transfer = match c.transfer {
        TransferFunction::Unspecified => "",
        t => t.name(),
    };
    let matrix = match c.matrix {
        ColorMatrix::Unspecified | ColorMatrix::Rgb => "",
        m => m.name(),
    };
    let range = match c.range {
        ColorRange::Unspecified => "",
        r => r.name(),
    };
    [primaries, transfer, matrix, range]
}

/// The colorimetry four strings say for an image of `format`. A name this table does not know
/// is left unspecified rather than refusing the frame: colour names are advisory, and the
/// pixels are what the frame is for.
pub(crate) fn colorimetry_of(format: PixelFormat, names: [&str; 4]) -> Colorimetry {
    if names.iter().all(|n| n.is_empty()) {
        return Colorimetry::default();
    }
    let [space, transfer, encoding, range] = names;
    let primaries = match space.to_ascii_lowercase().as_str() {
        "bt709" | "srgb" => ColorPrimaries::Bt709,
        "smpte170m" | "bt601" => ColorPrimaries::Bt601,
        "bt2020" => ColorPrimaries::Bt2020,
        "display_p3" | "p3" => ColorPrimaries::DisplayP3,
        _ => ColorPrimaries::Unspecified,
    };
    let rgb = matches!(
        format.layout(),
        hwtensor::Layout::Packed | hwtensor::Layout::Planar
    ) && !format.pairs_pixels();
    let matrix = match (encoding, rgb) {
        ("", true) => ColorMatrix::Rgb,
        (e, _) => e.parse().unwrap_or_default(),
    };
    Colorimetry::new(
        primaries,
        transfer.parse().unwrap_or_default(),
        matrix,
        range.parse().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_through_its_hal_code_and_u8_is_zero() {
        for d in DType::ALL {
            assert_eq!(dtype_of(dtype_code(d)), Some(d));
        }
        assert_eq!(dtype_code(DType::U8), 0);
        assert_eq!(dtype_code(DType::F64), 10);
        assert_eq!(dtype_of(11), None);
        assert_eq!(dtype_of(u32::MAX), None);
    }

    #[test]
    fn every_format_round_trips_through_its_edgefirst_name() {
        for f in PixelFormat::ALL {
            assert_eq!(format_of(format_name(f)), Some(f), "{f}");
        }
    }

    #[test]
    fn edgefirst_ros_gstreamer_and_hwtensor_spellings_are_all_understood() {
        assert_eq!(format_of("nv12"), Some(PixelFormat::Nv12));
        assert_eq!(format_of("yuv422"), Some(PixelFormat::Uyvy));
        assert_eq!(format_of("GRAY16_LE"), Some(PixelFormat::Gray16));
        assert_eq!(format_of("rgba"), Some(PixelFormat::Rgba));
        assert_eq!(format_of("h264"), None);
        assert_eq!(format_of(""), None);
    }

    #[test]
    fn colorimetry_round_trips_through_its_names() {
        let hd = Colorimetry::BT709_LIMITED;
        assert_eq!(color_names(hd), ["bt709", "bt709", "bt709", "limited"]);
        assert_eq!(colorimetry_of(PixelFormat::Nv12, color_names(hd)), hd);
        let srgb = Colorimetry::SRGB;
        assert_eq!(colorimetry_of(PixelFormat::Rgba, color_names(srgb)), srgb);
        for format in [PixelFormat::Nv12, PixelFormat::Rgba] {
            let none = Colorimetry::default();
            assert_eq!(colorimetry_of(format, color_names(none)), none);
        }
    }
}
