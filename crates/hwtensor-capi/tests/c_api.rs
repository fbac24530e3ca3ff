//! A C program compiled with `cc` against the header and the cdylib, run as integrators run it.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::cdylib_dir;

#[test]
fn a_c_program_signals_waits_and_polls_through_the_c_abi() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = cdylib_dir();
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_smoke");
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-D_POSIX_C_SOURCE=200809L")
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/smoke.c"))
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lhwtensor_capi")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler (cc) is installed");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    eprint!("{err}");
    print!("{out}");
    assert!(run.status.success(), "the C program failed:\n{out}\n{err}");
}
