//! What travels with each frame besides the tensor: the publisher's sequence number and
//! timestamp, who published it and on which host, whether it blocks for a slow subscriber
//! (byte 5, flags), and how many frames back its buffer last carried one (bytes 6-7: a frame
//! read by reference after that is the publisher's newer frame, not its own). A fixed 56-byte
//! record: Zenoh's attachment for inline samples, the prefix of each frame on the one-host
//! socket. Parsed as hostile input.

use uuid::Uuid;

/// "HWTZ": a sample on the key that is not ours fails here first.
const MAGIC: [u8; 4] = *b"HWTZ";
/// The record's layout version. 2: bytes 6-7 say which earlier frame's buffer this one reuses.
const VERSION: u8 = 2;
/// Bytes of the record.
pub const INFO_LEN: usize = 56;
/// Flag (byte 5): the publisher blocks rather than drops when a subscriber is behind, so a
/// subscriber on its host waits for room in its queue instead of dropping the frame.
const FLAG_BLOCKS: u8 = 1;

/// The frame record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// The publisher's sequence number (from 1, one per published frame).
    pub seq: u64,
    /// When it was published: nanoseconds of `CLOCK_REALTIME` on the publisher's host.
    pub timestamp_ns: u64,
    /// The publisher (a new id per `Publisher`, so a restarted one is a new sequence).
    pub publisher: Uuid,
    /// The publisher's host (boot and network namespace): a subscriber with the same host id
    /// can take the frame by fd hand-off instead.
    pub host: Uuid,
    /// Whether the publisher blocks rather than drops frames a subscriber cannot take yet
    /// (`CongestionControl::Block`).
    pub blocks: bool,
    /// This frame is in the buffer frame `seq - reuses` was in (0: none known): that frame,
    /// read by reference from now on, holds this one's bytes.
    pub reuses: u16,
}

impl FrameInfo {
    /// The frame whose buffer this one rewrote, if the publisher said.
    pub fn rewrites(&self) -> Option<u64> {
        (self.reuses > 0).then(|| self.seq.saturating_sub(u64::from(self.reuses)))
    }

    /// The 56 bytes.
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut out = [0u8; INFO_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = if self.blocks { FLAG_BLOCKS } else { 0 };
        out[6..8].copy_from_slice(&self.reuses.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..24].copy_from_slice(&self.timestamp_ns.to_le_bytes());
        out[24..40].copy_from_slice(self.publisher.as_bytes());
        out[40..56].copy_from_slice(self.host.as_bytes());
        out
    }

    /// Parses a record, saying what is wrong with one that is not.
    pub fn decode(bytes: &[u8]) -> Result<FrameInfo, String> {
        let b: &[u8; INFO_LEN] = bytes.try_into().map_err(|_| {
            format!(
                "a frame record of {} bytes ({INFO_LEN} expected)",
                bytes.len()
            )
        })?;
        if b[0..4] != MAGIC {
            return Err("no hwtensor frame record (bad magic)".into());
        }
        if b[4] != VERSION {
            return Err(format!(
                "frame record version {} (this reads {VERSION})",
                b[4]
            ));
        }
        if b[5] & !FLAG_BLOCKS != 0 {
            return Err("unknown flags in the frame record".into());
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let uuid_at = |i: usize| Uuid::from_slice(&b[i..i + 16]).unwrap_or_default();
        let info = FrameInfo {
            seq: u64_at(8),
            timestamp_ns: u64_at(16),
            publisher: uuid_at(24),
            host: uuid_at(40),
            blocks: b[5] & FLAG_BLOCKS != 0,
            reuses: u16::from_le_bytes([b[6], b[7]]),
        };
        if info.seq == 0 || info.publisher.is_nil() {
            return Err("a frame record without sequence number or publisher".into());
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FrameInfo {
        FrameInfo {
            seq: 7,
            timestamp_ns: 123,
            publisher: Uuid::new_v4(),
            host: Uuid::new_v4(),
            blocks: true,
            reuses: 2,
        }
    }

    #[test]
    fn a_record_round_trips() {
        let info = sample();
        assert_eq!(FrameInfo::decode(&info.encode()), Ok(info));
    }

    #[test]
    fn every_truncation_and_every_single_byte_corruption_of_the_header_is_refused() {
        let bytes = sample().encode();
        for n in 0..INFO_LEN {
            assert!(FrameInfo::decode(&bytes[..n]).is_err(), "{n} bytes");
        }
        for i in 0..6 {
            let mut bad = bytes;
            bad[i] ^= 0x5a;
            assert!(FrameInfo::decode(&bad).is_err(), "byte {i}");
        }
        let mut zero_seq = bytes;
        zero_seq[8..16].fill(0);
        assert!(FrameInfo::decode(&zero_seq).is_err());
    }
}
