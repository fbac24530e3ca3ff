//! GPU memory on Windows: an `ID3D11Texture2D` on the process device per image buffer.
//!
//! The CPU sees the texture through a persistent staging texture and a host copy whose rows are
//! the staging texture's pitch apart -- that pitch is the image's row stride. A map copies the
//! texture down (GPU copy into staging, `Map`, rows into the host copy); dropping a write map
//! copies it back up. D3D11 cannot keep a staging texture mapped while the GPU copies into it,
//! so the host copy is what gives a map its stable pointer.

use std::collections::HashMap;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use windows::core::Interface;
use windows::Win32::Foundation::GENERIC_ALL;
use windows::Win32::Graphics::Direct3D11::{
    ID3D11Texture2D, D3D11_BIND_SHADER_RESOURCE, D3D11_CPU_ACCESS_READ, D3D11_CPU_ACCESS_WRITE,
    D3D11_MAPPED_SUBRESOURCE, D3D11_MAP_READ, D3D11_MAP_WRITE, D3D11_RESOURCE_MISC_SHARED,
    D3D11_RESOURCE_MISC_SHARED_NTHANDLE, D3D11_SUBRESOURCE_DATA, D3D11_TEXTURE2D_DESC,
    D3D11_USAGE_DEFAULT, D3D11_USAGE_STAGING,
};
use windows::Win32::Graphics::Dxgi::Common::{
    DXGI_FORMAT, DXGI_FORMAT_B8G8R8A8_UNORM, DXGI_FORMAT_B8G8R8X8_UNORM,
    DXGI_FORMAT_R16G16B16A16_FLOAT, DXGI_FORMAT_R16_UNORM, DXGI_FORMAT_R32G32B32A32_FLOAT,
    DXGI_FORMAT_R8G8B8A8_UNORM, DXGI_FORMAT_R8G8_UNORM, DXGI_FORMAT_R8_UNORM, DXGI_SAMPLE_DESC,
};
use windows::Win32::Graphics::Dxgi::IDXGIResource1;

use super::GpuDevice;
use crate::gpu::{GpuOrigin, TextureRequest};
use crate::os::heap::HeapBlock;
use crate::{DType, Error, PixelFormat, Result, TensorMemory};

/// D3D11's largest 2D texture side at feature level 11.0 and up.
const MAX_TEXTURE_SIDE: usize = 16384;

/// Host memory imported into the device: D3D11 has no such import, so there is never one
/// (the copy path reaches host memory through the staging texture instead).
#[derive(Debug)]
pub(crate) enum HostImport {}

impl HostImport {
    /// Never an import: D3D11 cannot import host memory.
    ///
    /// # Safety
    /// None needed; unsafe to match the Vulkan backend's contract (the pointer must stay valid
    /// while the import lives).
    pub(crate) unsafe fn new(_ptr: *mut u8, _len: usize) -> Option<HostImport> {
        None
    }
}

/// The DXGI format that holds `format` of `dtype`, and its bytes per texel.
fn dxgi_format(format: PixelFormat, dtype: DType) -> Option<(DXGI_FORMAT, usize)> {
    use PixelFormat as P;
    Some(match (format, dtype) {
        (P::Rgba, DType::U8) => (DXGI_FORMAT_R8G8B8A8_UNORM, 4),
        (P::Bgra, DType::U8) => (DXGI_FORMAT_B8G8R8A8_UNORM, 4),
        (P::Bgrx, DType::U8) => (DXGI_FORMAT_B8G8R8X8_UNORM, 4),
        // Semi-planar and planar YUV images are their combined grid of samples.
        (P::Grey | P::Nv12 | P::Nv21 | P::Nv16 | P::Nv24 | P::I420 | P::Yv12, DType::U8) => {
            (DXGI_FORMAT_R8_UNORM, 1)
        }
        (P::Gray16 | P::P010, DType::U16) => (DXGI_FORMAT_R16_UNORM, 2),
        (P::Yuyv | P::Vyuy | P::Uyvy, DType::U8) => (DXGI_FORMAT_R8G8_UNORM, 2),
        (P::Rgba, DType::F16) => (DXGI_FORMAT_R16G16B16A16_FLOAT, 8),
        (P::Rgba, DType::F32) => (DXGI_FORMAT_R32G32B32A32_FLOAT, 16),
        _ => return None,
    })
}

/// The texture that holds a request: its format and texel grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Grid {
    pub format: i32,
    pub width: u32,
    pub height: u32,
    /// Bytes of pixels in one row (`width` texels).
    pub row_bytes: usize,
}

impl Grid {
    fn of(req: &TextureRequest) -> Result<Grid> {
        let (format, texel) = dxgi_format(req.format, req.dtype).ok_or_else(|| Error::Unavailable {
            memory: TensorMemory::Gpu,
            reason: format!(
                "no DXGI format holds {} of {}; GPU images on Windows are RGBA8, BGRA8, GREY, NV12/NV16/NV24, YUYV/VYUY (u8) or RGBA (f16, f32)",
                req.format, req.dtype
            ),
        })?;
        let elem = req.dtype.size();
        let row = req
            .format
            .min_row_bytes(req.width, elem)
            .unwrap_or(usize::MAX);
        // Saturating: a hostile size must reach the side check below, not overflow.
        let tight = req
            .format
            .allocation_shape(req.width, req.height)
            .iter()
            .fold(elem, |n, &d| n.saturating_mul(d));
        let rows = (tight / row.max(1)).saturating_mul(req.batch);
        let width = row / texel;
        if width == 0 || width > MAX_TEXTURE_SIDE || rows == 0 || rows > MAX_TEXTURE_SIDE {
            return Err(Error::Shape(format!(
                "a {width}x{rows} texture is outside D3D11's 1..={MAX_TEXTURE_SIDE} per side"
            )));
        }
        Ok(Grid {
            format: format.0,
            width: width as u32,
            height: rows as u32,
            row_bytes: width * texel,
        })
    }

    fn desc(self, staging: bool, misc: u32) -> D3D11_TEXTURE2D_DESC {
        D3D11_TEXTURE2D_DESC {
            Width: self.width,
            Height: self.height,
            MipLevels: 1,
            ArraySize: 1,
            Format: DXGI_FORMAT(self.format),
            SampleDesc: DXGI_SAMPLE_DESC {
                Count: 1,
                Quality: 0,
            },
            Usage: if staging {
                D3D11_USAGE_STAGING
            } else {
                D3D11_USAGE_DEFAULT
            },
            BindFlags: if staging {
                0
            } else {
                D3D11_BIND_SHADER_RESOURCE.0 as u32
            },
            CPUAccessFlags: if staging {
                (D3D11_CPU_ACCESS_READ.0 | D3D11_CPU_ACCESS_WRITE.0) as u32
            } else {
                0
            },
            MiscFlags: misc,
        }
    }
}

fn create_texture(
    dev: &GpuDevice,
    desc: &D3D11_TEXTURE2D_DESC,
    init: Option<&D3D11_SUBRESOURCE_DATA>,
) -> windows::core::Result<ID3D11Texture2D> {
    let mut tex = None;
    // SAFETY: a valid description; the initial data (when given) covers every row.
    unsafe {
        dev.device()
            .CreateTexture2D(desc, init.map(std::ptr::from_ref), Some(&mut tex))
    }?;
    tex.ok_or_else(|| windows::core::Error::from_hresult(windows::Win32::Foundation::E_POINTER))
}

/// The pitch a staging texture of `grid` maps with, learnt once per grid.
fn staging_pitch(dev: &GpuDevice, grid: Grid) -> Result<usize> {
    static PITCHES: OnceLock<Mutex<HashMap<Grid, usize>>> = OnceLock::new();
    let cache = PITCHES.get_or_init(Default::default);
    let cached = cache.lock().ok().and_then(|c| c.get(&grid).copied());
    if let Some(p) = cached {
        return Ok(p);
    }
    let staging = create_texture(dev, &grid.desc(true, 0), None)
        .map_err(super::failed("creating a staging texture"))?;
    let pitch = dev.with_queue(|| -> Result<usize> {
        let mapped = map(dev, &staging, D3D11_MAP_READ)?;
        // SAFETY: mapped just above.
        unsafe { dev.context().Unmap(&staging, 0) };
        Ok(mapped.RowPitch as usize)
    })?;
    if let Ok(mut c) = cache.lock() {
        c.insert(grid, pitch);
    }
    Ok(pitch)
}

pub(super) fn map(
    dev: &GpuDevice,
    tex: &ID3D11Texture2D,
    how: windows::Win32::Graphics::Direct3D11::D3D11_MAP,
) -> Result<D3D11_MAPPED_SUBRESOURCE> {
    let mut mapped = D3D11_MAPPED_SUBRESOURCE::default();
    // SAFETY: a staging texture of this device, inside the queue bracket (callers hold it).
    unsafe { dev.context().Map(tex, 0, how, 0, Some(&mut mapped)) }
        .map_err(super::failed("mapping a staging texture"))?;
    Ok(mapped)
}

/// The row stride GPU images of `texture` get: the staging texture's pitch.
pub(crate) fn image_row_pitch(texture: &TextureRequest) -> Result<Option<usize>> {
    let dev = super::device()?;
    staging_pitch(dev, Grid::of(texture)?).map(Some)
}

/// A serial for each GPU buffer this copy makes; mixed with the texture's address so two
/// copies of the library in one process never give two live buffers one identity.
fn next_serial() -> u64 {
    static PRIVATE: AtomicU64 = AtomicU64::new(0);
    PRIVATE.fetch_add(1, Ordering::Relaxed) + 1
}

/// One GPU image buffer.
pub(crate) struct GpuMemory {
    pub(super) device: &'static GpuDevice,
    pub(super) texture: ID3D11Texture2D,
    pub(super) staging: ID3D11Texture2D,
    /// The CPU's copy: `pitch * rows` bytes.
    host: HeapBlock,
    pub(super) pitch: usize,
    pub(super) rows: usize,
    /// The texture's format and size: two buffers of one grid can be copied texture to texture.
    pub(super) grid: Grid,
    origin: GpuOrigin,
    /// Whether the texture was created shareable by NT handle.
    shareable: bool,
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory")
            .field("pitch", &self.pitch)
            .field("rows", &self.rows)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

// SAFETY: the device's textures are free-threaded objects; every context call on them is made
// inside the queue bracket, and the host copy is coordinated by the buffer's map claims.
unsafe impl Send for GpuMemory {}
// SAFETY: as above.
unsafe impl Sync for GpuMemory {}

impl GpuMemory {
    /// A zeroed texture for the image `texture` describes; `len` is what the tensor's
    /// geometry needs (at most `pitch * rows`).
    pub(crate) fn allocate(len: usize, texture: Option<&TextureRequest>) -> Result<GpuMemory> {
        let req = texture.ok_or_else(|| Error::Unavailable {
            memory: TensorMemory::Gpu,
            reason: "GPU memory on Windows holds images (textures): [[new_image]]".into(),
        })?;
        let device = super::device()?;
        let grid = Grid::of(req)?;
        let pitch = staging_pitch(device, grid)?;
        let rows = grid.height as usize;
        let host = HeapBlock::zeroed(pitch * rows)?;
        if len > host.len() {
            return Err(Error::Shape(format!(
                "the image needs {len} bytes but its texture holds {}",
                host.len()
            )));
        }
        let init = D3D11_SUBRESOURCE_DATA {
            pSysMem: host.ptr().cast_const().cast(),
            SysMemPitch: pitch as u32,
            SysMemSlicePitch: 0,
        };
        let shared = (D3D11_RESOURCE_MISC_SHARED_NTHANDLE.0 | D3D11_RESOURCE_MISC_SHARED.0) as u32;
        let (texture, shareable) =
            match create_texture(device, &grid.desc(false, shared), Some(&init)) {
                Ok(t) => (t, true),
                Err(e) => {
                    log::debug!(
                    "hwtensor: a shareable texture was refused ({e}); this one cannot be exported"
                );
                    let t = create_texture(device, &grid.desc(false, 0), Some(&init))
                        .map_err(super::failed("creating a texture"))?;
                    (t, false)
                }
            };
        Self::wrap(device, texture, grid, pitch, host, shareable)
    }

    /// A texture of `grid` with its staging texture and host copy around it.
    fn wrap(
        device: &'static GpuDevice,
        texture: ID3D11Texture2D,
        grid: Grid,
        pitch: usize,
        host: HeapBlock,
        shareable: bool,
    ) -> Result<GpuMemory> {
        let staging = create_texture(device, &grid.desc(true, 0), None)
            .map_err(super::failed("creating a staging texture"))?;
        let serial = next_serial() ^ (texture.as_raw() as usize as u64).rotate_left(32);
        let origin = GpuOrigin {
            pid: std::process::id(),
            start_time: 0,
            serial,
        };
        Ok(GpuMemory {
            device,
            texture,
            staging,
            host,
            pitch,
            rows: grid.height as usize,
            grid,
            origin,
            shareable,
        })
    }

    /// Opens a texture another API or process shared by NT handle, after checking that it is
    /// the texture `req` describes (format and size); the handle stays the caller's.
    pub(crate) fn open_shared(
        handle: BorrowedHandle<'_>,
        req: &TextureRequest,
    ) -> Result<GpuMemory> {
        let device = super::device()?;
        let device1 = device.device1().ok_or_else(|| Error::Unavailable {
            memory: TensorMemory::Gpu,
            reason: format!(
                "{} has no ID3D11Device1 to open shared handles",
                device.adapter_label()
            ),
        })?;
        let raw = windows::Win32::Foundation::HANDLE(handle.as_raw_handle());
        // SAFETY: a handle the caller lends for the call; the driver validates what it names.
        let texture: ID3D11Texture2D =
            unsafe { device1.OpenSharedResource1(raw) }.map_err(|e| {
                Error::InvalidArgument(format!(
                    "the handle does not open as a shared texture on {}: {e}",
                    device.adapter_label()
                ))
            })?;
        Self::adopt(device, texture, req, "the shared texture", true)
    }

    /// Wraps a texture a host made on the process device (the same `ID3D11Device`, so its
    /// work and ours share one immediate context and are ordered), after checking that it is
    /// the texture `req` describes. The texture is kept (a COM reference), never shared on.
    pub(crate) fn host_texture(
        texture: ID3D11Texture2D,
        req: &TextureRequest,
    ) -> Result<GpuMemory> {
        let device = super::device()?;
        // SAFETY: a query of a live texture's device (a new COM reference).
        let owner = unsafe { texture.GetDevice() }.map_err(super::failed("GetDevice"))?;
        if owner.as_raw() != device.device().as_raw() {
            return Err(Error::InvalidArgument(format!(
                "the texture belongs to another ID3D11Device, not the process device ({}): \
                 make it with gpu::device()?.device(), or share it by NT handle \
                 (Tensor::image_from_gpu_share)",
                device.adapter_label()
            )));
        }
        Self::adopt(device, texture, req, "the host's texture", false)
    }

    /// Takes `texture` as the image `req` describes (format and size checked), with a staging
    /// texture and host block of its own.
    fn adopt(
        device: &'static GpuDevice,
        texture: ID3D11Texture2D,
        req: &TextureRequest,
        what: &str,
        shareable: bool,
    ) -> Result<GpuMemory> {
        let grid = Grid::of(req)?;
        let mut desc = D3D11_TEXTURE2D_DESC::default();
        // SAFETY: a description query of a live texture into a local.
        unsafe { texture.GetDesc(&mut desc) };
        let got = (desc.Format.0, desc.Width, desc.Height);
        if got != (grid.format, grid.width, grid.height)
            || desc.ArraySize != 1
            || desc.SampleDesc.Count != 1
        {
            return Err(Error::InvalidArgument(format!(
                "{what} is format {} {}x{} (array {}, {} samples) but the image needs format {} {}x{}",
                got.0, got.1, got.2, desc.ArraySize, desc.SampleDesc.Count, grid.format, grid.width, grid.height
            )));
        }
        let pitch = staging_pitch(device, grid)?;
        let host = HeapBlock::zeroed(pitch * grid.height as usize)?;
        Self::wrap(device, texture, grid, pitch, host, shareable)
    }

    pub(crate) fn device(&self) -> &'static GpuDevice {
        self.device
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.host.ptr()
    }
    pub(crate) fn len(&self) -> usize {
        self.host.len()
    }
    pub(crate) fn origin(&self) -> GpuOrigin {
        self.origin
    }
    /// Bytes from one row of the host copy to the next: the image's row stride.
    pub(crate) fn pitch(&self) -> usize {
        self.pitch
    }
    /// The texture, for D3D11 and ANGLE work on the process device.
    pub(crate) fn texture(&self) -> &ID3D11Texture2D {
        &self.texture
    }

    /// Brings the texture's contents into the host copy for a CPU access.
    pub(crate) fn begin_cpu(&self, write: bool) -> Result<GpuCpuAccess<'_>> {
        self.download()?;
        Ok(GpuCpuAccess { mem: self, write })
    }

    fn download(&self) -> Result<()> {
        let dev = self.device;
        dev.with_queue(|| {
            // SAFETY: two textures of one grid on this device, inside the bracket.
            unsafe { dev.context().CopyResource(&self.staging, &self.texture) };
            let mapped = map(dev, &self.staging, D3D11_MAP_READ)?;
            self.copy_rows(mapped.pData.cast(), mapped.RowPitch as usize, true);
            // SAFETY: mapped just above.
            unsafe { dev.context().Unmap(&self.staging, 0) };
            Ok(())
        })
    }

    fn upload(&self) -> Result<()> {
        let dev = self.device;
        dev.with_queue(|| {
            let mapped = map(dev, &self.staging, D3D11_MAP_WRITE)?;
            self.copy_rows(mapped.pData.cast(), mapped.RowPitch as usize, false);
            // SAFETY: mapped just above; then a copy between two textures of one grid.
            unsafe {
                dev.context().Unmap(&self.staging, 0);
                dev.context().CopyResource(&self.texture, &self.staging);
                dev.context().Flush();
            }
            Ok(())
        })
    }

    /// Copies every row between the mapped staging texture and the host copy.
    fn copy_rows(&self, mapped: *mut u8, mapped_pitch: usize, down: bool) {
        let row = self.pitch.min(mapped_pitch);
        for r in 0..self.rows {
            // SAFETY: the mapping holds `rows` rows `mapped_pitch` apart and the host copy
            // `rows` rows `pitch` apart; `row` fits both, and the two never overlap.
            unsafe {
                let (gpu, host) = (
                    mapped.add(r * mapped_pitch),
                    self.host.ptr().add(r * self.pitch),
                );
                if down {
                    std::ptr::copy_nonoverlapping(gpu, host, row);
                } else {
                    std::ptr::copy_nonoverlapping(host, gpu, row);
                }
            }
        }
    }

    /// A new shared NT handle of the texture, where it was created shareable.
    pub(crate) fn share(&self) -> Result<OwnedHandle> {
        if !self.shareable {
            return Err(Error::Unavailable {
                memory: TensorMemory::Gpu,
                reason: format!(
                    "{} cannot create shareable textures",
                    self.device.adapter_label()
                ),
            });
        }
        // A driver that accepts the shared flags and then cannot make a handle (Wine: no
        // IDXGIResource1, E_NOTIMPL) cannot share either.
        let cannot = |e: windows::core::Error| Error::Unavailable {
            memory: TensorMemory::Gpu,
            reason: format!("{} cannot share textures: {e}", self.device.adapter_label()),
        };
        let resource: IDXGIResource1 = self.texture.cast().map_err(cannot)?;
        // SAFETY: a shareable texture; the handle is new and ours to close.
        let handle =
            unsafe { resource.CreateSharedHandle(None, GENERIC_ALL.0, None) }.map_err(cannot)?;
        // SAFETY: a fresh handle owned by nothing else.
        Ok(unsafe { OwnedHandle::from_raw_handle(handle.0 as RawHandle) })
    }
}

/// A live CPU access of a GPU image: a write access copies the host copy back up when it ends.
#[derive(Debug)]
pub(crate) struct GpuCpuAccess<'a> {
    mem: &'a GpuMemory,
    write: bool,
}

impl Drop for GpuCpuAccess<'_> {
    fn drop(&mut self) {
        if self.write {
            if let Err(e) = self.mem.upload() {
                log::error!("hwtensor: writing a map back to its texture failed: {e}");
            }
        }
    }
}

/// A GPU image handed to another API or process: the texture's shared NT handle and the
/// point on the timeline its contents are ready at.
#[derive(Debug)]
pub struct GpuShare {
    /// The texture's shared NT handle.
    pub texture: OwnedHandle,
    /// The value of its last GPU write, with the fence to wait on.
    pub completion: super::GpuCompletion,
}
