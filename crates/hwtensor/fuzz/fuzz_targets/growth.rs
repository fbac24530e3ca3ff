//! Fuzzes a channel whose producer grows its pool, honestly and not: additions, frames in them,
//! frames naming any slot, hand-offs broken off, wake-ups, hand-backs of what is not held.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hwtensor::stream::fuzzing::growth(data);
});
