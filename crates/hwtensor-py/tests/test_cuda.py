"""CUDA through DLPack: PyTorch (and CuPy where installed) on the H200. Skipped (printed) where
there is no CUDA; failures under HWTENSOR_TEST_REQUIRE_CUDA=1."""

import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hwtensor


def _gpu_frame(fill, memory="gpu"):
    """A GPU tensor written by Vulkan: a host tensor copied in on the GPU device."""
    host = hwtensor.Tensor((1080, 1920, 4), memory="mem")
    with host.map_write() as a:
        a[:] = fill
    t = hwtensor.Tensor((1080, 1920, 4), memory=memory)
    t.copy_from(host)
    return t


def test_torch_from_dlpack_is_hwtensors_cuda_mapping_not_a_copy(cuda):
    torch = cuda
    t = _gpu_frame(3)
    x = torch.from_dlpack(t)
    assert x.is_cuda and tuple(x.shape) == (1080, 1920, 4)
    assert x.data_ptr() == t.cuda_ptr()
    assert int(x.sum()) == 3 * 1080 * 1920 * 4, "the Vulkan copy is ordered before the read"


def test_torch_gives_the_cuda_mapping_in_one_call_ordered_on_the_current_stream(cuda):
    torch = cuda
    t = _gpu_frame(4)
    stream = torch.cuda.Stream()  # not the legacy default: the view must follow the current one
    with torch.cuda.stream(stream):
        x = t.torch()
        total = int(x.sum())  # queued on `stream`, which waited for the Vulkan copy
    assert x.is_cuda and x.dtype == torch.uint8 and tuple(x.shape) == (1080, 1920, 4)
    assert x.data_ptr() == t.cuda_ptr()
    assert total == 4 * 1080 * 1920 * 4, "the Vulkan copy is ordered before the read"
    x.fill_(6)
    t.cuda_done(torch.cuda.current_stream())
    with t.map_read() as a:
        assert int(a.min()) == 6 == int(a.max()), "the view writes the tensor's own memory"


def test_the_cuda_array_interface_names_the_mapping_and_orders_the_last_write(cuda):
    torch = cuda
    t = _gpu_frame(5)
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == 1  # the legacy default stream waits
    assert cai["typestr"] == "|u1" and cai["shape"] == (1080, 1920, 4)
    assert cai["strides"] == t.strides and cai["data"] == (t.cuda_ptr(), False)
    x = torch.as_tensor(t, device="cuda")  # torch reads the interface: no copy
    assert x.data_ptr() == t.cuda_ptr()
    assert int(x.sum()) == 5 * 1080 * 1920 * 4, "the Vulkan copy is ordered before the read"
    f = hwtensor.Tensor((4, 8), "float32", memory="cuda")
    assert f.__cuda_array_interface__["typestr"] == "<f4"
    try:
        import cupy
    except ImportError:
        return
    assert int(cupy.asarray(t).sum()) == 5 * 1080 * 1920 * 4


def test_the_exchange_api_exports_a_gpu_tensor_at_its_cuda_mapping(cuda):
    import ctypes

    from test_dlpack import _ManagedHead, _exchange_api

    t = _gpu_frame(9)
    export = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        _exchange_api().managed_tensor_from_py_object_no_sync
    )
    out = ctypes.c_void_p()
    assert export(t, ctypes.byref(out)) == 0 and out.value
    head = _ManagedHead.from_address(out.value)
    assert head.device_type == 2 and head.data == t.cuda_ptr()  # kDLCUDA, no copy
    head.deleter(out.value)
    # The legacy default stream waits for the Vulkan write: a read queued there sees it.
    torch = cuda
    x = torch.from_dlpack(t)
    assert int(x.sum()) == 9 * 1080 * 1920 * 4


def test_a_torch_kernels_write_is_seen_by_hwtensor_after_cuda_done(cuda):
    torch = cuda
    t = _gpu_frame(0)
    stream = torch.cuda.Stream()  # a stream of our own: DLPack forbids naming stream 0
    with torch.cuda.stream(stream):
        # A raw capsule (legacy kind: what torch takes from a capsule), ordered on our stream.
        x = torch.from_dlpack(t.__dlpack__(stream=stream.cuda_stream))
        x.fill_(7)
    t.cuda_done(stream)  # a torch.cuda.Stream object: its handle is read from it
    with t.map_read() as a:  # a CPU map waits for the timeline value cuda_done signalled
        assert int(a.min()) == 7 == int(a.max())


def test_a_read_ended_by_cuda_read_done_holds_off_a_cpu_write_until_it_is_done(cuda):
    torch = cuda
    t = _gpu_frame(3)
    x = t.torch()
    torch.cuda._sleep(100_000_000)  # ~50 ms of GPU clock: the read below is still queued
    total = x.sum()
    before = hwtensor.gpu.device().last_signalled
    t.cuda_read_done(torch.cuda.current_stream())  # an event, no timeline value
    assert hwtensor.gpu.device().last_signalled == before
    with t.map_write() as a:  # waits for the event: the sum reads the 3s, not these 0s
        a[:] = 0
    assert int(total) == 3 * 1080 * 1920 * 4


def test_cuda_memory_tensors_export_natively_and_round_trip(cuda):
    torch = cuda
    t = hwtensor.Tensor((256, 256), "float32", memory="cuda")
    x = torch.from_dlpack(t)
    x.copy_(torch.arange(256, dtype=torch.float32, device="cuda").expand(256, 256))
    t.cuda_done(torch.cuda.current_stream())
    with t.map_read() as a:
        assert np.array_equal(a[5], np.arange(256, dtype=np.float32))


def test_the_per_thread_default_stream_is_accepted(cuda):
    torch = cuda
    t = _gpu_frame(1)
    x = torch.utils.dlpack.from_dlpack(t.__dlpack__(stream=2))
    torch.cuda.synchronize()
    assert int(x[0, 0, 0]) == 1


def test_cupy_from_dlpack_shares_the_same_memory(cuda, request):
    try:
        import cupy
    except ImportError:
        print(f"SKIPPED: {request.node.name} - no CuPy")
        pytest.skip("no CuPy")
    t = _gpu_frame(2)
    y = cupy.from_dlpack(t)
    assert y.data.ptr == t.cuda_ptr()
    assert int(y.sum()) == 2 * 1080 * 1920 * 4


CHILD = textwrap.dedent(
    """
    import socket, sys
    import torch
    import hwtensor
    sock = socket.socket(fileno=int(sys.argv[1]))
    t = hwtensor.recv(sock, timeout=20)
    x = torch.from_dlpack(t)
    sock.sendall(f"{int(x.sum())} {x.is_cuda} {x.data_ptr() == t.cuda_ptr()}".encode())
    """
)


def test_a_python_process_receives_a_vulkan_frame_as_a_torch_cuda_tensor(cuda):
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(theirs.fileno())], pass_fds=[theirs.fileno()]
    )
    theirs.close()
    t = _gpu_frame(5)
    hwtensor.send(ours, t)
    ours.settimeout(60)
    answer = ours.recv(256).decode()
    assert child.wait(timeout=60) == 0
    assert answer == f"{5 * 1080 * 1920 * 4} True True"


def test_a_torch_cuda_tensor_wraps_as_cuda_memory_that_maps_and_copies(cuda):
    torch = cuda
    x = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    x.mul_(3)  # queued on torch's stream: the wrap must order behind it
    t = hwtensor.from_dlpack(x)
    assert (t.memory, t.shape, t.dtype) == ("cuda", (1 << 20,), "int32")
    assert t.cuda_ptr() == x.data_ptr(), "no copy"
    with t.map_read() as a:
        assert int(a[12345]) == 3 * 12345
    g = hwtensor.Tensor((1 << 20,), "int32", memory="gpu")
    g.copy_from(t)  # on CUDA's copy engine, into Vulkan memory
    with g.map_read() as b:
        assert int(b[-1]) == 3 * ((1 << 20) - 1)
    ours, theirs = socket.socketpair()
    with pytest.raises(hwtensor.Unavailable, match="(?i)inline"):
        hwtensor.send(ours, t)
    # Its bytes travel instead: 4 MiB, more than the socket holds, so the receiver runs on
    # its own thread (a send into an unread socket waits for the reader).
    got = []
    reader = threading.Thread(target=lambda: got.append(hwtensor.recv(theirs, timeout=30)))
    reader.start()
    hwtensor.send(ours, t, inline=True)
    reader.join(timeout=60)
    with got[0].map_read() as c:
        assert int(c[7]) == 21
