//! The library's version and the start-up check that the header a caller compiled against
//! fits the library it loaded.

/// The major version: a new one breaks the ABI (and renames the shared library's SONAME,
/// `libhwtensor.so.<major>`).
pub const HWT_VERSION_MAJOR: u32 = 0;
/// The minor version. Before 1.0 a new minor version may break the ABI too, so until then the
/// SONAME carries it: `libhwtensor.so.0.<minor>`.
pub const HWT_VERSION_MINOR: u32 = 1;
/// The patch version: fixes only.
pub const HWT_VERSION_PATCH: u32 = 0;
/// The version as one number, `major << 16 | minor << 8 | patch`: what [`hwt_version`] returns
/// and [`hwt_version_compatible`] takes.
pub const HWT_VERSION: u32 = HWT_VERSION_MAJOR << 16 | HWT_VERSION_MINOR << 8 | HWT_VERSION_PATCH;

/// The version of the loaded library, packed like `HWT_VERSION`.
#[no_mangle]
pub extern "C" fn hwt_version() -> u32 {
    HWT_VERSION
}

/// 1 when the loaded library serves a caller compiled against the header of `header_version`
/// (pass `HWT_VERSION`), else 0. Call it once at start-up: the same major version, and a minor
/// version at least the header's (before 1.0, the same minor version).
#[no_mangle]
pub extern "C" fn hwt_version_compatible(header_version: u32) -> u8 {
    compatible(HWT_VERSION, header_version) as u8
}

/// (major, minor) of a packed version.
fn split(version: u32) -> (u32, u32) {
    (version >> 16, (version >> 8) & 0xff)
}

fn compatible(library: u32, header: u32) -> bool {
    let ((lib_major, lib_minor), (want_major, want_minor)) = (split(library), split(header));
    lib_major == want_major
        && if lib_major == 0 {
            lib_minor == want_minor
        } else {
            lib_minor >= want_minor
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_macros_are_the_crates_version() {
        let parts =
            [HWT_VERSION_MAJOR, HWT_VERSION_MINOR, HWT_VERSION_PATCH].map(|p| p.to_string());
        assert_eq!(parts.join("."), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn a_header_fits_a_library_of_its_major_version_and_a_minor_at_least_its_own() {
        let v = |major: u32, minor: u32, patch: u32| major << 16 | minor << 8 | patch;
        assert!(compatible(v(1, 2, 0), v(1, 2, 5)));
        assert!(compatible(v(1, 3, 0), v(1, 2, 0)));
        assert!(!compatible(v(1, 1, 9), v(1, 2, 0)));
        assert!(!compatible(v(2, 0, 0), v(1, 0, 0)));
        // Before 1.0 a minor version is a major one.
        assert!(compatible(v(0, 1, 3), v(0, 1, 0)));
        assert!(!compatible(v(0, 2, 0), v(0, 1, 0)));
    }
}
