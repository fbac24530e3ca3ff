"""A consumer as a program of its own: connects to the producer at ADDRESS (default
@hwtensor-example-py), receives 30 frames and checks every byte of each is its number, reading
each as a NumPy array over the shared memory itself.
"""

import sys
import time

import numpy as np

import hwtensor

FRAMES = 30


def connect(address, tries=100):
    for _ in range(tries - 1):
        try:
            return hwtensor.Consumer.connect(address)
        except hwtensor.HandoffError:  # not listening yet
            time.sleep(0.1)
    return hwtensor.Consumer.connect(address)


def main(address="@hwtensor-example-py"):
    consumer = connect(address)
    wrong = 0
    for _ in range(FRAMES):
        with consumer.recv(timeout=10) as frame:
            with frame.tensor.map_read() as a:
                wrong += int(np.count_nonzero(a != (frame.seq & 0xFF)))
    print(f"consumer: {FRAMES} frames from {address}, {wrong} wrong bytes")
    sys.exit(wrong != 0)


if __name__ == "__main__":
    main(*sys.argv[1:2])
