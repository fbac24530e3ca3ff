//! [`Tensor::reshape`] and [`Tensor::repoint`]: new geometry over the same buffer, no copy.
//!
//! A pool of buffers outlives the frames it carries: when a stream changes resolution or
//! format, its buffers are re-pointed at the new geometry instead of reallocated, as long as it
//! fits their capacity.

use crate::geometry::{byte_strides, element_count};
use crate::image::{check_row_stride, default_row_stride, image_geometry, ImageInfo};
use crate::tensor::Parts;
use crate::{Element, Error, PixelFormat, Result, Tensor};

impl<T: Element> Tensor<T> {
    /// The same elements in another `shape` (C order), sharing the buffer: the tensor must be
    /// contiguous (not a strided view) and the element count unchanged. An image becomes a
    /// plain tensor (its rows no longer mean pixels); quantization and access are kept.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        if !self.is_contiguous() {
            return Err(Error::Shape(format!(
                "a strided view ({:?} with byte strides {:?}) cannot be reshaped in place; copy \
                 it into a tensor of its own first",
                self.shape, self.strides
            )));
        }
        if self
            .quantization
            .as_ref()
            .is_some_and(|q| q.channels.is_some())
        {
            return Err(Error::Shape(
                "a per-channel-quantized tensor cannot be reshaped: its channel axis would lose \
                 its meaning"
                    .into(),
            ));
        }
        if element_count(shape)? != self.len() {
            return Err(Error::Shape(format!(
                "{shape:?} holds {} elements, the tensor {}",
                element_count(shape)?,
                self.len()
            )));
        }
        let mut t = self.clone();
        t.strides = byte_strides(shape, Self::elem(), None)?;
        t.shape = shape.to_vec();
        t.image = None;
        Ok(t)
    }

    /// The whole buffer under a new plain `shape` (C order, from its first byte): a pooled
    /// buffer re-pointed at a new geometry. It must fit the buffer's capacity.
    pub fn repoint(&self, shape: &[usize]) -> Result<Self> {
        let strides = byte_strides(shape, Self::elem(), None)?;
        self.repointed(shape.to_vec(), strides, None)
    }

    /// The whole buffer as a `w` x `h` image of `format` with rows `row_stride` bytes apart
    /// (tight when `None`): a pooled buffer re-pointed at a new frame format. It must fit the
    /// buffer's capacity.
    pub fn repoint_image(
        &self,
        w: usize,
        h: usize,
        format: PixelFormat,
        row_stride: Option<usize>,
    ) -> Result<Self> {
        let pitch = match row_stride {
            Some(p) => check_row_stride(format, w, Self::elem(), p)?,
            None => default_row_stride(format, w, Self::elem(), crate::TensorMemory::Mem)?,
        };
        let (shape, strides) = image_geometry(None, format, w, h, Self::elem(), pitch)?;
        let info = ImageInfo::new(format, w, h, pitch);
        self.repointed(shape, strides, Some(info))
    }

    fn repointed(
        &self,
        shape: Vec<usize>,
        strides: Vec<usize>,
        image: Option<ImageInfo>,
    ) -> Result<Self> {
        // A D3D11 GPU buffer may be a texture whose pitch and format the driver chose.
        if cfg!(windows) && self.memory() == crate::TensorMemory::Gpu {
            return Err(Error::InvalidOperation(
                "GPU memory on Windows may be a texture of a fixed geometry; allocate a new \
                 tensor instead of re-pointing it"
                    .into(),
            ));
        }
        let parts = Parts {
            offset: 0,
            shape,
            strides,
            image,
            access: self.access,
            quantization: self.quantization.clone(),
        };
        let checked = parts.check(Self::elem(), self.buffer.len())?;
        Tensor::from_parts(self.buffer.clone(), checked)
    }
}

#[cfg(test)]
mod tests {
    use crate::{CpuAccess, Error, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};

    #[test]
    fn a_contiguous_tensor_reshapes_in_place_and_a_strided_view_does_not() {
        let t = Tensor::<u16>::new(&[4, 6], Some(TensorMemory::Mem)).unwrap();
        t.map_write().unwrap()[7] = 9;
        let r = t.reshape(&[2, 3, 4]).unwrap();
        assert_eq!(r.strides(), &[24, 8, 2]);
        assert_eq!(r.map_read().unwrap()[7], 9, "the same elements");
        assert!(matches!(t.reshape(&[5, 5]), Err(Error::Shape(_))));
        let view = t.view(Region::new(1, 0, 2, 2)).unwrap();
        assert!(matches!(view.reshape(&[4]), Err(Error::Shape(_))));
    }

    #[test]
    fn a_pooled_buffer_is_repointed_at_any_geometry_that_fits_it() {
        let pool = Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Rgba, 64, 32),
            Some(TensorMemory::Mem),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        let nv12 = pool
            .repoint_image(64, 32, PixelFormat::Nv12, Some(128))
            .unwrap();
        assert_eq!(nv12.row_stride(), Some(128));
        assert_eq!(nv12.image_info().unwrap().format, PixelFormat::Nv12);
        let plain = pool.repoint(&[32, 256]).unwrap();
        assert_eq!(plain.shape(), &[32, 256]);
        assert!(
            pool.repoint_image(128, 64, PixelFormat::Rgba, None)
                .is_err(),
            "too big"
        );
        assert!(pool.repoint(&[64 * 32 * 4 + 1]).is_err());
    }
}
