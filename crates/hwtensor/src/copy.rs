//! [`Tensor::copy_from`]: copies between any two backings.
//!
//! Host to host is a memcpy. Where a side is GPU memory, the copy is planned here (shapes,
//! claims, the runs of both layouts) and the platform's GPU backend runs the plan on the device
//! (`gpu::run_copy`); a host side the device cannot reach, and any copy within one buffer, goes
//! through CPU maps.

use crate::gpu::{self, CopyPlan, Placement};
use crate::Direction;
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
        if !self.buffer.same_as(&src.buffer) {
            if let Some(done) = self.copy_on_device(src) {
                return done;
            }
        }
        self.copy_from_flat(&src.to_vec()?)
    }

    /// Runs the copy on the GPU device when a side is GPU memory and the device reaches the
    /// other; `None` when it has to go through CPU maps.
    fn copy_on_device(&self, src: &Tensor<T>) -> Option<Result<()>> {
        if self.buffer.gpu().is_none() && src.buffer.gpu().is_none() {
            return None;
        }
        let (from, to) = (src.buffer.copy_side()?, self.buffer.copy_side()?);
        let plan = CopyPlan {
            shape: &self.shape,
            elem: T::DTYPE.size(),
            src: Placement {
                offset: src.offset,
                strides: &src.strides,
            },
            dst: Placement {
                offset: self.offset,
                strides: &self.strides,
            },
        };
        let run = || {
            let _read = src.buffer.hold_for_device(Direction::Read)?;
            let _write = self.buffer.hold_for_device(Direction::Write)?;
            gpu::run_copy(&plan, from, to)
        };
        Some(run())
    }
}
