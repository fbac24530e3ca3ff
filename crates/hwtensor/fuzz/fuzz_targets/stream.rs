//! Fuzzes the pooled channel's hostile inputs: a set-up message with any number of fds, and any
//! words a peer writes into the shared control block, read from both sides.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwtensor::stream::fuzzing::setup_message(data);
    hwtensor::stream::fuzzing::control_block(data);
});
