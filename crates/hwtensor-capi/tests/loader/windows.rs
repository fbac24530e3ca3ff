use std::ffi::CStr;
use std::path::Path;

use hwtensor::gpu::windows::core::{Interface, HSTRING, PCSTR};
use hwtensor::gpu::windows::Win32::Graphics::Direct3D11::ID3D11Fence;
use hwtensor::gpu::{ExternalDevice, GpuDevice};
use windows_sys::Win32::System::LibraryLoader::{GetProcAddress, LoadLibraryW};

/// A library loaded with `LoadLibraryW`: its own copy of every static, as `RTLD_LOCAL` gives
/// on Linux (Windows never merges symbols between modules).
pub struct Library(windows_sys::Win32::Foundation::HMODULE);

// SAFETY: a module handle is a plain address, usable from any thread; the test only calls
// GetProcAddress on it.
unsafe impl Sync for Library {}
// SAFETY: as above.
unsafe impl Send for Library {}

impl Library {
    pub fn open_private(path: &Path) -> Library {
        let wide = HSTRING::from(path.as_os_str());
        // SAFETY: a NUL-terminated wide path of our own DLL.
        let module = unsafe { LoadLibraryW(wide.as_ptr()) };
        assert!(!module.is_null(), "LoadLibraryW({}) failed", path.display());
        Library(module)
    }

    /// # Safety
    /// `F` must be the symbol's real function type, a function pointer.
    pub unsafe fn get<F: Copy>(&self, name: &CStr) -> F {
        // SAFETY: a loaded module and a NUL-terminated name.
        let f = unsafe { GetProcAddress(self.0, PCSTR(name.as_ptr().cast()).0) }
            .unwrap_or_else(|| panic!("{name:?} is exported"));
        // SAFETY: the caller's contract: F is a function pointer of the symbol's type.
        unsafe { std::mem::transmute_copy(&f) }
    }
}

pub fn device_handle(d: &GpuDevice) -> u64 {
    d.device().as_raw() as usize as u64
}

pub fn assert_one_fence(ours: &GpuDevice, lib: &Library) {
    // SAFETY: the symbol's signature (include/hwtensor.h).
    let fence: super::GetU64 = unsafe { lib.get(c"hwt_gpu_fence_handle") };
    let mut theirs = 0;
    // SAFETY: a valid out-pointer.
    let status = unsafe { fence(&mut theirs) };
    match ours.fence() {
        Some(f) => {
            assert_eq!(status, 0);
            // Each copy opens the shared NT handle: two interface pointers, one fence, so
            // compare what they have reached rather than the pointers.
            let raw = theirs as usize as *mut std::ffi::c_void;
            // SAFETY: the other copy's live fence, borrowed for this check.
            let other = unsafe { ID3D11Fence::from_raw_borrowed(&raw) }.expect("a fence pointer");
            let v = ours.signal().unwrap();
            ours.wait(v, std::time::Duration::from_secs(5)).unwrap();
            // SAFETY: reads of live fences.
            let (mine, seen) = unsafe { (f.GetCompletedValue(), other.GetCompletedValue()) };
            assert!(
                mine >= v && seen >= v,
                "the other copy's fence reached {seen}, ours {mine}, signalled {v}"
            );
        }
        None => {
            assert_eq!(
                status, 1,
                "no fence in one copy means no fence in the other"
            );
            eprintln!("SKIPPED: the shared-fence half of the two-copies test - no ID3D11Device5 under this driver");
            let required = std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "HWTENSOR_TEST_REQUIRE_GPU=1 but the device has no fence"
            );
        }
    }
}

pub fn bogus_external_device() -> ExternalDevice {
    ExternalDevice {
        device: std::ptr::dangling_mut(),
    }
}
