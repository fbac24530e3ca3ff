//! The image description from C: one `HwtImageSpec` taken by every image constructor
//! (`hwt_tensor_new_image`, `hwt_tensor_image_from_fd`, `hwt_tensor_image_from_planes`,
//! `hwt_tensor_image_copied_from_planes`, `hwt_tensor_from_d3d11_texture`), so a new property
//! of images is a field, not another family of functions. Zero in a field is its default.

use hwtensor::{DrmModifier, ImageSpec, TensorDyn};

use crate::codes::{access_of, dtype_of, format_of, memory_of};
use crate::status::{guard, invalid, HwtStatus, OrStatus};
use crate::tensor::{hand_out, HwtColorimetry, HwtTensor};

/// What an image is asked to be. Fields that are 0 take their default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HwtImageSpec {
    /// An `HWT_PIXEL_FORMAT_*` value.
    pub format: u32,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes from one row to the next; 0: tight on the host, 64-byte aligned on memory a
    /// device imports (an import: tight).
    pub row_stride: usize,
    /// Bytes from one row of each chroma plane to the next; 0: the format's rule from the row
    /// stride. Needs `row_stride`.
    pub chroma_stride: usize,
    /// Colour codes as `hwt_tensor_colorimetry` gives them; all 0: unspecified.
    pub colorimetry: HwtColorimetry,
    /// A `DRM_FORMAT_MOD_*`; 0 (`HWT_DRM_FORMAT_MOD_LINEAR`): rows one after another.
    pub drm_modifier: u64,
}

impl HwtImageSpec {
    /// The library's spec; an unknown format or colour code is `HWT_STATUS_INVALID_ARGUMENT`.
    pub(crate) fn spec(&self) -> Result<ImageSpec, HwtStatus> {
        let mut spec = ImageSpec::new(format_of(self.format)?, self.width, self.height)
            .with_colorimetry(self.colorimetry.colorimetry()?)
            .with_modifier(DrmModifier(self.drm_modifier));
        if self.row_stride != 0 {
            spec = spec.with_row_stride(self.row_stride);
        }
        if self.chroma_stride != 0 {
            spec = spec.with_chroma_stride(self.chroma_stride);
        }
        Ok(spec)
    }
}

/// The spec behind `spec`, null refused.
///
/// # Safety
/// `spec` must be null or valid for one read.
pub(crate) unsafe fn spec_in(spec: *const HwtImageSpec) -> Result<ImageSpec, HwtStatus> {
    // SAFETY: null refused; otherwise the caller's contract.
    let spec = unsafe { spec.as_ref() }.ok_or_else(|| invalid("the image spec is null"))?;
    spec.spec()
}

/// Creates the image `spec` describes, elements of `dtype`, in `memory`, with `cpu_access` (an
/// `HwtAccess`). A row stride must hold a row of the format in whole elements; a chroma stride
/// is for host, shm and dmabuf memory; a modifier other than LINEAR is refused (hwtensor
/// allocates linear images). On success `*out` holds a new reference.
///
/// # Safety
/// `spec` must be valid for one read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_tensor_new_image(
    spec: *const HwtImageSpec,
    dtype: u32,
    memory: u32,
    cpu_access: u32,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let spec = unsafe { spec_in(spec) }?;
        let (dtype, memory, access) =
            (dtype_of(dtype)?, memory_of(memory)?, access_of(cpu_access)?);
        let t = TensorDyn::image(&spec, dtype, memory, access).or_status()?;
        hand_out(out, t)
    })
}
