//! GPU memory on Windows.

use std::time::Duration;

use super::GpuDevice;
use crate::{Element, Error, Result, Tensor, TensorMemory};

/// The longest any CPU access waits for GPU work on a buffer.
pub const GPU_WAIT: Duration = Duration::from_secs(10);

/// Who made a GPU buffer, for identities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GpuOrigin {
    pub pid: u32,
    pub start_time: u64,
    pub serial: u64,
}

/// Host memory imported into the device: D3D11 has no such import, so there is never one.
#[derive(Debug)]
pub(crate) enum HostImport {}

#[derive(Debug)]
pub(crate) struct GpuMemory {
    device: &'static GpuDevice,
}

#[derive(Debug)]
pub(crate) struct GpuCpuAccess<'a>(&'a GpuMemory);

impl GpuMemory {
    pub(crate) fn allocate(_len: usize) -> Result<GpuMemory> {
        Err(Error::Unavailable {
            memory: TensorMemory::Gpu,
            reason: "not yet".into(),
        })
    }
    pub(crate) fn device(&self) -> &'static GpuDevice {
        self.device
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        std::ptr::null_mut()
    }
    pub(crate) fn len(&self) -> usize {
        0
    }
    pub(crate) fn origin(&self) -> GpuOrigin {
        GpuOrigin {
            pid: 0,
            start_time: 0,
            serial: 0,
        }
    }
    pub(crate) fn begin_cpu(&self, _write: bool) -> Result<GpuCpuAccess<'_>> {
        Ok(GpuCpuAccess(self))
    }
}

pub(crate) fn copy_on_gpu<T: Element>(_dst: &Tensor<T>, _src: &Tensor<T>) -> Option<Result<()>> {
    None
}
