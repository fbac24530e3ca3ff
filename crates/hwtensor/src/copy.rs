//! [`Tensor::copy_from`]: copies between any two backings.
//!
//! Host to host is a memcpy. Pairs that involve GPU memory go to the platform's GPU backend
//! first (`gpu::copy_on_gpu`), which runs the copy on the device where it can; whatever it
//! declines, and any copy within one buffer, is copied through CPU maps.

use crate::{Element, Error, Result, Tensor};

impl<T: Element> Tensor<T> {
    /// Copies `src` into this tensor. The shapes must match; either side may be a strided view
    /// (a crop of a padded image), copied as one region per contiguous run.
    pub fn copy_from(&self, src: &Tensor<T>) -> Result<()> {
        if self.shape != src.shape {
            return Err(Error::Shape(format!(
                "copy_from: shapes {:?} and {:?} differ",
                src.shape, self.shape
            )));
        }
        // Within one buffer the regions may overlap, and one buffer cannot be claimed for reading
        // and writing at once: such a copy reads everything first, through a map.
        let one_buffer = self.buffer.same_as(&src.buffer);
        if !one_buffer && (self.buffer.gpu().is_some() || src.buffer.gpu().is_some()) {
            if let Some(done) = crate::gpu::copy_on_gpu(self, src) {
                return done;
            }
        }
        self.copy_from_flat(&src.to_vec()?)
    }
}
