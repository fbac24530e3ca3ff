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
    with t.map_read() as r:  # read maps of host memory are the tensor's own bytes
        assert r.ctypes.data == x.ctypes.data
    assert x.dtype == np.int32 and x.shape == (8, 8)
    assert int(x.sum()) == 5 * 64


def test_the_capsule_kind_follows_the_consumers_max_version():
    # Heap memory named: where a dma-heap exists the default is a DMA-BUF (below).
    t = hwtensor.Tensor((4,), memory="mem")
    assert _is_capsule(t.__dlpack__(max_version=(1, 0)), b"dltensor_versioned")
    assert _is_capsule(t.__dlpack__(), b"dltensor")
    assert t.__dlpack_device__() == (1, 0)


def test_strides_are_exported_in_elements_for_a_padded_image():
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 10, 4, row_stride=96), dtype="uint16", memory="mem")
    x = np.from_dlpack(t)
    assert x.strides == (96, 8, 2)


def test_a_dmabuf_exports_read_only_and_holds_its_read_map_until_the_array_is_freed(dmabuf):
    # DLPack has no begin and end of CPU access, which a DMA-BUF needs (DMA_BUF_IOCTL_SYNC):
    # the capsule holds a read map for as long as the consumer keeps the array.
    t = hwtensor.Tensor((4096,), "uint8", memory="dmabuf")
    with t.map_write() as a:
        a[:] = 7
    x = np.from_dlpack(t)
    assert not x.flags.writeable and int(x.sum()) == 7 * 4096
    with pytest.raises(hwtensor.BusyError):
        with t.map_write():
            pass
    with t.map_read() as r:  # readers share
        assert int(r[0]) == 7
    del x
    with t.map_write() as a:  # the array's map ended with it
        a[:] = 1
    with pytest.raises(BufferError, match="legacy"):
        t.__dlpack__()  # a legacy capsule carries no read-only flag


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
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 4, 4), memory="mem", access="read")
    x = np.from_dlpack(t)
    assert not x.flags.writeable


def test_a_stream_argument_that_names_no_stream_is_refused_by_name():
    t = hwtensor.Tensor((4,))
    with pytest.raises(BufferError, match="cuda_stream"):
        t.cuda_done(object())
    with pytest.raises(BufferError, match="-5"):
        t.cuda_done(-5)
    with pytest.raises(BufferError, match="cuda_stream"):
        t.cuda_read_done(object())


def test_from_dlpack_wraps_a_numpy_array_without_a_copy():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = hwtensor.from_dlpack(x)
    assert (t.shape, t.dtype, t.strides, t.memory) == ((3, 4), "float32", (16, 4), "mem")
    assert t.identity == ("heap", x.ctypes.data)
    with t.map_write() as a:
        a[0, 0] = 42
    assert x[0, 0] == 42, "the write went to the array's own memory"


def test_a_wrapped_array_lives_as_long_as_its_tensor():
    x = np.full((1080, 1920, 4), 3, dtype=np.uint8)
    t = hwtensor.from_dlpack(x)
    del x
    with t.map_read() as a:
        assert int(a[-1, -1, -1]) == 3


def test_a_strided_numpy_view_keeps_its_strides():
    x = np.arange(64, dtype=np.int16).reshape(8, 8)[::2, 1:5]
    t = hwtensor.from_dlpack(x)
    assert t.strides == x.strides
    with t.map_read() as a:
        assert np.array_equal(a, x)


def test_a_read_only_array_wraps_as_a_read_only_tensor():
    x = np.zeros(16, dtype=np.uint8)
    x.flags.writeable = False
    t = hwtensor.from_dlpack(x)
    assert t.access == "read"
    with pytest.raises(hwtensor.AccessError):
        with t.map_write():
            pass


def test_arrays_hwtensor_cannot_wrap_are_refused_by_name():
    with pytest.raises(hwtensor.InvalidArgument, match="negative|reversed"):
        hwtensor.from_dlpack(np.arange(8, dtype=np.int32)[::-1])
    with pytest.raises(hwtensor.InvalidArgument, match="no hwtensor dtype"):
        hwtensor.from_dlpack(np.zeros(4, dtype=np.complex64))
    with pytest.raises(hwtensor.InvalidArgument, match="overlap"):
        hwtensor.from_dlpack(np.broadcast_to(np.arange(4, dtype=np.int32), (3, 4)))


def test_a_wrapped_array_travels_to_another_tensor_by_copy_from():
    x = np.arange(256, dtype=np.uint16)
    dst = hwtensor.Tensor((256,), "uint16", memory="shm")
    dst.copy_from(hwtensor.from_dlpack(x))
    with dst.map_read() as a:
        assert np.array_equal(a, x)


def test_a_pytorch_cpu_tensor_wraps_without_a_copy(request):
    try:
        import torch
    except ImportError:
        print(f"SKIPPED: {request.node.name} - no PyTorch here")
        pytest.skip("no PyTorch")
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    t = hwtensor.from_dlpack(x)
    assert (t.shape, t.dtype) == ((3, 4), "int32")
    with t.map_write() as a:
        a[2, 3] = -1
    assert int(x[2, 3]) == -1


def test_torch_views_a_host_tensor_over_its_own_memory(request):
    try:
        import torch
    except ImportError:
        print(f"SKIPPED: {request.node.name} - no PyTorch here")
        pytest.skip("no PyTorch")
    t = hwtensor.Tensor((3, 4), "int16", memory="shm")
    x = t.torch()
    assert (x.device.type, x.dtype, tuple(x.shape)) == ("cpu", torch.int16, (3, 4))
    x[1, 2] = 9
    with t.map_read() as a:
        assert int(a[1, 2]) == 9


def test_torch_without_pytorch_says_what_it_needs_and_the_other_ways_in():
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("PyTorch is installed here")
    t = hwtensor.Tensor((4,), memory="mem")
    with pytest.raises(ImportError, match="needs PyTorch.*map_read"):
        t.torch()


def test_a_raw_capsule_of_host_memory_wraps_too():
    x = np.arange(6, dtype=np.float64)
    t = hwtensor.from_dlpack(x.__dlpack__())
    with t.map_read() as a:
        assert list(a) == list(x)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _Crafted:
    """A DLPack producer of a hand-made (unversioned) capsule over `buffer`."""

    def __init__(self, buffer, byte_offset):
        self.buffer = buffer
        self.shape = (ctypes.c_int64 * 1)(8)
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = ctypes.addressof(buffer)
        t.device = _DLDevice(1, 0)  # kDLCPU
        t.ndim = 1
        t.dtype = _DLDataType(1, 8, 1)  # uint8
        t.shape = self.shape
        t.byte_offset = byte_offset

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **_kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_a_capsule_whose_byte_offset_wraps_the_address_is_refused():
    buffer = (ctypes.c_uint8 * 64)()
    # The producers outlive the tensors: a capsule's managed tensor is read again when the
    # tensor lets it go (these capsules name no deleter).
    producers = [_Crafted(buffer, offset) for offset in (8, 2**64 - 8, 2**64 - 1, 2**63)]
    good = hwtensor.from_dlpack(producers[0])
    with good.map_read() as a:
        assert a.shape == (8,)
    for hostile in producers[1:]:
        with pytest.raises(hwtensor.InvalidArgument, match="address space"):
            hwtensor.from_dlpack(hostile)
    del good


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ExchangeApi(ctypes.Structure):
    """DLPack 1.3's DLPackExchangeAPI: its header, then five function pointers."""

    _fields_ = [
        ("version", _Version),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


class _ManagedHead(ctypes.Structure):
    """The start of DLManagedTensorVersioned: version, context, deleter, flags, data, device."""

    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("flags", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
    ]


def _exchange_api():
    capsule = type(hwtensor.Tensor((1,), memory="mem")).__dlpack_c_exchange_api__
    assert _is_capsule(capsule, b"dlpack_exchange_api") == 1
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return _ExchangeApi.from_address(pointer(capsule, b"dlpack_exchange_api"))


def test_the_tensor_type_carries_dlpacks_c_exchange_api_of_version_1_3():
    table = _exchange_api()
    assert (table.version.major, table.version.minor) == (1, 3)
    assert table.managed_tensor_from_py_object_no_sync and table.current_work_stream
    assert not table.dltensor_from_py_object_no_sync  # no borrowed views are published


def test_the_exchange_api_exports_a_host_tensor_over_its_own_memory():
    t = hwtensor.Tensor((4, 8), "float32", memory="shm")
    with t.map_write() as a:
        a[:] = 2.5
    export = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        _exchange_api().managed_tensor_from_py_object_no_sync
    )
    out = ctypes.c_void_p()
    assert export(t, ctypes.byref(out)) == 0 and out.value
    head = _ManagedHead.from_address(out.value)
    assert (head.version.major, head.device_type) == (1, 1)  # kDLCPU
    assert head.data == np.from_dlpack(t).ctypes.data  # the tensor's memory, no copy
    assert ctypes.c_float.from_address(head.data).value == 2.5
    head.deleter(out.value)


def test_host_tensors_have_no_cuda_array_interface_so_consumers_probing_for_it_pass_them_by():
    for memory in ("mem", "shm"):
        t = hwtensor.Tensor((64,), memory=memory)
        assert not hasattr(t, "__cuda_array_interface__")
        with pytest.raises(AttributeError, match=r"map_read"):
            t.__cuda_array_interface__


def test_a_tensor_without_pending_gpu_writes_exports_no_sync_file():
    assert hwtensor.Tensor((64,), memory="shm").export_sync_file() is None


def test_a_gpu_tensor_without_cuda_says_where_it_is_and_why_it_does_not_export(gpu):
    if hwtensor.cuda_unavailable_reason() is None:
        print("SKIPPED: test_a_gpu_tensor_without_cuda_says_where_it_is_and_why_it_does_not_export - CUDA is here")
        pytest.skip("CUDA is here: a GPU tensor exports as CUDA memory")
    t = hwtensor.Tensor((16,), "uint8", memory="gpu")
    assert t.__dlpack_device__() == (7, 0)  # kDLVulkan: the process device
    assert not hasattr(t, "__cuda_array_interface__")
    with pytest.raises(hwtensor.Unavailable, match=r"map_read\(\)"):
        np.from_dlpack(t)
