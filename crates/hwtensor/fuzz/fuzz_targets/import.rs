//! Fuzzes `blob::import` with arbitrary bytes and, when the control byte says so, a memfd of a
//! size the input chooses standing in for the fd a peer would send; then uses what imported as
//! a receiver would (`src/receiver.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/receiver.rs"]
#[allow(dead_code)] // each target uses its own entry point
mod receiver;

fuzz_target!(|data: &[u8]| receiver::receive(data));
