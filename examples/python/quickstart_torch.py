"""PyTorch over hwtensor memory, without a copy: a tensor in shared memory seen by torch through
DLPack, and, where CUDA is, a GPU tensor seen by torch on the device, ordered on the stream.

    pip install ./crates/hwtensor-py torch && python examples/python/quickstart_torch.py
"""

import sys

import hwtensor

try:
    import torch
except ImportError:
    print("SKIPPED: quickstart_torch - PyTorch is not installed")
    raise SystemExit(0)

# CPU: shared memory another process could map too.
t = hwtensor.Tensor([2, 3], dtype="float32", memory="shm")
view = torch.from_dlpack(t)  # torch's tensor over hwtensor's buffer
view.fill_(1.5)
with t.map_read() as a:
    assert (a == 1.5).all(), "torch wrote into a different buffer"
print("torch and hwtensor share one CPU buffer:", view.sum().item() == 9.0)

# GPU: where PyTorch has CUDA and hwtensor a GPU device on the same card.
reason = hwtensor.cuda_unavailable_reason()
if reason is not None or not torch.cuda.is_available():
    print(f"SKIPPED: quickstart_torch GPU half - {reason or 'PyTorch sees no CUDA device'}")
    sys.exit(0)
g = hwtensor.Tensor([1080, 1920, 4], dtype="uint8", memory="gpu")
cuda_view = torch.from_dlpack(g)  # on the current stream, after hwtensor's last write
assert g.torch().data_ptr() == cuda_view.data_ptr()  # the same view in one cheaper call
cuda_view.fill_(7)
g.cuda_done(torch.cuda.current_stream())  # hwtensor's next use follows torch's write
with g.map_read() as a:
    assert (a == 7).all(), "the GPU tensor does not hold what torch wrote"
print("torch and hwtensor share one GPU buffer:", True)
