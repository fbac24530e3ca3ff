//! Fuzzes `blob::import` with valid blobs whose words are nudged by small amounts (see
//! `receiver::nudge`), then uses what imported as a receiver would.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/receiver.rs"]
#[allow(dead_code)] // each target uses its own entry point
mod receiver;

fuzz_target!(|data: &[u8]| {
    receiver::nudge(data);
});
