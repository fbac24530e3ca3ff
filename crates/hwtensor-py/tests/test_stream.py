import os
import pathlib
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import hwtensor

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _channel(memory="shm", slots=2):
    pool = [hwtensor.Tensor((64, 64, 4), memory=memory) for _ in range(slots)]
    producer = hwtensor.Producer(pool)
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    return producer, hwtensor.Consumer(theirs)


@pytest.mark.parametrize("memory", ["shm", "dmabuf"], indirect=True)
def test_frames_cross_the_channel_as_ids_over_the_same_buffers(memory):
    producer, consumer = _channel(memory)
    for seq in range(5):
        slot = producer.acquire(timeout=5)
        with producer.tensor(slot).map_write() as a:
            a[:] = seq
        producer.send(slot, seq, timestamp_ns=1000 + seq, payload=b"meta")
        with consumer.recv(timeout=5) as frame:
            assert (frame.seq, frame.timestamp_ns, frame.payload) == (seq, 1000 + seq, b"meta")
            assert frame.tensor.identity == producer.tensor(frame.slot).identity
            with frame.tensor.map_read() as b:
                assert int(b.max()) == seq == int(b.min())


def test_a_consumer_attaches_on_a_socket_with_a_python_timeout_before_the_producer_sends():
    import threading
    import time

    pool = [hwtensor.Tensor((64,), memory="shm") for _ in range(2)]
    producer = hwtensor.Producer(pool)
    ours, theirs = socket.socketpair()
    theirs.settimeout(5.0)  # Python makes the fd non-blocking

    def attach_later():
        time.sleep(0.05)
        producer.attach(ours)

    t = threading.Thread(target=attach_later)
    t.start()
    consumer = hwtensor.Consumer(theirs)
    t.join()
    assert len(consumer.pool) == 2


def test_a_producer_that_sends_nothing_is_a_connect_timeout():
    _ours, theirs = socket.socketpair()
    with pytest.raises(hwtensor.TimeoutError):
        hwtensor.Consumer(theirs, timeout=0.1)


def test_a_consumer_waits_no_longer_than_its_timeout():
    _producer, consumer = _channel()
    with pytest.raises(hwtensor.TimeoutError):
        consumer.recv(timeout=0.05)


def test_a_producer_that_leaves_ends_the_consumers_receive():
    producer, consumer = _channel()
    del producer
    with pytest.raises(hwtensor.PeerGone, match="producer left"):
        consumer.recv(timeout=5)


def test_a_producer_that_leaves_is_seen_though_the_caller_keeps_its_socket():
    pool = [hwtensor.Tensor((64,), memory="shm")]
    producer = hwtensor.Producer(pool)
    ours, theirs = socket.socketpair()
    producer.attach(ours)  # `ours` stays open in this scope
    consumer = hwtensor.Consumer(theirs)
    del producer
    with pytest.raises(hwtensor.PeerGone):
        consumer.recv(timeout=5)
    ours.close()


def test_a_frame_handed_back_cannot_be_read_again():
    producer, consumer = _channel()
    producer.send(producer.acquire(), 0)
    frame = consumer.recv(timeout=5)
    frame.release()
    with pytest.raises(hwtensor.InvalidArgument, match="handed back"):
        frame.tensor
    assert producer.acquire(timeout=5) in (0, 1)


def test_a_producer_refuses_a_slot_outside_its_pool():
    producer, _consumer = _channel()
    with pytest.raises(hwtensor.InvalidArgument, match="slot 7"):
        producer.send(7, 0)


@pytest.mark.parametrize("gpu_frames", [False, True])
def test_the_demo_producer_feeds_the_python_example_consumer(gpu_frames, request):
    cli = pathlib.Path(os.environ.get("HWTENSOR_CLI", ROOT / "target" / "debug" / "hwtensor"))
    if not cli.exists():
        pytest.fail(f"the hwtensor CLI is not built at {cli} (cargo build -p hwtensor-cli)")
    if gpu_frames:
        request.getfixturevalue("gpu")
    consumer = f"{sys.executable} {ROOT / 'examples' / 'python' / 'consumer.py'}"
    args = [str(cli), "demo", "--frames", "6", "--consumer", consumer]
    if gpu_frames:
        args.append("--gpu")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "python consumer: 6 frame(s)" in done.stdout
    assert "every acknowledgement verified" in done.stdout


def test_a_buffer_added_after_attach_reaches_the_consumer_by_its_own_slot():
    pool = [hwtensor.Tensor((64, 64, 4), memory="shm") for _ in range(2)]
    producer = hwtensor.Producer(pool, room=3)
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    consumer = hwtensor.Consumer(theirs)
    extra = hwtensor.Tensor((64, 64, 4), memory="shm")
    slot = producer.add(extra)
    assert slot == 2
    producer.acquire_slot(slot, timeout=5)
    with producer.tensor(slot).map_write() as a:
        a[:] = 42
    producer.send(slot, 0)
    with consumer.recv(timeout=5) as frame:
        assert frame.slot == 2
        assert frame.tensor.identity == extra.identity
        with frame.tensor.map_read() as b:
            assert int(b.min()) == 42 == int(b.max())
    with pytest.raises(hwtensor.Error, match="room"):
        producer.add(hwtensor.Tensor((64, 64, 4), memory="shm"))


def test_a_reading_consumer_cannot_write_and_a_writer_must_be_granted():
    pool = [hwtensor.Tensor((4096,), memory="shm") for _ in range(2)]
    producer = hwtensor.Producer(pool)
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    with pytest.raises(hwtensor.NotPermittedError, match="write=True"):
        hwtensor.Consumer(theirs, write=True)
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    reader = hwtensor.Consumer(theirs)
    assert not reader.writable
    slot = producer.acquire(timeout=5)
    with producer.tensor(slot).map_write() as a:
        a[:] = 7
    producer.send(slot, 0)
    with reader.recv(timeout=5) as frame:
        with pytest.raises(hwtensor.AccessError):
            with frame.tensor.map_write():
                pass
        with frame.tensor.map_read() as a:
            assert int(a[0]) == 7
    producer.admit(write=True)
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    assert hwtensor.Consumer(theirs, write=True).writable
    assert producer.refused == 0


def test_a_listener_and_an_address_connect_two_ends_and_a_huge_timeout_waits():
    name = f"@hwtensor-py-listener-{os.getpid()}"
    listener = hwtensor.Listener(name)
    assert listener.address == name
    producer = hwtensor.Producer([hwtensor.Tensor((64,), memory="shm")])
    assert producer.accept(listener, timeout=0.05) is False
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("c", hwtensor.Consumer.connect(name, timeout=1e300)))
    t.start()
    assert producer.accept(listener, timeout=5)
    t.join()
    slot = producer.acquire(timeout=float("inf"))
    producer.send(slot, 3)
    with box["c"].recv(timeout=float("inf")) as frame:
        assert frame.seq == 3


def test_a_consumer_reads_the_stream_description_the_producer_set():
    producer = hwtensor.Producer([hwtensor.Tensor((64,), memory="shm")])
    producer.set_stream_info(b"video/x-raw, framerate=(fraction)30/1")
    ours, theirs = socket.socketpair()
    producer.attach(ours)
    assert hwtensor.Consumer(theirs).stream_info == b"video/x-raw, framerate=(fraction)30/1"
    with pytest.raises(hwtensor.InvalidArgument, match="4096"):
        producer.set_stream_info(b"x" * 4097)


def test_a_marker_travels_with_a_frame_and_an_unknown_kind_is_refused():
    producer, consumer = _channel()
    slot = producer.acquire(timeout=5)
    eos = hwtensor.Marker("end_of_stream", pts_ns=40_000_000)
    producer.send(slot, 7, marker=eos)
    with consumer.recv(timeout=5) as frame:
        assert frame.marker() == eos
        assert (frame.marker().kind, frame.marker().duration_ns) == ("end_of_stream", None)
        assert frame.payload == eos.encode() and len(frame.payload) == 24
    assert hwtensor.Marker.decode(b"").kind == "frame"
    with pytest.raises(hwtensor.HandoffError, match="kind 9"):
        hwtensor.Marker.decode(bytes([9]) + bytes(23))
    with pytest.raises(hwtensor.InvalidArgument, match="end_of_stream"):
        hwtensor.Marker("eos")
    slot = producer.acquire(timeout=5)
    with pytest.raises(hwtensor.InvalidArgument, match="not both"):
        producer.send(slot, 8, payload=b"x", marker=eos)
