//! Fuzzes `blob::import` with valid blobs whose words are nudged by small amounts (see
//! `receiver::nudge`), then uses what imported as a receiver would.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/receiver.rs"]
mod receiver;

fuzz_target!(|data: &[u8]| {
    receiver::nudge(data);
});
