import os
import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hwtensor

CHILD = textwrap.dedent(
    """
    import socket, sys
    import numpy as np
    import hwtensor
    sock = socket.socket(fileno=int(sys.argv[1]))
    t = hwtensor.recv(sock, timeout=10)
    with t.map_read_write() as a:
        total = int(a.astype(np.uint64).sum())
        a[0, 0, 0] = 99
    assert (total, t.shape) == (1080 * 1920 * 4, (1080, 1920, 4)), (total, t.shape)
    # Back to the sender: the tensor carries our write's completion with it.
    hwtensor.send(sock, t)
    """
)


def _child(sock):
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(sock.fileno())], pass_fds=[sock.fileno()]
    )


@pytest.mark.parametrize("memory", ["shm", "gpu", "dmabuf"], indirect=True)
def test_a_tensor_sent_to_another_process_is_the_same_memory_there(memory):
    ours, theirs = socket.socketpair()
    child = _child(theirs)
    theirs.close()
    t = hwtensor.Tensor((1080, 1920, 4), memory=memory)
    with t.map_write() as a:
        a[:] = 1
    hwtensor.send(ours, t)
    back = hwtensor.recv(ours, timeout=30)
    assert child.wait(timeout=30) == 0
    assert back.identity == t.identity and back.memory == memory
    with back.map_read() as b:
        assert b[0, 0, 0] == 99, "the child's write is in our buffer"
        assert int(b.sum()) == 1080 * 1920 * 4 + 98


def test_recv_gives_up_after_its_timeout():
    ours, theirs = socket.socketpair()
    with pytest.raises(hwtensor.TimeoutError):
        hwtensor.recv(ours, timeout=0.05)
    theirs.settimeout(0.05)
    with pytest.raises(hwtensor.TimeoutError):
        hwtensor.recv(theirs)


def test_a_closed_socket_and_a_pipe_are_refused_by_name():
    ours, theirs = socket.socketpair()
    fd = ours.detach()
    os.close(fd)
    with pytest.raises(hwtensor.HandoffError, match=str(fd)):
        hwtensor.recv(fd, timeout=0.1)
    r, w = os.pipe()
    try:
        with pytest.raises(hwtensor.HandoffError, match="not a socket"):
            hwtensor.send(w, hwtensor.Tensor((4,)))
    finally:
        os.close(r)
        os.close(w)


def test_garbage_and_a_vanished_peer_raise_handoff_errors():
    ours, theirs = socket.socketpair()
    theirs.sendall(b"\x00garbage that is no blob")
    with pytest.raises(hwtensor.HandoffError):
        hwtensor.recv(ours, timeout=1)
    ours2, theirs2 = socket.socketpair()
    theirs2.close()
    with pytest.raises(hwtensor.HandoffError):
        hwtensor.recv(ours2, timeout=1)


def test_a_heap_tensor_travels_inline_and_refuses_a_reference():
    ours, theirs = socket.socketpair()
    t = hwtensor.Tensor((64,), "uint16", memory="mem")
    with t.map_write() as a:
        a[:] = np.arange(64)
    with pytest.raises(hwtensor.Unavailable) as refused:
        hwtensor.send(ours, t)
    # The advice names the Python call, not the Rust API.
    assert "hwtensor.send(sock, tensor, inline=True)" in str(refused.value)
    assert "Transport::" not in str(refused.value)
    hwtensor.send(ours, t, inline=True)
    got = hwtensor.recv(theirs, timeout=5)
    with got.map_read() as b:
        assert list(b) == list(range(64))


def test_a_socket_with_a_python_timeout_sends_a_large_frame_whole():
    ours, theirs = socket.socketpair()
    ours.settimeout(5)  # which makes the fd non-blocking underneath
    theirs.settimeout(5)
    t = hwtensor.Tensor((1080, 1920, 4), memory="mem")
    with t.map_write() as a:
        a[:] = 7
    got = []
    reader = threading.Thread(target=lambda: got.append(hwtensor.recv(theirs)))
    reader.start()
    hwtensor.send(ours, t, inline=True)
    reader.join(timeout=30)
    with got[0].map_read() as b:
        assert int(b[-1, -1, -1]) == 7
