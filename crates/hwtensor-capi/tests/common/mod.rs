//! Helpers shared by the C ABI tests.

#![allow(dead_code)]

use std::path::PathBuf;

/// The file name cargo gives this package's cdylib on this platform.
pub const CDYLIB: &str = if cfg!(windows) {
    "hwtensor_capi.dll"
} else {
    "libhwtensor_capi.so"
};

/// The directory cargo put this package's cdylib in (`target/<profile>/deps` or its parent).
pub fn cdylib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let found = [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join(CDYLIB).exists());
    found
        .unwrap_or_else(|| panic!("{CDYLIB} is built with the tests"))
        .to_path_buf()
}
