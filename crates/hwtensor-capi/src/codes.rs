//! The codes C passes as `uint32_t` (element types, memories, pixel formats, CPU access) and
//! their reading into hwtensor's types. Parameters are plain integers, since a C caller can pass
//! any value and a Rust enum must never hold an unknown one; each `*_of` refuses a value the
//! enum does not name. Values are only ever appended. The Linux-only codes (`HwtWait`) sit
//! beside the calls that take them.

use hwtensor::blob::Transport;
use hwtensor::{CpuAccess, DType, Direction, PixelFormat, TensorMemory};

use crate::status::{invalid, HwtStatus};

/// Element types (`uint32_t` parameters named `dtype` take these).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtDType {
    /// `uint8_t`
    U8 = 1,
    /// `int8_t`
    I8 = 2,
    /// `uint16_t`
    U16 = 3,
    /// `int16_t`
    I16 = 4,
    /// `uint32_t`
    U32 = 5,
    /// `int32_t`
    I32 = 6,
    /// `uint64_t`
    U64 = 7,
    /// `int64_t`
    I64 = 8,
    /// IEEE half precision
    F16 = 9,
    /// `float`
    F32 = 10,
    /// `double`
    F64 = 11,
}

/// Where a tensor's bytes live (`uint32_t` parameters named `memory` take these).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtMemory {
    /// Let hwtensor choose (the best memory the machine has for sharing); never reported.
    Auto = 0,
    /// Process heap.
    Mem = 1,
    /// Shared memory (a sealed memfd).
    Shm = 2,
    /// A DMA-BUF.
    DmaBuf = 3,
    /// GPU memory of the process device.
    Gpu = 4,
    /// CUDA device memory.
    Cuda = 5,
}

/// Pixel formats (`uint32_t` parameters named `format` take these; 0 reports "not an image").
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtPixelFormat {
    /// Not an image (only reported).
    None = 0,
    /// Packed RGB, 3 bytes a pixel.
    Rgb = 1,
    /// Packed RGBA.
    Rgba = 2,
    /// Packed BGRA.
    Bgra = 3,
    /// One byte a pixel.
    Grey = 4,
    /// Packed 4:2:2 YUYV.
    Yuyv = 5,
    /// Packed 4:2:2 VYUY.
    Vyuy = 6,
    /// Semi-planar 4:2:0.
    Nv12 = 7,
    /// Semi-planar 4:2:2.
    Nv16 = 8,
    /// Semi-planar 4:4:4.
    Nv24 = 9,
    /// Planar RGB.
    PlanarRgb = 10,
    /// Planar RGBA.
    PlanarRgba = 11,
    /// Semi-planar 4:2:0, chroma pairs V U.
    Nv21 = 12,
    /// Packed 4:2:2 UYVY.
    Uyvy = 13,
    /// Packed BGR, 3 bytes a pixel.
    Bgr = 14,
    /// Packed BGR and an unused byte.
    Bgrx = 15,
    /// One 16-bit little-endian sample a pixel (`HWT_DTYPE_U16`).
    Gray16 = 16,
    /// Semi-planar 4:2:0, 10 bits in 16-bit little-endian samples (`HWT_DTYPE_U16`).
    P010 = 17,
    /// Planar 4:2:0: Y, then U and V at half width and height (chroma stride half the row
    /// stride, unless given: `HwtImageSpec.chroma_stride`).
    I420 = 18,
    /// Planar 4:2:0 as I420 with V before U.
    Yv12 = 19,
}

/// What the CPU may do with a tensor (`uint32_t` parameters named `cpu_access`); also the
/// direction of a map (`mode`), where `NONE` is refused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtAccess {
    /// No CPU access: the tensor is for devices only.
    None = 0,
    /// Read.
    Read = 1,
    /// Write.
    Write = 2,
    /// Read and write.
    ReadWrite = 3,
}

pub(crate) fn dtype_of(code: u32) -> Result<DType, HwtStatus> {
    u8::try_from(code)
        .ok()
        .and_then(DType::from_code)
        .ok_or_else(|| invalid(format!("{code} is not an HwtDType")))
}

pub(crate) fn memory_of(code: u32) -> Result<Option<TensorMemory>, HwtStatus> {
    if code == HwtMemory::Auto as u32 {
        return Ok(None);
    }
    u8::try_from(code)
        .ok()
        .and_then(TensorMemory::from_code)
        .map(Some)
        .ok_or_else(|| invalid(format!("{code} is not an HwtMemory")))
}

pub(crate) fn format_of(code: u32) -> Result<PixelFormat, HwtStatus> {
    u8::try_from(code)
        .ok()
        .and_then(PixelFormat::from_code)
        .ok_or_else(|| invalid(format!("{code} is not an HwtPixelFormat")))
}

pub(crate) fn access_of(code: u32) -> Result<CpuAccess, HwtStatus> {
    [
        CpuAccess::None,
        CpuAccess::Read,
        CpuAccess::Write,
        CpuAccess::ReadWrite,
    ]
    .into_iter()
    .find(|a| *a as u32 == code)
    .ok_or_else(|| invalid(format!("{code} is not an HwtAccess")))
}

/// The direction of a map or device access: READ, WRITE or READ_WRITE.
pub(crate) fn direction_of(code: u32) -> Result<Direction, HwtStatus> {
    match access_of(code)? {
        CpuAccess::Read => Ok(Direction::Read),
        CpuAccess::Write => Ok(Direction::Write),
        CpuAccess::ReadWrite => Ok(Direction::ReadWrite),
        CpuAccess::None => Err(invalid("a map or access needs READ, WRITE or READ_WRITE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_enums_carry_the_librarys_own_codes() {
        let dtypes = [
            (HwtDType::U8, DType::U8),
            (HwtDType::I8, DType::I8),
            (HwtDType::U16, DType::U16),
            (HwtDType::I16, DType::I16),
            (HwtDType::U32, DType::U32),
            (HwtDType::I32, DType::I32),
            (HwtDType::U64, DType::U64),
            (HwtDType::I64, DType::I64),
            (HwtDType::F16, DType::F16),
            (HwtDType::F32, DType::F32),
            (HwtDType::F64, DType::F64),
        ];
        assert_eq!(dtypes.len(), DType::ALL.len());
        for (c, rust) in dtypes {
            assert_eq!(c as u32, rust.code() as u32, "{rust}");
        }
        let memories = [
            (HwtMemory::Mem, TensorMemory::Mem),
            (HwtMemory::Shm, TensorMemory::Shm),
            (HwtMemory::DmaBuf, TensorMemory::DmaBuf),
            (HwtMemory::Gpu, TensorMemory::Gpu),
            (HwtMemory::Cuda, TensorMemory::Cuda),
        ];
        assert_eq!(memories.len(), TensorMemory::ALL.len());
        for (c, rust) in memories {
            assert_eq!(c as u32, rust.code() as u32, "{rust}");
        }
        let formats = [
            (HwtPixelFormat::Rgb, PixelFormat::Rgb),
            (HwtPixelFormat::Rgba, PixelFormat::Rgba),
            (HwtPixelFormat::Bgra, PixelFormat::Bgra),
            (HwtPixelFormat::Grey, PixelFormat::Grey),
            (HwtPixelFormat::Yuyv, PixelFormat::Yuyv),
            (HwtPixelFormat::Vyuy, PixelFormat::Vyuy),
            (HwtPixelFormat::Nv12, PixelFormat::Nv12),
            (HwtPixelFormat::Nv16, PixelFormat::Nv16),
            (HwtPixelFormat::Nv24, PixelFormat::Nv24),
            (HwtPixelFormat::PlanarRgb, PixelFormat::PlanarRgb),
            (HwtPixelFormat::PlanarRgba, PixelFormat::PlanarRgba),
            (HwtPixelFormat::Nv21, PixelFormat::Nv21),
            (HwtPixelFormat::Uyvy, PixelFormat::Uyvy),
            (HwtPixelFormat::Bgr, PixelFormat::Bgr),
            (HwtPixelFormat::Bgrx, PixelFormat::Bgrx),
            (HwtPixelFormat::Gray16, PixelFormat::Gray16),
            (HwtPixelFormat::P010, PixelFormat::P010),
            (HwtPixelFormat::I420, PixelFormat::I420),
            (HwtPixelFormat::Yv12, PixelFormat::Yv12),
        ];
        assert_eq!(formats.len(), PixelFormat::ALL.len());
        for (c, rust) in formats {
            assert_eq!(c as u32, rust.code() as u32, "{rust}");
        }
        for a in [
            CpuAccess::None,
            CpuAccess::Read,
            CpuAccess::Write,
            CpuAccess::ReadWrite,
        ] {
            assert_eq!(access_of(a as u32), Ok(a));
        }
    }

    #[test]
    fn unknown_enum_values_are_refused_by_name() {
        assert_eq!(dtype_of(0), Err(HwtStatus::InvalidArgument));
        assert_eq!(dtype_of(12), Err(HwtStatus::InvalidArgument));
        assert_eq!(memory_of(6), Err(HwtStatus::InvalidArgument));
        assert_eq!(memory_of(0), Ok(None));
        assert_eq!(format_of(0), Err(HwtStatus::InvalidArgument));
        assert_eq!(direction_of(0), Err(HwtStatus::InvalidArgument));
        assert_eq!(direction_of(4), Err(HwtStatus::InvalidArgument));
    }
}

/// How a tensor travels (`uint32_t` parameters named `transport`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtTransport {
    /// The buffer travels by reference beside the blob (its fd on Linux, its section's handle
    /// on Windows): zero-copy.
    Reference = 1,
    /// The bytes travel inside the blob: heap memory, or crossing machines.
    Inline = 2,
}

/// The transport a code names.
pub(crate) fn transport_of(code: u32) -> Result<Transport, HwtStatus> {
    match code {
        c if c == HwtTransport::Reference as u32 => Ok(Transport::Reference),
        c if c == HwtTransport::Inline as u32 => Ok(Transport::Inline),
        other => Err(invalid(format!("{other} is not an HwtTransport"))),
    }
}
