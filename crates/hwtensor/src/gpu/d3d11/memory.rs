//! GPU memory on Windows: an `ID3D11Texture2D` on the process device per image buffer.
//!
//! The CPU sees the texture through a persistent staging texture and a host copy whose rows are
//! the staging texture's pitch apart -- that pitch is the image's row stride. A map copies the
//! texture down (GPU copy into staging, `Map`, rows into the host copy); dropping a write map
//! copies it back up. D3D11 cannot keep a staging texture mapped while the GPU copies into it,
//! so the host copy is what gives a map its stable pointer.

use std::collections::HashMap;
use std::os::windows::io::{
    AsHandle, AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle, RawHandle,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use windows::core::Interface;
use windows::Win32::Foundation::GENERIC_ALL;
use windows::Win32::Graphics::Direct3D11::{
    ID3D11Resource, ID3D11Texture2D, D3D11_BIND_SHADER_RESOURCE, D3D11_BOX, D3D11_CPU_ACCESS_READ,
    D3D11_CPU_ACCESS_WRITE, D3D11_MAPPED_SUBRESOURCE, D3D11_MAP_READ, D3D11_MAP_READ_WRITE,
    D3D11_MAP_WRITE, D3D11_RESOURCE_MISC_SHARED, D3D11_RESOURCE_MISC_SHARED_NTHANDLE,
    D3D11_SUBRESOURCE_DATA, D3D11_TEXTURE2D_DESC, D3D11_USAGE_DEFAULT, D3D11_USAGE_STAGING,
};
use windows::Win32::Graphics::Dxgi::Common::{
    DXGI_FORMAT, DXGI_FORMAT_B8G8R8A8_UNORM, DXGI_FORMAT_R16G16B16A16_FLOAT,
    DXGI_FORMAT_R32G32B32A32_FLOAT, DXGI_FORMAT_R8G8B8A8_UNORM, DXGI_FORMAT_R8G8_UNORM,
    DXGI_FORMAT_R8_UNORM, DXGI_SAMPLE_DESC,
};
use windows::Win32::Graphics::Dxgi::IDXGIResource1;

use super::GpuDevice;
use crate::backing::HeapBlock;
use crate::geometry::byte_strides;
use crate::image::TextureRequest;
use crate::map::Direction;
use crate::{DType, Element, Error, PixelFormat, Result, Tensor, TensorMemory};

/// The longest any CPU access waits for GPU work on a buffer.
pub const GPU_WAIT: Duration = Duration::from_secs(10);

/// D3D11's largest 2D texture side at feature level 11.0 and up.
const MAX_TEXTURE_SIDE: usize = 16384;

/// Who made a GPU buffer, for identities. Windows names the process by pid alone (its kernel
/// objects die with it), so `start_time` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GpuOrigin {
    pub pid: u32,
    pub start_time: u64,
    pub serial: u64,
}

/// Host memory imported into the device: D3D11 has no such import, so there is never one.
#[derive(Debug)]
pub(crate) enum HostImport {}

/// The DXGI format that holds `format` of `dtype`, and its bytes per texel.
fn dxgi_format(format: PixelFormat, dtype: DType) -> Option<(DXGI_FORMAT, usize)> {
    use PixelFormat as P;
    Some(match (format, dtype) {
        (P::Rgba, DType::U8) => (DXGI_FORMAT_R8G8B8A8_UNORM, 4),
        (P::Bgra, DType::U8) => (DXGI_FORMAT_B8G8R8A8_UNORM, 4),
        (P::Grey | P::Nv12 | P::Nv16 | P::Nv24, DType::U8) => (DXGI_FORMAT_R8_UNORM, 1),
        (P::Yuyv | P::Vyuy, DType::U8) => (DXGI_FORMAT_R8G8_UNORM, 2),
        (P::Rgba, DType::F16) => (DXGI_FORMAT_R16G16B16A16_FLOAT, 8),
        (P::Rgba, DType::F32) => (DXGI_FORMAT_R32G32B32A32_FLOAT, 16),
        _ => return None,
    })
}

/// The texture that holds a request: its format and texel grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Grid {
    format: i32,
    width: u32,
    height: u32,
    /// Bytes of pixels in one row (`width` texels).
    row_bytes: usize,
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

fn gpu_err(what: &str) -> impl FnOnce(windows::core::Error) -> Error + '_ {
    move |e| Error::gpu(super::hr_kind(&e), format!("{what} failed: {e}"))
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
        .map_err(gpu_err("creating a staging texture"))?;
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

fn map(
    dev: &GpuDevice,
    tex: &ID3D11Texture2D,
    how: windows::Win32::Graphics::Direct3D11::D3D11_MAP,
) -> Result<D3D11_MAPPED_SUBRESOURCE> {
    let mut mapped = D3D11_MAPPED_SUBRESOURCE::default();
    // SAFETY: a staging texture of this device, inside the queue bracket (callers hold it).
    unsafe { dev.context().Map(tex, 0, how, 0, Some(&mut mapped)) }
        .map_err(gpu_err("mapping a staging texture"))?;
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
    device: &'static GpuDevice,
    texture: ID3D11Texture2D,
    staging: ID3D11Texture2D,
    /// The CPU's copy: `pitch * rows` bytes.
    host: HeapBlock,
    pitch: usize,
    rows: usize,
    /// The texture's format and size: two buffers of one grid can be copied texture to texture.
    grid: Grid,
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
            reason: "GPU memory on Windows holds images (textures): allocate it with Tensor::image"
                .into(),
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
                        .map_err(gpu_err("creating a texture"))?;
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
            .map_err(gpu_err("creating a staging texture"))?;
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
    fn open_shared(handle: BorrowedHandle<'_>, req: &TextureRequest) -> Result<GpuMemory> {
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
                "the shared texture is format {} {}x{} (array {}, {} samples) but the image needs format {} {}x{}",
                got.0, got.1, got.2, desc.ArraySize, desc.SampleDesc.Count, grid.format, grid.width, grid.height
            )));
        }
        let pitch = staging_pitch(device, grid)?;
        let host = HeapBlock::zeroed(pitch * grid.height as usize)?;
        Self::wrap(device, texture, grid, pitch, host, true)
    }

    /// Called once the buffer around this memory exists. D3D11 images cross processes by NT
    /// handle, not by identity, so there is nothing to remember.
    pub(crate) fn allocated_as(&self, _buffer: &crate::buffer::Buffer) {}

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
    /// image, and queues a GPU wait for the completion where it carries a fence.
    pub fn image_from_gpu_share(
        texture: BorrowedHandle<'_>,
        completion: &super::GpuCompletion,
        w: usize,
        h: usize,
        format: PixelFormat,
        access: crate::CpuAccess,
    ) -> Result<Self> {
        let req = TextureRequest {
            format,
            width: w,
            height: h,
            dtype: T::DTYPE,
            batch: 1,
        };
        let mem = GpuMemory::open_shared(texture, &req)?;
        if let Some(fence) = &completion.fence {
            mem.device()
                .wait_on_gpu(fence.as_handle(), completion.value)?;
        }
        let stride = mem.pitch;
        let (shape, strides) =
            crate::image::image_geometry(None, format, w, h, T::DTYPE.size(), stride)?;
        let buffer = crate::buffer::Buffer::new(crate::backing::Storage::Gpu(mem))?;
        let info = crate::ImageInfo {
            format,
            width: w,
            height: h,
            row_stride: stride,
        };
        Ok(Self::over(buffer, shape, strides, Some(info), access))
    }

    /// The texture under this GPU image, for D3D11 or ANGLE work on the process device.
    pub fn d3d11_texture(&self) -> Option<ID3D11Resource> {
        self.buffer.gpu().and_then(|m| m.texture().cast().ok())
    }
}

/// `copy_from` with GPU images on D3D11, without the host copy in between:
/// - GPU to GPU, a rectangle of texels to a rectangle of one format and size (whole images,
///   crops of packed formats): one `CopySubresourceRegion`, on the GPU;
/// - host to GPU: the host rows go straight into the staging texture (for a partial view, after
///   the texture's current contents are copied down into it), then one `CopyResource` up;
/// - GPU to host, from any view: one `CopyResource` down, then the rows straight out of the
///   staging texture.
///
/// - any other GPU to GPU pair (batches, semi-planar or different formats): down into the
///   source's staging texture, run by run into the destination's, and up.
pub(crate) fn copy_on_gpu<T: Element>(dst: &Tensor<T>, src: &Tensor<T>) -> Option<Result<()>> {
    match (src.buffer.gpu(), dst.buffer.gpu()) {
        (Some(s), Some(d)) => Some(match gpu_rects(dst, src, s, d) {
            Some((from, to)) => gpu_to_gpu(dst, src, (s, from), (d, to)),
            None => between_stagings(dst, src, s, d),
        }),
        (None, Some(d)) => Some(through_staging(dst, src, d, Way::Up)),
        (Some(s), None) => Some(through_staging(dst, src, s, Way::Down)),
        (None, None) => None,
    }
}

/// Whether `t` is all of `m`: offset 0 and every pixel of every row.
fn whole<T: Element>(t: &Tensor<T>, m: &GpuMemory) -> bool {
    t.offset == 0 && t.len() * T::DTYPE.size() == m.grid.row_bytes * m.rows
}

/// A rectangle of texels in a texture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rect {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

/// The texels `t` covers in `m`'s texture, when they form a rectangle: the first dimension
/// walks the texture's rows (stride = pitch), the rest is one tight run of whole texels.
fn texel_rect<T: Element>(t: &Tensor<T>, m: &GpuMemory) -> Option<Rect> {
    let elem = T::DTYPE.size();
    let (&rows, inner) = t.shape.split_first()?;
    if t.strides.first() != Some(&m.pitch)
        || byte_strides(inner, elem, None).ok()? != t.strides[1..]
        || rows == 0
    {
        return None;
    }
    let texel = m.grid.row_bytes / m.grid.width as usize;
    let run = inner.iter().product::<usize>() * elem;
    let (y, x_bytes) = (t.offset / m.pitch, t.offset % m.pitch);
    if run == 0 || run % texel != 0 || x_bytes % texel != 0 {
        return None;
    }
    let rect = Rect {
        x: u32::try_from(x_bytes / texel).ok()?,
        y: u32::try_from(y).ok()?,
        w: u32::try_from(run / texel).ok()?,
        h: u32::try_from(rows).ok()?,
    };
    let fits = rect.x + rect.w <= m.grid.width && rect.y + rect.h <= m.grid.height;
    fits.then_some(rect)
}

/// The rectangles a GPU-side copy from `src` into `dst` takes, where there are such: all of
/// two textures of one grid (a whole batch included), or two equal rectangles of one format.
fn gpu_rects<T: Element>(
    dst: &Tensor<T>,
    src: &Tensor<T>,
    s: &GpuMemory,
    d: &GpuMemory,
) -> Option<(Rect, Rect)> {
    if s.grid == d.grid && src.strides == dst.strides && whole(src, s) && whole(dst, d) {
        let all = Rect {
            x: 0,
            y: 0,
            w: s.grid.width,
            h: s.grid.height,
        };
        return Some((all, all));
    }
    let (from, to) = (texel_rect(src, s)?, texel_rect(dst, d)?);
    (s.grid.format == d.grid.format && (from.w, from.h) == (to.w, to.h)).then_some((from, to))
}

/// One `CopySubresourceRegion` from the source rectangle to the destination's, on the GPU.
fn gpu_to_gpu<T: Element>(
    dst: &Tensor<T>,
    src: &Tensor<T>,
    (s, from): (&GpuMemory, Rect),
    (d, to): (&GpuMemory, Rect),
) -> Result<()> {
    let _read = src.buffer.claim_for(Direction::Read)?;
    let _write = dst.buffer.claim_for(Direction::Write)?;
    let area = D3D11_BOX {
        left: from.x,
        top: from.y,
        front: 0,
        right: from.x + from.w,
        bottom: from.y + from.h,
        back: 1,
    };
    let dev = d.device;
    dev.with_queue(|| {
        // SAFETY: two textures of one format on this device, the box inside the source and
        // the destination rectangle inside the destination (checked by `texel_rect`), inside
        // the queue bracket.
        unsafe {
            dev.context().CopySubresourceRegion(
                &d.texture,
                0,
                to.x,
                to.y,
                0,
                &s.texture,
                0,
                Some(&area),
            );
            dev.context().Flush();
        }
    });
    Ok(())
}

/// A GPU image view into another image's view: both staging textures mapped at once, the runs
/// copied between them, then one copy up.
fn between_stagings<T: Element>(
    dst: &Tensor<T>,
    src: &Tensor<T>,
    s: &GpuMemory,
    d: &GpuMemory,
) -> Result<()> {
    let _read = src.buffer.claim_for(Direction::Read)?;
    let _write = dst.buffer.claim_for(Direction::Write)?;
    let overwrites_all = whole(dst, d);
    let dev = d.device;
    dev.with_queue(|| {
        // SAFETY: textures of this device paired with their own staging, inside the bracket.
        unsafe {
            dev.context().CopyResource(&s.staging, &s.texture);
            if !overwrites_all {
                dev.context().CopyResource(&d.staging, &d.texture);
            }
        }
        let from = map(dev, &s.staging, D3D11_MAP_READ)?;
        let how = if overwrites_all {
            D3D11_MAP_WRITE
        } else {
            D3D11_MAP_READ_WRITE
        };
        let to = match map(dev, &d.staging, how) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: mapped just above.
                unsafe { dev.context().Unmap(&s.staging, 0) };
                return Err(e);
            }
        };
        let (from_ptr, to_ptr) = (from.pData.cast::<u8>().cast_const(), to.pData.cast::<u8>());
        let (from_pitch, to_pitch) = (from.RowPitch as usize, to.RowPitch as usize);
        // SAFETY: each offset lies in its own staging mapping (the tensors' geometry is checked
        // against grids of these textures); two textures never overlap.
        unsafe {
            copy_runs(
                dst,
                src,
                |off| from_ptr.add(mapped_offset(off, s.pitch, from_pitch)),
                |off| to_ptr.add(mapped_offset(off, d.pitch, to_pitch)),
            )
        };
        // SAFETY: both mapped above; then a copy between a texture and its own staging.
        unsafe {
            dev.context().Unmap(&s.staging, 0);
            dev.context().Unmap(&d.staging, 0);
            dev.context().CopyResource(&d.texture, &d.staging);
            dev.context().Flush();
        }
        Ok(())
    })
}

/// Copies every run of `src` into `dst` (same shape): from `from(byte offset in src's buffer)`
/// to `to(byte offset in dst's buffer)`, one `copy_nonoverlapping` per contiguous run.
///
/// # Safety
/// For every run, `from(offset)` must be readable and `to(offset)` writable for the run's
/// length, and the two must not overlap.
unsafe fn copy_runs<T: Element>(
    dst: &Tensor<T>,
    src: &Tensor<T>,
    from: impl Fn(usize) -> *const u8,
    to: impl Fn(usize) -> *mut u8,
) {
    crate::geometry::for_each_paired_run(
        &dst.shape,
        &src.strides,
        &dst.strides,
        T::DTYPE.size(),
        |s_off, d_off, len| {
            // SAFETY: the caller's contract.
            unsafe {
                std::ptr::copy_nonoverlapping(from(src.offset + s_off), to(dst.offset + d_off), len)
            }
        },
    );
}

/// Where byte `off` of a GPU image's host-copy layout (rows `pitch` apart) lies in a mapping of
/// its staging texture (rows `mapped_pitch` apart).
fn mapped_offset(off: usize, pitch: usize, mapped_pitch: usize) -> usize {
    (off / pitch) * mapped_pitch + off % pitch
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Up,
    Down,
}

/// Copies between a host tensor and a GPU image through the image's staging texture, run by
/// run (`geometry::for_each_paired_run`), translating the GPU side's offsets from the host
/// copy's pitch to the mapping's.
fn through_staging<T: Element>(
    dst: &Tensor<T>,
    src: &Tensor<T>,
    gpu: &GpuMemory,
    way: Way,
) -> Result<()> {
    let (host_dir, gpu_dir) = match way {
        Way::Up => (Direction::Read, Direction::Write),
        Way::Down => (Direction::Write, Direction::Read),
    };
    let (host_t, gpu_t) = if way == Way::Up {
        (src, dst)
    } else {
        (dst, src)
    };
    let _host = host_t.buffer.begin_access(host_dir)?;
    let _gpu = gpu_t.buffer.claim_for(gpu_dir)?;
    // Writing all of the texture needs nothing of it; anything else starts from its contents.
    let overwrites_all = way == Way::Up && whole(gpu_t, gpu);
    let dev = gpu.device;
    dev.with_queue(|| {
        let how = match way {
            Way::Up if overwrites_all => D3D11_MAP_WRITE,
            Way::Up => D3D11_MAP_READ_WRITE,
            Way::Down => D3D11_MAP_READ,
        };
        if !overwrites_all {
            // SAFETY: two textures of one grid on this device, inside the bracket.
            unsafe { dev.context().CopyResource(&gpu.staging, &gpu.texture) };
        }
        let mapped = map(dev, &gpu.staging, how)?;
        let (mapped_ptr, mapped_pitch) = (mapped.pData.cast::<u8>(), mapped.RowPitch as usize);
        let at = |off: usize| mapped_offset(off, gpu.pitch, mapped_pitch);
        let host = host_t.buffer.ptr();
        // SAFETY: the GPU side's offsets lie in the staging mapping (same grid, rows
        // `mapped_pitch` apart), the host side's in its buffer, which the access guard holds;
        // the two never overlap.
        unsafe {
            match way {
                Way::Up => copy_runs(
                    dst,
                    src,
                    |o| host.add(o).cast_const(),
                    |o| mapped_ptr.add(at(o)),
                ),
                Way::Down => copy_runs(
                    dst,
                    src,
                    |o| mapped_ptr.add(at(o)).cast_const(),
                    |o| host.add(o),
                ),
            }
        };
        // SAFETY: mapped above; then (up) a copy between two textures of one grid.
        unsafe {
            dev.context().Unmap(&gpu.staging, 0);
            if way == Way::Up {
                dev.context().CopyResource(&gpu.texture, &gpu.staging);
                dev.context().Flush();
            }
        }
        Ok(())
    })
}
