//! Helpers shared by the C ABI tests.

use std::path::PathBuf;

/// The directory cargo put this package's cdylib in (`target/<profile>/deps` or its parent).
pub fn cdylib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let found = [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libhwtensor_capi.so").exists());
    found
        .expect("libhwtensor_capi.so is built with the tests")
        .to_path_buf()
}
