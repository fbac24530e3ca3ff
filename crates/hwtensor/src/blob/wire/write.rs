//! A whole blob written: which `required` bits the tensor needs, the header, then each section
//! in order. The writer writes exactly what `read.rs` demands (the plane records come from the
//! same `body.rs` rules), so a written blob always reads back.

use super::body::{plane_records, PlaneRecord, CHANNEL_LEN, PLANE_LEN};
use super::header::{GpuFields, Header, MODIFIER_HEADER_LEN, NO_FENCE, V1_HEADER_LEN};
use super::{
    bad, MODE_INLINE, MODE_REFERENCE, REQUIRES_CHROMA_STRIDE, REQUIRES_COLORIMETRY,
    REQUIRES_COMPLETION, REQUIRES_DRM_MODIFIER, REQUIRES_IMAGE, REQUIRES_PER_CHANNEL,
    REQUIRES_PLANE_FDS, REQUIRES_QUANTIZATION, REQUIRES_SYNC_FILE,
};
use crate::image::ImageInfo;
use crate::{Element, Quantization, Result, Tensor};

/// What a writer knows besides the tensor: how its bytes travel.
pub(in crate::blob) struct Outgoing {
    pub mode: u8,
    pub byte_offset: usize,
    pub buffer_len: usize,
    pub fd_count: usize,
    pub gpu: GpuFields,
    /// The timeline value the reader waits for, through fd 1.
    pub completion: Option<u64>,
    /// fd 1 is a sync_file the reader waits for.
    pub sync_file: bool,
    /// An image with an fd per plane: where each plane starts in its fd (required bit 8).
    pub plane_offsets: Option<Vec<usize>>,
}

impl Outgoing {
    /// A reference blob of `t`'s buffer with one fd or handle beside it (the device memory's
    /// fence, where there is one, is the caller's to add).
    pub(in crate::blob) fn reference<T: Element>(t: &Tensor<T>) -> Outgoing {
        Outgoing {
            mode: MODE_REFERENCE,
            byte_offset: t.byte_offset(),
            buffer_len: t.buffer_len(),
            fd_count: 1,
            gpu: GpuFields::default(),
            completion: None,
            sync_file: false,
            plane_offsets: None,
        }
    }

    /// An inline blob of `len` bytes of data.
    pub(in crate::blob) fn inline(len: usize) -> Outgoing {
        Outgoing {
            mode: MODE_INLINE,
            byte_offset: 0,
            buffer_len: len,
            fd_count: 0,
            gpu: GpuFields::default(),
            completion: None,
            sync_file: false,
            plane_offsets: None,
        }
    }

    /// The blob of `t` sent this way, followed by `data` inline.
    pub(in crate::blob) fn write<T: Element>(
        &self,
        t: &Tensor<T>,
        data: Option<&[u8]>,
    ) -> Result<Vec<u8>> {
        let planes = self.planes(t)?;
        let quant = t.quantization();
        let channels = quant.as_ref().and_then(|q| q.channels.as_ref());
        let header = self.header(t, &planes, quant.as_ref(), data.map_or(0, <[u8]>::len))?;
        let mut b = Vec::with_capacity(header.total_len);
        header.write_into(&mut b);
        for v in t.shape().iter().chain(t.strides()) {
            b.extend_from_slice(&(*v as u64).to_le_bytes());
        }
        for p in &planes {
            p.write(&mut b);
        }
        if let Some(c) = channels {
            for (s, z) in c.scales.iter().zip(&c.zero_points) {
                b.extend_from_slice(&s.to_le_bytes());
                b.extend_from_slice(&z.to_le_bytes());
            }
        }
        if let Some(data) = data {
            b.extend_from_slice(data);
        }
        debug_assert_eq!(b.len(), header.total_len);
        Ok(b)
    }

    /// The plane records: what the tensor implies, each in its own fd where the planes travel
    /// apart.
    fn planes<T: Element>(&self, t: &Tensor<T>) -> Result<Vec<PlaneRecord>> {
        let mut planes = plane_records(t, self.byte_offset)?;
        if let Some(offsets) = &self.plane_offsets {
            for (k, (p, &offset)) in planes.iter_mut().zip(offsets).enumerate() {
                p.fd_index = k as u32;
                p.offset = offset as u64;
            }
        }
        Ok(planes)
    }

    /// The header of `t`'s blob (quantized by `quant`), whose body holds `planes`, the
    /// per-channel pairs and `data_len` bytes.
    fn header<T: Element>(
        &self,
        t: &Tensor<T>,
        planes: &[PlaneRecord],
        quant: Option<&Quantization>,
        data_len: usize,
    ) -> Result<Header> {
        let channels = quant.and_then(|q| q.channels.as_deref());
        let info = t.image_info().copied();
        let tiled = info.is_some_and(|i| !i.modifier.is_linear());
        let header_len = match tiled {
            true => MODIFIER_HEADER_LEN,
            false => V1_HEADER_LEN,
        };
        let rank = t.shape().len();
        let channel_count = channels.map_or(0, |c| c.scales.len());
        let total = header_len
            + 2 * 8 * rank
            + PLANE_LEN * planes.len()
            + CHANNEL_LEN * channel_count
            + data_len;
        if u32::try_from(total).is_err() {
            return Err(bad(format!(
                "a {total}-byte blob is past the 4 GiB format limit"
            )));
        }
        let (quant_scale, quant_zero_point) = quant.map_or((0.0, 0), |q| (q.scale, q.zero_point));
        Ok(Header {
            header_len,
            total_len: total,
            required: self.required(info.as_ref(), quant),
            dtype: T::DTYPE.code(),
            memory: t.memory().code(),
            mode: self.mode,
            rank,
            format: info.map_or(0, |i| i.format.code()),
            access: t.access() as u8,
            plane_count: planes.len(),
            fd_count: self.fd_count,
            byte_offset: self.byte_offset as u64,
            buffer_len: self.buffer_len as u64,
            width: info.map_or(0, |i| i.width as u64),
            height: info.map_or(0, |i| i.height as u64),
            colorimetry: info.map_or([0; 4], |i| i.colorimetry.codes()),
            row_stride: info.map_or(0, |i| i.row_stride as u64),
            quant_scale,
            quant_zero_point,
            quant_channels: channel_count as u32,
            quant_axis: channels.map_or(0, |c| c.axis as u32),
            completion_fd: match self.completion.is_some() || self.sync_file {
                true => 1,
                false => NO_FENCE,
            },
            completion_value: self.completion.unwrap_or(0),
            gpu: self.gpu,
            drm_modifier: info.map_or(0, |i| i.modifier.0),
        })
    }

    /// The `required` bits of a blob of this image and quantization: one for each feature it
    /// uses.
    fn required(&self, info: Option<&ImageInfo>, quant: Option<&Quantization>) -> u32 {
        [
            (self.completion.is_some(), REQUIRES_COMPLETION),
            (self.sync_file, REQUIRES_SYNC_FILE),
            (info.is_some(), REQUIRES_IMAGE),
            (quant.is_some(), REQUIRES_QUANTIZATION),
            (
                quant.is_some_and(|q| q.channels.is_some()),
                REQUIRES_PER_CHANNEL,
            ),
            (
                info.is_some_and(|i| i.colorimetry.is_specified()),
                REQUIRES_COLORIMETRY,
            ),
            (
                info.is_some_and(|i| !i.modifier.is_linear()),
                REQUIRES_DRM_MODIFIER,
            ),
            (
                info.is_some_and(|i| i.chroma_stride.is_some()),
                REQUIRES_CHROMA_STRIDE,
            ),
            (self.plane_offsets.is_some(), REQUIRES_PLANE_FDS),
        ]
        .into_iter()
        .filter(|(present, _)| *present)
        .fold(0, |bits, (_, bit)| bits | bit)
    }
}
