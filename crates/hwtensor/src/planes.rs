//! Images whose planes arrive in separate fds (Linux): V4L2's multi-planar formats (`NM12`,
//! one DMA-BUF per plane, each with its own `data_offset` and `bytesperline`) and libcamera
//! frame buffers (a plane list of fd, offset, length), imported without a copy.

use std::os::fd::{AsFd, OwnedFd};

use crate::backing::linux::{Plan, PlaneMapping, PlaneSource};
use crate::backing::Storage;
use crate::buffer::Buffer;
use crate::identity::BufferIdentity;
use crate::image::{check_chroma_stride, check_row_stride, image_geometry, ImageInfo};
use crate::tensor::import_access;
use crate::{
    CpuAccess, DType, Element, Error, ImageSpec, ImportPolicy, PixelFormat, Result, Tensor,
    TensorDyn,
};

/// One plane of an image as its producer hands it over: the fd it is in, the byte its first
/// row starts at (V4L2's `data_offset`, libcamera's plane offset) and its row stride
/// (`bytesperline`). `#[non_exhaustive]`: made by [`PlaneFd::new`].
#[derive(Debug)]
#[non_exhaustive]
pub struct PlaneFd {
    /// The fd the plane is in (taken; closed with the image).
    pub fd: OwnedFd,
    /// Where the plane's first row starts in the fd.
    pub offset: usize,
    /// Bytes from one row of the plane to the next.
    pub row_stride: usize,
}

impl PlaneFd {
    /// The plane at `offset` of `fd`, rows `row_stride` bytes apart.
    pub fn new(fd: OwnedFd, offset: usize, row_stride: usize) -> PlaneFd {
        PlaneFd {
            fd,
            offset,
            row_stride,
        }
    }
}

impl<T: Element> Tensor<T> {
    /// The image `spec` describes, its planes given one by one, each in an fd (the same fd for
    /// planes of one buffer, or one per plane), without a copy.
    ///
    /// The planes' row strides are the image's (a stride in `spec` must agree with them): the
    /// first plane's is the image's row stride; the chroma planes share one of their own
    /// (GStreamer and libcamera may pad it apart from the luma's), kept as
    /// [`ImageInfo::chroma_stride`](crate::ImageInfo::chroma_stride) where it differs from the
    /// format's rule. Planes laid out in one fd as one buffer
    /// are imported as that buffer ([`Tensor::image_from_fd_at`]); planes in separate buffers
    /// are mapped side by side, which needs each to start on a page (refused otherwise, with
    /// the fix named). Every fd must hold the bytes its planes need, and is checked as any
    /// import is (its kind, shared memory sealed against shrinking).
    ///
    /// An image in several buffers maps, views and copies like any image. It has no single fd
    /// ([`Tensor::as_fd`] is `None`): the whole image travels to another process with an fd
    /// per plane (`handoff::send`, a channel's pool), a view of part of it inline.
    pub fn image_from_planes(
        planes: Vec<PlaneFd>,
        spec: &ImageSpec,
        access: CpuAccess,
    ) -> Result<Self> {
        let elem = Self::elem();
        let (w, h, format) = (spec.width, spec.height, spec.format);
        let (info, model) = plane_model(&planes, spec, elem)?;
        let access = match info.modifier.is_linear() {
            true => access,
            false => CpuAccess::None,
        };
        let stride = info.row_stride;
        let first = &planes[0];
        if !first.offset.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::InvalidArgument(format!(
                "a {} image cannot start at byte {}: its elements align to {} bytes",
                T::DTYPE,
                first.offset,
                std::mem::align_of::<T>()
            )));
        }
        let (shape, strides) = image_geometry(None, format, w, h, elem, stride)?;
        let sources: Vec<PlaneSource> = planes
            .into_iter()
            .map(|p| PlaneSource {
                fd: p.fd,
                offset: p.offset,
            })
            .collect();
        let plan = Plan::of(&sources, &model)?;
        if plan.is_one_buffer() {
            let first = sources.into_iter().next().expect("checked above");
            return Self::image_at(first.fd, first.offset, info, access);
        }
        let buffer = mapped_planes(sources, &plan, ImportPolicy::STRICT.unsealed_shm)?;
        let access = access.narrowed_to(import_access(&buffer));
        let mut t = Self::over(buffer, shape, strides, Some(info), access);
        t.offset = plan.lead;
        Ok(t)
    }
}

impl<T: Element> Tensor<T> {
    /// The image [`Tensor::image_from_planes`] describes, copied into a new image on `memory`
    /// (automatic when `None`) with the first plane's row stride: for planes in separate
    /// buffers that cannot be joined in place (a 1920x1080 NV12M frame with 1920-byte rows).
    /// A copy of the whole frame, made because the caller asked for it; the fds are closed
    /// when it is done. The planes are checked as for the zero-copy import.
    pub fn image_copied_from_planes(
        planes: Vec<PlaneFd>,
        spec: &ImageSpec,
        memory: Option<crate::TensorMemory>,
    ) -> Result<Self> {
        let (info, model) = plane_model(&planes, spec, Self::elem())?;
        let image = Self::image_as(&info, memory)?;
        // Composed on the host, then copied where it lives (one upload for device memory).
        let host = match image.memory() {
            crate::TensorMemory::Mem | crate::TensorMemory::Shm | crate::TensorMemory::DmaBuf => {
                None
            }
            _ => Some(Self::image_as(&info, Some(crate::TensorMemory::Mem))?),
        };
        {
            let target = host.as_ref().unwrap_or(&image);
            let mut map = target.map_span_write()?;
            let bytes = map.as_bytes_mut();
            for (plane, source) in model.iter().zip(planes) {
                let src = Tensor::<u8>::from_fd_at(source.fd, source.offset, &[plane.size])?;
                let src = src.map_read()?;
                bytes[plane.offset..plane.offset + plane.size].copy_from_slice(&src);
            }
        }
        if let Some(host) = &host {
            image.copy_from(host)?;
        }
        Ok(image)
    }
}

impl<T: Element> Tensor<T> {
    /// A new zeroed image laid out as `info` says (row and chroma strides), on `memory`.
    fn image_as(info: &ImageInfo, memory: Option<crate::TensorMemory>) -> Result<Self> {
        Self::image(&ImageSpec::of(info), memory, CpuAccess::ReadWrite)
    }
}

impl TensorDyn {
    /// See [`Tensor::image_copied_from_planes`].
    pub fn image_copied_from_planes(
        planes: Vec<PlaneFd>,
        spec: &ImageSpec,
        dtype: DType,
        memory: Option<crate::TensorMemory>,
    ) -> Result<Self> {
        for_dtype!(dtype, image_copied_from_planes(planes, spec, memory))
    }

    /// See [`Tensor::image_from_planes`].
    pub fn image_from_planes(
        planes: Vec<PlaneFd>,
        spec: &ImageSpec,
        dtype: DType,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, image_from_planes(planes, spec, access))
    }
}

/// A buffer over `sources` mapped side by side as `plan` lays them out (the image's first byte
/// at `plan.lead`), known by its first plane's file; shared memory sealed unless
/// `allow_unsealed`. The import of `image_from_planes` and of a blob with an fd per plane.
pub(crate) fn mapped_planes(
    sources: Vec<PlaneSource>,
    plan: &Plan,
    allow_unsealed: bool,
) -> Result<Buffer> {
    let first = sources
        .first()
        .ok_or_else(|| Error::Image("an image needs at least one plane".into()))?;
    let identity = BufferIdentity::of_fd(first.fd.as_fd())?;
    let mapping = PlaneMapping::new(sources, plan, allow_unsealed)?;
    Ok(Buffer::with_identity(Storage::Planes(mapping), identity))
}

/// The image the planes describe (the first plane's row stride, the chroma planes' own) and
/// its plane layout, with the list checked against it.
fn plane_model(
    planes: &[PlaneFd],
    spec: &ImageSpec,
    elem: usize,
) -> Result<(ImageInfo, Vec<crate::Plane>)> {
    let (format, w) = (spec.format, spec.width);
    let first = planes
        .first()
        .ok_or_else(|| Error::Image("an image needs at least one plane".into()))?;
    let stride = check_row_stride(format, w, elem, first.row_stride)?;
    let chroma = match planes.get(1) {
        Some(p) if format.has_chroma_planes() => {
            check_chroma_stride(format, w, elem, stride, p.row_stride)?
        }
        _ => None,
    };
    let chroma_rows = chroma.unwrap_or(format.derived_chroma_stride(stride));
    let disagree = [
        ("row", spec.row_stride, stride),
        ("chroma", spec.chroma_stride, chroma_rows),
    ]
    .into_iter()
    .find(|(_, given, planes)| given.is_some_and(|g| g != *planes));
    if let Some((which, Some(given), planes)) = disagree {
        return Err(Error::RowStride(format!(
            "strides that disagree with the planes: the spec's {which} stride is {given} bytes, \
             the planes' {planes}; leave it out: the planes say it"
        )));
    }
    let info = ImageInfo {
        chroma_stride: chroma,
        colorimetry: spec.colorimetry,
        modifier: spec.modifier,
        ..ImageInfo::new(format, w, spec.height, stride)
    };
    let model = info.planes()?;
    check_planes(planes, &model, format)?;
    Ok((info, model))
}

/// One fd per plane of the format, each with the row stride the image implies (the chroma
/// planes share one).
fn check_planes(planes: &[PlaneFd], model: &[crate::Plane], format: PixelFormat) -> Result<()> {
    if planes.len() != model.len() {
        return Err(Error::Image(format!(
            "{format} has {} plane(s); {} were given",
            model.len(),
            planes.len()
        )));
    }
    for (k, (p, m)) in planes.iter().zip(model).enumerate().skip(1) {
        if p.row_stride != m.row_stride {
            return Err(Error::RowStride(format!(
                "plane {k}'s row stride is {} bytes, but this {format} image has {}-byte rows \
                 there (its chroma planes share one stride; planar RGB's planes share the \
                 first plane's)",
                p.row_stride, m.row_stride
            )));
        }
    }
    Ok(())
}
