//! C and C++ programs against the installed library, built and run as integrators build them:
//! the library installed by `scripts/install-capi` into a prefix of its own, a C11 program
//! found through `pkg-config`, a C++17 program through CMake's `find_package`, both with
//! warnings as errors, and the C program once more under AddressSanitizer and LeakSanitizer.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{cdylib_dir, CDYLIB};

/// The warnings every C and C++ consumer is compiled with.
const STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs a command that must succeed, and returns its output.
fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The prefix the library was installed into, once per test binary, through the install
/// script users run (given the library cargo built for these tests).
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = tmp("capi-prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        run(
            Command::new(crate_dir().join("../../scripts/install-capi"))
                .arg(&prefix)
                .env("HWTENSOR_CAPI_LIB", cdylib_dir().join(CDYLIB)),
            "scripts/install-capi",
        );
        prefix
    })
}

/// `pkg-config <args> hwtensor` against the installed prefix only.
fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = run(
        Command::new("pkg-config")
            .args(args)
            .arg("hwtensor")
            .env("PKG_CONFIG_PATH", installed().join("lib/pkgconfig")),
        "pkg-config (install it: apt install pkg-config)",
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Compiles `source` as C11 through pkg-config into `exe`, with `extra` flags.
fn compile_c(source: &str, exe: &Path, extra: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run(
        Command::new(cc)
            .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L"])
            .args(STRICT)
            .args(extra)
            .args(pkg_config(&["--cflags"]))
            .arg(crate_dir().join(source))
            .args(pkg_config(&["--libs"]))
            .arg("-o")
            .arg(exe),
        &format!("cc {source}"),
    );
}

/// Runs a consumer with the installed library on its search path, and checks it passed.
fn run_consumer(exe: &Path, env: &[(&str, &str)]) -> Output {
    let out = run(
        Command::new(exe)
            .env("LD_LIBRARY_PATH", installed().join("lib"))
            .envs(env.iter().copied()),
        &exe.display().to_string(),
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    print!("{}", String::from_utf8_lossy(&out.stdout));
    out
}

#[test]
fn the_installed_library_is_laid_out_as_c_libraries_are_with_its_soname() {
    let lib = installed().join("lib");
    let version = env!("CARGO_PKG_VERSION");
    // Before 1.0 each minor version is an ABI of its own (build.rs).
    let abi = match env!("CARGO_PKG_VERSION_MAJOR") {
        "0" => format!("0.{}", env!("CARGO_PKG_VERSION_MINOR")),
        major => major.to_string(),
    };
    for name in [
        format!("libhwtensor.so.{version}"),
        format!("libhwtensor.so.{abi}"),
        "libhwtensor.so".into(),
        "pkgconfig/hwtensor.pc".into(),
        "cmake/hwtensor/hwtensorConfig.cmake".into(),
        "cmake/hwtensor/hwtensorConfigVersion.cmake".into(),
    ] {
        assert!(lib.join(&name).exists(), "{name} is not installed");
    }
    assert!(installed().join("include/hwtensor.h").exists());
    let out = run(
        Command::new("readelf")
            .arg("-d")
            .arg(lib.join("libhwtensor.so")),
        "readelf (binutils)",
    );
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic.contains(&format!("[libhwtensor.so.{abi}]")),
        "no SONAME libhwtensor.so.{abi}:\n{dynamic}"
    );
    assert_eq!(
        pkg_config(&["--modversion"]),
        [env!("CARGO_PKG_VERSION").to_string()]
    );
}

#[test]
fn a_c_program_signals_waits_and_polls_through_the_c_abi() {
    let exe = tmp("c_smoke");
    compile_c("tests/c/smoke.c", &exe, &[]);
    run_consumer(&exe, &[]);
}

#[test]
fn a_c11_program_found_through_pkg_config_passes_its_tensor_tests() {
    let exe = tmp("c_tensors");
    compile_c("tests/c/tensors.c", &exe, &[]);
    let out = run_consumer(&exe, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("all passed"));
}

#[test]
fn the_c_program_runs_clean_under_address_and_leak_sanitizer() {
    let exe = tmp("c_tensors_asan");
    compile_c(
        "tests/c/tensors.c",
        &exe,
        &["-g", "-fsanitize=address", "-fno-omit-frame-pointer"],
    );
    // Any report fails the run (exit code 1), leaks included, but for the driver's own leak
    // that tests/lsan.supp names with its evidence (it needs full stacks to match).
    let suppressions = format!(
        "suppressions={}",
        crate_dir().join("tests/lsan.supp").display()
    );
    let out = run_consumer(
        &exe,
        &[
            (
                "ASAN_OPTIONS",
                "detect_leaks=1:exitcode=1:fast_unwind_on_malloc=0",
            ),
            ("LSAN_OPTIONS", &suppressions),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Sanitizer"),
        "sanitizer reports:\n{stderr}"
    );
}

#[test]
fn a_cpp17_program_found_through_cmake_find_package_passes_its_tensor_tests() {
    let build = tmp("cpp-build");
    let _ = std::fs::remove_dir_all(&build);
    run(
        Command::new("cmake")
            .arg("-S")
            .arg(crate_dir().join("tests/cpp"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", installed().display())),
        "cmake configure (install it: apt install cmake g++)",
    );
    run(
        Command::new("cmake").arg("--build").arg(&build),
        "cmake --build",
    );
    let out = run_consumer(&build.join("tensors_cpp"), &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("all passed"));
}
