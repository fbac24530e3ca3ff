//! [`Tensor::view`] and [`Tensor::batch`]: zero-copy sub-tensors.

use crate::image::ImageInfo;
use crate::{Element, Error, Layout, Region, Result, Tensor};

impl<T: Element> Tensor<T> {
    /// The sub-rectangle `region`, sharing this tensor's buffer.
    ///
    /// For an image the region is in pixels. For a plain tensor it selects rows and columns of
    /// its `[h, w]` dimensions: the last two of a rank-2 tensor, the three before the last
    /// (`[.., h, w, c]`) from rank 3 up. A region that does not fit is an error, never clamped;
    /// views nest, each relative to its parent.
    pub fn view(&self, region: Region) -> Result<Self> {
        let (h_dim, w_dim) = self.row_and_column_dims()?;
        if let Some(info) = self.image {
            if !info.modifier.is_linear() {
                return Err(info.modifier.refusal("a view"));
            }
            check_image_region(&info, region)?;
        }
        let fits = |start: usize, len: usize, dim: usize| {
            start
                .checked_add(len)
                .is_some_and(|end| end <= self.shape[dim])
        };
        if !fits(region.y, region.height, h_dim) || !fits(region.x, region.width, w_dim) {
            return Err(Error::RegionOutside {
                region,
                width: self.shape[w_dim],
                height: self.shape[h_dim],
            });
        }
        let start = region
            .y
            .checked_mul(self.strides[h_dim])
            .zip(region.x.checked_mul(self.strides[w_dim]))
            .and_then(|(dy, dx)| dy.checked_add(dx)?.checked_add(self.offset))
            .ok_or_else(|| Error::OutOfBounds(format!("the offset of {region:?} overflows")))?;
        let mut view = self.clone();
        view.offset = start;
        view.shape[h_dim] = region.height;
        view.shape[w_dim] = region.width;
        view.image = self.image.map(|i| ImageInfo {
            width: region.width,
            height: region.height,
            ..i
        });
        // Per-channel quantization on a row or column axis keeps the channels in the region.
        view.quantization = self.quantization.as_ref().map(|q| {
            q.sliced(h_dim, region.y, region.height)
                .sliced(w_dim, region.x, region.width)
        });
        debug_assert!(view.is_empty() || view.offset + view.byte_extent() <= self.buffer.len());
        Ok(view)
    }

    /// Item `index` of the leading (batch) dimension, which the result drops: `[n, h, w, c]`
    /// gives `[h, w, c]`. An index past the end is an error.
    pub fn batch(&self, index: usize) -> Result<Self> {
        let n = *self
            .shape
            .first()
            .ok_or_else(|| Error::Shape("a rank-0 tensor has no batch dimension".into()))?;
        if let Some(info) = self.image {
            if self.shape.len() == info.format.allocation_shape(info.width, info.height).len() {
                return Err(Error::Image(
                    "this image is not batched; [[image_batch]]".into(),
                ));
            }
        }
        if index >= n {
            return Err(Error::IndexOutside { index, len: n });
        }
        let start = index
            .checked_mul(self.strides[0])
            .and_then(|d| d.checked_add(self.offset))
            .ok_or_else(|| Error::OutOfBounds(format!("the offset of batch {index} overflows")))?;
        let mut item = self.clone();
        item.offset = start;
        item.shape.remove(0);
        item.strides.remove(0);
        item.quantization = self.quantization.as_ref().map(|q| q.without_dim(0, index));
        Ok(item)
    }

    /// Which dimensions a region's rows and columns select.
    fn row_and_column_dims(&self) -> Result<(usize, usize)> {
        let rank = self.shape.len();
        let from_end = match self.image {
            Some(info) => info.format.row_dim_from_end(),
            None if rank >= 3 => 3,
            None if rank == 2 => 2,
            None => {
                return Err(Error::Shape(format!(
                    "a region needs rows and columns; this tensor has rank {rank}"
                )))
            }
        };
        Ok((rank - from_end, rank - from_end + 1))
    }
}

fn check_image_region(info: &ImageInfo, region: Region) -> Result<()> {
    match info.format.layout() {
        Layout::SemiPlanar | Layout::PlanarYuv => Err(Error::Image(format!(
            "a region of a {} image spans two planes and is not one strided tensor; \
             [[plane_table]]",
            info.format
        ))),
        _ if info.format.pairs_pixels()
            && (!region.x.is_multiple_of(2) || !region.width.is_multiple_of(2)) =>
        {
            Err(Error::Image(format!(
                "{} pixels come in pairs: a region needs an even x and width (got x {} width {})",
                info.format, region.x, region.width
            )))
        }
        _ => Ok(()),
    }
}
