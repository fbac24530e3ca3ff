//! The CUDA driver API, loaded at run time through `cudarc`'s raw bindings, made safe to call.
//!
//! `cudarc` resolves each symbol on its first call and panics when libcuda is missing or lacks
//! the symbol (a driver older than the API version we build against). So nothing is called
//! before [`load`] has checked the library and every symbol hwtensor uses, once; after that a
//! call cannot panic, and every failure is an [`Error::Cuda`] naming the call and CUDA's error.

use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

pub(crate) use cudarc::driver::sys;

use crate::{Error, Result};

/// Every driver symbol hwtensor calls: all present in CUDA 11.4, the API version it builds
/// against (`cudarc`'s `cuda-11040`), so any driver from 11.4 on has them.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuGetErrorName",
    "cuImportExternalMemory",
    "cuExternalMemoryGetMappedBuffer",
    "cuDestroyExternalMemory",
    "cuMemFree_v2",
    "cuImportExternalSemaphore",
    "cuDestroyExternalSemaphore",
    "cuWaitExternalSemaphoresAsync",
    "cuSignalExternalSemaphoresAsync",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemHostGetDevicePointer_v2",
    "cuMemGetAllocationGranularity",
    "cuMemCreate",
    "cuMemAddressReserve",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemExportToShareableHandle",
    "cuMemsetD8Async",
    "cuMemImportFromShareableHandle",
    "cuMemUnmap",
    "cuMemAddressFree",
    "cuMemRelease",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuMemcpyAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventDestroy_v2",
    "cuStreamWaitEvent",
];

/// The library names the loader tries, in order (`cudarc` tries the same).
pub(crate) const LIBRARY: &str = "libcuda.so.1";

/// Checks, once, that libcuda loads and has every symbol in [`SYMBOLS`], then initialises the
/// driver. The failure is kept: later calls get the same text at once.
pub(crate) fn load() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            check_library()?;
            // SAFETY: every symbol was found above; cuInit takes flags 0.
            check(unsafe { sys::cuInit(0) }, "cuInit").map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|reason| Error::Unavailable {
            memory: crate::TensorMemory::Cuda,
            reason,
        })
}

fn check_library() -> std::result::Result<(), String> {
    // SAFETY: opening the library runs its initialisers, which is what it is for.
    if !unsafe { sys::is_culib_present() } {
        return Err(format!("no {LIBRARY} (no NVIDIA driver with CUDA here)"));
    }
    // SAFETY: present, checked just above, so culib() does not panic.
    let lib = unsafe { sys::culib() };
    for name in SYMBOLS {
        // SAFETY: a symbol lookup; the pointer is not called here.
        let found = unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) };
        if found.is_err() {
            return Err(format!(
                "{LIBRARY} has no {name}: the driver is older than CUDA 11.4, which hwtensor needs"
            ));
        }
    }
    Ok(())
}

/// `Ok` for `CUDA_SUCCESS`, else an [`Error::Cuda`] naming `call` and the error.
pub(crate) fn check(result: sys::CUresult, call: &'static str) -> Result<()> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Error::Cuda {
        call,
        name: error_name(result),
    })
}

/// CUDA's name for `result`, or its number where the driver has none.
fn error_name(result: sys::CUresult) -> String {
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: an out-pointer to a local; the driver returns a static string or an error.
    let ok = unsafe { sys::cuGetErrorName(result, &mut name) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !name.is_null() {
        // SAFETY: a NUL-terminated string of the driver's, valid for the process.
        return unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
    }
    format!("CUresult {}", result as u32)
}

/// The primary context made current on this thread for as long as the guard lives, whatever
/// context the caller had: every driver call of hwtensor runs inside one.
pub(crate) struct Current {
    /// Whether this guard pushed the context (and pops it): not when it was current already.
    pushed: bool,
}

impl Current {
    /// Makes `context` current on this thread: pushed on the context stack, unless it is the
    /// current one already (a PyTorch thread, or a hwtensor call inside another), which saves
    /// a push and a pop on every map.
    pub(crate) fn enter(context: sys::CUcontext) -> Result<Current> {
        let mut current = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local.
        let r = unsafe { sys::cuCtxGetCurrent(&mut current) };
        if r == sys::CUresult::CUDA_SUCCESS && current == context {
            return Ok(Current { pushed: false });
        }
        // SAFETY: a context retained for the life of the process.
        let r = unsafe { sys::cuCtxPushCurrent_v2(context) };
        check(r, "cuCtxPushCurrent")?;
        Ok(Current { pushed: true })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context this guard pushed (guards nest on one thread).
        let r = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        if let Err(e) = check(r, "cuCtxPopCurrent") {
            log::error!("hwtensor: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_hwtensor_calls_is_checked_before_use() {
        // The names the crate's driver calls resolve: each must be in the checked list.
        let source = include_str!("mod.rs").to_owned()
            + include_str!("device.rs")
            + include_str!("import.rs")
            + include_str!("memory.rs")
            + include_str!("copy.rs")
            + include_str!("event.rs");
        let called: std::collections::BTreeSet<&str> = source
            .split("sys::cu")
            .skip(1)
            .filter_map(|rest| {
                rest.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .next()
            })
            .collect();
        for name in called {
            let symbol = format!("cu{name}");
            assert!(
                SYMBOLS.contains(&symbol.as_str()),
                "{symbol} is called but not checked at load"
            );
        }
    }
}
