//! [`Region`]: a rectangle of a tensor (the views that take one are in `view.rs`).

/// A rectangle of pixels (or of `[h, w]` cells of a plain tensor), relative to the tensor it is
/// applied to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// Left edge, in pixels (or columns).
    pub x: usize,
    /// Top edge, in rows.
    pub y: usize,
    /// Width, in pixels (or columns).
    pub width: usize,
    /// Height, in rows.
    pub height: usize,
}

impl Region {
    /// A region `width` x `height` whose top-left corner is at (`x`, `y`).
    pub const fn new(x: usize, y: usize, width: usize, height: usize) -> Self {
        Region {
            x,
            y,
            width,
            height,
        }
    }
}
