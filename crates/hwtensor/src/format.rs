//! [`PixelFormat`]: image layouts, their buffer geometry and their plane tables.
//!
//! Geometry is exact for every size a camera produces. A semi-planar image of odd height has
//! `h + ceil(h / 2)` combined rows (NV12 at 640x483 is 725 rows), because the last chroma row
//! still covers the last luma row; rounding down loses it and rounding the buffer up to an even
//! height misplaces every plane a driver computes from the real height.

use crate::{Error, Result};

/// How the components of an image are arranged in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// New ones will come (BF16, P010, a backing, a kind of identity): outside this crate a
// match needs a wildcard arm, so adding one is not a breaking change.
#[non_exhaustive]
pub enum Layout {
    /// All components of a pixel are adjacent: `[h, w, c]` (or `[h, w]` for one component).
    Packed,
    /// One full-size plane per component: `[c, h, w]`.
    Planar,
    /// A full-size luma plane followed by one interleaved chroma plane: `[rows, w]`.
    SemiPlanar,
    /// A full-size luma plane followed by two chroma planes of half the width and half the
    /// height, each row half the luma row stride apart (V4L2's single-buffer YU12/YV12):
    /// `[rows, w]`, the same combined grid as NV12.
    PlanarYuv,
}

/// The pixel formats hwtensor describes.
///
/// The numeric codes are part of the wire format and never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
// New ones will come (BF16, P010, a backing, a kind of identity): outside this crate a
// match needs a wildcard arm, so adding one is not a breaking change.
#[non_exhaustive]
pub enum PixelFormat {
    /// Packed 8-bit R, G, B.
    Rgb = 1,
    /// Packed 8-bit R, G, B, A.
    Rgba = 2,
    /// Packed 8-bit B, G, R, A (the order Windows and many displays use).
    Bgra = 3,
    /// One 8-bit luma channel.
    Grey = 4,
    /// Packed 4:2:2: Y0 U Y1 V, two pixels in four bytes.
    Yuyv = 5,
    /// Packed 4:2:2: V Y0 U Y1, two pixels in four bytes.
    Vyuy = 6,
    /// Semi-planar 4:2:0: a Y plane, then a half-height plane of interleaved U V.
    Nv12 = 7,
    /// Semi-planar 4:2:2: a Y plane, then a full-height plane of interleaved U V at half width.
    Nv16 = 8,
    /// Semi-planar 4:4:4: a Y plane, then a full plane of interleaved U V.
    Nv24 = 9,
    /// Planar R, G, B: three full planes.
    PlanarRgb = 10,
    /// Planar R, G, B, A: four full planes.
    PlanarRgba = 11,
    /// Semi-planar 4:2:0 as NV12, with the chroma pairs in the order V U.
    Nv21 = 12,
    /// Packed 4:2:2: U Y0 V Y1, two pixels in four bytes.
    Uyvy = 13,
    /// Packed 8-bit B, G, R.
    Bgr = 14,
    /// Packed 8-bit B, G, R and an unused byte.
    Bgrx = 15,
    /// One 16-bit little-endian luma channel (2-byte elements, e.g. `u16`).
    Gray16 = 16,
    /// Semi-planar 4:2:0 as NV12 with 16-bit little-endian samples holding 10 bits in their high
    /// bits (2-byte elements, e.g. `u16`).
    P010 = 17,
    /// Planar 4:2:0: a Y plane, then a U and a V plane at half width and half height.
    I420 = 18,
    /// Planar 4:2:0 as I420 with the V plane before the U plane.
    Yv12 = 19,
}

/// One plane of an image: where it starts in the buffer and how its rows are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Plane {
    /// Byte offset of the plane's first row from the start of the image.
    pub offset: usize,
    /// Bytes from the start of one row of the plane to the next.
    pub row_stride: usize,
    /// Number of rows.
    pub rows: usize,
    /// Bytes the plane occupies (`rows * row_stride`).
    pub size: usize,
}

/// The FourCC of four ASCII characters, as V4L2 and DRM pack them (first character lowest).
pub const fn fourcc(code: &[u8; 4]) -> u32 {
    code[0] as u32 | (code[1] as u32) << 8 | (code[2] as u32) << 16 | (code[3] as u32) << 24
}

/// Each format's V4L2 and DRM FourCC, as the kernel documents their byte order: V4L2 names
/// bytes in memory order, DRM little-endian words, so the two differ for RGB and grey. Planar
/// RGB has neither.
const FOURCCS: [(PixelFormat, &[u8; 4], &[u8; 4]); 17] = [
    (PixelFormat::Rgb, b"RGB3", b"BG24"), // V4L2 RGB24 / DRM BGR888: R, G, B
    (PixelFormat::Rgba, b"AB24", b"AB24"), // V4L2 RGBA32 / DRM ABGR8888: R, G, B, A
    (PixelFormat::Bgra, b"AR24", b"AR24"), // V4L2 ABGR32 / DRM ARGB8888: B, G, R, A
    (PixelFormat::Grey, b"GREY", b"R8  "),
    (PixelFormat::Yuyv, b"YUYV", b"YUYV"),
    (PixelFormat::Vyuy, b"VYUY", b"VYUY"),
    (PixelFormat::Nv12, b"NV12", b"NV12"),
    (PixelFormat::Nv16, b"NV16", b"NV16"),
    (PixelFormat::Nv24, b"NV24", b"NV24"),
    (PixelFormat::Nv21, b"NV21", b"NV21"),
    (PixelFormat::Uyvy, b"UYVY", b"UYVY"),
    (PixelFormat::Bgr, b"BGR3", b"RG24"), // V4L2 BGR24 / DRM RGB888: B, G, R
    (PixelFormat::Bgrx, b"XR24", b"XR24"), // V4L2 XBGR32 / DRM XRGB8888: B, G, R, X
    (PixelFormat::Gray16, b"Y16 ", b"R16 "),
    (PixelFormat::P010, b"P010", b"P010"),
    (PixelFormat::I420, b"YU12", b"YU12"), // V4L2 YUV420 / DRM YUV420
    (PixelFormat::Yv12, b"YV12", b"YV12"), // V4L2 YVU420 / DRM YVU420
];

/// Each format's name in GStreamer's `video/x-raw` caps (`GstVideoFormat`). hwtensor's planar
/// RGBA (R, G, B, A planes) has none: GStreamer's four-plane RGB is `GBRA`, another order.
const GST_NAMES: [(PixelFormat, &str); 18] = [
    (PixelFormat::Rgb, "RGB"),
    (PixelFormat::Rgba, "RGBA"),
    (PixelFormat::Bgra, "BGRA"),
    (PixelFormat::Grey, "GRAY8"),
    (PixelFormat::Yuyv, "YUY2"),
    (PixelFormat::Vyuy, "VYUY"),
    (PixelFormat::Nv12, "NV12"),
    (PixelFormat::Nv16, "NV16"),
    (PixelFormat::Nv24, "NV24"),
    (PixelFormat::PlanarRgb, "RGBP"),
    (PixelFormat::Nv21, "NV21"),
    (PixelFormat::Uyvy, "UYVY"),
    (PixelFormat::Bgr, "BGR"),
    (PixelFormat::Bgrx, "BGRx"),
    (PixelFormat::Gray16, "GRAY16_LE"),
    (PixelFormat::P010, "P010_10LE"),
    (PixelFormat::I420, "I420"),
    (PixelFormat::Yv12, "YV12"),
];

impl PixelFormat {
    /// Every format, in code order.
    pub const ALL: [PixelFormat; 19] = [
        PixelFormat::Rgb,
        PixelFormat::Rgba,
        PixelFormat::Bgra,
        PixelFormat::Grey,
        PixelFormat::Yuyv,
        PixelFormat::Vyuy,
        PixelFormat::Nv12,
        PixelFormat::Nv16,
        PixelFormat::Nv24,
        PixelFormat::PlanarRgb,
        PixelFormat::PlanarRgba,
        PixelFormat::Nv21,
        PixelFormat::Uyvy,
        PixelFormat::Bgr,
        PixelFormat::Bgrx,
        PixelFormat::Gray16,
        PixelFormat::P010,
        PixelFormat::I420,
        PixelFormat::Yv12,
    ];

    /// The stable name (`"rgba"`, `"nv12"`, `"planar_rgb"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            PixelFormat::Rgb => "rgb",
            PixelFormat::Rgba => "rgba",
            PixelFormat::Bgra => "bgra",
            PixelFormat::Grey => "grey",
            PixelFormat::Yuyv => "yuyv",
            PixelFormat::Vyuy => "vyuy",
            PixelFormat::Nv12 => "nv12",
            PixelFormat::Nv16 => "nv16",
            PixelFormat::Nv24 => "nv24",
            PixelFormat::PlanarRgb => "planar_rgb",
            PixelFormat::PlanarRgba => "planar_rgba",
            PixelFormat::Nv21 => "nv21",
            PixelFormat::Uyvy => "uyvy",
            PixelFormat::Bgr => "bgr",
            PixelFormat::Bgrx => "bgrx",
            PixelFormat::Gray16 => "gray16",
            PixelFormat::P010 => "p010",
            PixelFormat::I420 => "i420",
            PixelFormat::Yv12 => "yv12",
        }
    }

    /// Other names users write for this format (GStreamer's, FFmpeg's, common spellings).
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            PixelFormat::Rgb => &["rgb24", "rgb888"],
            PixelFormat::Rgba => &["rgba8", "rgba32", "rgbx"],
            PixelFormat::Bgra => &["bgra8", "bgra32"],
            PixelFormat::Grey => &["gray", "gray8", "grey8", "y8", "l8"],
            PixelFormat::Yuyv => &["yuy2", "yuyv422"],
            PixelFormat::Vyuy => &[],
            PixelFormat::Nv12 => &[],
            PixelFormat::Nv16 => &[],
            PixelFormat::Nv24 => &[],
            PixelFormat::PlanarRgb => &["rgbp", "planar-rgb", "rgb_planar"],
            PixelFormat::PlanarRgba => &["rgbap", "planar-rgba", "rgba_planar"],
            PixelFormat::Nv21 => &[],
            PixelFormat::Uyvy => &["uyvy422"],
            PixelFormat::Bgr => &["bgr24", "bgr888"],
            PixelFormat::Bgrx => &["bgrx8", "bgr0"],
            PixelFormat::Gray16 => &["gray16_le", "gray16le", "y16"],
            PixelFormat::P010 => &["p010_10le", "p010le"],
            PixelFormat::I420 => &["yu12", "yuv420p"],
            PixelFormat::Yv12 => &["yvu420p"],
        }
    }

    /// The V4L2 FourCC of this format (`V4L2_PIX_FMT_*`), where V4L2 has one: the code a
    /// capture driver reports for frames laid out exactly as hwtensor lays this format out.
    pub fn fourcc(self) -> Option<u32> {
        FOURCCS.iter().find(|c| c.0 == self).map(|c| fourcc(c.1))
    }

    /// The DRM FourCC of this format (`DRM_FORMAT_*`, little-endian component order), where DRM
    /// has one: what a display or EGL import is told.
    pub fn drm_fourcc(self) -> Option<u32> {
        FOURCCS.iter().find(|c| c.0 == self).map(|c| fourcc(c.2))
    }

    /// This format's name in GStreamer caps (`"I420"`, `"GRAY16_LE"`), where GStreamer has one.
    pub fn gst_name(self) -> Option<&'static str> {
        GST_NAMES.iter().find(|c| c.0 == self).map(|c| c.1)
    }

    /// The format a GStreamer caps name names (exact, as caps spell it); `None` for one
    /// hwtensor does not lay out.
    pub fn from_gst_name(name: &str) -> Option<PixelFormat> {
        GST_NAMES.iter().find(|c| c.1 == name).map(|c| c.0)
    }

    /// The format a V4L2 or DRM FourCC names, including V4L2's multi-planar variants (`NM12`,
    /// `NM21`, `NM16`: the same pixels with one buffer per plane); `None` for a code hwtensor
    /// does not lay out.
    pub fn from_fourcc(code: u32) -> Option<PixelFormat> {
        const MULTI_PLANAR: [(&[u8; 4], PixelFormat); 3] = [
            (b"NM12", PixelFormat::Nv12),
            (b"NM21", PixelFormat::Nv21),
            (b"NM16", PixelFormat::Nv16),
        ];
        FOURCCS
            .iter()
            .find(|c| fourcc(c.1) == code || fourcc(c.2) == code)
            .map(|c| c.0)
            .or_else(|| {
                MULTI_PLANAR
                    .iter()
                    .find(|(c, _)| fourcc(c) == code)
                    .map(|(_, f)| *f)
            })
    }

    /// How the components are arranged.
    pub const fn layout(self) -> Layout {
        use PixelFormat::*;
        match self {
            Rgb | Rgba | Bgra | Grey | Yuyv | Vyuy | Uyvy | Bgr | Bgrx | Gray16 => Layout::Packed,
            Nv12 | Nv16 | Nv24 | Nv21 | P010 => Layout::SemiPlanar,
            PlanarRgb | PlanarRgba => Layout::Planar,
            I420 | Yv12 => Layout::PlanarYuv,
        }
    }

    /// Elements per pixel in a packed row (YUYV carries 2 per pixel: Y and alternately U or V),
    /// or the number of planes of a planar format. 1 for semi-planar and planar YUV formats
    /// (per luma sample).
    pub const fn channels(self) -> usize {
        use PixelFormat::*;
        match self {
            Grey | Gray16 | Nv12 | Nv16 | Nv24 | Nv21 | P010 | I420 | Yv12 => 1,
            Yuyv | Vyuy | Uyvy => 2,
            Rgb | Bgr | PlanarRgb => 3,
            Rgba | Bgra | Bgrx | PlanarRgba => 4,
        }
    }

    /// The element size this format's samples demand (GRAY16 and P010 are 16-bit), or `None`
    /// when any element type may carry it.
    pub const fn sample_bytes(self) -> Option<usize> {
        match self {
            PixelFormat::Gray16 | PixelFormat::P010 => Some(2),
            _ => None,
        }
    }

    /// Checks that a row stride of `row_stride` bytes lays out every plane: planar YUV chroma
    /// rows are half of it apart, so it must be even.
    pub fn check_stride(self, row_stride: usize) -> Result<()> {
        if self.layout() == Layout::PlanarYuv && !row_stride.is_multiple_of(2) {
            return Err(Error::RowStride(format!(
                "{self} chroma rows are half the luma stride apart, so the stride must be even \
                 (got {row_stride})"
            )));
        }
        Ok(())
    }

    /// Bytes of data in each row of plane `index` of a `w`-pixel image of `elem`-byte elements,
    /// whatever its stride: the first plane (and every plane of planar RGB) holds a luma row;
    /// a chroma plane holds half of it (I420, YV12), all of it (NV12, NV21, P010, NV16: U and
    /// V interleaved at half width) or twice it (NV24). `None` on overflow.
    pub fn plane_row_bytes(self, w: usize, elem: usize, index: usize) -> Option<usize> {
        let luma = self.min_row_bytes(w, elem)?;
        match (index, self) {
            (0, _) | (_, PixelFormat::PlanarRgb | PixelFormat::PlanarRgba) => Some(luma),
            (_, PixelFormat::I420 | PixelFormat::Yv12) => Some(luma / 2),
            (_, PixelFormat::Nv24) => luma.checked_mul(2),
            _ => Some(luma),
        }
    }

    /// The row stride of the chroma planes a format derives from the luma's when nothing else
    /// is said: half of it (I420, YV12), twice it (NV24), the same (the others).
    pub const fn derived_chroma_stride(self, row_stride: usize) -> usize {
        match self {
            PixelFormat::I420 | PixelFormat::Yv12 => row_stride / 2,
            PixelFormat::Nv24 => row_stride.saturating_mul(2),
            _ => row_stride,
        }
    }

    /// Whether the format has chroma planes after its luma plane (semi-planar and planar YUV),
    /// whose row stride may differ from the one the format derives.
    pub const fn has_chroma_planes(self) -> bool {
        matches!(self.layout(), Layout::SemiPlanar | Layout::PlanarYuv)
    }

    /// Checks that `elem`-byte elements can carry this format's samples.
    pub fn check_element(self, elem: usize) -> Result<()> {
        match self.sample_bytes() {
            Some(bytes) if bytes != elem => Err(Error::Image(format!(
                "{self} samples are {bytes}-byte words; use a {bytes}-byte element type \
                 (u16), not a {elem}-byte one"
            ))),
            _ => Ok(()),
        }
    }

    /// Whether pixels come in horizontal pairs that share chroma, so widths and x offsets must
    /// be even.
    pub const fn pairs_pixels(self) -> bool {
        use PixelFormat::*;
        matches!(
            self,
            Yuyv | Vyuy | Uyvy | Nv12 | Nv21 | Nv16 | P010 | I420 | Yv12
        )
    }

    /// Rows of the combined buffer grid of an image `height` pixels high.
    ///
    /// Saturates rather than wraps: [`check_size`](Self::check_size) refuses such heights.
    pub const fn buffer_rows(self, height: usize) -> usize {
        match self {
            PixelFormat::Nv12
            | PixelFormat::Nv21
            | PixelFormat::P010
            | PixelFormat::I420
            | PixelFormat::Yv12 => height.saturating_add(height.div_ceil(2)),
            PixelFormat::Nv16 => height.saturating_mul(2),
            PixelFormat::Nv24 => height.saturating_mul(3),
            _ => height,
        }
    }

    /// The shape of the buffer that holds one `w`x`h` image: the tensor's shape.
    ///
    /// Whether the image's grid ([`allocation_shape`](Self::allocation_shape) at the row
    /// stride) reaches every chroma byte as an element: not for I420 and YV12 (two chroma rows
    /// share a grid row, half a stride apart) nor NV24 (a chroma row spans two grid rows),
    /// whose padded images must be copied and addressed through the plane table.
    pub const fn grid_holds_chroma(self) -> bool {
        !matches!(
            self,
            PixelFormat::I420 | PixelFormat::Yv12 | PixelFormat::Nv24
        )
    }

    /// Semi-planar formats are one combined `[rows, w]` grid with the luma row stride. For NV24
    /// that grid matches the chroma plane only when rows are tight: a padded NV24 chroma row is
    /// `2 * row_stride` bytes (the V4L2/DRM layout that [`plane_table`](Self::plane_table)
    /// reports), so address a padded NV24 image's chroma through the plane table. I420 and YV12
    /// fill the same grid as NV12: their two chroma planes, rows half the stride apart, take
    /// the rows NV12's one chroma plane takes.
    pub fn allocation_shape(self, w: usize, h: usize) -> Vec<usize> {
        match (self.layout(), self.channels()) {
            (Layout::Packed, 1) => vec![h, w],
            (Layout::Packed, c) => vec![h, w, c],
            (Layout::Planar, c) => vec![c, h, w],
            (Layout::SemiPlanar | Layout::PlanarYuv, _) => vec![self.buffer_rows(h), w],
        }
    }

    /// The index grid of the image: one entry per addressable sample. Formats whose components
    /// are not independent samples (YUV) address pixels: NV12 and YUYV are `[h, w]`.
    pub fn addressing_shape(self, w: usize, h: usize) -> Vec<usize> {
        match (self.layout(), self.channels()) {
            (Layout::SemiPlanar | Layout::PlanarYuv, _) => vec![h, w],
            (Layout::Packed, _) if self.pairs_pixels() => vec![h, w],
            _ => self.allocation_shape(w, h),
        }
    }

    /// Position, counted from the last dimension, of the row dimension in `allocation_shape`:
    /// the dimension whose stride is the row stride.
    pub(crate) fn row_dim_from_end(self) -> usize {
        match (self.layout(), self.channels()) {
            (Layout::Packed, c) if c > 1 => 3,
            _ => 2,
        }
    }

    /// Bytes of one tight row of the image at `w` pixels with `elem`-byte components.
    pub fn min_row_bytes(self, w: usize, elem: usize) -> Option<usize> {
        let per_px = match self.layout() {
            Layout::Packed => self.channels(),
            Layout::Planar | Layout::SemiPlanar | Layout::PlanarYuv => 1,
        };
        w.checked_mul(per_px)?.checked_mul(elem)
    }

    /// Checks that a `w`x`h` image of this format can exist.
    pub fn check_size(self, w: usize, h: usize) -> Result<()> {
        if self.pairs_pixels() && !w.is_multiple_of(2) {
            return Err(Error::Image(format!(
                "{self} shares chroma between horizontal pixel pairs, so its width must be even (got {w})"
            )));
        }
        if self.buffer_rows(h) == usize::MAX {
            return Err(Error::Image(format!(
                "a {self} image {h} rows high overflows usize"
            )));
        }
        let _ = w;
        Ok(())
    }

    /// The planes of a `w`x`h` image whose rows are `row_stride` bytes apart, in memory order
    /// (YV12: Y, V, U).
    ///
    /// Row strides are bytes. The chroma plane of NV24 carries two bytes per pixel, so its rows
    /// are `2 * row_stride` apart; the chroma planes of I420 and YV12 half a luma row, so theirs
    /// are `row_stride / 2` apart and the stride must be even (the V4L2 single-buffer convention).
    pub fn plane_table(self, w: usize, h: usize, row_stride: usize) -> Result<Vec<Plane>> {
        self.plane_table_with(w, h, row_stride, None)
    }

    /// [`plane_table`](Self::plane_table) with the chroma planes' rows `chroma_stride` bytes
    /// apart (`None`: the stride the format derives from `row_stride`): GStreamer's default
    /// I420 layout rounds the chroma stride up on its own, and libcamera and V4L2's
    /// multi-planar formats report one `bytesperline` per plane.
    pub fn plane_table_with(
        self,
        w: usize,
        h: usize,
        row_stride: usize,
        chroma_stride: Option<usize>,
    ) -> Result<Vec<Plane>> {
        if chroma_stride.is_some() && !self.has_chroma_planes() {
            return Err(Error::RowStride(format!(
                "{self} has no chroma planes to give a stride of their own"
            )));
        }
        let planes = self.derived_plane_table(w, h, row_stride)?;
        let Some(chroma) = chroma_stride else {
            return Ok(planes);
        };
        // The luma plane stays; each chroma plane follows the one before, its rows `chroma`
        // apart.
        let mut out = vec![planes[0]];
        for p in &planes[1..] {
            let prev = out[out.len() - 1];
            let size = p.rows.checked_mul(chroma).ok_or_else(|| {
                Error::Shape(format!("{} rows of {chroma} bytes overflow", p.rows))
            })?;
            let offset = prev
                .offset
                .checked_add(prev.size)
                .ok_or_else(|| Error::Shape("plane offset overflows".into()))?;
            out.push(Plane {
                offset,
                row_stride: chroma,
                rows: p.rows,
                size,
            });
        }
        Ok(out)
    }

    /// The plane table with every stride derived from `row_stride`.
    fn derived_plane_table(self, w: usize, h: usize, row_stride: usize) -> Result<Vec<Plane>> {
        self.check_size(w, h)?;
        let plane = |offset: usize, row_stride: usize, rows: usize| -> Result<Plane> {
            let size = rows.checked_mul(row_stride).ok_or_else(|| {
                Error::Shape(format!("{rows} rows of {row_stride} bytes overflow"))
            })?;
            Ok(Plane {
                offset,
                row_stride,
                rows,
                size,
            })
        };
        let luma = plane(0, row_stride, h)?;
        let planes = match self {
            _ if self.layout() == Layout::Packed => vec![luma],
            PixelFormat::PlanarRgb | PixelFormat::PlanarRgba => {
                let mut v = Vec::with_capacity(self.channels());
                for i in 0..self.channels() {
                    let offset = luma
                        .size
                        .checked_mul(i)
                        .ok_or_else(|| Error::Shape("plane offset overflows".into()))?;
                    v.push(plane(offset, row_stride, h)?);
                }
                v
            }
            PixelFormat::Nv12 | PixelFormat::Nv21 | PixelFormat::P010 => {
                vec![luma, plane(luma.size, row_stride, h.div_ceil(2))?]
            }
            PixelFormat::I420 | PixelFormat::Yv12 => {
                self.check_stride(row_stride)?;
                let first = plane(luma.size, row_stride / 2, h.div_ceil(2))?;
                let second = luma
                    .size
                    .checked_add(first.size)
                    .ok_or_else(|| Error::Shape("plane offset overflows".into()))?;
                vec![luma, first, plane(second, row_stride / 2, h.div_ceil(2))?]
            }
            PixelFormat::Nv16 => vec![luma, plane(luma.size, row_stride, h)?],
            PixelFormat::Nv24 => {
                let chroma_stride = row_stride
                    .checked_mul(2)
                    .ok_or_else(|| Error::Shape("NV24 chroma stride overflows".into()))?;
                vec![luma, plane(luma.size, chroma_stride, h)?]
            }
            _ => unreachable!("every layout is covered"),
        };
        Ok(planes)
    }
}

coded_enum!(PixelFormat, "pixel format");

#[cfg(test)]
mod tests {
    use super::*;
    use PixelFormat::*;

    #[test]
    fn nv12_at_640x480_is_460800_bytes() {
        let planes = Nv12.plane_table(640, 480, 640).unwrap();
        assert_eq!(planes.iter().map(|p| p.size).sum::<usize>(), 460_800);
        assert_eq!(Nv12.allocation_shape(640, 480), vec![720, 640]);
    }

    #[test]
    fn an_odd_height_keeps_its_last_chroma_row() {
        assert_eq!(Nv12.allocation_shape(640, 483), vec![725, 640]);
        let planes = Nv12.plane_table(640, 483, 640).unwrap();
        assert_eq!(planes[1].rows, 242);
        assert_eq!(planes[1].offset, 483 * 640);
    }

    #[test]
    fn semi_planar_formats_address_pixels_not_rows() {
        assert_eq!(Nv12.addressing_shape(64, 48), vec![48, 64]);
        assert_eq!(Yuyv.addressing_shape(64, 48), vec![48, 64]);
        assert_eq!(Yuyv.allocation_shape(64, 48), vec![48, 64, 2]);
        assert_eq!(Rgba.addressing_shape(64, 48), vec![48, 64, 4]);
    }

    #[test]
    fn shapes_follow_the_layout() {
        assert_eq!(Rgb.allocation_shape(4, 2), vec![2, 4, 3]);
        assert_eq!(Grey.allocation_shape(4, 2), vec![2, 4]);
        assert_eq!(PlanarRgba.allocation_shape(4, 2), vec![4, 2, 4]);
        assert_eq!(Nv16.allocation_shape(4, 2), vec![4, 4]);
        assert_eq!(Nv24.allocation_shape(4, 2), vec![6, 4]);
    }

    #[test]
    fn planar_planes_follow_one_another_at_the_padded_stride() {
        let planes = PlanarRgb.plane_table(100, 10, 128).unwrap();
        let offsets: Vec<_> = planes.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, vec![0, 1280, 2560]);
    }

    #[test]
    fn nv24_chroma_rows_are_twice_the_luma_stride() {
        let planes = Nv24.plane_table(64, 8, 64).unwrap();
        assert_eq!(
            planes[1],
            Plane {
                offset: 512,
                row_stride: 128,
                rows: 8,
                size: 1024
            }
        );
    }

    #[test]
    fn chroma_pairs_need_an_even_width() {
        assert!(Nv12.plane_table(641, 480, 704).is_err());
        assert!(Yuyv.check_size(3, 2).is_err());
        assert!(Nv24.check_size(3, 2).is_ok());
        assert!(Rgb.check_size(3, 3).is_ok());
    }

    #[test]
    fn codes_and_names_round_trip() {
        for f in PixelFormat::ALL {
            assert_eq!(PixelFormat::from_code(f.code()), Some(f));
            assert_eq!(f.name().parse::<PixelFormat>().unwrap(), f);
            assert_eq!(f.name().to_uppercase().parse::<PixelFormat>().unwrap(), f);
            for alias in f.aliases() {
                assert_eq!(alias.parse::<PixelFormat>().unwrap(), f, "{alias}");
            }
        }
        assert_eq!(PixelFormat::from_code(0), None);
    }

    #[test]
    fn a_plane_table_that_overflows_is_an_error() {
        assert!(PlanarRgb.plane_table(2, usize::MAX / 2, 4).is_err());
    }

    #[test]
    fn no_name_or_alias_of_a_pixel_format_belongs_to_two_formats() {
        let mut seen = std::collections::HashMap::new();
        for f in PixelFormat::ALL {
            for n in std::iter::once(f.name()).chain(f.aliases().iter().copied()) {
                if let Some(other) = seen.insert(n.to_ascii_lowercase(), f) {
                    panic!("{n} names both {other} and {f}");
                }
            }
        }
    }

    #[test]
    fn fourccs_name_the_layouts_v4l2_and_drm_document_and_round_trip() {
        assert_eq!(fourcc(b"NV12"), 0x3231_564e);
        assert_eq!(PixelFormat::Rgba.fourcc(), Some(fourcc(b"AB24")));
        assert_eq!(PixelFormat::Bgra.drm_fourcc(), Some(fourcc(b"AR24")));
        assert_eq!(PixelFormat::Rgb.fourcc(), Some(fourcc(b"RGB3")));
        assert_eq!(PixelFormat::Rgb.drm_fourcc(), Some(fourcc(b"BG24")));
        for f in PixelFormat::ALL {
            for code in [f.fourcc(), f.drm_fourcc()].into_iter().flatten() {
                assert_eq!(PixelFormat::from_fourcc(code), Some(f), "{f}");
            }
        }
        assert_eq!(
            PixelFormat::from_fourcc(fourcc(b"NM12")),
            Some(PixelFormat::Nv12)
        );
        assert_eq!(PixelFormat::from_fourcc(fourcc(b"MJPG")), None);
        assert_eq!(PixelFormat::PlanarRgb.fourcc(), None);
    }

    #[test]
    fn i420_chroma_planes_follow_luma_at_half_the_stride_and_yv12_shares_the_geometry() {
        for f in [I420, Yv12] {
            let planes = f.plane_table(1280, 720, 1280).unwrap();
            let table: Vec<_> = planes
                .iter()
                .map(|p| (p.offset, p.row_stride, p.rows))
                .collect();
            assert_eq!(
                table,
                vec![(0, 1280, 720), (921_600, 640, 360), (1_152_000, 640, 360)]
            );
            assert_eq!(planes.iter().map(|p| p.size).sum::<usize>(), 1_382_400);
            assert_eq!(f.allocation_shape(1280, 720), vec![1080, 1280]);
        }
    }

    #[test]
    fn an_odd_height_i420_keeps_its_last_chroma_rows_inside_the_nv12_grid() {
        let planes = I420.plane_table(64, 5, 64).unwrap();
        let end = planes[2].offset + planes[2].size;
        assert_eq!(planes[1].rows, 3);
        assert_eq!(end, I420.buffer_rows(5) * 64);
    }

    #[test]
    fn an_odd_i420_stride_is_refused_because_chroma_rows_are_half_of_it() {
        let err = I420.plane_table(64, 4, 65).unwrap_err();
        assert!(err.to_string().contains("even"), "{err}");
    }

    #[test]
    fn sixteen_bit_formats_demand_two_byte_elements() {
        assert!(Gray16.check_element(2).is_ok());
        assert!(P010.check_element(2).is_ok());
        let err = P010.check_element(1).unwrap_err();
        assert!(err.to_string().contains("u16"), "{err}");
        assert!(Nv12.check_element(2).is_ok());
        assert_eq!(P010.allocation_shape(64, 4), vec![6, 64]);
        assert_eq!(P010.min_row_bytes(64, 2), Some(128));
    }

    #[test]
    fn the_new_packed_formats_have_their_channels() {
        assert_eq!(Bgr.allocation_shape(4, 2), vec![2, 4, 3]);
        assert_eq!(Bgrx.allocation_shape(4, 2), vec![2, 4, 4]);
        assert_eq!(Uyvy.allocation_shape(4, 2), vec![2, 4, 2]);
        assert_eq!(Gray16.allocation_shape(4, 2), vec![2, 4]);
        assert!(Uyvy.check_size(3, 2).is_err());
        assert_eq!(Nv21.plane_table(8, 4, 8).unwrap()[1].offset, 32);
    }

    #[test]
    fn gstreamer_names_round_trip_and_cover_every_format_but_planar_rgba() {
        for f in PixelFormat::ALL {
            match f.gst_name() {
                Some(name) => assert_eq!(PixelFormat::from_gst_name(name), Some(f), "{f}"),
                None => assert_eq!(f, PlanarRgba),
            }
        }
        assert_eq!(PixelFormat::from_gst_name("I420"), Some(I420));
        assert_eq!(PixelFormat::from_gst_name("BGRx"), Some(Bgrx));
        assert_eq!(PixelFormat::from_gst_name("GBRA"), None);
    }

    #[test]
    fn the_new_formats_carry_their_v4l2_and_drm_codes() {
        assert_eq!(I420.fourcc(), Some(fourcc(b"YU12")));
        assert_eq!(Yv12.drm_fourcc(), Some(fourcc(b"YV12")));
        assert_eq!(Bgr.drm_fourcc(), Some(fourcc(b"RG24")));
        assert_eq!(Gray16.fourcc(), Some(fourcc(b"Y16 ")));
        assert_eq!(PixelFormat::from_fourcc(fourcc(b"NM21")), Some(Nv21));
    }
}
