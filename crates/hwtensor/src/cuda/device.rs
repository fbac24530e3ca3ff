//! The CUDA device of the process GPU device: the one whose UUID equals the Vulkan device's,
//! worked in through its primary context (the one PyTorch and CuPy use, so pointers handed out
//! are valid in theirs), with the process timeline imported once as an external semaphore.

use std::ffi::{c_char, c_int, CStr};
use std::os::fd::IntoRawFd;
use std::sync::OnceLock;

use super::driver::{self, check, sys, Current};
use crate::gpu::{self, format_uuid, GpuDevice};
use crate::{Error, Result, TensorMemory};

/// Bytes `cuDeviceGetName` may write: the driver's names are far shorter.
const NAME_LEN: usize = 256;

/// `HWTENSOR_CUDA=off` keeps this process away from CUDA: a Vulkan-only process that never
/// wants CUDA's start-up time and memory, and that receives CUDA memory as GPU memory.
pub const CUDA_ENV: &str = "HWTENSOR_CUDA";

/// Whether [`CUDA_ENV`] turns CUDA off (`off`, `0`, `no`, `false`, in any case).
pub(crate) fn turned_off(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        ["off", "0", "no", "false"]
            .iter()
            .any(|off| v.trim().eq_ignore_ascii_case(off))
    })
}

/// `CU_STREAM_NON_BLOCKING`: hwtensor's own stream does not serialise with the legacy default
/// stream of the application's kernels.
const STREAM_NON_BLOCKING: u32 = 0x1;

/// hwtensor's own stream, made once.
struct OwnStream(sys::CUstream);

// SAFETY: a CUDA stream is usable from any thread.
unsafe impl Send for OwnStream {}
// SAFETY: as above.
unsafe impl Sync for OwnStream {}

/// The CUDA side of the process GPU device.
pub struct CudaDevice {
    ordinal: i32,
    device: sys::CUdevice,
    context: sys::CUcontext,
    name: String,
    uuid: [u8; 16],
    driver_version: i32,
    /// The process timeline as a CUDA external semaphore.
    timeline: sys::CUexternalSemaphore,
    gpu: &'static GpuDevice,
}

// SAFETY: CUDA contexts, devices and external semaphores are usable from any thread; every
// call hwtensor makes pushes the context on the calling thread first.
unsafe impl Send for CudaDevice {}
// SAFETY: as above.
unsafe impl Sync for CudaDevice {}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("uuid", &format_uuid(&self.uuid))
            .field("driver_version", &self.driver_version)
            .finish_non_exhaustive()
    }
}

/// The CUDA device matched to the process GPU device, found on the first call; a failure is
/// kept, and every later call gets the same text at once.
pub fn device() -> Result<&'static CudaDevice> {
    static DEVICE: OnceLock<std::result::Result<CudaDevice, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| CudaDevice::find().map_err(|e| unavailable_text(&e)))
        .as_ref()
        .map_err(|reason| Error::Unavailable {
            memory: TensorMemory::Cuda,
            reason: reason.clone(),
        })
}

/// The reason inside an availability error, without repeating "cuda memory is not available".
fn unavailable_text(e: &Error) -> String {
    match e {
        Error::Unavailable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// Why CUDA cannot be used here, or `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    device().err().map(|e| unavailable_text(&e))
}

/// The index in `candidates` of the UUID equal to `wanted`. CUDA ordinals follow
/// `CUDA_VISIBLE_DEVICES` and PCI order, Vulkan's enumeration does not: only the UUID names
/// the same GPU in both.
pub(crate) fn match_uuid(candidates: &[[u8; 16]], wanted: &[u8; 16]) -> Option<usize> {
    candidates.iter().position(|c| c == wanted)
}

impl CudaDevice {
    fn find() -> Result<CudaDevice> {
        if turned_off(std::env::var(CUDA_ENV).ok().as_deref()) {
            return Err(Error::Unavailable {
                memory: TensorMemory::Cuda,
                reason: format!("{CUDA_ENV} turns CUDA off in this process"),
            });
        }
        driver::load()?;
        let gpu = gpu::device()?;
        let wanted = gpu.device_uuid();
        let mut count: c_int = 0;
        // SAFETY: an out-pointer to a local (the driver is loaded and initialised).
        let r = unsafe { sys::cuDeviceGetCount(&mut count) };
        check(r, "cuDeviceGetCount")?;
        let devices = (0..count)
            .map(|i| {
                let mut d: sys::CUdevice = 0;
                // SAFETY: an out-pointer to a local; `i` is below the count.
                check(unsafe { sys::cuDeviceGet(&mut d, i) }, "cuDeviceGet")?;
                Ok((i, d, uuid_of(d)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let uuids: Vec<[u8; 16]> = devices.iter().map(|(_, _, u)| *u).collect();
        let Some(index) = match_uuid(&uuids, &wanted) else {
            let seen: Vec<String> = uuids.iter().map(format_uuid).collect();
            return Err(Error::Unavailable {
                memory: TensorMemory::Cuda,
                reason: format!(
                    "no CUDA device matches the process GPU device {} ({}); CUDA sees [{}]{}",
                    gpu.adapter_label(),
                    format_uuid(&wanted),
                    seen.join(", "),
                    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
                        " (CUDA_VISIBLE_DEVICES is set: the GPU may be hidden from CUDA)"
                    } else {
                        ""
                    }
                ),
            });
        };
        let (ordinal, device, uuid) = devices[index];
        let mut context = std::ptr::null_mut();
        // SAFETY: a device of this driver; an out-pointer to a local. Retained for the life of
        // the process (the device is never dropped).
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        check(r, "cuDevicePrimaryCtxRetain")?;
        let mut driver_version = 0;
        // SAFETY: an out-pointer to a local.
        let r = unsafe { sys::cuDriverGetVersion(&mut driver_version) };
        check(r, "cuDriverGetVersion")?;
        let _current = Current::enter(context)?;
        let timeline = import_timeline(gpu)?;
        Ok(CudaDevice {
            ordinal,
            device,
            context,
            name: name_of(device)?,
            uuid,
            driver_version,
            timeline,
            gpu,
        })
    }

    /// The CUDA ordinal (as this process's `CUDA_VISIBLE_DEVICES` numbers them).
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }
    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The device's UUID: the process GPU device's.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }
    /// The driver's CUDA version, e.g. 13000 for 13.0.
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }
    /// The primary context (a raw `CUcontext`), the one PyTorch and CuPy use.
    pub fn context(&self) -> *mut std::ffi::c_void {
        self.context.cast()
    }
    /// The raw `CUdevice`.
    pub fn raw_device(&self) -> i32 {
        self.device
    }
    /// The process GPU device this CUDA device is.
    pub(crate) fn gpu(&self) -> &'static GpuDevice {
        self.gpu
    }

    /// hwtensor's own non-blocking stream, made on first use: for its copies and fills, and
    /// for turning CUDA reads marked by events into a timeline value.
    pub(crate) fn own_stream(&self) -> Result<sys::CUstream> {
        static STREAM: OnceLock<std::result::Result<OwnStream, String>> = OnceLock::new();
        let made = STREAM.get_or_init(|| {
            let _current = self.enter().map_err(|e| e.to_string())?;
            let mut stream = std::ptr::null_mut();
            // SAFETY: an out-pointer to a local; the stream lives as long as the process.
            let r = unsafe { sys::cuStreamCreate(&mut stream, STREAM_NON_BLOCKING) };
            check(r, "cuStreamCreate").map_err(|e| e.to_string())?;
            Ok(OwnStream(stream))
        });
        made.as_ref()
            .map(|s| s.0)
            .map_err(|e| Error::InvalidOperation(format!("no CUDA stream of hwtensor's own: {e}")))
    }

    /// Makes the primary context current on this thread while the guard lives.
    pub(crate) fn enter(&self) -> Result<Current> {
        Current::enter(self.context)
    }

    /// Queues on `stream` a wait until the process timeline reaches `value` (nothing for 0).
    pub(crate) fn wait_on_stream(&self, stream: sys::CUstream, value: u64) -> Result<()> {
        if value == 0 {
            return Ok(());
        }
        // SAFETY: plain-old-data parameters; all-zero is their documented default.
        let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
        params.params.fence.value = value;
        // SAFETY: one live semaphore and one parameter block for the call; the caller made
        // the primary context current and owns the stream.
        let r = unsafe { sys::cuWaitExternalSemaphoresAsync(&self.timeline, &params, 1, stream) };
        check(r, "cuWaitExternalSemaphoresAsync")
    }

    /// Allocates the next timeline value and queues its signal on `stream`, after every value
    /// allocated before (so the timeline never goes backwards): the value that says when the
    /// work queued on `stream` so far is done, for Vulkan, CPU maps and other processes.
    /// `waited` is a value the stream already waits for: when nothing came after it, the
    /// stream needs no second wait (one driver call less per map).
    pub(crate) fn signal_from_stream(&self, stream: sys::CUstream, waited: u64) -> Result<u64> {
        self.gpu.signal_by(|after, value| {
            if after > waited {
                self.wait_on_stream(stream, after)?;
            }
            // SAFETY: as for the wait parameters.
            let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS =
                unsafe { std::mem::zeroed() };
            params.params.fence.value = value;
            // SAFETY: one live semaphore and one parameter block for the call; the primary
            // context is current (the caller's guard).
            let r =
                unsafe { sys::cuSignalExternalSemaphoresAsync(&self.timeline, &params, 1, stream) };
            check(r, "cuSignalExternalSemaphoresAsync")
        })
    }
}

fn uuid_of(device: sys::CUdevice) -> Result<[u8; 16]> {
    // SAFETY: plain-old-data, written by the call below.
    let mut uuid: sys::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: an out-pointer to a local; a device of this driver.
    let r = unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, device) };
    check(r, "cuDeviceGetUuid_v2")?;
    Ok(uuid.bytes.map(|b| b as u8))
}

fn name_of(device: sys::CUdevice) -> Result<String> {
    let mut buf = [0 as c_char; NAME_LEN];
    // SAFETY: the buffer's length is passed; the driver NUL-terminates within it.
    let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), NAME_LEN as c_int, device) };
    check(r, "cuDeviceGetName")?;
    buf[NAME_LEN - 1] = 0;
    // SAFETY: NUL-terminated within the buffer (forced just above).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Imports the process timeline as a CUDA external semaphore (CUDA takes the fd).
fn import_timeline(gpu: &GpuDevice) -> Result<sys::CUexternalSemaphore> {
    let fd = gpu.export_fence().ok_or_else(|| Error::Unavailable {
        memory: TensorMemory::Cuda,
        reason: format!(
            "{} cannot export its timeline, so CUDA work cannot be ordered with it",
            gpu.adapter_label()
        ),
    })?;
    let raw = fd.into_raw_fd();
    let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
        type_: sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD,
        handle: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 { fd: raw },
        flags: 0,
        reserved: [0; 16],
    };
    let mut semaphore = std::ptr::null_mut();
    // SAFETY: a description of a timeline semaphore fd of this GPU; an out-pointer to a local.
    let r = unsafe { sys::cuImportExternalSemaphore(&mut semaphore, &desc) };
    if r != sys::CUresult::CUDA_SUCCESS {
        // CUDA takes the fd only on success: close it here.
        // SAFETY: the fd was ours and CUDA did not take it.
        drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
    }
    check(r, "cuImportExternalSemaphore")?;
    Ok(semaphore)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_turned_off_only_by_the_words_that_say_so() {
        for off in ["off", "OFF", " 0", "no", "False"] {
            assert!(turned_off(Some(off)), "{off}");
        }
        for on in [None, Some(""), Some("on"), Some("1"), Some("offline")] {
            assert!(!turned_off(on), "{on:?}");
        }
    }

    #[test]
    fn the_cuda_device_is_found_by_uuid_not_by_ordinal() {
        let a = [1u8; 16];
        let b = [2u8; 16];
        assert_eq!(match_uuid(&[a, b], &b), Some(1));
        assert_eq!(match_uuid(&[b, a], &b), Some(0));
        assert_eq!(match_uuid(&[a], &b), None);
        assert_eq!(match_uuid(&[], &b), None);
    }
}
