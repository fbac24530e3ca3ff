import asyncio
import ctypes
import os
import pathlib
import subprocess
import sys

import pytest

import hwtensor


def test_signal_then_wait_completes(gpu):
    v = gpu.signal()
    gpu.wait(v, timeout=5)
    assert gpu.completed_value >= v
    assert gpu.last_signalled >= v


def test_a_gpu_error_says_its_kind_without_its_message_being_parsed():
    # A process whose adapter choice matches nothing: the device fails as "unsupported" on
    # every machine, with or without a GPU (a fresh process: the device is made once).
    code = (
        "import hwtensor\n"
        "try:\n"
        "    hwtensor.gpu.device()\n"
        "except hwtensor.GpuError as e:\n"
        "    print(e.kind)\n"
    )
    env = dict(os.environ, HWTENSOR_GPU_ADAPTER="no-adapter-is-called-this")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "unsupported"


def test_a_value_never_allocated_is_refused_not_waited_for(gpu):
    with pytest.raises(hwtensor.InvalidArgument):
        gpu.completion_fd(gpu.last_signalled + 10**9)
    with pytest.raises(hwtensor.InvalidArgument):
        gpu.wait(1, timeout=-1)


def test_a_completion_fd_wakes_an_asyncio_loop(gpu):
    value = gpu.signal()
    fd = gpu.completion_fd(value)

    async def wait_readable():
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(fd, ready.set_result, True)
        try:
            return await asyncio.wait_for(ready, 5)
        finally:
            loop.remove_reader(fd)

    try:
        assert asyncio.run(wait_readable())
    finally:
        os.close(fd)


def _c_library():
    path = os.environ.get("HWTENSOR_CAPI_LIB")
    if path is None:
        root = pathlib.Path(__file__).resolve().parents[3]
        path = root / "target" / "debug" / "libhwtensor_capi.so"
    return ctypes.CDLL(str(path))


def test_the_c_library_loaded_beside_it_shares_one_device_and_timeline(gpu):
    lib = _c_library()
    value = ctypes.c_uint64()
    assert lib.hwt_gpu_signal(ctypes.byref(value)) == 0
    assert gpu.last_signalled >= value.value, "the C copy's signal is on our timeline"
    ours = gpu.signal()
    assert ours > value.value
    assert lib.hwt_gpu_last_signalled(ctypes.byref(value)) == 0
    assert value.value >= ours
    uuid = (ctypes.c_uint8 * 16)()
    assert lib.hwt_gpu_device_uuid(ctypes.byref(uuid)) == 0
    assert bytes(uuid) == bytes(gpu.uuid)
