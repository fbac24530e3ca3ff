"""GPU frames into PyTorch across processes: torch.multiprocessing beside the hwtensor channel,
measured the same way in one run (issue #27).

    python crates/hwtensor-py/bench_ipc.py                 # on a CUDA machine with PyTorch
    python crates/hwtensor-py/bench_ipc.py --self-test     # anywhere: the harness on shm frames

Each contender runs a producer and a consumer process. Per frame the producer writes one
element on the GPU (`x[0, 0, 0] = v`) and stamps the time; the consumer reads one element on the
GPU (`.item()`), stamps the time, and acknowledges; the producer stamps the acknowledgement. Both
processes read `CLOCK_MONOTONIC` (`time.monotonic_ns`), one clock for every process, so
`received - sent` is the one-way latency and `acknowledged - sent` the round trip. Contenders
run in alternating blocks, so a machine that gets busier part-way through costs them alike.

Contenders:
- `tm-simplequeue`: `torch.multiprocessing.SimpleQueue` carrying the CUDA tensor each frame;
- `tm-queue`: `torch.multiprocessing.Queue`, the same tensors each frame (torch caches their IPC
  handles);
- `hwtensor-gpu` / `hwtensor-cuda`: the pooled channel with `gpu` / `cuda` frames, seen by torch
  through `torch.from_dlpack` on both sides;
- `hwtensor-gpu-kept`: as `hwtensor-gpu`, but the consumer makes its torch views of the pool once
  and reads the one of each frame's slot (the issue asks that it be no slower than re-exporting);
- `hwtensor-gpu-torch`: as `hwtensor-gpu`, the consumer's view made by `Tensor.torch()`;
- `hwtensor-shm` (`--self-test` only): the channel with shm frames and NumPy, no GPU.
"""

import argparse
import multiprocessing
import socket
import sys
import time

#: Frames in the pool (and in flight at most), as in the issue's measurement.
POOL = 3
#: Frame sizes: (name, height, width, channels) of u8 frames.
SIZES = {"1080p": (1080, 1920, 4), "4k": (2160, 3840, 4)}
#: How long a consumer waits for one frame before the run counts as broken.
FRAME_WAIT_S = 10.0

#: Per hwtensor contender, the CPU waits on a timeline its two processes made over all its
#: frames: [pending, slept] (see `GpuDevice.cpu_waits`); the issue asks for 0 slept.
CPU_WAITS = {}


def cpu_waits():
    """This process's (pending, slept) CPU waits on a timeline; (0, 0) without a GPU device."""
    import hwtensor

    try:
        return hwtensor.gpu.device().cpu_waits()
    except hwtensor.Error:
        return (0, 0)


def _since(before):
    now = cpu_waits()
    return (now[0] - before[0], now[1] - before[1])


def percentile(samples, q):
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `samples`: a value that occurred."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def summary(samples_ns):
    """Median and p99 in microseconds, and the count."""
    return {
        "n": len(samples_ns),
        "median_us": percentile(samples_ns, 50) / 1000,
        "p99_us": percentile(samples_ns, 99) / 1000,
    }


#: Frames each block runs first and leaves out of its samples: a block's first frame waits for
#: its consumer process to start and make its CUDA context (seconds). One such frame per block
#: was the whole p99 of a run of 4 blocks of 75 frames (3.7 s, H100, 2026-12-06).
WARM_UP = 3


def alternate(contenders, blocks, per_block, warm_up=WARM_UP):
    """Runs each contender's `run(frames)` in turn, `blocks` times, each block `warm_up` frames
    longer than `per_block`; returns, per name, the one-way and round-trip samples of all its
    blocks, each block's first `warm_up` frames left out."""
    results = {name: ([], []) for name in contenders}
    for _ in range(blocks):
        for name, run in contenders.items():
            one_way, round_trip = run(per_block + warm_up)
            results[name][0].extend(one_way[warm_up:])
            results[name][1].extend(round_trip[warm_up:])
    return results


# -- the hwtensor channel -------------------------------------------------------------------


#: How a consumer sees a frame: NumPy through a CPU map, torch through `torch.from_dlpack` or
#: `Tensor.torch()` per frame, or torch views of the pool made once and picked by the frame's slot.
CONSUMER_VIEWS = ("numpy", "from_dlpack", "torch", "kept")


def _hwtensor_consumer(sock, acks, frames, view, out):
    import hwtensor

    consumer = hwtensor.Consumer(sock)
    kept = None
    if view == "kept":
        import torch

        kept = [torch.from_dlpack(t) for t in consumer.pool]
    received = []
    waits = cpu_waits()
    for _ in range(frames):
        with consumer.recv(timeout=FRAME_WAIT_S) as frame:
            if kept is not None:
                value = kept[frame.slot][0, 0, 0].item()
            elif view == "from_dlpack":
                import torch

                value = torch.from_dlpack(frame.tensor)[0, 0, 0].item()
            elif view == "torch":
                value = frame.tensor.torch()[0, 0, 0].item()
            else:
                with frame.tensor.map_read() as a:
                    value = int(a[0, 0, 0])
            received.append(time.monotonic_ns())
            acks.send(bytes([value & 0xFF]))  # on a socket of its own: the channel's
            # carries the channel's own wake-ups
    out.put((received, _since(waits)))


def hwtensor_contender(name, memory, shape, view):
    """The channel with `memory` frames; the consumer sees them as `view` says (one of
    `CONSUMER_VIEWS`). Its processes' CPU waits add up in `CPU_WAITS[name]`."""
    if view not in CONSUMER_VIEWS:
        raise ValueError(f"view {view!r} is none of {CONSUMER_VIEWS}")
    use_torch = view != "numpy"

    def run(frames):
        import hwtensor

        pool = [hwtensor.Tensor(shape, memory=memory) for _ in range(POOL)]
        producer = hwtensor.Producer(pool)
        ours, theirs = socket.socketpair()
        acks, their_acks = socket.socketpair()
        # spawn, not fork: the parent holds a GPU device (and CUDA), which a fork does not
        # carry; the sockets travel to the child by multiprocessing's own fd passing.
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(
            target=_hwtensor_consumer, args=(theirs, their_acks, frames, view, out)
        )
        child.start()
        producer.attach(ours)
        views = None
        if use_torch:
            import torch

            views = [torch.from_dlpack(t) for t in pool]
        sent, acked = [], []
        waits = cpu_waits()
        for seq in range(frames):
            slot = producer.acquire(timeout=FRAME_WAIT_S)
            if views is not None:
                views[slot][0, 0, 0] = seq & 0xFF
                pool[slot].cuda_done()
            else:
                with pool[slot].map_write() as a:
                    a[0, 0, 0] = seq & 0xFF
            stamp = time.monotonic_ns()
            producer.send(slot, seq, timestamp_ns=stamp)
            sent.append(stamp)
            ack = acks.recv(1)
            if ack != bytes([seq & 0xFF]):
                raise RuntimeError(f"frame {seq}: the consumer read {ack!r}")
            acked.append(time.monotonic_ns())
        ours = _since(waits)
        received, theirs = out.get(timeout=FRAME_WAIT_S * 2)
        child.join()
        total = CPU_WAITS.setdefault(name, [0, 0])
        for i in range(2):
            total[i] += ours[i] + theirs[i]
        return _samples(sent, received, acked)

    return run


# -- torch.multiprocessing ------------------------------------------------------------------


def _torch_consumer(frames_q, acks_q, frames, out):
    received = []
    for _ in range(frames):
        x = frames_q.get()
        value = x[0, 0, 0].item()
        received.append(time.monotonic_ns())
        acks_q.put(value)
        del x
    out.put(received)


def torch_contender(queue_kind, shape):
    """torch.multiprocessing with a `SimpleQueue` or a `Queue` of CUDA tensors."""

    def run(frames):
        import torch
        import torch.multiprocessing as tm

        ctx = tm.get_context("spawn")
        make = ctx.SimpleQueue if queue_kind == "simplequeue" else ctx.Queue
        frames_q, acks_q, out = make(), make(), ctx.Queue()
        child = ctx.Process(target=_torch_consumer, args=(frames_q, acks_q, frames, out))
        child.start()
        pool = [torch.zeros(shape, dtype=torch.uint8, device="cuda") for _ in range(POOL)]
        sent, acked = [], []
        for seq in range(frames):
            x = pool[seq % POOL]
            x[0, 0, 0] = seq & 0xFF
            torch.cuda.current_stream().synchronize()  # what the consumer reads is written
            stamp = time.monotonic_ns()
            frames_q.put(x)
            sent.append(stamp)
            if acks_q.get() != seq & 0xFF:
                raise RuntimeError(f"frame {seq}: the consumer read another value")
            acked.append(time.monotonic_ns())
        received = out.get()
        child.join()
        return _samples(sent, received, acked)

    return run


def _samples(sent, received, acked):
    if not len(sent) == len(received) == len(acked):
        raise RuntimeError(f"{len(sent)} sent, {len(received)} received, {len(acked)} acked")
    one_way = [r - s for s, r in zip(sent, received)]
    round_trip = [a - s for s, a in zip(sent, acked)]
    return one_way, round_trip


# -- the run --------------------------------------------------------------------------------


def contenders_for(size, self_test):
    shape = SIZES[size]
    if self_test:
        return {"hwtensor-shm": hwtensor_contender(f"{size} hwtensor-shm", "shm", shape, "numpy")}
    import hwtensor

    found = {
        "tm-simplequeue": torch_contender("simplequeue", shape),
        "tm-queue": torch_contender("queue", shape),
        "hwtensor-gpu": hwtensor_contender(f"{size} hwtensor-gpu", "gpu", shape, "from_dlpack"),
        "hwtensor-gpu-torch": hwtensor_contender(f"{size} hwtensor-gpu-torch", "gpu", shape, "torch"),
        "hwtensor-gpu-kept": hwtensor_contender(f"{size} hwtensor-gpu-kept", "gpu", shape, "kept"),
    }
    reason = hwtensor.cuda_unavailable_reason()
    if reason is None:
        try:  # a channel lends its buffers by fd: CUDA memory must have one here
            hwtensor.Producer([hwtensor.Tensor((64,), memory="cuda")])
            found["hwtensor-cuda"] = hwtensor_contender(
                f"{size} hwtensor-cuda", "cuda", shape, "from_dlpack"
            )
        except hwtensor.Error as e:
            reason = str(e)
    if reason is not None:
        print(f"SKIPPED: hwtensor-cuda - {reason}")
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=600, help="frames per contender and size")
    p.add_argument("--blocks", type=int, default=6, help="alternating blocks")
    p.add_argument("--sizes", default="1080p,4k")
    p.add_argument("--self-test", action="store_true", help="shm frames only, no GPU needed")
    args = p.parse_args(argv)
    if args.frames < args.blocks or args.blocks < 1:
        p.error("--frames must be at least --blocks, and --blocks at least 1")
    if not args.self_test:
        import torch

        if not torch.cuda.is_available():
            sys.exit("PyTorch sees no CUDA device: run with --self-test, or on a CUDA machine")
    rows = []
    print(f"{'size':<6} {'contender':<16} {'n':>5} {'one-way median':>15} {'p99':>9} "
          f"{'round trip median':>18} {'p99':>9}", flush=True)
    # Each size's rows as soon as it is measured: a run cut short (a device call's time limit)
    # still reports the sizes it finished.
    for size in args.sizes.split(","):
        results = alternate(contenders_for(size, args.self_test), args.blocks, args.frames // args.blocks)
        for name, (one_way, round_trip) in results.items():
            ow, rt = summary(one_way), summary(round_trip)
            rows.append((size, name, ow, rt))
            print(f"{size:<6} {name:<16} {ow['n']:>5} {ow['median_us']:>12.1f} us {ow['p99_us']:>6.1f} us "
                  f"{rt['median_us']:>15.1f} us {rt['p99_us']:>6.1f} us", flush=True)
    for name, (pending, slept) in CPU_WAITS.items():
        print(f"{name}: CPU waits on a timeline, both processes: {pending} pending, {slept} slept")
    return rows


if __name__ == "__main__":
    main()
