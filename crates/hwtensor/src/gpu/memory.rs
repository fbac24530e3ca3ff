//! What the core asks of GPU memory, on every platform: the texture an image needs, and the
//! copy plan a backend carries out. The core plans (shapes, claims, runs); a backend only moves
//! bytes, so no backend reaches into a tensor's fields.

use crate::geometry::for_each_paired_run;
use crate::{DType, PixelFormat};

/// What GPU memory needs to know of an image to hold it as a texture (D3D11); Vulkan GPU memory
/// is a plain buffer and ignores it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) struct TextureRequest {
    pub format: PixelFormat,
    pub width: usize,
    pub height: usize,
    pub dtype: DType,
    /// Images stacked in the buffer (1 for a single image).
    pub batch: usize,
}

/// Who allocated a GPU buffer: the process (pid and start time; Windows names a process by
/// pid alone, its kernel objects die with it, so start time is 0 there) and the allocation's
/// serial in it. The buffer's identity in every process it reaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct GpuOrigin {
    pub pid: u32,
    pub start_time: u64,
    pub serial: u64,
}

/// What names a GPU buffer to another process: the device it lives on, the size of its
/// exported allocation and its origin. The blob's GPU section carries it; the backend fills it
/// (`GpuMemory::describe`) and accepts a peer's (`GpuDevice::accept_reference`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuReference {
    pub device_uuid: [u8; 16],
    pub driver_uuid: [u8; 16],
    pub allocation_size: u64,
    pub producer: GpuOrigin,
}

/// Where a tensor's elements lie in its buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement<'a> {
    /// Byte offset of the first element.
    pub offset: usize,
    /// Byte strides, one per dimension.
    pub strides: &'a [usize],
}

/// A copy between two tensors of one shape, planned by the core: the claims are taken, the
/// shapes agree; what is left is moving each contiguous run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyPlan<'a> {
    /// The shape both tensors share.
    pub shape: &'a [usize],
    /// Bytes of one element.
    pub elem: usize,
    /// The source's elements in its buffer.
    pub src: Placement<'a>,
    /// The destination's elements in its buffer.
    pub dst: Placement<'a>,
    /// The sync_files either side's bytes are complete at (`Tensor::with_sync_file`): the
    /// copy must not read the source, nor overwrite the destination, before they signal. A
    /// backend waits for them GPU-side where it can, else on the CPU, bounded. (None on
    /// Windows, where the type has no values.)
    pub fences: [Option<&'a crate::os::AcquireFence>; 2],
}

impl CopyPlan<'_> {
    /// Calls `run(src_offset, dst_offset, len)` for every contiguous run, in buffer offsets.
    pub(crate) fn for_each_run(&self, mut run: impl FnMut(usize, usize, usize)) {
        let (s, d) = (self.src.offset, self.dst.offset);
        for_each_paired_run(
            self.shape,
            self.src.strides,
            self.dst.strides,
            self.elem,
            |so, doff, len| run(s + so, d + doff, len),
        );
    }
}

/// One side of a copy the device runs: GPU memory, or host bytes.
#[derive(Debug)]
pub(crate) enum CopySide<'a> {
    /// GPU memory of the process device.
    Gpu(&'a super::GpuMemory),
    /// A host buffer, held by the core's CPU access for the whole copy.
    Host(HostBytes<'a>),
}

/// A host buffer as a copy's side: its start, and its import into the device where the
/// backend copies through one (Vulkan's `VK_EXT_external_memory_host`).
#[derive(Debug)]
pub(crate) struct HostBytes<'a> {
    /// The buffer's first byte; offsets of the plan are from here. (Vulkan copies through the
    /// import instead.)
    #[cfg_attr(not(windows), allow(dead_code))]
    pub ptr: *mut u8,
    /// The buffer imported into the device, where it could be.
    #[cfg_attr(windows, allow(dead_code))]
    pub import: Option<&'a super::HostImport>,
}
