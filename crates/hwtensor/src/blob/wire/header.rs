//! The fixed header: its field table (one line per field, the only place an offset is
//! written), the writer of its bytes and the checked reader that refuses what the fields say
//! on their own or about each other.

use super::{
    bad, to_usize, KNOWN_REQUIREMENTS, MAGIC, MAX_FDS, MAX_PLANES, MAX_RANK, MODE_REFERENCE,
    REQUIRES_COLORIMETRY, REQUIRES_COMPLETION, REQUIRES_DRM_MODIFIER, REQUIRES_IMAGE,
    REQUIRES_PER_CHANNEL, REQUIRES_PLANE_FDS, REQUIRES_QUANTIZATION, REQUIRES_SYNC_FILE, VERSION,
};
use crate::gpu::{GpuOrigin, GpuReference};
use crate::image::ImageInfo;
use crate::MAX_QUANT_CHANNELS;
use crate::{PixelFormat, Result, TensorMemory};

/// A field of the fixed header: its name and offset, its width in the type. The writer can
/// only put `N` bytes there and the reader only gets `N` back, so the two cannot disagree on a
/// width; their offsets and the doc table are checked against [`FIELDS`] by the tests below.
#[derive(Clone, Copy, Debug)]
pub(in crate::blob) struct Field<const N: usize> {
    pub name: &'static str,
    pub at: usize,
}

/// Declares each header field once, and [`FIELDS`], the table in order.
macro_rules! header_fields {
    ($($id:ident: $n:literal @ $at:literal = $name:literal;)*) => {
        $(pub(in crate::blob) const $id: Field<$n> = Field { name: $name, at: $at };)*
        /// Every header field in order, as `(name, offset, size)`: the one source the writer,
        /// the reader and the format table in the module docs are checked against.
        #[cfg(test)]
        pub(in crate::blob) const FIELDS: &[(&str, usize, usize)] = &[$(($name, $at, $n)),*];
    };
}

header_fields! {
    F_MAGIC: 4 @ 0 = "magic";
    F_VERSION: 2 @ 4 = "version";
    F_HEADER_LEN: 2 @ 6 = "header_len";
    F_TOTAL_LEN: 4 @ 8 = "total_len";
    F_REQUIRED: 4 @ 12 = "required";
    F_DTYPE: 1 @ 16 = "dtype";
    F_MEMORY: 1 @ 17 = "memory";
    F_MODE: 1 @ 18 = "mode";
    F_RANK: 1 @ 19 = "rank";
    F_FORMAT: 1 @ 20 = "format";
    F_ACCESS: 1 @ 21 = "access";
    F_PLANE_COUNT: 1 @ 22 = "plane_count";
    F_FD_COUNT: 1 @ 23 = "fd_count";
    F_BYTE_OFFSET: 8 @ 24 = "byte_offset";
    F_BUFFER_LEN: 8 @ 32 = "buffer_len";
    F_WIDTH: 8 @ 40 = "width";
    F_HEIGHT: 8 @ 48 = "height";
    F_ROW_STRIDE: 8 @ 56 = "row_stride";
    F_QUANT_SCALE: 4 @ 64 = "quant_scale";
    F_QUANT_ZERO_POINT: 4 @ 68 = "quant_zero_point";
    F_COMPLETION_FD: 4 @ 72 = "completion_fd";
    F_QUANT_CHANNELS: 4 @ 76 = "quant_channels";
    F_COMPLETION_VALUE: 8 @ 80 = "completion_value";
    F_COLORIMETRY: 4 @ 88 = "colorimetry";
    F_RESERVED_92: 4 @ 92 = "reserved";
    F_DEVICE_UUID: 16 @ 96 = "device_uuid";
    F_DRIVER_UUID: 16 @ 112 = "driver_uuid";
    F_ALLOCATION_SIZE: 8 @ 128 = "allocation_size";
    F_PRODUCER_PID: 4 @ 136 = "producer_pid";
    F_QUANT_AXIS: 4 @ 140 = "quant_axis";
    F_PRODUCER_START: 8 @ 144 = "producer_start";
    F_PRODUCER_SERIAL: 8 @ 152 = "producer_serial";
    F_PRODUCER_SEMAPHORE: 8 @ 160 = "producer_semaphore";
}

/// Length of the v1 fixed header: where the table ends.
pub(in crate::blob) const V1_HEADER_LEN: usize = 168;

/// The first field appended after the v1 table: an image's DRM format modifier, written (with
/// `required` bit 5) only when it is not LINEAR, so every linear blob stays the 168-byte header
/// every reader knows, and a reader that predates the field refuses a tiled frame by its bit
/// instead of reading tiles as rows.
pub(in crate::blob) const F_DRM_MODIFIER: Field<8> = Field {
    at: V1_HEADER_LEN,
    name: "drm_modifier",
};
/// The header's length when it carries [`F_DRM_MODIFIER`].
pub(in crate::blob) const MODIFIER_HEADER_LEN: usize = V1_HEADER_LEN + 8;
/// Fence index of "no completion fence".
pub(in crate::blob) const NO_FENCE: u32 = u32::MAX;

/// What a GPU buffer sent by reference says of itself (all zero otherwise).
pub(in crate::blob) type GpuFields = GpuReference;

/// The fixed header, as written or read.
#[derive(Debug, Default)]
pub(in crate::blob) struct Header {
    pub header_len: usize,
    pub total_len: usize,
    pub required: u32,
    pub dtype: u8,
    pub memory: u8,
    pub mode: u8,
    pub rank: usize,
    pub format: u8,
    pub access: u8,
    pub plane_count: usize,
    pub fd_count: usize,
    pub byte_offset: u64,
    pub buffer_len: u64,
    pub width: u64,
    pub height: u64,
    pub row_stride: u64,
    /// The image's colorimetry codes (zero: unspecified).
    pub colorimetry: [u8; 4],
    pub quant_scale: f32,
    pub quant_zero_point: i32,
    /// Per-channel quantization: channel count and axis (0 without it).
    pub quant_channels: u32,
    pub quant_axis: u32,
    pub completion_fd: u32,
    pub completion_value: u64,
    pub gpu: GpuFields,
    /// The image's DRM format modifier (0, LINEAR, unless the header is long enough to say).
    pub drm_modifier: u64,
}

/// Puts `value` at field `f` of a header.
fn put<const N: usize>(h: &mut [u8; V1_HEADER_LEN], f: Field<N>, value: [u8; N]) {
    h[f.at..f.at + N].copy_from_slice(&value);
}

impl Header {
    /// The header's bytes: the v1 table, then the modifier where `header_len` has room for it.
    #[cfg(test)]
    pub(in crate::blob) fn write(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(MODIFIER_HEADER_LEN);
        self.write_into(&mut h);
        h
    }

    /// Appends the header's bytes to `out` (the blob being written: no buffer of its own).
    pub(in crate::blob) fn write_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.write_v1());
        if self.header_len >= MODIFIER_HEADER_LEN {
            out.extend_from_slice(&self.drm_modifier.to_le_bytes());
        }
    }

    /// The v1 table's bytes.
    fn write_v1(&self) -> [u8; V1_HEADER_LEN] {
        let mut h = [0u8; V1_HEADER_LEN];
        put(&mut h, F_MAGIC, MAGIC);
        put(&mut h, F_VERSION, VERSION.to_le_bytes());
        let len = self.header_len.max(V1_HEADER_LEN) as u16;
        put(&mut h, F_HEADER_LEN, len.to_le_bytes());
        put(&mut h, F_TOTAL_LEN, (self.total_len as u32).to_le_bytes());
        put(&mut h, F_REQUIRED, self.required.to_le_bytes());
        put(&mut h, F_DTYPE, [self.dtype]);
        put(&mut h, F_MEMORY, [self.memory]);
        put(&mut h, F_MODE, [self.mode]);
        put(&mut h, F_RANK, [self.rank as u8]);
        put(&mut h, F_FORMAT, [self.format]);
        put(&mut h, F_ACCESS, [self.access]);
        put(&mut h, F_PLANE_COUNT, [self.plane_count as u8]);
        put(&mut h, F_FD_COUNT, [self.fd_count as u8]);
        put(&mut h, F_BYTE_OFFSET, self.byte_offset.to_le_bytes());
        put(&mut h, F_BUFFER_LEN, self.buffer_len.to_le_bytes());
        put(&mut h, F_WIDTH, self.width.to_le_bytes());
        put(&mut h, F_HEIGHT, self.height.to_le_bytes());
        put(&mut h, F_ROW_STRIDE, self.row_stride.to_le_bytes());
        put(&mut h, F_COLORIMETRY, self.colorimetry);
        put(&mut h, F_QUANT_SCALE, self.quant_scale.to_le_bytes());
        put(
            &mut h,
            F_QUANT_ZERO_POINT,
            self.quant_zero_point.to_le_bytes(),
        );
        put(&mut h, F_QUANT_CHANNELS, self.quant_channels.to_le_bytes());
        put(&mut h, F_QUANT_AXIS, self.quant_axis.to_le_bytes());
        put(&mut h, F_COMPLETION_FD, self.completion_fd.to_le_bytes());
        put(
            &mut h,
            F_COMPLETION_VALUE,
            self.completion_value.to_le_bytes(),
        );
        put(&mut h, F_DEVICE_UUID, self.gpu.device_uuid);
        put(&mut h, F_DRIVER_UUID, self.gpu.driver_uuid);
        put(
            &mut h,
            F_ALLOCATION_SIZE,
            self.gpu.allocation_size.to_le_bytes(),
        );
        put(&mut h, F_PRODUCER_PID, self.gpu.producer.pid.to_le_bytes());
        put(
            &mut h,
            F_PRODUCER_START,
            self.gpu.producer.start_time.to_le_bytes(),
        );
        put(
            &mut h,
            F_PRODUCER_SERIAL,
            self.gpu.producer.serial.to_le_bytes(),
        );
        // The reserved fields and producer_semaphore stay 0 (see the format table).
        h
    }

    /// Reads the fixed header and checks everything it can say on its own.
    pub(in crate::blob) fn read(bytes: &[u8]) -> Result<Header> {
        let (header_len, total_len) = read_lengths(bytes)?;
        let r = Reader(bytes);
        let h = Header {
            header_len,
            total_len,
            required: r.u32(F_REQUIRED)?,
            dtype: r.u8(F_DTYPE)?,
            memory: r.u8(F_MEMORY)?,
            mode: r.u8(F_MODE)?,
            rank: r.u8(F_RANK)? as usize,
            format: r.u8(F_FORMAT)?,
            access: r.u8(F_ACCESS)?,
            plane_count: r.u8(F_PLANE_COUNT)? as usize,
            fd_count: r.u8(F_FD_COUNT)? as usize,
            byte_offset: r.u64(F_BYTE_OFFSET)?,
            buffer_len: r.u64(F_BUFFER_LEN)?,
            width: r.u64(F_WIDTH)?,
            height: r.u64(F_HEIGHT)?,
            row_stride: r.u64(F_ROW_STRIDE)?,
            colorimetry: r.get(F_COLORIMETRY)?,
            quant_scale: f32::from_le_bytes(r.get(F_QUANT_SCALE)?),
            quant_zero_point: i32::from_le_bytes(r.get(F_QUANT_ZERO_POINT)?),
            quant_channels: r.u32(F_QUANT_CHANNELS)?,
            quant_axis: r.u32(F_QUANT_AXIS)?,
            completion_fd: r.u32(F_COMPLETION_FD)?,
            completion_value: r.u64(F_COMPLETION_VALUE)?,
            gpu: GpuFields {
                device_uuid: r.get(F_DEVICE_UUID)?,
                driver_uuid: r.get(F_DRIVER_UUID)?,
                allocation_size: r.u64(F_ALLOCATION_SIZE)?,
                producer: GpuOrigin {
                    pid: r.u32(F_PRODUCER_PID)?,
                    start_time: r.u64(F_PRODUCER_START)?,
                    serial: r.u64(F_PRODUCER_SERIAL)?,
                },
            },
            drm_modifier: match header_len >= MODIFIER_HEADER_LEN {
                true => r.u64(F_DRM_MODIFIER)?,
                false => 0,
            },
        };
        // Reserved fields must be zero: a writer that fills them is one this reader does not
        // understand, and silently ignoring what it meant is how misreads happen. The
        // semaphore word of early v1 writers is ignored (see the format table).
        if r.u32(F_RESERVED_92)? != 0 {
            return Err(bad("reserved header fields are not zero"));
        }
        let producer_semaphore = r.u64(F_PRODUCER_SEMAPHORE)?;
        h.check(producer_semaphore)?;
        Ok(h)
    }

    /// The checks that tie header fields to each other and to the limits.
    fn check(&self, producer_semaphore: u64) -> Result<()> {
        let device_memory = [TensorMemory::Gpu.code(), TensorMemory::Cuda.code()];
        let gpu_reference = device_memory.contains(&self.memory) && self.mode == MODE_REFERENCE;
        if !gpu_reference && (self.gpu != GpuFields::default() || producer_semaphore != 0) {
            return Err(bad(
                "GPU fields are set on a blob that is not GPU memory by reference",
            ));
        }
        if self.required & !KNOWN_REQUIREMENTS != 0 {
            return Err(bad(format!(
                "written by a newer hwtensor: it requires features {:#x} this reader does not know",
                self.required & !KNOWN_REQUIREMENTS
            )));
        }
        if self.required & REQUIRES_QUANTIZATION == 0
            && (self.quant_scale.to_bits() != 0 || self.quant_zero_point != 0)
        {
            return Err(bad(
                "quantization fields are set without the quantization bit",
            ));
        }
        let fenced = self.required & (REQUIRES_COMPLETION | REQUIRES_SYNC_FILE) != 0;
        if (!fenced && self.completion_fd != NO_FENCE)
            || (self.required & REQUIRES_COMPLETION == 0 && self.completion_value != 0)
        {
            return Err(bad("completion fields are set without the completion bit"));
        }
        if self.required & REQUIRES_IMAGE == 0
            && (self.width, self.height, self.row_stride) != (0, 0, 0)
        {
            return Err(bad("image fields are set without the image bit"));
        }
        self.check_per_channel()?;
        let colorimetry = self.required & REQUIRES_COLORIMETRY != 0;
        if !colorimetry && self.colorimetry != [0; 4] {
            return Err(bad("colorimetry is set without the colorimetry bit"));
        }
        if colorimetry && self.required & REQUIRES_IMAGE == 0 {
            return Err(bad("colorimetry on a blob that is not an image"));
        }
        let tiled = self.required & REQUIRES_DRM_MODIFIER != 0;
        if tiled && self.header_len < MODIFIER_HEADER_LEN {
            return Err(bad(format!(
                "the drm_modifier bit on a {}-byte header, which has no drm_modifier field",
                self.header_len
            )));
        }
        if tiled != (self.drm_modifier != 0) {
            return Err(bad(
                "the drm_modifier bit and the drm_modifier field disagree (a LINEAR image sets \
                 neither)",
            ));
        }
        if tiled && self.required & REQUIRES_IMAGE == 0 {
            return Err(bad("a DRM format modifier on a blob that is not an image"));
        }
        self.check_counts()?;
        if self.required & REQUIRES_PLANE_FDS != 0 {
            self.check_plane_fds(fenced, tiled)?;
        }
        Ok(())
    }

    /// Per-channel quantization (bit 4): its count and axis only with the bit, the bit only
    /// with quantization, a count within the limit and an axis of the tensor.
    fn check_per_channel(&self) -> Result<()> {
        let per_channel = self.required & REQUIRES_PER_CHANNEL != 0;
        if !per_channel && (self.quant_channels, self.quant_axis) != (0, 0) {
            return Err(bad(
                "per-channel quantization fields are set without the per-channel bit",
            ));
        }
        if per_channel && self.required & REQUIRES_QUANTIZATION == 0 {
            return Err(bad("per-channel quantization without the quantization bit"));
        }
        if per_channel && !(1..=MAX_QUANT_CHANNELS).contains(&(self.quant_channels as usize)) {
            return Err(bad(format!(
                "{} quantization channels (1 to {MAX_QUANT_CHANNELS} allowed)",
                self.quant_channels
            )));
        }
        if per_channel && self.quant_axis as usize >= self.rank {
            return Err(bad(format!(
                "quantization axis {} of a rank-{} tensor",
                self.quant_axis, self.rank
            )));
        }
        Ok(())
    }

    /// The rank, plane and fd counts within the format's limits.
    fn check_counts(&self) -> Result<()> {
        if self.rank > MAX_RANK {
            return Err(bad(format!(
                "rank {} is past the maximum of {MAX_RANK}",
                self.rank
            )));
        }
        if self.plane_count == 0 || self.plane_count > MAX_PLANES {
            return Err(bad(format!(
                "{} planes (1 to {MAX_PLANES} allowed)",
                self.plane_count
            )));
        }
        if self.fd_count > MAX_FDS {
            return Err(bad(format!(
                "{} fds (at most {MAX_FDS} allowed)",
                self.fd_count
            )));
        }
        Ok(())
    }

    /// An fd per plane (bit 8) is a whole linear image by reference, one fd for each of its
    /// two or more planes, without a fence (the sender waited for its own).
    fn check_plane_fds(&self, fenced: bool, tiled: bool) -> Result<()> {
        let why = if self.required & REQUIRES_IMAGE == 0 {
            "on a blob that is not an image"
        } else if self.mode != MODE_REFERENCE {
            "on a blob that is not by reference"
        } else if fenced {
            "beside a completion fence"
        } else if tiled {
            "on a tiled image"
        } else if self.plane_count < 2 || self.fd_count != self.plane_count {
            "without one fd for each of two or more planes"
        } else if self.byte_offset != 0 {
            "with a byte_offset (such a blob describes the whole image)"
        } else {
            return Ok(());
        };
        Err(bad(format!(
            "the plane fds bit {why} ({} planes, {} fds)",
            self.plane_count, self.fd_count
        )))
    }

    /// The image the header describes, if it is one.
    pub(in crate::blob) fn image_info(&self) -> Result<Option<ImageInfo>> {
        let is_image = self.required & REQUIRES_IMAGE != 0;
        if is_image != (self.format != 0) {
            return Err(bad("the image bit and the pixel format disagree"));
        }
        if !is_image {
            return Ok(None);
        }
        let format = PixelFormat::from_code(self.format)
            .ok_or_else(|| bad(format!("unknown pixel format code {}", self.format)))?;
        let mut info = ImageInfo::new(
            format,
            to_usize(self.width, "width")?,
            to_usize(self.height, "height")?,
            to_usize(self.row_stride, "row_stride")?,
        );
        info.colorimetry = crate::Colorimetry::from_codes(self.colorimetry).map_err(bad)?;
        info.modifier = crate::DrmModifier(self.drm_modifier);
        Ok(Some(info))
    }
}

/// Checks the magic and version, and reads the header's and the blob's lengths: a header
/// shorter than v1's, or a blob whose length is not what arrived, is refused.
fn read_lengths(bytes: &[u8]) -> Result<(usize, usize)> {
    let r = Reader(bytes);
    if r.get(F_MAGIC)? != MAGIC {
        return Err(bad("not an hwtensor blob (bad magic)"));
    }
    let version = u16::from_le_bytes(r.get(F_VERSION)?);
    if version != VERSION {
        return Err(bad(format!(
            "version {version} is not the version {VERSION} this reader understands"
        )));
    }
    let header_len = u16::from_le_bytes(r.get(F_HEADER_LEN)?) as usize;
    let total_len = u32::from_le_bytes(r.get(F_TOTAL_LEN)?) as usize;
    if header_len < V1_HEADER_LEN {
        return Err(bad(format!(
            "header_len {header_len} is below the {V1_HEADER_LEN}-byte v1 header"
        )));
    }
    if total_len != bytes.len() {
        return Err(bad(format!(
            "total_len says {total_len} bytes, {} arrived",
            bytes.len()
        )));
    }
    Ok((header_len, total_len))
}

/// Header fields read by the table, bounds-checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn get<const N: usize>(&self, f: Field<N>) -> Result<[u8; N]> {
        self.0
            .get(f.at..f.at + N)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                bad(format!(
                    "truncated: {} needs {N} bytes at offset {}, the blob has {}",
                    f.name,
                    f.at,
                    self.0.len()
                ))
            })
    }
    fn u8(&self, f: Field<1>) -> Result<u8> {
        self.get(f).map(|[b]| b)
    }
    fn u32(&self, f: Field<4>) -> Result<u32> {
        self.get(f).map(u32::from_le_bytes)
    }
    fn u64(&self, f: Field<8>) -> Result<u64> {
        self.get(f).map(u64::from_le_bytes)
    }
}
