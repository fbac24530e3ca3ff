//! Gives the Linux shared library its SONAME, `libhwtensor.so.<major>`: what a program linked
//! against it records and what the installed library is found by (see scripts/install-capi).

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhwtensor.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
