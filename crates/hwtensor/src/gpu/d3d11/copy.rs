//! The device side of [`Tensor::copy_from`](crate::Tensor::copy_from) on D3D11: runs a copy
//! the core planned (`gpu::CopyPlan`) with GPU images, without a host copy in between:
//! - GPU to GPU, a rectangle of texels to a rectangle of one format and size (whole images,
//!   crops of packed formats): one `CopySubresourceRegion`, on the GPU;
//! - host to GPU: the host rows go straight into the staging texture (for a partial view, after
//!   the texture's current contents are copied down into it), then one `CopyResource` up;
//! - GPU to host, from any view: one `CopyResource` down, then the rows straight out of the
//!   staging texture;
//! - any other GPU to GPU pair (batches, semi-planar or different formats): down into the
//!   source's staging texture, run by run into the destination's, and up.

use windows::Win32::Graphics::Direct3D11::{
    D3D11_BOX, D3D11_MAP_READ, D3D11_MAP_READ_WRITE, D3D11_MAP_WRITE,
};

use super::memory::{map, GpuMemory};
use crate::geometry::byte_strides;
use crate::gpu::{CopyPlan, CopySide, HostBytes, Placement};
use crate::{Error, Result};

/// Whether the device copies to and from this host buffer: always, through staging.
pub(crate) fn reaches_host(_host: &HostBytes<'_>) -> bool {
    true
}

/// Runs `plan` from `src` into `dst`, at least one of them GPU memory. The core holds both
/// sides' claims for the call.
pub(crate) fn run_copy(plan: &CopyPlan<'_>, src: CopySide<'_>, dst: CopySide<'_>) -> Result<()> {
    // Windows has no sync_files: a fence here is a value of a type that has none.
    if let Some(fence) = plan.fences.into_iter().flatten().next() {
        match *fence {}
    }
    match (src, dst) {
        (CopySide::Gpu(s), CopySide::Gpu(d)) => match gpu_rects(plan, s, d) {
            Some((from, to)) => gpu_to_gpu((s, from), (d, to)),
            None => between_stagings(plan, s, d),
        },
        (CopySide::Host(h), CopySide::Gpu(d)) => through_staging(plan, &h, d, Way::Up),
        (CopySide::Gpu(s), CopySide::Host(h)) => through_staging(plan, &h, s, Way::Down),
        (CopySide::Host(_), CopySide::Host(_)) => Err(Error::InvalidOperation(
            "a host-to-host copy is a memcpy, not device work".into(),
        )),
    }
}

/// Whether the elements at `p` (of `shape`) are all of `m`: offset 0 and every pixel of every
/// row.
fn whole(p: &Placement<'_>, plan: &CopyPlan<'_>, m: &GpuMemory) -> bool {
    p.offset == 0 && plan.shape.iter().product::<usize>() * plan.elem == m.grid.row_bytes * m.rows
}

/// A rectangle of texels in a texture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rect {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

/// The texels the elements at `p` cover in `m`'s texture, when they form a rectangle: the
/// first dimension walks the texture's rows (stride = pitch), the rest is one tight run of
/// whole texels.
fn texel_rect(p: &Placement<'_>, plan: &CopyPlan<'_>, m: &GpuMemory) -> Option<Rect> {
    let elem = plan.elem;
    let (&rows, inner) = plan.shape.split_first()?;
    if p.strides.first() != Some(&m.pitch)
        || byte_strides(inner, elem, None).ok()? != p.strides[1..]
        || rows == 0
    {
        return None;
    }
    let texel = m.grid.row_bytes / m.grid.width as usize;
    let run = inner.iter().product::<usize>() * elem;
    let (y, x_bytes) = (p.offset / m.pitch, p.offset % m.pitch);
    if run == 0 || !run.is_multiple_of(texel) || !x_bytes.is_multiple_of(texel) {
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

/// The rectangles a GPU-side copy takes, where there are such: all of two textures of one grid
/// (a whole batch included), or two equal rectangles of one format.
fn gpu_rects(plan: &CopyPlan<'_>, s: &GpuMemory, d: &GpuMemory) -> Option<(Rect, Rect)> {
    let (src, dst) = (&plan.src, &plan.dst);
    if s.grid == d.grid && src.strides == dst.strides && whole(src, plan, s) && whole(dst, plan, d)
    {
        let all = Rect {
            x: 0,
            y: 0,
            w: s.grid.width,
            h: s.grid.height,
        };
        return Some((all, all));
    }
    let (from, to) = (texel_rect(src, plan, s)?, texel_rect(dst, plan, d)?);
    (s.grid.format == d.grid.format && (from.w, from.h) == (to.w, to.h)).then_some((from, to))
}

/// One `CopySubresourceRegion` from the source rectangle to the destination's, on the GPU.
fn gpu_to_gpu((s, from): (&GpuMemory, Rect), (d, to): (&GpuMemory, Rect)) -> Result<()> {
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
fn between_stagings(plan: &CopyPlan<'_>, s: &GpuMemory, d: &GpuMemory) -> Result<()> {
    let overwrites_all = whole(&plan.dst, plan, d);
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
                plan,
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

/// Copies every run of the plan: from `from(byte offset in the source's buffer)` to
/// `to(byte offset in the destination's buffer)`, one `copy_nonoverlapping` per run.
///
/// # Safety
/// For every run, `from(offset)` must be readable and `to(offset)` writable for the run's
/// length, and the two must not overlap.
unsafe fn copy_runs(
    plan: &CopyPlan<'_>,
    from: impl Fn(usize) -> *const u8,
    to: impl Fn(usize) -> *mut u8,
) {
    plan.for_each_run(|s_off, d_off, len| {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(from(s_off), to(d_off), len) }
    });
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

/// Copies between a host buffer and a GPU image through the image's staging texture, run by
/// run, translating the GPU side's offsets from the host copy's pitch to the mapping's.
fn through_staging(
    plan: &CopyPlan<'_>,
    host: &HostBytes<'_>,
    gpu: &GpuMemory,
    way: Way,
) -> Result<()> {
    // Writing all of the texture needs nothing of it; anything else starts from its contents.
    let overwrites_all = way == Way::Up && whole(&plan.dst, plan, gpu);
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
        let host = host.ptr;
        // SAFETY: the GPU side's offsets lie in the staging mapping (same grid, rows
        // `mapped_pitch` apart), the host side's in its buffer, which the core's access holds;
        // the two never overlap.
        unsafe {
            match way {
                Way::Up => copy_runs(
                    plan,
                    |o| host.add(o).cast_const(),
                    |o| mapped_ptr.add(at(o)),
                ),
                Way::Down => copy_runs(
                    plan,
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
