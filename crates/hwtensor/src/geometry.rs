//! Shapes and byte strides: the arithmetic every tensor, image, view and map shares.
//!
//! All strides are in bytes. All arithmetic is checked: a shape or stride that overflows `usize`
//! is an error at construction, so nothing downstream can compute a wrapped offset.
//!
//! ```
//! use hwtensor::geometry::{byte_strides, extent};
//!
//! // A 4x3 RGB image with 16-byte rows: the row dimension is 3 from the end of [h, w, c].
//! let strides = byte_strides(&[3, 4, 3], 1, Some((3, 16)))?;
//! assert_eq!(strides, [16, 3, 1]);
//! assert_eq!(extent(&[3, 4, 3], &strides, 1)?, 2 * 16 + 4 * 3);
//! # Ok::<(), hwtensor::Error>(())
//! ```

use crate::{Error, Result};

/// Number of elements of `shape`, or an error when it overflows.
pub fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::Shape(format!("the element count of {shape:?} overflows usize")))
}

/// Byte strides of `shape` with `elem`-byte elements, the one function every layout goes
/// through.
///
/// Dimensions are laid out in C order (the last one fastest), except that the dimension `row`
/// names (counted from the end, so a batch dimension in front does not move it) steps by the
/// given row stride instead of by the tight size of what follows it. That covers every surface:
///
/// | surface | shape | row dim from end |
/// |---|---|---|
/// | packed `[h, w, c]` | RGB, RGBA, YUYV | 3 |
/// | one-component `[h, w]` | GREY | 2 |
/// | planar `[c, h, w]` | planar RGB | 2 |
/// | semi-planar `[rows, w]` | NV12 | 2 |
/// | batched `[n, ...]` | any of the above | unchanged |
///
/// A dimension outside the row steps by `rows * row_stride`, so planes and batch items follow
/// one another at the padded size. With `row` `None` the strides are plain C order.
pub fn byte_strides(
    shape: &[usize],
    elem: usize,
    row: Option<(usize, usize)>,
) -> Result<Vec<usize>> {
    let overflow = || Error::Shape(format!("the byte strides of {shape:?} overflow usize"));
    let rank = shape.len();
    let row_dim = match row {
        Some((from_end, _)) if from_end == 0 || from_end > rank => {
            return Err(Error::Shape(format!(
                "a rank-{rank} shape has no row dimension {from_end} from the end"
            )));
        }
        Some((from_end, stride)) => Some((rank - from_end, stride)),
        None => None,
    };
    let mut strides = vec![0; rank];
    let mut next = elem;
    for i in (0..rank).rev() {
        strides[i] = match row_dim {
            Some((d, stride)) if d == i => stride,
            _ => next,
        };
        next = strides[i].checked_mul(shape[i]).ok_or_else(overflow)?;
    }
    Ok(strides)
}

/// Bytes from the first element to one past the last: what a map of the tensor must cover.
///
/// Exact, not `rows * row_stride`: a view offset in x ends `x * bpp` bytes short of its last
/// padded row, and rounding up to whole rows would run past the end of the buffer.
pub fn extent(shape: &[usize], strides: &[usize], elem: usize) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .zip(strides)
        .try_fold(elem, |acc, (&d, &s)| {
            (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
        })
        .ok_or_else(|| {
            Error::Shape(format!(
                "the extent of {shape:?} with strides {strides:?} overflows usize"
            ))
        })
}

/// Checks that no offset a view or batch item of this tensor can reach overflows, and that
/// ndarray may view it: every stride, `offset + sum(shape[i] * strides[i]) + elem` and the
/// element count of the non-empty dimensions (times `elem`) stay within `isize::MAX` (ndarray
/// takes strides as `isize`: a larger one, even on an empty axis, is a negative stride to it).
///
/// Why the whole sum and not the extent: the extent ignores the stride of an axis of length 1
/// and every stride beside an axis of length 0, yet a view may start at the end of any axis
/// (`y = height`), so a hostile stride of 2^63 on a length-1 axis would wrap the view's offset.
pub fn check_reach(shape: &[usize], strides: &[usize], offset: usize, elem: usize) -> Result<()> {
    let too_far = || {
        Error::Shape(format!(
            "shape {shape:?} with strides {strides:?} at offset {offset} reaches past isize::MAX bytes"
        ))
    };
    let mut reach = offset.checked_add(elem).ok_or_else(too_far)?;
    for (&d, &s) in shape.iter().zip(strides) {
        reach = d
            .checked_mul(s)
            .and_then(|x| reach.checked_add(x))
            .ok_or_else(too_far)?;
    }
    let elements = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(elem, |n, &d| n.checked_mul(d))
        .ok_or_else(too_far)?;
    let widest = strides.iter().copied().max().unwrap_or(0);
    if reach > isize::MAX as usize || elements > isize::MAX as usize || widest > isize::MAX as usize
    {
        return Err(too_far());
    }
    Ok(())
}

/// The trailing dimensions whose elements follow one another (a dimension of one element
/// always does): the bytes of one run over them, and how many dimensions lie outside it. A
/// tensor whose elements are contiguous has none outside. No allocation: on every slice map's
/// path.
#[inline(always)]
pub(crate) fn contiguous_tail(shape: &[usize], strides: &[usize], elem: usize) -> (usize, usize) {
    let mut run = elem;
    let mut outer = shape.len();
    while outer > 0 && (strides[outer - 1] == run || shape[outer - 1] == 1) {
        run *= shape[outer - 1];
        outer -= 1;
    }
    (run, outer)
}

/// Calls `f(byte_offset, byte_len)` for each maximal contiguous run of the tensor's elements,
/// in logical (C) order. A tight tensor is one run; a padded image is one run per row.
pub(crate) fn for_each_run(
    shape: &[usize],
    strides: &[usize],
    elem: usize,
    mut f: impl FnMut(usize, usize),
) {
    for_each_paired_run(shape, strides, strides, elem, |offset, _, len| {
        f(offset, len)
    });
}

/// Calls `f(src_offset, dst_offset, byte_len)` for each run of elements that is contiguous in
/// both of two tensors of the same `shape`, in logical order: the regions of a strided copy.
pub(crate) fn for_each_paired_run(
    shape: &[usize],
    src_strides: &[usize],
    dst_strides: &[usize],
    elem: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    if shape.contains(&0) {
        return;
    }
    // Fold trailing dimensions into the run while both sides stay tight over it.
    let mut run = elem;
    let mut outer = shape.len();
    while outer > 0 && src_strides[outer - 1] == run && dst_strides[outer - 1] == run {
        run *= shape[outer - 1];
        outer -= 1;
    }
    let mut index = vec![0usize; outer];
    loop {
        let at = |strides: &[usize]| index.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>();
        f(at(src_strides), at(dst_strides), run);
        let mut d = outer;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_shapes_get_c_order_strides() {
        assert_eq!(byte_strides(&[2, 3, 4], 4, None).unwrap(), vec![48, 16, 4]);
    }

    #[test]
    fn a_padded_packed_image_steps_rows_by_the_row_stride() {
        // [h=2, w=3, c=4] u8 with 64-byte rows, batched 5 times.
        assert_eq!(
            byte_strides(&[5, 2, 3, 4], 1, Some((3, 64))).unwrap(),
            vec![128, 64, 4, 1]
        );
    }

    #[test]
    fn planar_planes_follow_at_the_padded_plane_size() {
        assert_eq!(
            byte_strides(&[3, 10, 100], 1, Some((2, 128))).unwrap(),
            vec![1280, 128, 1]
        );
    }

    #[test]
    fn strides_that_overflow_are_an_error() {
        assert!(byte_strides(&[usize::MAX, 2], 8, None).is_err());
        assert!(element_count(&[usize::MAX, 2]).is_err());
        assert!(byte_strides(&[2], 1, Some((2, 4))).is_err());
    }

    #[test]
    fn the_extent_of_a_view_stops_at_its_last_element() {
        // 2 rows of 3 RGBA pixels in an image with 64-byte rows.
        assert_eq!(extent(&[2, 3, 4], &[64, 4, 1], 1).unwrap(), 64 + 12);
        assert_eq!(extent(&[0, 3], &[3, 1], 1).unwrap(), 0);
    }

    #[test]
    fn paired_runs_split_where_either_side_is_padded() {
        let mut runs = vec![];
        // A 2x3 RGBA crop of a 64-byte-pitch image into a tight tensor.
        for_each_paired_run(&[2, 3, 4], &[64, 4, 1], &[12, 4, 1], 1, |s, d, l| {
            runs.push((s, d, l))
        });
        assert_eq!(runs, vec![(0, 0, 12), (64, 12, 12)]);
        runs.clear();
        for_each_paired_run(&[2, 3], &[12, 4], &[12, 4], 4, |s, d, l| {
            runs.push((s, d, l))
        });
        assert_eq!(runs, vec![(0, 0, 24)]);
    }

    #[test]
    fn runs_merge_tight_dimensions_and_split_at_padding() {
        let mut runs = vec![];
        for_each_run(&[2, 3, 4], &[64, 4, 1], 1, |o, l| runs.push((o, l)));
        assert_eq!(runs, vec![(0, 12), (64, 12)]);
        runs.clear();
        for_each_run(&[2, 3], &[12, 4], 4, |o, l| runs.push((o, l)));
        assert_eq!(runs, vec![(0, 24)]);
    }
}
