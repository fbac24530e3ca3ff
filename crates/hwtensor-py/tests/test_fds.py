"""fds and blobs from Python: tensors over fds made outside hwtensor (os.memfd_create), images
at an offset and over planes, a tensor's own fd, blobs by reference and inline, quantization,
copies to another memory; and the same refusals of hostile fds and blobs as in Rust."""

import os
import socket

import numpy as np
import pytest

import hwtensor


def _memfd(size, fill=0):
    fd = os.memfd_create("test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, bytes([fill]) * size)
    return fd


def test_a_memfd_made_outside_hwtensor_is_a_tensor_over_the_same_bytes():
    fd = _memfd(4096, fill=7)
    t = hwtensor.Tensor.from_fd(fd, (16, 16), dtype="uint16", offset=1024)
    os.close(fd)  # ours was duplicated: the tensor keeps its own
    assert t.memory == "shm" and t.shape == (16, 16)
    with t.map_read() as a:
        assert (a == 0x0707).all()


def test_an_image_at_an_offset_and_an_image_over_two_planes_read_their_own_bytes():
    fd = _memfd(64 + 8 * 4 * 4, fill=0)
    os.pwrite(fd, bytes([9]) * (8 * 4 * 4), 64)
    img = hwtensor.Tensor.image_from_fd(fd, hwtensor.ImageSpec("rgba", 8, 4), offset=64)
    with img.map_read() as a:
        assert a.shape == (4, 8, 4) and (a == 9).all()
    # A decoder's NV12 in two buffers: each plane starts on a page, as a mapping needs.
    width, height = 4096, 2
    luma, chroma = _memfd(width * height, fill=1), _memfd(width * height // 2, fill=2)
    nv12 = hwtensor.Tensor.image_from_planes([(luma, 0, width), (chroma, 0, width)], hwtensor.ImageSpec("nv12", width, height))
    for f in (fd, luma, chroma):
        os.close(f)
    assert nv12.format == "nv12" and len(nv12.plane_table) == 2
    with nv12.map_read() as a:
        flat = a.reshape(-1)
        assert flat[0] == 1 and flat[width * height] == 2


def test_an_image_in_a_buffer_per_plane_is_sent_with_an_fd_per_plane_as_the_same_memory():
    width, height = 4096, 2  # each plane a whole page, as a buffer per plane needs
    luma, chroma = _memfd(width * height, fill=1), _memfd(width * height // 2, fill=2)
    nv12 = hwtensor.Tensor.image_from_planes([(luma, 0, width), (chroma, 0, width)], hwtensor.ImageSpec("nv12", width, height))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        hwtensor.send(ours, nv12)  # by reference: no copy
        got = hwtensor.recv(theirs, timeout=5)
    assert got.format == "nv12" and got.shape == nv12.shape
    with got.map_write() as a:
        flat = a.reshape(-1)
        assert flat[0] == 1 and flat[width * height] == 2
        flat[width * height + 3] = 9
    assert os.pread(chroma, 1, 3) == bytes([9])  # the sender's chroma buffer
    for f in (luma, chroma):
        os.close(f)


def test_a_tensors_fd_is_borrowed_and_its_clone_is_the_callers():
    t = hwtensor.Tensor((64,), memory="shm")
    borrowed = t.fd()
    mine = t.clone_fd()
    assert mine != borrowed
    again = hwtensor.Tensor.from_fd(mine, (64,))
    os.close(mine)
    assert again.identity == t.identity
    with pytest.raises(hwtensor.Unavailable, match="no fd"):
        hwtensor.Tensor((4,), memory="mem").fd()


def test_hostile_fds_are_refused_as_in_rust():
    r, w = os.pipe()
    with pytest.raises(hwtensor.HandoffError):  # a pipe is not memory
        hwtensor.Tensor.from_fd(r, (4,))
    with pytest.raises(hwtensor.HandoffError, match="not an fd"):
        hwtensor.Tensor.from_fd(-1, (4,))
    closed = _memfd(16)
    os.close(closed)
    with pytest.raises(hwtensor.HandoffError, match="cannot be duplicated"):
        hwtensor.Tensor.from_fd(closed, (4,))
    small = _memfd(16)
    with pytest.raises(hwtensor.Error):  # shorter than the shape
        hwtensor.Tensor.from_fd(small, (1024,))
    for f in (r, w, small):
        os.close(f)


def test_a_blob_by_reference_and_one_inline_come_back_as_the_same_tensor():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 8, 4), memory="shm")
    with t.map_write() as a:
        a[:] = 5
    data, fds = hwtensor.export_blob(t)
    assert len(fds) == 1
    back = hwtensor.import_blob(data, fds)
    for f in fds:
        os.close(f)
    assert back.identity == t.identity and back.format == "rgba"
    heap = hwtensor.Tensor((3,), "float32", memory="mem")
    data, fds = hwtensor.export_blob(heap, inline=True)
    assert fds == []
    copy = hwtensor.import_blob(data)
    assert copy.shape == (3,) and copy.dtype == "float32"


def test_a_hostile_blob_is_a_handoff_error_naming_what_is_wrong():
    with pytest.raises(hwtensor.HandoffError, match="bad blob"):
        hwtensor.import_blob(b"HWTB" + bytes(60))
    t = hwtensor.Tensor((16,), memory="shm")
    data, fds = hwtensor.export_blob(t)
    with pytest.raises(hwtensor.HandoffError):
        hwtensor.import_blob(data[:-8], fds)  # cut short
    with pytest.raises(hwtensor.HandoffError):
        hwtensor.import_blob(data, [])  # its fd missing
    for f in fds:
        os.close(f)


def test_gpu_memory_in_a_blob_from_an_unknown_sender_is_refused_in_pythons_words(gpu):
    t = hwtensor.Tensor((4096,), memory="gpu")
    data, fds = hwtensor.export_blob(t)
    with pytest.raises(hwtensor.HandoffError, match=r"hwtensor\.recv accepts it") as refused:
        hwtensor.import_blob(data, fds)
    assert "ImportPolicy" not in str(refused.value)
    for f in fds:
        os.close(f)


def test_quantization_is_set_on_a_new_tensor_over_the_same_buffer_and_travels():
    t = hwtensor.Tensor((2, 3), "int8", memory="shm")
    assert t.quantization is None
    q = t.with_quantization(0.5, 3)
    assert q.quantization == {"scale": 0.5, "zero_point": 3}
    assert q.identity == t.identity and t.quantization is None
    per = t.with_quantization(axis=1, scales=[0.1, 0.2, 0.3], zero_points=[0, 1, 2])
    assert per.quantization["scales"] == pytest.approx([0.1, 0.2, 0.3])
    data, fds = hwtensor.export_blob(per)
    assert hwtensor.import_blob(data, fds).quantization["axis"] == 1
    for f in fds:
        os.close(f)
    with pytest.raises(hwtensor.AccessError, match="integer"):
        hwtensor.Tensor((2,), "float32").with_quantization(0.5, 0)  # a float tensor
    with pytest.raises(hwtensor.InvalidArgument, match="per tensor"):
        t.with_quantization()


def test_to_memory_copies_into_the_memory_asked_for():
    t = hwtensor.Tensor((8,), "uint16", memory="mem")
    with t.map_write() as a:
        a[:] = np.arange(8)
    s = t.to_memory("shm")
    assert s.memory == "shm" and s.identity != t.identity
    with s.map_read() as a:
        assert list(a) == list(range(8))


X_TILED = 0x0100000000000001  # I915_FORMAT_MOD_X_TILED of drm_fourcc.h


def test_a_tiled_frame_is_carried_and_refused_where_read_as_rows():
    linear = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 16, 8), memory="shm")
    assert linear.drm_modifier == 0
    tiled = linear.with_drm_modifier(X_TILED)
    assert tiled.drm_modifier == X_TILED and tiled.access == "none"
    with pytest.raises(hwtensor.InvalidArgument, match="DRM format modifier .*Intel"):
        with tiled.map_read():
            pass
    data, fds = hwtensor.export_blob(tiled)
    back = hwtensor.import_blob(data, fds)
    for f in fds:
        os.close(f)
    assert back.drm_modifier == X_TILED
    with pytest.raises(hwtensor.InvalidArgument):
        hwtensor.Tensor((4,), memory="mem").with_drm_modifier(X_TILED)  # not an image
