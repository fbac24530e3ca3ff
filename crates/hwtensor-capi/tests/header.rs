//! The committed C header is what cbindgen makes of the current source.

#![cfg(target_os = "linux")]

use std::path::Path;

#[test]
fn the_committed_header_matches_the_source() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the C ABI")
        .write(&mut generated);
    let committed_path = crate_dir.join("include/hwtensor.h");
    if std::env::var("HWTENSOR_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&committed_path, &generated).unwrap();
    }
    let committed = std::fs::read(&committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/hwtensor.h is stale; regenerate with HWTENSOR_BLESS=1 cargo test -p hwtensor-capi --test header"
    );
}
