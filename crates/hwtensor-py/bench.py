"""Python-side benchmarks of hwtensor, medians of repeated runs, side by side in one run:

    python crates/hwtensor-py/bench.py

- a NumPy view of a mapped 1080p shm tensor (map + array + end), against NumPy's own
  `np.frombuffer` of a bytearray of the same size (the floor for making an array);
- a write map of a 1080p and a 4K RGBA shm tensor that writes one byte (map + array + write +
  end), median and p99, against a read map of the same tensor;
- `torch.from_dlpack` of a GPU tensor after its first import (where PyTorch and CUDA are),
  against `torch.from_dlpack` of a PyTorch CUDA tensor's own capsule;
- a cross-process hand-off over the pooled channel of 1080p frames to a Python consumer and
  to a Rust consumer of the same channel (`hwtensor bench-peer`, what `hwtensor bench` runs),
  one frame in flight, the consumer blocking between frames.
"""

import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

import hwtensor

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHAPE = (1080, 1920, 4)
REPEAT = 2000


def median_us(fn, repeat=REPEAT):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000


def numpy_view():
    t = hwtensor.Tensor(SHAPE, memory="shm")
    raw = bytearray(t.nbytes)

    def ours():
        with t.map_read() as a:
            a.shape

    def floor():
        np.frombuffer(raw, dtype=np.uint8).reshape(SHAPE)

    a, b = median_us(ours), median_us(floor)
    print(f"numpy view of a mapped 1080p shm tensor: {a:.2f} us (np.frombuffer: {b:.2f} us, {a / b:.1f}x)")


def p99_us(fn, repeat=REPEAT):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return statistics.median(times) / 1000, times[int(len(times) * 0.99)] / 1000


def write_maps():
    for name, shape in (("1080p", SHAPE), ("4K", (2160, 3840, 4))):
        t = hwtensor.Tensor(shape, memory="shm")

        def write():
            with t.map_write() as a:
                a[0, 0, 0] = 1

        def read():
            with t.map_read() as a:
                a[0, 0, 0]

        (w50, w99), (r50, r99) = p99_us(write), p99_us(read)
        print(
            f"write map of a {name} RGBA shm tensor, one byte written: {w50:.1f} us median, "
            f"{w99:.1f} us p99 (a read map: {r50:.1f} / {r99:.1f} us)"
        )


def torch_dlpack():
    if hwtensor.cuda_unavailable_reason() is not None:
        print(f"torch.from_dlpack: skipped ({hwtensor.cuda_unavailable_reason()})")
        return
    import inspect

    import torch
    import torch.utils.dlpack

    t = hwtensor.Tensor(SHAPE, memory="gpu")
    torch.from_dlpack(t)  # the first import
    own = torch.zeros(SHAPE, dtype=torch.uint8, device="cuda")
    a = median_us(lambda: torch.from_dlpack(t), 500)
    b = median_us(lambda: torch.from_dlpack(own), 500)
    print(f"torch.from_dlpack of a GPU tensor (imported): {a:.2f} us (of a torch tensor: {b:.2f} us)")
    # Where torch.from_dlpack's time goes: each step it takes, alone.
    steps = {
        "__dlpack_device__": lambda: t.__dlpack_device__(),
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        "__dlpack__(stream=1)": lambda: t.__dlpack__(stream=1, max_version=(1, 0)),
        "__dlpack__ + torch._C._from_dlpack": lambda: torch._C._from_dlpack(
            t.__dlpack__(stream=1, max_version=(1, 0))
        ),
        "torch: own __dlpack__ + _from_dlpack": lambda: torch._C._from_dlpack(own.__dlpack__()),
        "torch.as_tensor (CUDA Array Interface)": lambda: torch.as_tensor(t, device="cuda"),
    }
    if hasattr(t, "torch"):
        steps["Tensor.torch()"] = t.torch
    for name, fn in steps.items():
        print(f"  {name}: {median_us(fn, 500):.2f} us")
    source = inspect.getsource(torch.utils.dlpack.from_dlpack)
    print(f"  torch {torch.__version__}: from_dlpack reads the C exchange API: {'exchange_api' in source}")


CONSUMER = """
import socket, sys, time, hwtensor
sock = socket.socket(fileno=int(sys.argv[1]))
c = hwtensor.Consumer(sock)
ages = []
for _ in range(int(sys.argv[2])):
    f = c.recv(timeout=10)
    ages.append(time.monotonic_ns() - f.timestamp_ns)
    f.release()
ages.sort()
print(ages[len(ages) // 2])
"""


def handoff(frames=2000):
    pool = [hwtensor.Tensor(SHAPE, memory="shm") for _ in range(3)]
    results = {}
    cli = os.environ.get("HWTENSOR_CLI", str(ROOT / "target" / "release" / "hwtensor"))
    for who in ("python", "rust"):
        producer = hwtensor.Producer(pool)
        ours, theirs = socket.socketpair()
        if who == "python":
            cmd = [sys.executable, "-c", CONSUMER, str(theirs.fileno()), str(frames)]
        else:
            cmd = [cli, "bench-peer", "--fd", str(theirs.fileno()), "--frames", str(frames)]
        child = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, text=True)
        theirs.close()
        producer.attach(ours)
        for seq in range(frames):
            slot = producer.acquire(timeout=10)
            producer.send(slot, seq, timestamp_ns=time.monotonic_ns())
            time.sleep(0.0002)  # paced: one frame in flight, the consumer asleep between
        del producer
        out, _ = child.communicate(timeout=60)
        results[who] = float(out.split()[0]) / 1000  # the median, ns -> us
    p, r = results["python"], results["rust"]
    print(f"channel hand-off of 1080p frames, frame age at receipt: python consumer {p:.2f} us, rust consumer {r:.2f} us ({p / r:.2f}x)")


if __name__ == "__main__":
    numpy_view()
    write_maps()
    torch_dlpack()
    handoff()
