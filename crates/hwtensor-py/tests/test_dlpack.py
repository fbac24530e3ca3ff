import ctypes

import numpy as np
import pytest

import hwtensor

_is_capsule = ctypes.pythonapi.PyCapsule_IsValid
_is_capsule.restype = ctypes.c_int
_is_capsule.argtypes = [ctypes.py_object, ctypes.c_char_p]


def test_numpy_from_dlpack_shares_the_tensors_memory():
    t = hwtensor.Tensor((8, 8), "int32", memory="shm")
    x = np.from_dlpack(t)
    with t.map_write() as a:
        a[:] = 5
        assert a.ctypes.data == x.ctypes.data
    assert x.dtype == np.int32 and x.shape == (8, 8)
    assert int(x.sum()) == 5 * 64


def test_the_capsule_kind_follows_the_consumers_max_version():
    t = hwtensor.Tensor((4,))
    assert _is_capsule(t.__dlpack__(max_version=(1, 0)), b"dltensor_versioned")
    assert _is_capsule(t.__dlpack__(), b"dltensor")
    assert t.__dlpack_device__() == (1, 0)


def test_strides_are_exported_in_elements_for_a_padded_image():
    t = hwtensor.Tensor.image(10, 4, "rgba", dtype="uint16", memory="mem", row_stride=96)
    x = np.from_dlpack(t)
    assert x.strides == (96, 8, 2)


def test_a_copy_or_another_device_is_refused_not_faked():
    t = hwtensor.Tensor((4,))
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))


def test_the_capsule_keeps_the_buffer_alive_after_the_tensor_is_gone():
    t = hwtensor.Tensor((1024,), "uint8", memory="mem")
    with t.map_write() as a:
        a[:] = 42
    x = np.from_dlpack(t)
    del t, a
    assert int(x.sum()) == 42 * 1024


def test_a_read_only_tensor_exports_a_read_only_array():
    t = hwtensor.Tensor.image(4, 4, "rgba", memory="mem", access="read")
    x = np.from_dlpack(t)
    assert not x.flags.writeable


def test_a_stream_argument_that_names_no_stream_is_refused_by_name():
    t = hwtensor.Tensor((4,))
    with pytest.raises(BufferError, match="cuda_stream"):
        t.cuda_done(object())
    with pytest.raises(BufferError, match="-5"):
        t.cuda_done(-5)
