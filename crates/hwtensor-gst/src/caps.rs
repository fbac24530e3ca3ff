//! Caps and the image description: which `video/x-raw` caps a channel carries, and how a
//! channel's image lies in a buffer (`GstVideoMeta`).

use gst_video::{VideoFormat, VideoInfo};
use hwtensor::{DType, PixelFormat, TensorDyn};

/// The image a channel carries, as a pool is made for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The pixel format.
    pub format: PixelFormat,
    /// The element type its samples need (`U16` for GRAY16_LE and P010).
    pub dtype: DType,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// The row stride the pool's images get: GStreamer's own for these caps where hwtensor lays
    /// every plane out where GStreamer does, so elements that ignore `GstVideoMeta` still
    /// write where we read; `None` (tight rows) otherwise.
    pub gst_stride: Option<usize>,
    /// With `gst_stride`: the chroma planes' stride where GStreamer pads them apart from the
    /// format's rule (I420 at 1364 pixels: 684-byte chroma rows, where half the luma's is 682).
    pub gst_chroma: Option<usize>,
}

/// Every format the elements carry, as caps name it: those GStreamer and hwtensor both lay out.
pub fn formats() -> Vec<&'static str> {
    PixelFormat::ALL
        .iter()
        .filter_map(|f| f.gst_name())
        .filter(|name| VideoFormat::from_string(name) != VideoFormat::Unknown)
        .collect()
}

/// The caps both elements' pads accept: raw video in every carried format, any size and rate.
pub fn template() -> gst::Caps {
    gst::Caps::builder("video/x-raw")
        .field("format", gst::List::new(formats()))
        .field("width", gst::IntRange::new(1, i32::MAX))
        .field("height", gst::IntRange::new(1, i32::MAX))
        .field(
            "framerate",
            gst::FractionRange::new(gst::Fraction::new(0, 1), gst::Fraction::new(i32::MAX, 1)),
        )
        .build()
}

/// The image fixed caps describe, or why a channel cannot carry them (named for the
/// negotiation error).
pub fn geometry(caps: &gst::CapsRef) -> Result<(Geometry, VideoInfo), String> {
    let info = VideoInfo::from_caps(caps).map_err(|_| format!("{caps} is not raw video"))?;
    let name = info.format().to_str();
    let format = PixelFormat::from_gst_name(name).ok_or_else(|| {
        format!(
            "hwtensor carries no {name} video; carried formats: {}",
            formats().join(", ")
        )
    })?;
    if info.is_interlaced() {
        return Err("interlaced video is not carried; deinterlace first".into());
    }
    let dtype = match format.sample_bytes() {
        Some(2) => DType::U16,
        _ => DType::U8,
    };
    let (width, height) = (info.width() as usize, info.height() as usize);
    let mut g = Geometry {
        format,
        dtype,
        width,
        height,
        gst_stride: None,
        gst_chroma: None,
    };
    let stride = info.stride()[0] as usize;
    // GStreamer pads each plane's rows on its own: its chroma stride, where it differs from
    // the format's rule, is one of the image's own.
    let chroma = (format.has_chroma_planes() && info.n_planes() > 1)
        .then(|| info.stride()[1] as usize)
        .filter(|&c| c != format.derived_chroma_stride(stride));
    let ours = format.plane_table_with(width, height, stride, chroma).ok();
    let same = ours.is_some_and(|planes| {
        planes.len() == info.n_planes() as usize
            && planes.iter().enumerate().all(|(i, p)| {
                p.offset == info.offset()[i] && p.row_stride == info.stride()[i] as usize
            })
    });
    if same {
        g.gst_stride = Some(stride);
        g.gst_chroma = chroma;
    }
    Ok((g, info))
}

/// Caps for the image `t` describes (its frame rate unknown: `0/1`, variable). A tiled image
/// (a DRM modifier other than linear) is refused here, at negotiation: `video/x-raw` says a
/// linear layout, and downstream would read the tiles as rows.
pub fn caps_of(t: &TensorDyn) -> Result<gst::Caps, String> {
    let info = t
        .image_info()
        .ok_or("the channel carries plain tensors, not images; hwtensorsrc needs images")?;
    let modifier = t.drm_modifier();
    if !modifier.is_linear() {
        return Err(format!(
            "the channel's frames are tiled (DRM modifier {modifier:?}); hwtensorsrc outputs \
             linear video/x-raw only, so it cannot negotiate them: have the producer lend \
             linear buffers"
        ));
    }
    let name = info
        .format
        .gst_name()
        .ok_or_else(|| format!("GStreamer has no name for {} images", info.format))?;
    let format = VideoFormat::from_string(name);
    let video = VideoInfo::builder(format, info.width as u32, info.height as u32)
        .fps(gst::Fraction::new(0, 1))
        .build()
        .map_err(|e| format!("{name} {}x{}: {e}", info.width, info.height))?;
    video.to_caps().map_err(|e| e.to_string())
}

/// Plane offsets (from the image's first byte, where its memory starts) and strides of `t`, as
/// `GstVideoMeta` takes them.
pub fn layout(t: &TensorDyn) -> Result<(Vec<usize>, Vec<i32>), String> {
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    let offsets = planes.iter().map(|p| p.offset).collect();
    let strides = planes
        .iter()
        .map(|p| i32::try_from(p.row_stride).map_err(|_| "a row stride past i32".to_string()))
        .collect::<Result<_, _>>()?;
    Ok((offsets, strides))
}

/// Adds `GstVideoMeta` to `buffer` saying how `t`'s image lies in it.
///
/// Through the C function itself: gstreamer-rs's `VideoMeta::add_full` checks the buffer
/// against GStreamer's default size for the format, which refuses a tight I420 whose default
/// rows GStreamer pads (1364x767: GStreamer rounds the luma plane up to 768 rows).
pub fn add_video_meta(buffer: &mut gst::BufferRef, t: &TensorDyn) -> Result<(), String> {
    add_video_meta_at(buffer, t, &layout(t)?.0)
}

/// [`add_video_meta`] with each plane at `offsets` of the buffer (counted across its memories:
/// a buffer with a memory per plane has each plane where the memories before it end).
#[allow(unsafe_code)] // one FFI call on a buffer we hold mutably
pub fn add_video_meta_at(
    buffer: &mut gst::BufferRef,
    t: &TensorDyn,
    offsets: &[usize],
) -> Result<(), String> {
    use gst::glib::translate::IntoGlib;
    let info = t.image_info().ok_or("not an image")?;
    let format = info
        .format
        .gst_name()
        .map(VideoFormat::from_string)
        .ok_or_else(|| format!("GStreamer has no name for {} images", info.format))?;
    let strides = layout(t)?.1;
    if offsets.len() != strides.len() {
        return Err(format!(
            "{} plane offsets for {} planes",
            offsets.len(),
            strides.len()
        ));
    }
    if offsets.len() > gst_video::ffi::GST_VIDEO_MAX_PLANES as usize {
        return Err(format!(
            "{} has more planes than GStreamer describes",
            info.format
        ));
    }
    // SAFETY: `buffer` is a valid buffer we hold mutably; the offset and stride arrays hold
    // `n_planes` (at most GST_VIDEO_MAX_PLANES) entries each and are copied by the call.
    let meta = unsafe {
        gst_video::ffi::gst_buffer_add_video_meta_full(
            buffer.as_mut_ptr(),
            gst_video::VideoFrameFlags::empty().into_glib(),
            format.into_glib(),
            info.width as u32,
            info.height as u32,
            offsets.len() as u32,
            offsets.as_ptr() as *mut _,
            strides.as_ptr() as *mut _,
        )
    };
    match meta.is_null() {
        true => Err("GStreamer refused the video meta".into()),
        false => Ok(()),
    }
}

/// Bytes of `t`'s image from its first byte to the end of its last plane (within its buffer).
pub fn image_bytes(t: &TensorDyn) -> Result<usize, String> {
    let planes = t.plane_table().map_err(|e| e.to_string())?;
    let end = planes.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
    Ok(end.min(t.buffer_len().saturating_sub(t.byte_offset())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwtensor::ImageSpec;

    fn caps(format: &str, w: i32, h: i32) -> gst::Caps {
        gst::Caps::builder("video/x-raw")
            .field("format", format)
            .field("width", w)
            .field("height", h)
            .field("framerate", gst::Fraction::new(30, 1))
            .build()
    }

    #[test]
    fn the_test_sizes_take_gstreamers_own_stride() {
        gst::init().unwrap();
        for (f, w, h, stride) in [
            ("I420", 1280, 720, 1280),
            ("NV12", 1920, 1080, 1920),
            ("RGBA", 1366, 768, 5464),
            ("UYVY", 640, 480, 1280),
        ] {
            let (g, _) = geometry(&caps(f, w, h)).unwrap();
            assert_eq!(g.gst_stride, Some(stride), "{f}");
        }
    }

    #[test]
    fn an_i420_whose_gstreamer_chroma_rows_are_padded_on_their_own_gets_gstreamers_layout() {
        gst::init().unwrap();
        // GStreamer pads I420 rows to 4 bytes (1364 / 684): the chroma stride is not half.
        let (g, _) = geometry(&caps("I420", 1364, 768)).unwrap();
        assert_eq!((g.gst_stride, g.gst_chroma), (Some(1364), Some(684)));
        // An odd height: GStreamer rounds the luma plane up to an even row count, hwtensor
        // does not, so the channel keeps its own (tight) layout.
        let (g, _) = geometry(&caps("I420", 1364, 767)).unwrap();
        assert_eq!((g.gst_stride, g.gst_chroma), (None, None));
    }

    #[test]
    fn a_format_the_channel_cannot_carry_is_refused_by_name() {
        gst::init().unwrap();
        let err = geometry(&caps("AYUV", 64, 64)).unwrap_err();
        assert!(err.contains("AYUV") && err.contains("I420"), "{err}");
    }

    #[test]
    fn sixteen_bit_formats_are_carried_in_u16_tensors() {
        gst::init().unwrap();
        let (g, _) = geometry(&caps("GRAY16_LE", 64, 8)).unwrap();
        assert_eq!(g.dtype, DType::U16);
        let (g, _) = geometry(&caps("P010_10LE", 64, 8)).unwrap();
        assert_eq!((g.format, g.dtype), (PixelFormat::P010, DType::U16));
    }

    #[test]
    fn every_carried_format_makes_caps_that_come_back_as_the_same_image() {
        gst::init().unwrap();
        for name in formats() {
            let (g, _) = geometry(&caps(name, 64, 8)).unwrap();
            let t = TensorDyn::image(
                &ImageSpec::new(g.format, 64, 8),
                g.dtype,
                Some(hwtensor::TensorMemory::Mem),
                hwtensor::CpuAccess::ReadWrite,
            )
            .unwrap();
            let back = caps_of(&t).unwrap();
            let (again, _) = geometry(&back).unwrap();
            assert_eq!(
                (again.format, again.width, again.height),
                (g.format, 64, 8),
                "{name}"
            );
        }
    }
}
