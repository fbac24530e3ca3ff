//! [`Quantization`]: how an integer tensor's values map to real numbers, per tensor or per
//! channel along one axis (TFLite's and ONNX's per-axis quantization of weights, and of some
//! NPUs' outputs), validated against the element type and the shape it describes.

use crate::{DType, Error, Result};

/// Most channels per-channel quantization may name: a blob carries their parameters, so the
/// count is bounded (the widest layers we know of have a few thousand channels).
pub const MAX_QUANT_CHANNELS: usize = 1 << 16;

/// Affine quantization of an integer tensor: `real = scale * (q - zero_point)`, per tensor or
/// per channel. Made by [`Quantization::per_tensor`] or [`Quantization::per_channel`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Quantization {
    /// The real value of one step of the stored integer (per channel: channel 0's).
    pub scale: f32,
    /// The stored integer that means zero (per channel: channel 0's).
    pub zero_point: i32,
    /// Per-channel parameters, where there are (boxed: every tensor carries a quantization
    /// slot, and most have none).
    pub channels: Option<Box<ChannelQuantization>>,
}

/// One `(scale, zero_point)` per index along `axis`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelQuantization {
    /// The channel axis.
    pub axis: usize,
    /// One scale per channel.
    pub scales: Vec<f32>,
    /// One zero point per channel.
    pub zero_points: Vec<i32>,
}

impl Quantization {
    /// One scale and zero point for the whole tensor.
    pub fn per_tensor(scale: f32, zero_point: i32) -> Quantization {
        Quantization {
            scale,
            zero_point,
            channels: None,
        }
    }

    /// One scale and zero point per index along `axis`; both lists as long as that axis, and at
    /// most [`MAX_QUANT_CHANNELS`].
    pub fn per_channel(
        axis: usize,
        scales: Vec<f32>,
        zero_points: Vec<i32>,
    ) -> Result<Quantization> {
        if scales.len() != zero_points.len() || scales.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "per-channel quantization needs as many zero points as scales, at least one \
                 ({} scales, {} zero points)",
                scales.len(),
                zero_points.len()
            )));
        }
        if scales.len() > MAX_QUANT_CHANNELS {
            return Err(Error::InvalidArgument(format!(
                "{} channels is more than the {MAX_QUANT_CHANNELS} per-channel quantization takes",
                scales.len()
            )));
        }
        Ok(Quantization {
            scale: scales[0],
            zero_point: zero_points[0],
            channels: Some(Box::new(ChannelQuantization {
                axis,
                scales,
                zero_points,
            })),
        })
    }

    /// Whether these parameters can describe a tensor of `dtype`, saying why not: integer
    /// elements only, every scale positive and finite, every zero point representable.
    pub fn check(&self, dtype: DType) -> Result<()> {
        let (min, max): (i64, i64) = match dtype {
            DType::U8 => (0, u8::MAX.into()),
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::U16 => (0, u16::MAX.into()),
            DType::I16 => (i16::MIN.into(), i16::MAX.into()),
            DType::U32 | DType::U64 => (0, i64::MAX),
            DType::I32 | DType::I64 => (i64::MIN, i64::MAX),
            _ => {
                return Err(Error::InvalidOperation(format!(
                    "quantization describes integer tensors; a {dtype} tensor holds real values \
                     already"
                )))
            }
        };
        let pairs: Vec<(f32, i32)> = match &self.channels {
            Some(c) => c
                .scales
                .iter()
                .copied()
                .zip(c.zero_points.iter().copied())
                .collect(),
            None => vec![(self.scale, self.zero_point)],
        };
        for (scale, zero_point) in pairs {
            if !(scale.is_finite() && scale > 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "a quantization scale must be a positive finite number, not {scale}"
                )));
            }
            if !(min..=max).contains(&i64::from(zero_point)) {
                return Err(Error::InvalidArgument(format!(
                    "zero point {zero_point} does not fit a {dtype} element ({min} to {max})"
                )));
            }
        }
        Ok(())
    }

    /// Whether per-channel parameters fit a tensor of `shape`: their axis is one of its axes,
    /// with one pair per index.
    pub fn check_shape(&self, shape: &[usize]) -> Result<()> {
        let Some(c) = &self.channels else {
            return Ok(());
        };
        match shape.get(c.axis) {
            Some(&n) if n == c.scales.len() => Ok(()),
            Some(&n) => Err(Error::Shape(format!(
                "per-channel quantization has {} channels, axis {} of {shape:?} has {n}",
                c.scales.len(),
                c.axis
            ))),
            None => Err(Error::Shape(format!(
                "per-channel quantization on axis {} of a rank-{} tensor",
                c.axis,
                shape.len()
            ))),
        }
    }

    /// The parameters of the channels `start..start + len` of axis `dim` (a view's), the rest
    /// unchanged.
    pub(crate) fn sliced(&self, dim: usize, start: usize, len: usize) -> Quantization {
        match &self.channels {
            Some(c) if c.axis == dim => {
                let end = (start + len).min(c.scales.len());
                let start = start.min(end);
                match Quantization::per_channel(
                    dim,
                    c.scales[start..end].to_vec(),
                    c.zero_points[start..end].to_vec(),
                ) {
                    Ok(q) => q,
                    // An empty view keeps no channel: its first channel's values say enough.
                    Err(_) => Quantization {
                        channels: Some(Box::new(ChannelQuantization {
                            axis: dim,
                            scales: Vec::new(),
                            zero_points: Vec::new(),
                        })),
                        ..self.clone()
                    },
                }
            }
            _ => self.clone(),
        }
    }

    /// The parameters once dimension `dim` is dropped at `index` (a batch item's): the item's
    /// own pair when `dim` is the channel axis, the axis renumbered when it came after.
    pub(crate) fn without_dim(&self, dim: usize, index: usize) -> Quantization {
        match &self.channels {
            Some(c) if c.axis == dim => {
                let at = index.min(c.scales.len().saturating_sub(1));
                Quantization::per_tensor(
                    c.scales.get(at).copied().unwrap_or(self.scale),
                    c.zero_points.get(at).copied().unwrap_or(self.zero_point),
                )
            }
            Some(c) if c.axis > dim => Quantization {
                channels: Some(Box::new(ChannelQuantization {
                    axis: c.axis - 1,
                    ..(**c).clone()
                })),
                ..self.clone()
            },
            _ => self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_parameters_follow_views_and_batch_items() {
        let q = Quantization::per_channel(0, vec![0.5, 0.25, 0.125], vec![1, 2, 3]).unwrap();
        assert!(q.check_shape(&[3, 8]).is_ok());
        assert!(q.check_shape(&[4, 8]).is_err());
        assert!(q.check_shape(&[]).is_err());
        let middle = q.sliced(0, 1, 2);
        assert_eq!(middle.channels.as_ref().unwrap().zero_points, vec![2, 3]);
        let item = q.without_dim(0, 2);
        assert_eq!(
            (item.scale, item.zero_point, item.channels),
            (0.125, 3, None)
        );
        let later = Quantization::per_channel(2, vec![1.0; 4], vec![0; 4]).unwrap();
        assert_eq!(later.without_dim(0, 5).channels.unwrap().axis, 1);
    }

    #[test]
    fn every_channel_is_validated() {
        let q = Quantization::per_channel(0, vec![0.5, -1.0], vec![0, 0]).unwrap();
        assert!(q.check(DType::U8).is_err());
        let q = Quantization::per_channel(0, vec![0.5, 0.5], vec![0, 300]).unwrap();
        assert!(q.check(DType::U8).is_err());
        assert!(q.check(DType::I16).is_ok());
        assert!(Quantization::per_channel(0, vec![0.5], vec![]).is_err());
    }
}
