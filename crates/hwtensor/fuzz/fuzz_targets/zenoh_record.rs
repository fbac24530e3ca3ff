//! Fuzzes what a hwtensor-zenoh subscriber reads from a peer before any tensor: the 56-byte
//! frame record (a sample's attachment, the prefix of each frame on the one-host socket) and
//! the per-publisher sequence state it moves. The two files are compiled in from the Zenoh
//! crate, so this target needs no Zenoh build.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../../hwtensor-zenoh/src/info.rs"]
#[allow(dead_code)]
mod info;
#[path = "../../../hwtensor-zenoh/src/sequence.rs"]
#[allow(dead_code)]
mod sequence;

fuzz_target!(|data: &[u8]| {
    let mut sequences = sequence::Sequences::default();
    for record in data.chunks(info::INFO_LEN) {
        let Ok(frame) = info::FrameInfo::decode(record) else {
            continue;
        };
        assert_eq!(info::FrameInfo::decode(&frame.encode()), Ok(frame));
        if let sequence::Verdict::Next { gap } = sequences.accept(frame.publisher, frame.seq) {
            assert!(gap < sequence::MAX_GAP);
        }
    }
});
