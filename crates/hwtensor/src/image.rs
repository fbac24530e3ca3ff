//! Images: tensors that also know their pixel format, size and row stride.

use crate::buffer::allocate_choosing;
use crate::format::Plane;
use crate::geometry::{byte_strides, element_count, extent};
use crate::gpu::TextureRequest;
use crate::memory::Purpose;
use crate::{CpuAccess, Element, Error, PixelFormat, Result, Tensor, TensorMemory};

/// Row pitch alignment of images on memory a device imports (DMA-BUF, GPU).
///
/// Mali and Vivante refuse EGL imports of DMA-BUFs whose pitch is not a multiple of 64 bytes,
/// and 64 also satisfies every GPU's linear-image pitch rule we know of.
pub const IMAGE_PITCH_ALIGN: usize = 64;

/// What makes a tensor an image. `#[non_exhaustive]`: made by [`ImageInfo::new`], so a field
/// added later (as colorimetry was) breaks no one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageInfo {
    /// The pixel format.
    pub format: PixelFormat,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes from one row to the next (always set here; [`Tensor::row_stride`] reports `None`
    /// when it equals the tight row).
    pub row_stride: usize,
    /// How its numbers become colours (unspecified unless someone said).
    pub colorimetry: crate::Colorimetry,
    /// How its pixels lie in memory beyond format and stride: LINEAR (rows) unless a producer
    /// of tiled or compressed frames said otherwise (see [`crate::DrmModifier`]).
    pub modifier: crate::DrmModifier,
    /// Bytes from one row of each chroma plane to the next, where the producer laid them out
    /// apart from the format's rule (GStreamer's I420 rounds the chroma stride up on its own;
    /// V4L2 and libcamera report one per plane). `None`: the format's rule (half the row
    /// stride for I420 and YV12, twice it for NV24, the same for the others); never set to
    /// what the rule gives.
    pub chroma_stride: Option<usize>,
}

impl ImageInfo {
    /// A `width` x `height` image of `format` with rows `row_stride` bytes apart, colorimetry
    /// unspecified.
    pub fn new(format: PixelFormat, width: usize, height: usize, row_stride: usize) -> ImageInfo {
        ImageInfo {
            format,
            width,
            height,
            row_stride,
            colorimetry: crate::Colorimetry::default(),
            modifier: crate::DrmModifier::LINEAR,
            chroma_stride: None,
        }
    }

    /// The chroma planes' row stride: the one set, or the format's rule.
    pub fn chroma_row_stride(&self) -> usize {
        self.chroma_stride
            .unwrap_or(self.format.derived_chroma_stride(self.row_stride))
    }

    /// The image's planes, relative to its first byte.
    pub fn planes(&self) -> Result<Vec<Plane>> {
        self.format
            .plane_table_with(self.width, self.height, self.row_stride, self.chroma_stride)
    }

    /// Whether the image's grid reaches each chroma byte as an element (see
    /// [`PixelFormat::grid_holds_chroma`]): never with a chroma stride of its own, whose rows
    /// the grid does not know.
    pub fn grid_holds_chroma(&self) -> bool {
        self.format.grid_holds_chroma() && self.chroma_stride.is_none()
    }
}

/// What an image constructor is asked for: the format and size, and where the producer
/// dictates them, the row stride, the chroma planes' stride, the colorimetry and the DRM
/// format modifier. One value taken by every image constructor (in Rust, C's `HwtImageSpec`
/// and Python's `ImageSpec` alike), so a new property of images is a field here, not another
/// family of constructors.
///
/// ```
/// use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory};
///
/// let spec = ImageSpec::new(PixelFormat::I420, 1364, 768)
///     .with_row_stride(1364)
///     .with_chroma_stride(684); // GStreamer rounds each plane's stride up on its own
/// let frame = Tensor::<u8>::image(&spec, Some(TensorMemory::Mem), CpuAccess::ReadWrite)?;
/// assert_eq!(frame.image_info().unwrap().chroma_row_stride(), 684);
/// # Ok::<(), hwtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageSpec {
    /// The pixel format.
    pub format: PixelFormat,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes from one row to the next; `None`: tight on the host, [`IMAGE_PITCH_ALIGN`] on
    /// memory a device imports (for an import: tight).
    pub row_stride: Option<usize>,
    /// Bytes from one row of each chroma plane to the next; `None`: the format's rule from
    /// the row stride (see [`ImageInfo::chroma_stride`]). Needs `row_stride`.
    pub chroma_stride: Option<usize>,
    /// How its numbers become colours.
    pub colorimetry: crate::Colorimetry,
    /// How its pixels lie in memory beyond rows: LINEAR for every image hwtensor allocates;
    /// an import of a tiled frame says its modifier (the image then declares no CPU access).
    pub modifier: crate::DrmModifier,
}

impl ImageSpec {
    /// A `width` x `height` image of `format`, every other property the default.
    pub fn new(format: PixelFormat, width: usize, height: usize) -> ImageSpec {
        ImageSpec {
            format,
            width,
            height,
            row_stride: None,
            chroma_stride: None,
            colorimetry: crate::Colorimetry::default(),
            modifier: crate::DrmModifier::LINEAR,
        }
    }

    /// The same with rows `row_stride` bytes apart (a V4L2 driver's `bytesperline`, a codec's
    /// pitch).
    pub fn with_row_stride(mut self, row_stride: usize) -> ImageSpec {
        self.row_stride = Some(row_stride);
        self
    }

    /// The same with the chroma planes' rows `chroma_stride` bytes apart.
    pub fn with_chroma_stride(mut self, chroma_stride: usize) -> ImageSpec {
        self.chroma_stride = Some(chroma_stride);
        self
    }

    /// The same with `colorimetry`.
    pub fn with_colorimetry(mut self, colorimetry: crate::Colorimetry) -> ImageSpec {
        self.colorimetry = colorimetry;
        self
    }

    /// The same laid out by `modifier`.
    pub fn with_modifier(mut self, modifier: crate::DrmModifier) -> ImageSpec {
        self.modifier = modifier;
        self
    }

    /// The spec of the image `info` describes (its strides as it has them).
    pub fn of(info: &ImageInfo) -> ImageSpec {
        ImageSpec {
            row_stride: Some(info.row_stride),
            chroma_stride: info.chroma_stride,
            colorimetry: info.colorimetry,
            modifier: info.modifier,
            ..ImageSpec::new(info.format, info.width, info.height)
        }
    }

    /// The image this spec describes at rows `row_stride` apart, for elements of `elem`
    /// bytes: the strides checked (a chroma stride needs the row stride it goes with).
    pub(crate) fn info_at(&self, row_stride: usize, elem: usize) -> Result<ImageInfo> {
        let (format, w) = (self.format, self.width);
        let row_stride = check_row_stride(format, w, elem, row_stride)?;
        let chroma_stride = match (self.chroma_stride, self.row_stride) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Error::RowStride(
                    "a chroma stride needs the row stride it goes with: [[give_row_stride]]".into(),
                ))
            }
            (Some(c), Some(_)) => check_chroma_stride(format, w, elem, row_stride, c)?,
        };
        Ok(ImageInfo {
            chroma_stride,
            colorimetry: self.colorimetry,
            modifier: self.modifier,
            ..ImageInfo::new(format, w, self.height, row_stride)
        })
    }
}

/// Checks a chroma stride the caller gives an image of `format`, `w` pixels wide with
/// `elem`-byte elements and rows `row_stride` apart: the format has chroma planes, and the
/// stride holds a chroma row in whole elements. Returns it as [`ImageInfo::chroma_stride`]
/// keeps it: `None` when it is the format's own rule.
pub(crate) fn check_chroma_stride(
    format: PixelFormat,
    w: usize,
    elem: usize,
    row_stride: usize,
    chroma: usize,
) -> Result<Option<usize>> {
    if !format.has_chroma_planes() {
        return Err(Error::RowStride(format!(
            "{format} has no chroma planes to give a stride of their own"
        )));
    }
    let row = format
        .plane_row_bytes(w, elem, 1)
        .ok_or_else(|| Error::Shape(format!("a {w}-pixel {format} row overflows usize")))?;
    if chroma < row || !chroma.is_multiple_of(elem) {
        return Err(Error::RowStride(format!(
            "a chroma stride of {chroma} bytes cannot hold a {w}-pixel {format} chroma row \
             ({row} bytes) in whole {elem}-byte elements"
        )));
    }
    Ok((chroma != format.derived_chroma_stride(row_stride)).then_some(chroma))
}

/// The row stride an image gets on `memory`: tight on the host, aligned for devices.
pub(crate) fn default_row_stride(
    format: PixelFormat,
    w: usize,
    elem: usize,
    memory: TensorMemory,
) -> Result<usize> {
    let tight = format
        .min_row_bytes(w, elem)
        .ok_or_else(|| Error::Shape(format!("a {w}-pixel {format} row overflows usize")))?;
    match memory {
        TensorMemory::DmaBuf | TensorMemory::Gpu => tight
            .checked_next_multiple_of(IMAGE_PITCH_ALIGN)
            .ok_or_else(|| Error::Shape(format!("a {w}-pixel {format} row overflows usize"))),
        _ => Ok(tight),
    }
}

/// Bytes an image's last chroma row reaches past the end of its grid (0 for most formats).
///
/// The grid (`allocation_shape` at the luma row stride) ends at the luma width of its last
/// row. I420's and YV12's chroma rows are half a luma row apart, so the last V row starts half
/// a row into the grid's last row; NV24's are two rows apart; a chroma stride of the image's
/// own puts them anywhere. With padded rows that row ends past the grid: without these bytes a
/// map, an import's size check or an allocation would miss the end of the last chroma row.
pub(crate) fn chroma_tail(info: &ImageInfo, elem: usize) -> usize {
    if info.grid_holds_chroma() {
        return 0;
    }
    // Arithmetic, not the plane table: this is on every map's path.
    let (f, w, h, stride) = (info.format, info.width, info.height, info.row_stride);
    let (planes, rows) = match f {
        PixelFormat::I420 | PixelFormat::Yv12 => (2, h.div_ceil(2)),
        PixelFormat::Nv24 | PixelFormat::Nv16 => (1, h),
        PixelFormat::Nv12 | PixelFormat::Nv21 | PixelFormat::P010 => (1, h.div_ceil(2)),
        _ => return 0,
    };
    if rows == 0 {
        return 0;
    }
    let chroma = info.chroma_row_stride();
    let row = f.plane_row_bytes(w, elem, 1).unwrap_or(0);
    // The luma plane's h rows, then each chroma plane's rows one after another.
    let end = h
        .checked_mul(stride)
        .zip((planes * rows - 1).checked_mul(chroma))
        .and_then(|(luma, chroma)| luma.checked_add(chroma)?.checked_add(row));
    // Past `usize`: a tail no buffer holds, which `image_span`'s checked sum refuses (a
    // saturated end less a saturated grid would read as no tail at all).
    let Some(end) = end else {
        return usize::MAX;
    };
    let grid_end = (f.buffer_rows(h).max(1) - 1)
        .saturating_mul(stride)
        .saturating_add(f.min_row_bytes(w, elem).unwrap_or(0));
    end.saturating_sub(grid_end)
}

/// Bytes of padding after the last row of an image's last plane (its stride beyond its data).
fn last_row_padding(info: &ImageInfo, elem: usize) -> usize {
    let Ok(planes) = info.planes() else { return 0 };
    let Some(last) = planes.last() else { return 0 };
    let row = info
        .format
        .plane_row_bytes(info.width, elem, planes.len() - 1)
        .unwrap_or(last.row_stride);
    last.row_stride.saturating_sub(row)
}

/// Bytes an image spans: `extent` (its grid's, from the first byte) and the chroma planes past
/// the grid. Checked: a height and stride whose product passes `usize` (`2^32` rows of `2^32`
/// bytes) is refused here, never wrapped into a small buffer that a map then overruns.
pub(crate) fn image_span(extent: usize, info: &ImageInfo, elem: usize) -> Result<usize> {
    extent
        .checked_add(chroma_tail(info, elem))
        .ok_or_else(|| too_large(info))
}

/// The error of an image whose byte count passes what `usize` holds.
fn too_large(info: &ImageInfo) -> Error {
    Error::Shape(format!(
        "a {} x {} {} image at {}-byte rows needs more bytes than this platform can address",
        info.width, info.height, info.format, info.row_stride
    ))
}

/// Shape and strides of `batch` (or one, when `None`) images.
pub(crate) fn image_geometry(
    batch: Option<usize>,
    format: PixelFormat,
    w: usize,
    h: usize,
    elem: usize,
    row_stride: usize,
) -> Result<(Vec<usize>, Vec<usize>)> {
    format.check_size(w, h)?;
    format.check_element(elem)?;
    let mut shape = format.allocation_shape(w, h);
    if let Some(n) = batch {
        shape.insert(0, n);
    }
    let strides = byte_strides(&shape, elem, Some((format.row_dim_from_end(), row_stride)))?;
    extent(&shape, &strides, elem)?;
    element_count(&shape)?;
    Ok((shape, strides))
}

impl<T: Element> Tensor<T> {
    /// A zeroed image as `spec` describes it on `memory` (automatic when `None`: DMA-BUF,
    /// then heap), with the CPU access its users declare. Without a row stride, DMA-BUF and GPU
    /// images get a 64-byte-aligned pitch; a given one must hold a row of the format in whole
    /// elements, and GPU memory whose platform dictates its own pitch (a D3D11 staging
    /// texture) refuses a different one. A chroma stride of its own is for host, shm and
    /// DMA-BUF memory (GPU memory lays out its own planes); a modifier other than LINEAR is
    /// refused: hwtensor allocates linear images.
    pub fn image(
        spec: &ImageSpec,
        memory: Option<TensorMemory>,
        access: CpuAccess,
    ) -> Result<Self> {
        Self::image_impl(None, spec, memory, access)
    }

    /// `n` zeroed images as `spec` describes them in one buffer, shape `[n, ...]`;
    /// [`Tensor::batch`] picks one.
    pub fn image_batch(
        n: usize,
        spec: &ImageSpec,
        memory: Option<TensorMemory>,
        access: CpuAccess,
    ) -> Result<Self> {
        Self::image_impl(Some(n), spec, memory, access)
    }

    fn image_impl(
        batch: Option<usize>,
        spec: &ImageSpec,
        memory: Option<TensorMemory>,
        access: CpuAccess,
    ) -> Result<Self> {
        let (w, h, format) = (spec.width, spec.height, spec.format);
        if !spec.modifier.is_linear() {
            return Err(Error::Image(format!(
                "hwtensor allocates linear images, not {}; a modifier describes an imported frame",
                spec.modifier
            )));
        }
        let asked = spec
            .row_stride
            .map(|s| spec.info_at(s, Self::elem()))
            .transpose()?;
        if asked.is_some_and(|i| i.chroma_stride.is_some()) && memory == Some(TensorMemory::Gpu) {
            return Err(Error::RowStride(
                "GPU memory lays out an image's planes itself; a chroma stride of its own is for \
                 host, shm or dmabuf memory"
                    .into(),
            ));
        }
        let pitch = asked.map(|i| i.row_stride);
        let elem = Self::elem();
        let texture = TextureRequest {
            format,
            width: w,
            height: h,
            dtype: T::DTYPE,
            batch: batch.unwrap_or(1),
        };
        let geometry = |m| {
            // The platform's GPU memory may dictate the pitch (a D3D11 staging texture's).
            let dictated = match m {
                TensorMemory::Gpu => crate::gpu::image_row_pitch(&texture)?,
                _ => None,
            };
            let stride = match (pitch, dictated) {
                (Some(asked), Some(given)) if asked != given => {
                    return Err(Error::RowStride(format!(
                        "{m} memory here lays a {w}-pixel {format} row out {given} bytes apart, \
                         not the {asked} asked for"
                    )))
                }
                (Some(asked), _) => asked,
                (None, Some(given)) => given,
                (None, None) => default_row_stride(format, w, elem, m)?,
            };
            image_geometry(batch, format, w, h, elem, stride).map(|g| (g, stride))
        };
        let info_at = |stride| spec.info_at(stride, elem);
        // Through the end of the last plane's last row stride: a consumer that takes a frame
        // as planes of `rows * stride` bytes (GStreamer's buffer size) reads inside the buffer.
        let bytes = |m| {
            geometry(m).and_then(|((shape, strides), stride)| {
                let info = info_at(stride)?;
                let padding = last_row_padding(&info, elem);
                let planes = image_span(extent(&shape, &strides, elem)?, &info, elem)?;
                planes.checked_add(padding).ok_or_else(|| too_large(&info))
            })
        };
        let cpu_reads = access.allows(crate::Direction::Read);
        let (buffer, chosen) =
            allocate_choosing(Purpose::Image, memory, bytes, Some(&texture), cpu_reads)?;
        let ((shape, strides), row_stride) = geometry(chosen)?;
        let info = info_at(row_stride)?;
        Ok(Self::over(buffer, shape, strides, Some(info), access))
    }

    /// The image description, or `None` for a plain tensor.
    pub fn image_info(&self) -> Option<&ImageInfo> {
        self.image.as_ref()
    }

    /// The pixel format of an image.
    pub fn format(&self) -> Option<PixelFormat> {
        self.image.map(|i| i.format)
    }

    /// Width of an image in pixels.
    pub fn width(&self) -> Option<usize> {
        self.image.map(|i| i.width)
    }

    /// Height of an image in pixels.
    pub fn height(&self) -> Option<usize> {
        self.image.map(|i| i.height)
    }

    /// The image's colorimetry (`None` for a plain tensor).
    pub fn colorimetry(&self) -> Option<crate::Colorimetry> {
        self.image.map(|i| i.colorimetry)
    }

    /// Says how the image's numbers become colours; travels with it in views and blobs. A
    /// plain tensor has no colours: an error.
    pub fn set_colorimetry(&mut self, colorimetry: crate::Colorimetry) -> Result<()> {
        match &mut self.image {
            Some(info) => {
                info.colorimetry = colorimetry;
                Ok(())
            }
            None => Err(Error::Image(
                "a plain tensor has no colorimetry; make it an image".into(),
            )),
        }
    }

    /// The image's DRM format modifier (LINEAR for a plain tensor and for every image
    /// hwtensor makes).
    pub fn drm_modifier(&self) -> crate::DrmModifier {
        self.image
            .map_or(crate::DrmModifier::LINEAR, |i| i.modifier)
    }

    /// The same image over the same buffer, its layout described by `modifier` (a tiled or
    /// compressed frame from a decoder or a camera, imported by fd). A non-linear one is carried
    /// through blobs, the channel and the bindings unchanged, and the image then declares no CPU
    /// access: maps, views and copies are refused by name, since they would read tiles as rows.
    pub fn with_drm_modifier(&self, modifier: crate::DrmModifier) -> Result<Tensor<T>> {
        let Some(mut info) = self.image else {
            return Err(Error::Image(
                "a plain tensor has no DRM format modifier; make it an image".into(),
            ));
        };
        let mut t = self.clone();
        info.modifier = modifier;
        t.image = Some(info);
        if !modifier.is_linear() {
            t.access = CpuAccess::None;
        }
        Ok(t)
    }

    /// The row stride in bytes of an image whose rows are padded; `None` when they are tight
    /// (or for a plain tensor).
    pub fn row_stride(&self) -> Option<usize> {
        let info = self.image?;
        let tight = info.format.min_row_bytes(info.width, Self::elem())?;
        (info.row_stride != tight).then_some(info.row_stride)
    }

    /// The row stride in bytes, tight or not.
    pub fn effective_row_stride(&self) -> Option<usize> {
        self.image.map(|i| i.row_stride)
    }

    /// Changes the row stride of an image (to match a consumer's pitch, for example).
    ///
    /// Refused when the stride is below the format's tight row, is not a whole number of
    /// elements, or when the image at that stride would not fit in the buffer.
    pub fn set_row_stride(&mut self, row_stride: usize) -> Result<()> {
        let info = self.image.ok_or_else(|| {
            Error::Image("set_row_stride needs an image; this is a plain tensor".into())
        })?;
        let elem = Self::elem();
        check_row_stride(info.format, info.width, elem, row_stride)?;
        let row = Some((info.format.row_dim_from_end(), row_stride));
        let strides = byte_strides(&self.shape, elem, row)?;
        if let Some(c) = info.chroma_stride {
            check_chroma_stride(info.format, info.width, elem, row_stride, c)?;
        }
        let span = image_span(
            extent(&self.shape, &strides, elem)?,
            &ImageInfo { row_stride, ..info },
            elem,
        )?;
        let end = span
            .checked_add(self.offset)
            .ok_or_else(|| Error::RowStride(format!("{row_stride} bytes overflows")))?;
        if end > self.buffer.len() {
            return Err(Error::RowStride(format!(
                "a row stride of {row_stride} bytes needs {end} bytes but the buffer holds {}",
                self.buffer.len()
            )));
        }
        self.strides = strides;
        self.image = Some(ImageInfo { row_stride, ..info });
        Ok(())
    }

    /// The planes of an image, relative to its first byte.
    pub fn plane_table(&self) -> Result<Vec<Plane>> {
        let info = self.image.ok_or_else(|| {
            Error::Image("plane_table needs an image; this is a plain tensor".into())
        })?;
        info.planes()
    }
}

pub(crate) fn check_row_stride(
    format: PixelFormat,
    w: usize,
    elem: usize,
    stride: usize,
) -> Result<usize> {
    format.check_element(elem)?;
    let min = format
        .min_row_bytes(w, elem)
        .ok_or_else(|| Error::Shape(format!("a {w}-pixel {format} row overflows usize")))?;
    if stride < min {
        return Err(Error::RowStride(format!(
            "{stride} bytes is below the {min}-byte minimum of a {w}-pixel {format} row"
        )));
    }
    if !stride.is_multiple_of(elem) {
        return Err(Error::RowStride(format!(
            "{stride} bytes is not a whole number of {elem}-byte elements"
        )));
    }
    format.check_stride(stride)?;
    Ok(stride)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chroma_tail_is_where_the_plane_table_ends_the_last_chroma_row() {
        use PixelFormat::*;
        for f in [I420, Yv12, Nv24, Nv12, Nv21, Nv16] {
            for (w, h) in [(64, 48), (64, 47), (2, 1), (1364, 768)] {
                let tight = f.min_row_bytes(w, 1).unwrap();
                for (stride, chroma) in [
                    (tight, None),
                    (tight + 64, None),
                    (tight + 4, Some(tight + 8)),
                ] {
                    let info = ImageInfo {
                        chroma_stride: chroma,
                        ..ImageInfo::new(f, w, h, stride)
                    };
                    let planes = info.planes().unwrap();
                    let last = planes.last().unwrap();
                    let row = f.plane_row_bytes(w, 1, planes.len() - 1).unwrap();
                    let end = last.offset + (last.rows - 1) * last.row_stride + row;
                    let grid_end = (f.buffer_rows(h) - 1) * stride + tight;
                    let want = if info.grid_holds_chroma() {
                        0
                    } else {
                        end.saturating_sub(grid_end)
                    };
                    assert_eq!(
                        chroma_tail(&info, 1),
                        want,
                        "{f} {w}x{h} {stride} {chroma:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_padded_i420_map_reaches_the_end_of_its_last_v_row() {
        let (w, h, stride) = (64, 48, 128);
        let t = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::I420, w, h).with_row_stride(stride),
            Some(TensorMemory::Mem),
            crate::CpuAccess::ReadWrite,
        )
        .unwrap();
        let last = *t.plane_table().unwrap().last().unwrap();
        let end = last.offset + (last.rows - 1) * last.row_stride + w / 2;
        assert_eq!(t.map_span_read().unwrap().len(), end);
        assert!(t.buffer_len() >= end);
        let tight = ImageInfo::new(PixelFormat::I420, w, h, w);
        assert_eq!(chroma_tail(&tight, 1), 0);
    }

    #[test]
    fn device_memory_rows_are_padded_to_64_bytes_and_host_rows_are_tight() {
        assert_eq!(
            default_row_stride(PixelFormat::Rgb, 100, 1, TensorMemory::DmaBuf).unwrap(),
            320
        );
        assert_eq!(
            default_row_stride(PixelFormat::Rgb, 100, 1, TensorMemory::Mem).unwrap(),
            300
        );
        assert_eq!(
            default_row_stride(PixelFormat::Rgba, 640, 1, TensorMemory::DmaBuf).unwrap(),
            2560
        );
    }

    #[test]
    fn a_stride_below_the_row_or_between_elements_is_refused() {
        assert!(check_row_stride(PixelFormat::Rgba, 10, 1, 39).is_err());
        assert!(check_row_stride(PixelFormat::Rgba, 10, 4, 162).is_err());
        assert_eq!(
            check_row_stride(PixelFormat::Rgba, 10, 4, 192).unwrap(),
            192
        );
    }
}
