"""Where do the ~140 us CUDA stalls of issue #27 come from? A probe, not a benchmark.

    PYTHONPATH=/tmp/site python3 scripts/gpu-probes/cuda_stalls.py [--frames 300]

A producer process and a consumer process move 1080p u8 frames through the hwtensor channel
as bench_ipc.py does, but each variant leaves out or changes one ingredient, and each side
times its own steps with `time.perf_counter_ns` (host time of the call): the producer's
one-element write (`x[0, 0, 0] = v`), its `cuda_done`, the consumer's `torch.from_dlpack`, its
`.item()`. Printed: per variant, the median of every step, over the frames after a warm-up.

Variants (P = producer, C = consumer):
- `both`: what bench_ipc.py does: P writes and calls cuda_done (a semaphore wait and signal
  on its stream), C calls from_dlpack per frame (the same on its stream) and reads;
- `p-order`: only P orders (C took its views once, at the start);
- `c-order`: only C orders (P writes, no cuda_done);
- `c-signal`: P orders; C keeps views and, after its read, calls cuda_done: since CUDA maps
  queue no wait for a completed value, C's stream then only signals (is the signal the stall,
  or the wait?);
- `none`: nobody orders per frame (the bytes are still CUDA-imported Vulkan memory);
- `c-idle`: P orders, C never touches the GPU (acknowledges only): is a second process's
  CUDA use part of it?
- `c-event`: as `c-signal`, but C ends its read by recording a CUDA event (torch's) instead of
  `cuda_done`: does any consumer GPU op after the read cost the producer, or only the
  external-semaphore signal? (Stop 43 measured `c-signal`'s P write at 265 us, `both` at 21.)
- `c-signal-sync`: as `c-signal`, C then waits for its stream (`torch.cuda.synchronize`) before
  it hands the frame back: is it the signal still in flight, or the signal at all?
- `c-read-done`: as `c-signal`, C ends its read with `cuda_read_done()` (hwtensor records a
  CUDA event; the hand-back waits for it): the fix for `c-signal`, to be as cheap as `c-event`;
- `p-sync`: P writes and waits on the CPU (`torch.cuda.synchronize`), C keeps views: the
  torch.multiprocessing pattern over hwtensor memory;
- `both-cuda`: `both` over CUDA (VMM) memory instead of Vulkan memory;
- `one-process`: `both` with producer and consumer in one process.
"""

import argparse
import multiprocessing
import socket
import statistics
import time

SHAPE = (1080, 1920, 4)
POOL = 3
WARM_UP = 20
FRAME_WAIT_S = 10.0

VARIANTS = {
    # name: (memory, producer orders, consumer orders, consumer uses the GPU, producer syncs,
    #        how the consumer ends its read: None, "signal", "event", "signal-sync" or
    #        "read-done")
    "both": ("gpu", True, True, True, False, None),
    "p-order": ("gpu", True, False, True, False, None),
    "c-order": ("gpu", False, True, True, False, None),
    "c-signal": ("gpu", True, False, True, False, "signal"),
    "c-event": ("gpu", True, False, True, False, "event"),
    "c-signal-sync": ("gpu", True, False, True, False, "signal-sync"),
    "c-read-done": ("gpu", True, False, True, False, "read-done"),
    "none": ("gpu", False, False, True, False, None),
    "c-idle": ("gpu", True, False, False, False, None),
    "p-sync": ("gpu", False, False, True, True, None),
    "both-cuda": ("cuda", True, True, True, False, None),
}


def _ns(f):
    t = time.perf_counter_ns()
    r = f()
    return r, time.perf_counter_ns() - t


def _end_read(torch, frame, how):
    """Ends the consumer's read of `frame` as the variant says (see the module docs)."""
    if how == "event":
        torch.cuda.Event().record()
        return
    if how == "read-done":
        frame.tensor.cuda_read_done()
        return
    frame.tensor.cuda_done()
    if how == "signal-sync":
        torch.cuda.synchronize()


def _consumer(sock, acks, frames, order, use_gpu, end_read, out):
    import torch
    import hwtensor

    consumer = hwtensor.Consumer(sock)
    views = None if order else [torch.from_dlpack(t) for t in consumer.pool]
    steps = {"C from_dlpack": [], "C item": [], "C cuda_done": []}
    for _ in range(frames):
        with consumer.recv(timeout=FRAME_WAIT_S) as frame:
            if use_gpu:
                if order:
                    x, dt = _ns(lambda: torch.from_dlpack(frame.tensor))
                    steps["C from_dlpack"].append(dt)
                else:
                    x = views[frame.slot]
                value, dt = _ns(lambda: x[0, 0, 0].item())
                steps["C item"].append(dt)
                if end_read:
                    _, dt = _ns(lambda: _end_read(torch, frame, end_read))
                    steps["C cuda_done"].append(dt)
            else:
                value = frame.seq
            acks.send(bytes([value & 0xFF]))
    out.put(steps)


def run_variant(name, frames):
    import torch
    import hwtensor

    memory, p_order, c_order, c_gpu, p_sync, c_end_read = VARIANTS[name]
    pool = [hwtensor.Tensor(SHAPE, memory=memory) for _ in range(POOL)]
    producer = hwtensor.Producer(pool)
    ours, theirs = socket.socketpair()
    acks, their_acks = socket.socketpair()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    args = (theirs, their_acks, frames, c_order, c_gpu, c_end_read, out)
    child = ctx.Process(target=_consumer, args=args)
    child.start()
    producer.attach(ours)
    views = [torch.from_dlpack(t) for t in pool]
    steps = {"P write": [], "P cuda_done": [], "P sync": [], "one-way": []}
    for seq in range(frames):
        slot = producer.acquire(timeout=FRAME_WAIT_S)
        _, dt = _ns(lambda: views[slot].__setitem__((0, 0, 0), seq & 0xFF))
        steps["P write"].append(dt)
        if p_order:
            _, dt = _ns(lambda: pool[slot].cuda_done())
            steps["P cuda_done"].append(dt)
        if p_sync:
            _, dt = _ns(torch.cuda.synchronize)
            steps["P sync"].append(dt)
        sent = time.perf_counter_ns()
        producer.send(slot, seq)
        acks.recv(1)
        steps["one-way"].append(time.perf_counter_ns() - sent)
    steps.update(out.get(timeout=FRAME_WAIT_S * 2))
    child.join()
    return steps


def run_one_process(frames):
    import torch
    import hwtensor

    pool = [hwtensor.Tensor(SHAPE, memory="gpu") for _ in range(POOL)]
    views = [torch.from_dlpack(t) for t in pool]
    steps = {"P write": [], "P cuda_done": [], "C from_dlpack": [], "C item": []}
    for seq in range(frames):
        slot = seq % POOL
        _, dt = _ns(lambda: views[slot].__setitem__((0, 0, 0), seq & 0xFF))
        steps["P write"].append(dt)
        _, dt = _ns(lambda: pool[slot].cuda_done())
        steps["P cuda_done"].append(dt)
        x, dt = _ns(lambda: torch.from_dlpack(pool[slot]))
        steps["C from_dlpack"].append(dt)
        _, dt = _ns(lambda: x[0, 0, 0].item())
        steps["C item"].append(dt)
    return steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--variants", default=",".join([*VARIANTS, "one-process"]))
    args = p.parse_args()
    columns = [
        "P write", "P cuda_done", "P sync", "C from_dlpack", "C item", "C cuda_done", "one-way"
    ]
    print(f"{'variant':<12}" + "".join(f"{c:>15}" for c in columns) + "   (medians, us)")
    for name in args.variants.split(","):
        try:
            steps = run_one_process(args.frames) if name == "one-process" else run_variant(name, args.frames)
        except Exception as e:  # a variant this machine cannot run says why; the rest go on
            print(f"{name:<12} failed: {type(e).__name__}: {e}", flush=True)
            continue
        cells = []
        for c in columns:
            s = steps.get(c, [])[WARM_UP:]
            cells.append(f"{statistics.median(s) / 1000:>15.1f}" if s else f"{'-':>15}")
        print(f"{name:<12}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
