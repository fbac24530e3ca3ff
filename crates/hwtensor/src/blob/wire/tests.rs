//! The codec's own tests: the field table against itself and the docs, and headers that
//! read back or are refused.

use super::header::{Header, FIELDS, NO_FENCE, V1_HEADER_LEN};
use super::{REQUIRES_IMAGE, REQUIRES_QUANTIZATION};
use crate::{PixelFormat, TensorMemory};

#[test]
fn the_header_fields_tile_the_v1_header_without_gap_or_overlap() {
    let mut next = 0;
    for &(name, at, size) in FIELDS {
        assert_eq!(
            at, next,
            "{name} starts at {at}, the field before ends at {next}"
        );
        next = at + size;
    }
    assert_eq!(next, V1_HEADER_LEN);
}

#[test]
fn the_format_table_in_the_docs_is_the_field_table() {
    let docs = include_str!("../mod.rs");
    let rows: Vec<(String, usize, usize)> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let at = cells.first()?.parse().ok()?;
            let size = cells.get(1)?.parse().ok()?;
            Some((cells.get(2)?.to_string(), at, size))
        })
        .collect();
    let table: Vec<(String, usize, usize)> = FIELDS
        .iter()
        .map(|&(n, a, s)| (n.to_string(), a, s))
        .collect();
    assert_eq!(rows, table);
}

#[test]
fn a_written_header_reads_back_field_for_field() {
    let h = Header {
        total_len: V1_HEADER_LEN,
        required: REQUIRES_IMAGE | REQUIRES_QUANTIZATION,
        dtype: 1,
        memory: TensorMemory::Mem.code(),
        mode: 1,
        rank: 3,
        format: PixelFormat::Rgba.code(),
        access: 3,
        plane_count: 1,
        byte_offset: 5,
        buffer_len: 6,
        width: 7,
        height: 8,
        row_stride: 9,
        quant_scale: 0.5,
        quant_zero_point: -3,
        completion_fd: NO_FENCE,
        ..Header::default()
    };
    let back = Header::read(&h.write()).unwrap();
    assert_eq!(
        format!("{back:?}"),
        format!(
            "{:?}",
            Header {
                header_len: V1_HEADER_LEN,
                ..h
            }
        )
    );
}

#[test]
fn every_truncation_of_a_header_is_refused_with_a_reason() {
    let h = Header {
        total_len: V1_HEADER_LEN,
        plane_count: 1,
        completion_fd: NO_FENCE,
        ..Header::default()
    }
    .write();
    for len in 0..V1_HEADER_LEN {
        let err = Header::read(&h[..len]).unwrap_err();
        assert!(matches!(err, crate::Error::Blob(_)), "{len}: {err}");
    }
}
