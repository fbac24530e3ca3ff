"""A Python consumer of `hwtensor demo`'s frames, over the pooled channel.

Run by the demo's producer:

    hwtensor demo --frames 100 --consumer "python examples/python/consumer.py"
    hwtensor demo --gpu --frames 100 --consumer "python examples/python/consumer.py --torch"

Each 1080p RGBA frame is read without a copy (as a NumPy array over shared memory, or, with
`--torch` on a CUDA machine, as a PyTorch CUDA tensor over the GPU frame), every pixel is
verified against the producer's pattern, and an acknowledgement is written over the same
pixels before the frame is handed back: the producer checks it in its own buffer.
"""

import argparse
import socket
import sys
import time

import numpy as np

import hwtensor

# The demo's pattern: pixel i of frame f is the little-endian u32 (f * SPREAD) ^ i; the
# acknowledgement is its bitwise complement.
SPREAD = 0x9E3779B1
WAIT_S = 10.0


def seed(frame):
    return (frame * SPREAD) & 0xFFFFFFFF


def check_with_numpy(t, frame, index):
    """Verifies and acknowledges through a CPU map (no copy for shared memory)."""
    with t.map_read_write() as a:
        px = a.view(np.uint32)[..., 0]
        expected = np.uint32(seed(frame)) ^ index
        bad = np.flatnonzero(px != expected)
        if bad.size:
            raise SystemExit(f"frame {frame}: pixel {bad[0]} is not what the producer wrote")
        px[...] = ~expected


def check_with_torch(torch, t, frame, index):
    """Verifies and acknowledges on the GPU: the frame as a PyTorch CUDA tensor (DLPack)."""
    stream = torch.cuda.current_stream()
    x = torch.from_dlpack(t)  # waits on `stream` for the producer's upload, GPU-side
    px = x.view(torch.int32)[..., 0].to(torch.int64) & 0xFFFFFFFF
    expected = index ^ seed(frame)
    if not torch.equal(px, expected):
        bad = int(torch.nonzero(px != expected)[0][0])
        raise SystemExit(f"frame {frame}: row {bad} is not what the producer wrote")
    ack = (~expected) & 0xFFFFFFFF
    x.view(torch.int32)[..., 0] = (ack - ((ack >> 31) << 32)).to(torch.int32)
    t.cuda_done(stream)  # the producer's next use waits for our kernels


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True, help="the producer's abstract socket name")
    p.add_argument("--gpu", action="store_true", help="GPU frames (given by the producer)")
    p.add_argument("--cuda", action="store_true", help="(accepted; --torch reads on CUDA)")
    p.add_argument("--torch", action="store_true", help="read GPU frames as PyTorch tensors")
    args = p.parse_args()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + args.socket)
    consumer = hwtensor.Consumer(sock, write=True)  # it writes its acknowledgement
    torch = None
    if args.torch:
        import torch
    shape = consumer.pool[0].shape
    index = np.arange(shape[0] * shape[1], dtype=np.uint32).reshape(shape[:2])
    if torch is not None:
        index = torch.arange(shape[0] * shape[1], device="cuda").reshape(shape[:2])
    ages = []
    while True:
        try:
            frame = consumer.recv(timeout=WAIT_S)
        except hwtensor.PeerGone:  # the producer left: the end of the stream
            break
        with frame:
            ages.append(time.monotonic_ns() - frame.timestamp_ns)
            if torch is not None:
                check_with_torch(torch, frame.tensor, frame.seq, index)
            else:
                check_with_numpy(frame.tensor, frame.seq, index)
    ages.sort()
    how = "as PyTorch CUDA tensors" if torch is not None else "as NumPy arrays"
    median = ages[len(ages) // 2] / 1000 if ages else 0.0
    print(
        f"python consumer: {len(ages)} frame(s) read {how}, every pixel verified; "
        f"frame age at receipt median {median:.1f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
