//! Encoder and decoder together, in this process (its own pid stands for a publisher's), and
//! messages the schema crate builds, hostile ones included.

use std::borrow::Cow;
use std::os::fd::AsRawFd;

use edgefirst_schemas::edgefirst_msgs::CameraFrame;
use edgefirst_schemas::tensor::{TensorFields, TensorPlaneView};
use hwtensor::{
    Colorimetry, CpuAccess, DType, Direction, ImageSpec, PixelFormat, Quantization, Tensor,
    TensorDyn, TensorMemory,
};

use super::{encode, Schema, Stamp};

/// The decoder as a subscriber calls it, with the library's longest fence wait.
fn decode(bytes: &[u8]) -> Result<super::Decoded, String> {
    super::decode::decode(bytes, hwtensor::gpu::GPU_WAIT)
}

fn stamp() -> Stamp<'static> {
    Stamp {
        seq: 7,
        time_ns: 1_234_567_890_123_456_789,
        frame_id: "camera",
    }
}

/// An image of `format` with padded rows, every byte set from its position.
fn image(format: PixelFormat, memory: TensorMemory) -> TensorDyn {
    let dtype = match format {
        PixelFormat::Gray16 | PixelFormat::P010 => DType::U16,
        _ => DType::U8,
    };
    let (w, h) = (64, 48);
    let stride = format.min_row_bytes(w, dtype.size()).unwrap() + 64;
    let mut t = TensorDyn::image(
        &ImageSpec::new(format, w, h).with_row_stride(stride),
        dtype,
        Some(memory),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    t.set_colorimetry(Colorimetry::BT709_LIMITED).unwrap();
    let mut map = t.map_bytes(Direction::Write).unwrap();
    for (i, b) in map.as_bytes_mut().unwrap().iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    drop(map);
    t
}

fn bytes(t: &TensorDyn) -> Vec<u8> {
    t.map_bytes(Direction::Read)
        .unwrap()
        .as_bytes()
        .unwrap()
        .to_vec()
}

fn round_trip(t: &TensorDyn, by_reference: bool) -> super::Decoded {
    let mut message = Vec::new();
    encode(t, by_reference, &stamp(), &mut message).unwrap();
    decode(&message).unwrap()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn every_format_round_trips_inline_with_its_strides_colorimetry_and_bytes() {
    let _fds = super::fds_held();
    for format in PixelFormat::ALL {
        let t = image(format, TensorMemory::Mem);
        let d = round_trip(&t, true); // heap memory has no fd: inline whatever was asked
        assert_eq!(
            d.tensor
                .image_info()
                .map(|i| (i.format, i.width, i.height, i.row_stride)),
            t.image_info()
                .map(|i| (i.format, i.width, i.height, i.row_stride)),
            "{format}"
        );
        assert_eq!(
            d.tensor.image_info().map(|i| i.colorimetry),
            Some(Colorimetry::BT709_LIMITED),
            "{format}"
        );
        assert_eq!(bytes(&d.tensor), bytes(&t), "{format}");
        assert_eq!(
            (d.seq, d.time_ns, d.frame_id.as_str()),
            (Some(7), stamp().time_ns, "camera")
        );
    }
}

#[test]
fn a_shm_image_by_reference_is_the_publishers_own_buffer() {
    let _fds = super::fds_held();
    for format in [PixelFormat::Nv12, PixelFormat::I420, PixelFormat::Rgba] {
        let t = image(format, TensorMemory::Shm);
        let before = open_fds();
        let d = round_trip(&t, true);
        assert_eq!(
            d.tensor.identity(),
            t.identity(),
            "{format}: a copy, not the buffer"
        );
        assert_eq!(bytes(&d.tensor), bytes(&t));
        assert_eq!(
            d.tensor.image_info().map(|i| i.colorimetry),
            Some(Colorimetry::BT709_LIMITED)
        );
        drop(d);
        assert_eq!(open_fds(), before, "{format}: an fd leaked");
    }
}

#[test]
fn plain_tensors_keep_dtype_shape_and_quantization_both_ways() {
    let _fds = super::fds_held();
    let t = Tensor::<i8>::new(&[3, 5, 7], Some(TensorMemory::Shm)).unwrap();
    t.map_write()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as i8);
    let q = Quantization::per_channel(0, vec![0.5, 0.25, 0.125], vec![1, 2, 3]).unwrap();
    let t = TensorDyn::from(t)
        .with_quantization(Some(q.clone()))
        .unwrap();
    for by_reference in [true, false] {
        let d = round_trip(&t, by_reference);
        assert_eq!(
            (d.tensor.dtype(), d.tensor.shape()),
            (DType::I8, &[3, 5, 7][..])
        );
        assert_eq!(d.tensor.quantization(), Some(q.clone()));
        assert_eq!(bytes(&d.tensor), bytes(&t));
        assert_eq!(d.tensor.identity() == t.identity(), by_reference);
    }
}

#[test]
fn an_image_is_a_camera_frame_and_a_plain_tensor_is_tensor_stamped() {
    let _fds = super::fds_held();
    let mut out = Vec::new();
    let image = image(PixelFormat::Nv12, TensorMemory::Mem);
    assert_eq!(
        encode(&image, false, &stamp(), &mut out),
        Ok(Schema::CameraFrame)
    );
    let frame = CameraFrame::from_cdr(out.as_slice()).unwrap();
    assert_eq!(frame.tensor().format(), "NV12");
    assert_eq!(frame.tensor().shape().collect::<Vec<_>>(), vec![48, 64]);
    assert_eq!(frame.tensor().num_planes(), 2);
    let plain = TensorDyn::new(&[4], DType::F32, None).unwrap();
    assert_eq!(
        encode(&plain, false, &stamp(), &mut out),
        Ok(Schema::TensorStamped)
    );
}

/// An NV12 message as EdgeFirst's camera node writes one: both planes in one memfd of this
/// process (its pid), built with the schema crate.
struct Camera {
    memfd: std::os::fd::OwnedFd,
    w: u64,
    h: u64,
}

impl Camera {
    fn new() -> Camera {
        let (w, h) = (64u64, 48u64);
        let t = Tensor::<u8>::new(&[(w * h * 3 / 2) as usize], Some(TensorMemory::Shm)).unwrap();
        t.map_write()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as u8);
        Camera {
            memfd: t.clone_fd().unwrap(),
            w,
            h,
        }
    }

    fn planes(&self) -> Vec<TensorPlaneView<'static>> {
        let fd = self.memfd.as_raw_fd() as i64;
        let luma = self.w * self.h;
        [(0, luma), (luma, luma / 2)]
            .into_iter()
            .map(|(offset, size)| TensorPlaneView {
                handle: fd,
                offset,
                stride: self.w,
                size,
                used: size,
                modifier: 0,
                handle_bytes: &[],
                data: &[],
            })
            .collect()
    }

    /// The message with `edit` applied to its fields.
    fn message(
        &self,
        edit: impl FnOnce(&mut TensorFields<'_>, &mut Vec<TensorPlaneView<'_>>),
    ) -> Vec<u8> {
        let mut planes = self.planes();
        let shape = [self.h, self.w];
        let strides = [self.w as i64, 1];
        let mut fields = TensorFields {
            storage_kind: super::codes::STORAGE_SHM,
            pid: std::process::id(),
            fence_fd: -1,
            dtype: 0,
            quant_axis: -2,
            shape: &shape,
            strides: &strides,
            format: Cow::Borrowed("NV12"),
            color_space: Cow::Borrowed("bt709"),
            color_transfer: Cow::Borrowed("bt709"),
            color_encoding: Cow::Borrowed("bt709"),
            color_range: Cow::Borrowed("limited"),
            ..TensorFields::default()
        };
        let mut edited = planes.clone();
        edit(&mut fields, &mut edited);
        planes = edited;
        fields.planes = &planes;
        CameraFrame::builder()
            .seq(3)
            .frame_id("front")
            .tensor(&fields)
            .build()
            .unwrap()
            .to_cdr()
    }
}

#[test]
fn the_schema_crates_camera_frame_by_reference_is_imported_without_a_copy() {
    let _fds = super::fds_held();
    let camera = Camera::new();
    let d = decode(&camera.message(|_, _| {})).unwrap();
    let info = *d.tensor.image_info().unwrap();
    assert_eq!(
        (info.format, info.width, info.height),
        (PixelFormat::Nv12, 64, 48)
    );
    assert_eq!(
        d.tensor.image_info().map(|i| i.colorimetry),
        Some(Colorimetry::BT709_LIMITED)
    );
    assert_eq!(d.tensor.memory(), TensorMemory::Shm);
    let expected: Vec<u8> = (0..64 * 48 * 3 / 2).map(|i| i as u8).collect();
    assert_eq!(bytes(&d.tensor), expected);
    assert_eq!((d.seq, d.frame_id.as_str()), (Some(3), "front"));
}

#[test]
fn hostile_messages_are_refused_naming_the_field_and_leak_no_fd() {
    let _fds = super::fds_held();
    let camera = Camera::new();
    let eventfd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    let ev = eventfd.as_raw_fd();
    let pipe = std::io::pipe().unwrap().0;
    let not_fd = pipe.as_raw_fd() as i64;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("pid:", camera.message(|f, _| f.pid = 1 << 23)),
        (
            "planes[1].handle",
            camera.message(|_, p| p[1].handle = 999_999),
        ),
        ("planes", camera.message(|_, p| p[0].handle = not_fd)),
        ("planes", camera.message(|_, p| p[1].offset = 1 << 30)),
        (
            "planes[1].modifier",
            camera.message(|_, p| p[1].modifier = 1 << 56),
        ),
        (
            "planes[0].modifier",
            camera.message(|_, p| p.iter_mut().for_each(|p| p.modifier = 0xee << 56)),
        ),
        ("fence_fd", camera.message(|f, _| f.fence_fd = ev)),
        ("storage_kind", camera.message(|f, _| f.storage_kind = 5)),
        (
            "format",
            camera.message(|f, _| f.format = Cow::Borrowed("h264")),
        ),
        (
            "shape",
            camera.message(|f, _| {
                f.shape = &[48, 64, 3];
                f.strides = &[];
            }),
        ),
        ("dtype", camera.message(|f, _| f.dtype = 42)),
        ("planes:", camera.message(|_, p| p.truncate(1))),
    ];
    let before = open_fds();
    for (field, message) in &cases {
        let err = decode(message).unwrap_err();
        assert!(
            err.starts_with(field),
            "expected a refusal of {field}, got: {err}"
        );
    }
    assert_eq!(open_fds(), before, "a refused message leaked an fd");
}

#[test]
fn inline_data_shorter_than_its_plane_is_refused_naming_the_plane() {
    let _fds = super::fds_held();
    let t = image(PixelFormat::I420, TensorMemory::Mem);
    let mut message = Vec::new();
    encode(&t, false, &stamp(), &mut message).unwrap();
    let frame = CameraFrame::from_cdr(message.as_slice()).unwrap();
    let tensor = frame.tensor();
    let mut planes: Vec<_> = tensor.planes().collect();
    let short = &planes[2].data[..planes[2].data.len() / 2];
    planes[2].data = short;
    planes[2].size = short.len() as u64;
    planes[2].used = short.len() as u64;
    let shape: Vec<u64> = tensor.shape().collect();
    let strides: Vec<i64> = tensor.strides().collect();
    let fields = TensorFields {
        dtype: 0,
        quant_axis: -2,
        shape: &shape,
        strides: &strides,
        format: Cow::Borrowed("I420"),
        planes: &planes,
        ..TensorFields::default()
    };
    let short = CameraFrame::builder()
        .tensor(&fields)
        .build()
        .unwrap()
        .to_cdr();
    let err = decode(&short).unwrap_err();
    assert!(err.starts_with("planes[2].data"), "{err}");
}

#[test]
fn a_message_at_an_odd_address_is_read_like_any_other() {
    let _fds = super::fds_held();
    let t = TensorDyn::from(Tensor::<f32>::new(&[4], None).unwrap())
        .with_quantization(None)
        .unwrap();
    let mut message = Vec::new();
    encode(&t, false, &stamp(), &mut message).unwrap();
    let mut shifted = vec![0u8; message.len() + 1];
    shifted[1..].copy_from_slice(&message);
    let q = Tensor::<i8>::new(&[2], None).unwrap();
    let q = TensorDyn::from(q)
        .with_quantization(Some(Quantization::per_tensor(0.5, 3)))
        .unwrap();
    let mut quantized = Vec::new();
    encode(&q, false, &stamp(), &mut quantized).unwrap();
    let mut odd = vec![0u8; quantized.len() + 3];
    odd[3..].copy_from_slice(&quantized);
    assert_eq!(decode(&shifted[1..]).unwrap().tensor.shape(), &[4]);
    let d = decode(&odd[3..]).unwrap();
    assert_eq!(d.tensor.quantization(), q.quantization());
}

#[test]
fn an_i420_frame_whose_chroma_planes_are_padded_on_their_own_round_trips_both_ways() {
    let _fds = super::fds_held();
    for memory in [TensorMemory::Mem, TensorMemory::Shm] {
        let t = TensorDyn::image(
            &ImageSpec::new(PixelFormat::I420, 1364, 8)
                .with_row_stride(1364)
                .with_chroma_stride(684),
            DType::U8,
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap();
        {
            let mut map = t.map_bytes(Direction::Write).unwrap();
            for (i, b) in map.as_bytes_mut().unwrap().iter_mut().enumerate() {
                *b = (i % 241) as u8;
            }
        }
        let d = round_trip(&t, true);
        assert_eq!(
            d.tensor.image_info().unwrap().chroma_stride,
            Some(684),
            "{memory}"
        );
        assert_eq!(bytes(&d.tensor), bytes(&t), "{memory}");
    }
}

#[test]
fn every_cut_and_every_changed_byte_of_a_message_head_is_an_answer_never_a_panic() {
    let _fds = super::fds_held();
    let before = open_fds();
    for (format, memory) in [
        (PixelFormat::I420, TensorMemory::Mem),
        (PixelFormat::Nv12, TensorMemory::Shm),
    ] {
        let t = image(format, memory);
        let mut message = Vec::new();
        encode(&t, true, &stamp(), &mut message).unwrap();
        // The head: the stamp, the scalars, shape, strides, strings and plane records (inline
        // pixels after it are data, not structure).
        let head = message.len().min(HEAD_BYTES);
        let mut refused = 0;
        for n in 0..head {
            refused += usize::from(decode(&message[..n]).is_err());
        }
        for at in 0..head {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut changed = message.clone();
                changed[at] = value;
                refused += usize::from(decode(&changed).is_err());
            }
        }
        assert!(
            refused > head,
            "{format}: a cut message must be refused ({refused})"
        );
    }
    assert!(open_fds() <= before + 2, "refused messages leaked fds");
}

/// Bytes of a message's head that the mutation test changes one by one.
const HEAD_BYTES: usize = 400;

#[test]
fn a_pid_that_is_not_the_publishers_gets_nothing_it_may_not_have() {
    let _fds = super::fds_held();
    let camera = Camera::new();
    // A live process of this user that is not the publisher, its fds 0 to 2 on /dev/null.
    let null = std::process::Stdio::null;
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .stdin(null())
        .stdout(null())
        .stderr(null())
        .spawn()
        .unwrap();
    let before = open_fds();
    let message = camera.message(|f, p| {
        f.pid = other.id();
        p.iter_mut().for_each(|p| p.handle = 0);
    });
    let err = decode(&message).unwrap_err();
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        err.starts_with("planes") && err.contains("character device"),
        "{err}"
    );
    assert_eq!(
        open_fds(),
        before,
        "the other process's fd stayed open here"
    );
}

#[test]
fn the_schema_crates_camera_frame_comes_back_from_our_encoder_with_the_same_fields() {
    let _fds = super::fds_held();
    let camera = Camera::new();
    let theirs = camera.message(|_, _| {});
    let d = decode(&theirs).unwrap();
    let mut ours = Vec::new();
    let stamp = Stamp {
        seq: 3,
        time_ns: 0,
        frame_id: "front",
    };
    assert_eq!(
        encode(&d.tensor, true, &stamp, &mut ours),
        Ok(Schema::CameraFrame)
    );
    let (a, b) = (
        CameraFrame::from_cdr(theirs.as_slice()).unwrap(),
        CameraFrame::from_cdr(ours.as_slice()).unwrap(),
    );
    let (ta, tb) = (a.tensor(), b.tensor());
    assert_eq!((b.seq(), b.frame_id()), (a.seq(), a.frame_id()));
    assert_eq!(
        (
            tb.format(),
            tb.dtype(),
            tb.storage_kind(),
            tb.pid(),
            tb.fence_fd()
        ),
        (
            ta.format(),
            ta.dtype(),
            ta.storage_kind(),
            ta.pid(),
            ta.fence_fd()
        )
    );
    assert_eq!(
        tb.shape().collect::<Vec<_>>(),
        ta.shape().collect::<Vec<_>>()
    );
    assert_eq!(
        tb.strides().collect::<Vec<_>>(),
        ta.strides().collect::<Vec<_>>()
    );
    assert_eq!(
        [
            tb.color_space(),
            tb.color_transfer(),
            tb.color_encoding(),
            tb.color_range()
        ],
        [
            ta.color_space(),
            ta.color_transfer(),
            ta.color_encoding(),
            ta.color_range()
        ]
    );
    // The same planes of the same memory: our fd number differs (it is our own copy).
    let plane = |p: TensorPlaneView<'_>| (p.offset, p.stride, p.size, p.used, p.modifier);
    assert_eq!(
        tb.planes().map(plane).collect::<Vec<_>>(),
        ta.planes().map(plane).collect::<Vec<_>>()
    );
    assert_eq!(
        decode(&ours).unwrap().tensor.identity(),
        d.tensor.identity()
    );
}
