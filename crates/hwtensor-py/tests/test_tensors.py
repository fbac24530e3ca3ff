import os

import numpy as np
import pytest

import hwtensor


def test_a_plain_tensor_describes_itself_in_numpy_terms():
    t = hwtensor.Tensor((4, 6), "float32", memory="mem")
    assert t.shape == (4, 6)
    assert t.dtype == "float32"
    assert t.strides == (24, 4)
    assert t.memory == "mem"
    assert t.format is None and t.row_stride is None
    assert t.identity[0] == "heap"
    assert "float32" in repr(t)


def test_dtype_names_are_numpys_or_hwtensors():
    assert hwtensor.Tensor((2,), "f16").dtype == "float16"
    assert hwtensor.Tensor((2,), "int64").dtype == "int64"


def test_an_image_has_its_format_planes_and_row_stride():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("nv12", 64, 32), memory="shm")
    assert t.format == "nv12"
    assert (t.width, t.height) == (64, 32)
    assert t.plane_table == [(0, 64, 32, 2048), (2048, 64, 16, 1024)]
    assert t.identity[0] == "file"


def test_an_image_keeps_a_chosen_row_stride():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 10, 4, row_stride=64), memory="mem")
    assert t.row_stride == 64
    assert t.strides[0] == 64


def test_unknown_names_raise_invalid_argument_listing_the_known_ones():
    with pytest.raises(hwtensor.InvalidArgument, match="f32"):
        hwtensor.Tensor((2,), "complex")
    with pytest.raises(hwtensor.InvalidArgument, match="shm"):
        hwtensor.Tensor((2,), memory="vram")
    with pytest.raises(hwtensor.InvalidArgument, match="read_write"):
        hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 8, 8), access="sometimes")


def test_every_exception_is_an_hwtensor_error():
    for cls in (
        hwtensor.InvalidArgument,
        hwtensor.Unavailable,
        hwtensor.BusyError,
        hwtensor.AccessError,
        hwtensor.HandoffError,
        hwtensor.TimeoutError,
        hwtensor.GpuError,
        hwtensor.CudaError,
    ):
        assert issubclass(cls, hwtensor.Error)


def test_a_view_shares_its_parents_buffer():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 8, 8), memory="mem")
    with t.map_write() as a:
        a[:] = np.arange(8 * 8 * 4, dtype=np.uint8).reshape(a.shape)
        expected = a[2:6, 1:4].copy()
    v = t.view(1, 2, 3, 4)
    assert v.shape == (4, 3, 4)
    assert v.identity == t.identity
    with v.map_read() as b:
        assert np.array_equal(b, expected)


def test_a_batch_outside_the_tensor_is_refused():
    t = hwtensor.Tensor((3, 4))
    assert t.batch(2).shape == (4,)
    with pytest.raises(hwtensor.InvalidArgument):
        t.batch(3)


def test_copy_from_copies_between_memories():
    src = hwtensor.Tensor((16,), "uint16", memory="mem")
    dst = hwtensor.Tensor((16,), "uint16", memory="shm")
    with src.map_write() as a:
        a[:] = np.arange(16)
    dst.copy_from(src)
    with dst.map_read() as b:
        assert list(b) == list(range(16))


def test_reshape_and_repoint_keep_the_buffer():
    t = hwtensor.Tensor((4, 6), "uint16", memory="mem")
    r = t.reshape((2, 12))
    assert (r.shape, r.identity) == ((2, 12), t.identity)
    nv12 = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 64, 32), memory="shm").repoint(
        width=64, height=32, format="nv12", row_stride=128
    )
    assert (nv12.format, nv12.row_stride) == ("nv12", 128)
    with pytest.raises(hwtensor.InvalidArgument):
        t.reshape((5, 5))
    with pytest.raises(hwtensor.InvalidArgument):
        t.repoint((1000,))


def test_colorimetry_is_said_once_and_travels_with_the_image():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("nv12", 64, 32), memory="shm")
    assert t.colorimetry["matrix"] == "unspecified"
    hd = t.with_colorimetry(primaries="bt709", transfer="bt709", matrix="bt709", range="limited")
    assert hd.colorimetry == {
        "primaries": "bt709",
        "transfer": "bt709",
        "matrix": "bt709",
        "range": "limited",
    }
    assert hd.identity == t.identity, "the same buffer"
    with pytest.raises(hwtensor.InvalidArgument, match="limited"):
        t.with_colorimetry(range="studio")
    assert hwtensor.Tensor((4,)).colorimetry is None


def test_np_asarray_of_a_tensor_is_a_type_error_naming_the_ways_in():
    t = hwtensor.Tensor((4,), "uint8", memory="mem")
    with pytest.raises(TypeError, match=r"map_read\(\)"):
        np.asarray(t)


def test_hwtensors_timeout_is_also_the_builtin_one():
    import builtins
    import socket

    assert issubclass(hwtensor.TimeoutError, builtins.TimeoutError)
    assert issubclass(hwtensor.TimeoutError, hwtensor.Error)
    ours, theirs = socket.socketpair()
    try:
        hwtensor.recv(theirs, timeout=0.01)
    except TimeoutError as e:  # the builtin name, as code written for any library says it
        assert isinstance(e, hwtensor.TimeoutError)
        assert "within" in str(e)
    else:
        raise AssertionError("a receive with nothing sent returned")


def test_the_formats_cameras_and_decoders_produce_have_their_planes():
    i420 = hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 64, 32), memory="shm")
    assert i420.plane_table == [(0, 64, 32, 2048), (2048, 32, 16, 512), (2560, 32, 16, 512)]
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("yv12", 64, 32)).plane_table == i420.plane_table
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("nv21", 64, 32)).plane_table[1] == (2048, 64, 16, 1024)
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("bgr", 8, 2)).shape == (2, 8, 3)
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("bgrx", 8, 2)).shape == (2, 8, 4)
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("uyvy", 8, 2)).shape == (2, 8, 2)
    p010 = hwtensor.Tensor.image(hwtensor.ImageSpec("p010", 64, 32), dtype="uint16")
    assert p010.plane_table == [(0, 128, 32, 4096), (4096, 128, 16, 2048)]
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("gray16_le", 8, 2), dtype="u16").format == "gray16"


def test_an_i420_image_keeps_gstreamers_chroma_stride():
    # GStreamer's default I420 at 1364 pixels pads the chroma rows to 684 bytes (not 682).
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 1364, 8, row_stride=1364, chroma_stride=684), memory="mem")
    assert t.chroma_stride == 684
    assert [p[1] for p in t.plane_table] == [1364, 684, 684]
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 64, 32)).chroma_stride == 32
    assert hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 64, 32)).chroma_stride is None
    with pytest.raises(hwtensor.Error, match="row_stride"):
        hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 64, 8, chroma_stride=40))


def test_an_fd_that_is_no_sync_file_is_refused_as_a_fence():
    t = hwtensor.Tensor([64], memory="shm")
    ev = os.eventfd(1)
    try:
        with pytest.raises(hwtensor.HandoffError, match="sync_file"):
            t.with_sync_file(ev)
    finally:
        os.close(ev)


def test_a_sixteen_bit_format_over_bytes_is_refused_naming_the_dtype():
    with pytest.raises(hwtensor.Error, match="u16"):
        hwtensor.Tensor.image(hwtensor.ImageSpec("p010", 64, 32), dtype="uint8")


def test_an_i420_frame_copies_between_memories_plane_for_plane():
    src = hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 64, 32), memory="mem")
    with src.map_write() as a:
        a[:] = np.arange(a.size, dtype=np.uint32).reshape(a.shape) % 251
    dst = hwtensor.Tensor.image(hwtensor.ImageSpec("i420", 64, 32), memory="shm")
    dst.copy_from(src)
    with src.map_read() as a, dst.map_read() as b:
        assert (a == b).all()


def test_a_dtype_may_be_a_numpy_type_or_dtype_and_a_negative_shape_is_the_librarys_error():
    for dtype in (np.float32, np.dtype("float32"), "float32", np.zeros(1, np.float32).dtype):
        assert hwtensor.Tensor((2, 3), dtype=dtype).dtype == "float32"
    assert hwtensor.Tensor((4,)).dtype == "uint8"
    with pytest.raises(hwtensor.InvalidArgument, match="not -3"):
        hwtensor.Tensor((2, -3))
    with pytest.raises(hwtensor.Error):
        hwtensor.Tensor((2,), dtype=object())


def test_one_image_spec_carries_strides_colours_and_a_modifier_to_every_constructor():
    bt709 = {"primaries": "bt709", "transfer": "bt709", "matrix": "bt709", "range": "limited"}
    spec = hwtensor.ImageSpec("nv12", 64, 32, row_stride=128, colorimetry=bt709)
    assert (spec.format, spec.width, spec.height, spec.row_stride) == ("nv12", 64, 32, 128)
    t = hwtensor.Tensor.image(spec, memory="shm")
    assert t.row_stride == 128 and t.colorimetry == bt709
    with pytest.raises(hwtensor.InvalidArgument, match="primaries, transfer, matrix, range"):
        hwtensor.ImageSpec("nv12", 64, 32, colorimetry={"gamma": "2.2"})
    tiled = hwtensor.ImageSpec("nv12", 64, 32, drm_modifier=0x0100000000000001)
    with pytest.raises(hwtensor.Error, match="linear"):
        hwtensor.Tensor.image(tiled, memory="mem")
    fd = t.clone_fd()
    try:
        imported = hwtensor.Tensor.image_from_fd(fd, tiled)
    finally:
        os.close(fd)
    assert imported.drm_modifier == 0x0100000000000001
    with pytest.raises(hwtensor.InvalidArgument, match="DRM format modifier is 0x0100000000000001"):
        with imported.map_read():
            pass
