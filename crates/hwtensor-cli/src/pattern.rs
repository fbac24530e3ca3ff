//! The demos' frames and their pattern: every pixel of every frame differs, so a consumer that
//! saw a stale buffer, a wrong offset or another frame's pixels fails verification.

use hwtensor::stream::{Producer, Slot};
use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory};

/// Width of a demo frame.
pub const WIDTH: usize = 1920;
/// Height of a demo frame.
pub const HEIGHT: usize = 1080;

/// A new 1080p RGBA frame on `memory`.
pub fn frame(memory: TensorMemory) -> hwtensor::Result<Tensor<u8>> {
    Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, WIDTH, HEIGHT),
        Some(memory),
        CpuAccess::ReadWrite,
    )
}

/// Golden-ratio multiplier: spreads frame numbers over the 32-bit space.
const FRAME_SPREAD: u32 = 0x9e37_79b1;

/// The RGBA pixel `index` of frame `frame`.
pub fn pixel(frame: u32, index: usize) -> [u8; 4] {
    (frame.wrapping_mul(FRAME_SPREAD) ^ index as u32).to_le_bytes()
}

/// The acknowledgement the consumer writes over the same pixel.
pub fn ack(frame: u32, index: usize) -> [u8; 4] {
    (!u32::from_le_bytes(pixel(frame, index))).to_le_bytes()
}

/// Writes `f(frame, i)` into every pixel of `bytes`.
pub fn fill(bytes: &mut [u8], frame: u32, f: fn(u32, usize) -> [u8; 4]) {
    for (i, px) in bytes.chunks_exact_mut(4).enumerate() {
        px.copy_from_slice(&f(frame, i));
    }
}

/// The index of the first pixel of `bytes` that is not `f(frame, i)`, if any.
pub fn first_mismatch(bytes: &[u8], frame: u32, f: fn(u32, usize) -> [u8; 4]) -> Option<usize> {
    bytes
        .chunks_exact(4)
        .enumerate()
        .position(|(i, px)| px != f(frame, i))
}

/// Checks the acknowledgement in `slot`'s buffer of the frame it carried last, if any.
pub fn check_ack_of(producer: &Producer, slot: Slot, carried: &mut [Option<u32>]) -> crate::Result {
    let Some(frame) = carried[slot.index()].take() else {
        return Ok(());
    };
    let sent = producer.tensor(slot).as_tensor::<u8>()?;
    if let Some(i) = first_mismatch(sent.map_read()?.as_bytes(), frame, ack) {
        return Err(
            format!("frame {frame}: pixel {i} lacks the consumer's acknowledgement").into(),
        );
    }
    Ok(())
}

/// Prints the producer's progress every tenth of the frames.
pub fn progress(frame: u32, frames: u32) {
    let step = (frames / 10).max(1);
    if frames > 1 && ((frame + 1).is_multiple_of(step) || frame + 1 == frames) {
        eprintln!("producer: {}/{frames} frames", frame + 1);
    }
}
