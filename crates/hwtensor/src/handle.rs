//! What a Windows tensor does with NT handles, the counterpart of `fd.rs` on Linux: a GPU image
//! shared with another API or process as its texture's handle plus its completion, and an image
//! made over such a handle.

use std::os::windows::io::{AsHandle, BorrowedHandle};

use windows::core::Interface;
use windows::Win32::Graphics::Direct3D11::{ID3D11Resource, ID3D11Texture2D};

use crate::backing::Storage;
use crate::buffer::Buffer;
use crate::gpu::{GpuCompletion, GpuMemory, GpuShare, TextureRequest};
use crate::image::image_geometry;
use crate::{CpuAccess, DType, Element, Error, ImageSpec, Result, Tensor, TensorDyn};

impl<T: Element> Tensor<T> {
    /// Shares this GPU image: a new NT handle of its texture plus the completion a consumer
    /// waits for (no fence where the device has none: the work has then already finished).
    pub fn share_gpu(&self) -> Result<GpuShare> {
        let mem = self.buffer.gpu().ok_or_else(|| {
            Error::InvalidOperation(format!(
                "only GPU tensors have a texture to share; this one is {}",
                self.memory()
            ))
        })?;
        let texture = mem.share()?;
        let value = mem.device().signal()?;
        Ok(GpuShare {
            texture,
            completion: mem.device().completion(value),
        })
    }

    /// A `w`x`h` GPU image over a texture another API or process shared (`share_gpu` on the
    /// other side): opens the NT handle (which stays the caller's), checks the texture is that
    /// image, and waits (on the CPU, at most [`crate::gpu::GPU_WAIT`]) for the completion where
    /// it carries a fence: a peer that never signals is a timeout, never a hung queue.
    pub fn image_from_gpu_share(
        texture: BorrowedHandle<'_>,
        completion: &GpuCompletion,
        spec: &ImageSpec,
        access: CpuAccess,
    ) -> Result<Self> {
        let req = Self::texture_request(spec);
        let mem = GpuMemory::open_shared(texture, &req)?;
        if let Some(fence) = &completion.fence {
            mem.device().wait_for_peer(
                fence.as_handle(),
                completion.value,
                crate::gpu::GPU_WAIT,
            )?;
        }
        Self::over_texture(mem, spec, access)
    }

    /// A `w`x`h` GPU image over `texture`, a texture the host made on the process device
    /// (`gpu::device()?.device()`): no copy, no handle. `completion` is the timeline value after
    /// which the host's last write to it is done (0: nothing to wait for, the host's work went to
    /// the shared immediate context before this call); it is waited for on the CPU, at most
    /// [`crate::gpu::GPU_WAIT`], and a value never signalled is refused. A texture of another
    /// device, or one that is not this image (format, size, one layer, one sample), is refused.
    pub fn from_d3d11_texture(
        texture: &ID3D11Texture2D,
        completion: u64,
        spec: &ImageSpec,
        access: CpuAccess,
    ) -> Result<Self> {
        let req = Self::texture_request(spec);
        let mem = GpuMemory::host_texture(texture.clone(), &req)?;
        let device = mem.device();
        if completion > device.last_signalled() {
            return Err(Error::InvalidArgument(format!(
                "completion {completion} was never signalled (the timeline is at {})",
                device.last_signalled()
            )));
        }
        if completion > 0 {
            device.wait(completion, crate::gpu::GPU_WAIT)?;
        }
        Self::over_texture(mem, spec, access)
    }

    /// The one texture the image `spec` describes is.
    fn texture_request(spec: &ImageSpec) -> TextureRequest {
        TextureRequest {
            format: spec.format,
            width: spec.width,
            height: spec.height,
            dtype: T::DTYPE,
            batch: 1,
        }
    }

    /// The image `spec` describes over `mem`, a texture checked to be it, rows its staging
    /// pitch apart (a row stride in `spec` must be that pitch; a texture is linear).
    fn over_texture(mem: GpuMemory, spec: &ImageSpec, access: CpuAccess) -> Result<Self> {
        let (format, w, h, stride) = (spec.format, spec.width, spec.height, mem.pitch());
        if spec.row_stride.is_some_and(|s| s != stride) || !spec.modifier.is_linear() {
            return Err(Error::RowStride(format!(
                "a shared D3D11 texture is linear with rows {stride} bytes apart; leave the \
                 spec's row stride and modifier out"
            )));
        }
        let (shape, strides) = image_geometry(None, format, w, h, T::DTYPE.size(), stride)?;
        let buffer = Buffer::new(Storage::Gpu(mem))?;
        let info = spec.info_at(stride, T::DTYPE.size())?;
        Ok(Self::over(buffer, shape, strides, Some(info), access))
    }

    /// The texture under this GPU image, for D3D11 or ANGLE work on the process device.
    pub fn d3d11_texture(&self) -> Option<ID3D11Resource> {
        self.buffer.gpu().and_then(|m| m.texture().cast().ok())
    }
}

impl TensorDyn {
    /// See [`Tensor::from_d3d11_texture`]; elements of `dtype`.
    pub fn from_d3d11_texture(
        texture: &ID3D11Texture2D,
        completion: u64,
        spec: &ImageSpec,
        dtype: DType,
        access: CpuAccess,
    ) -> Result<Self> {
        for_dtype!(dtype, from_d3d11_texture(texture, completion, spec, access))
    }
}
