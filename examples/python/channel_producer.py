"""A producer as a program of its own: lends a pool of three 640x480 RGBA shared-memory frames
to the consumer that connects to ADDRESS (default @hwtensor-example-py), then sends 30 frames,
each filled with its number. Only processes of this user attach (``producer.admit`` widens it),
and they read only. Run channel_consumer.py beside it.
"""

import sys

import hwtensor

FRAMES = 30


def main(address="@hwtensor-example-py"):
    pool = [hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 640, 480), memory="shm") for _ in range(3)]
    producer = hwtensor.Producer(pool)
    listener = hwtensor.Listener(address)
    if not producer.accept(listener, timeout=10):
        sys.exit("producer: no consumer connected within 10 s")
    for seq in range(FRAMES):
        slot = producer.acquire(timeout=10)
        with producer.tensor(slot).map_write() as a:
            a[...] = seq
        producer.send(slot, seq)
    for _ in range(3):  # stays until the consumer handed every frame back
        producer.release(producer.acquire(timeout=10))
    print(f"producer: sent {FRAMES} frames to {address}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
