//! Gives the Linux shared library its SONAME: what a program linked against it records and
//! what the installed library is found by (see scripts/install-capi). The SONAME names the ABI,
//! and before 1.0 each minor version is a new ABI (`hwt_version_compatible` refuses another
//! one), so it is `libhwtensor.so.0.<minor>` then and `libhwtensor.so.<major>` from 1.0 on: a
//! program built against 0.1 never loads a 0.2 that breaks it.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let part = |name| std::env::var(name).unwrap_or_else(|_| "0".into());
        let (major, minor) = (
            part("CARGO_PKG_VERSION_MAJOR"),
            part("CARGO_PKG_VERSION_MINOR"),
        );
        let abi = if major == "0" {
            format!("0.{minor}")
        } else {
            major
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhwtensor.so.{abi}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
