"""Shared helpers: hardware tests print `SKIPPED: <test> - <reason>` where they cannot run,
and fail instead under HWTENSOR_TEST_REQUIRE_GPU=1 / HWTENSOR_TEST_REQUIRE_CUDA=1 /
HWTENSOR_TEST_REQUIRE_DMABUF=1."""

import os

import pytest

import hwtensor


def _skip_or_fail(request, env, reason):
    name = request.node.name
    if os.environ.get(env) == "1":
        pytest.fail(f"{name}: {reason} (and {env}=1)")
    print(f"SKIPPED: {name} - {reason}")
    pytest.skip(reason)


@pytest.fixture
def gpu(request):
    """The process GPU device, or a skip (a failure under HWTENSOR_TEST_REQUIRE_GPU=1)."""
    try:
        return hwtensor.gpu.device()
    except hwtensor.Error as e:
        _skip_or_fail(request, "HWTENSOR_TEST_REQUIRE_GPU", f"no GPU device: {e}")


@pytest.fixture
def cuda(request, gpu):
    """PyTorch with CUDA on the process device, or a skip (a failure under
    HWTENSOR_TEST_REQUIRE_CUDA=1)."""
    reason = hwtensor.cuda_unavailable_reason()
    if reason is not None:
        _skip_or_fail(request, "HWTENSOR_TEST_REQUIRE_CUDA", f"no CUDA: {reason}")
    try:
        import torch
    except ImportError:
        _skip_or_fail(request, "HWTENSOR_TEST_REQUIRE_CUDA", "no PyTorch")
    if not torch.cuda.is_available():
        _skip_or_fail(request, "HWTENSOR_TEST_REQUIRE_CUDA", "PyTorch sees no CUDA device")
    return torch


@pytest.fixture
def dmabuf(request):
    """A dma-heap to allocate DMA-BUF tensors from (`scripts/dma-vm` has one), or a skip (a
    failure under HWTENSOR_TEST_REQUIRE_DMABUF=1)."""
    try:
        hwtensor.Tensor((1,), memory="dmabuf")
    except hwtensor.Error as e:
        _skip_or_fail(request, "HWTENSOR_TEST_REQUIRE_DMABUF", f"no DMA-BUF: {e}")


@pytest.fixture
def memory(request):
    """The memory a test is parametrized over (`indirect=True`): "gpu" and "dmabuf" need their
    hardware, and skip (or fail) as the fixtures of those names do."""
    if request.param in ("gpu", "dmabuf"):
        request.getfixturevalue(request.param)
    return request.param
