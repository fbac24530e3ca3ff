"""The README's first Python program: a frame in shared memory, written through NumPy, handed
to a child process over a Unix socket and read there, without a copy.

    pip install ./crates/hwtensor-py numpy && python examples/python/quickstart_numpy.py
"""

import os
import socket

import hwtensor

frame = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 640, 480), memory="shm")
with frame.map_write() as px:  # a NumPy array over the shared memory itself
    px[:] = 42

parent, child = socket.socketpair()
pid = os.fork()
if pid == 0:  # the consumer: its own import of the same buffer
    parent.close()
    received = hwtensor.recv(child, timeout=10)
    with received.map_read() as px:
        os._exit(0 if (px == 42).all() else 1)
child.close()
hwtensor.send(parent, frame)
_, status = os.waitpid(pid, 0)
ok = os.waitstatus_to_exitcode(status) == 0
print("the consumer saw the producer's pixels:", ok)
raise SystemExit(0 if ok else 1)
