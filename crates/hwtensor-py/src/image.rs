//! The image description from Python: one `ImageSpec` value taken by every image constructor
//! (`Tensor.image`, `Tensor.image_from_fd`, `Tensor.image_from_planes`), so a new property of
//! images is a keyword here, not another argument of each constructor.

use std::str::FromStr;

use hwtensor::{Colorimetry, DrmModifier, ImageSpec as CoreSpec, PixelFormat};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{InvalidArgument, OrPy};

/// What an image is asked to be: ``format`` ("rgba", "nv12", "i420", ... or a FourCC alias),
/// ``width`` and ``height`` in pixels; where the producer dictates them, ``row_stride`` and
/// ``chroma_stride`` in bytes (None: the memory's default, and the format's rule from the row
/// stride), ``colorimetry`` (a dict of names as ``Tensor.colorimetry`` gives) and
/// ``drm_modifier`` (a ``DRM_FORMAT_MOD_*``; 0 is LINEAR).
#[pyclass(module = "hwtensor", frozen, eq)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ImageSpec(pub(crate) CoreSpec);

#[pymethods]
impl ImageSpec {
    #[new]
    #[pyo3(signature = (format, width, height, *, row_stride = None, chroma_stride = None, colorimetry = None, drm_modifier = 0))]
    fn new(
        format: &str,
        width: usize,
        height: usize,
        row_stride: Option<usize>,
        chroma_stride: Option<usize>,
        colorimetry: Option<&Bound<'_, PyDict>>,
        drm_modifier: u64,
    ) -> PyResult<ImageSpec> {
        let mut spec = CoreSpec::new(PixelFormat::from_str(format).or_py()?, width, height)
            .with_modifier(DrmModifier(drm_modifier));
        if let Some(s) = row_stride {
            spec = spec.with_row_stride(s);
        }
        if let Some(c) = chroma_stride {
            spec = spec.with_chroma_stride(c);
        }
        if let Some(c) = colorimetry {
            spec = spec.with_colorimetry(colorimetry_of(c)?);
        }
        Ok(ImageSpec(spec))
    }

    /// The pixel format's name.
    #[getter]
    fn format(&self) -> &'static str {
        self.0.format.name()
    }

    /// Width in pixels.
    #[getter]
    fn width(&self) -> usize {
        self.0.width
    }

    /// Height in pixels.
    #[getter]
    fn height(&self) -> usize {
        self.0.height
    }

    /// Bytes from one row to the next, or None (the memory's default).
    #[getter]
    fn row_stride(&self) -> Option<usize> {
        self.0.row_stride
    }

    /// Bytes from one chroma row to the next, or None (the format's rule).
    #[getter]
    fn chroma_stride(&self) -> Option<usize> {
        self.0.chroma_stride
    }

    /// The DRM format modifier (0: LINEAR).
    #[getter]
    fn drm_modifier(&self) -> u64 {
        self.0.modifier.0
    }

    fn __repr__(&self) -> String {
        let s = &self.0;
        let opt = |v: Option<usize>| v.map_or("None".to_string(), |v| v.to_string());
        format!(
            "ImageSpec({:?}, {}, {}, row_stride={}, chroma_stride={}, drm_modifier={:#x})",
            s.format.name(),
            s.width,
            s.height,
            opt(s.row_stride),
            opt(s.chroma_stride),
            s.modifier.0
        )
    }
}

/// The colorimetry a dict of names says (``primaries``, ``transfer``, ``matrix``, ``range``;
/// those left out unspecified); another key is refused by name.
fn colorimetry_of(d: &Bound<'_, PyDict>) -> PyResult<Colorimetry> {
    let mut c = Colorimetry::default();
    for (key, value) in d.iter() {
        let (key, value): (String, String) = (key.extract()?, value.extract()?);
        set_colour(&mut c, &key, &value)?;
    }
    Ok(c)
}

/// Sets the `part` of `c` ("primaries", "transfer", "matrix" or "range") to the one `name`s:
/// what `ImageSpec(colorimetry=)` and `Tensor.with_colorimetry` both read.
pub(crate) fn set_colour(c: &mut Colorimetry, part: &str, name: &str) -> PyResult<()> {
    match part {
        "primaries" => c.primaries = name.parse().or_py()?,
        "transfer" => c.transfer = name.parse().or_py()?,
        "matrix" => c.matrix = name.parse().or_py()?,
        "range" => c.range = name.parse().or_py()?,
        other => {
            return Err(InvalidArgument::new_err(format!(
                "colorimetry key {other:?}: the keys are primaries, transfer, matrix, range"
            )))
        }
    }
    Ok(())
}
