"""A Python consumer of a channel that GStreamer's hwtensorsink feeds (crates/hwtensor-gst).

Runs where the plugin is built and gst-launch-1.0 is installed: scripts/test sets
HWTENSOR_GST_PLUGIN_DIR, and then a missing piece is a failure, not a skip."""

import os
import pathlib
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

import hwtensor

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def plugin_dir(request):
    required = os.environ.get("HWTENSOR_GST_PLUGIN_DIR")
    found = pathlib.Path(required or ROOT / "target" / "debug")
    missing = None
    if shutil.which("gst-launch-1.0") is None:
        missing = "gst-launch-1.0 is not installed"
    elif not (found / "libgsthwtensor.so").exists():
        missing = f"no libgsthwtensor.so in {found} (cargo build -p hwtensor-gst)"
    if missing and required:
        pytest.fail(missing)
    if missing:
        print(f"SKIPPED: {request.node.name} - {missing}")
        pytest.skip(missing)
    return found


def _connect(name, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\0" + name)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _reference(plugin_dir, caps, frames):
    out = subprocess.run(
        ["gst-launch-1.0", "-q", "videotestsrc", f"num-buffers={frames}", "pattern=ball", "!", caps,
         "!", "fdsink", "fd=1"],
        capture_output=True, check=True, timeout=60,
    )
    return out.stdout


def test_a_python_consumer_reads_every_frame_hwtensorsink_publishes(plugin_dir):
    name = f"hwtensor-py-gst-{os.getpid()}"
    caps = "video/x-raw,format=I420,width=320,height=240"
    frames = 6
    env = dict(os.environ, GST_PLUGIN_PATH=str(plugin_dir))
    producer = subprocess.Popen(
        ["gst-launch-1.0", "-q", "videotestsrc", f"num-buffers={frames}", "pattern=ball", "!", caps,
         "!", "hwtensorsink", f"socket=@{name}", "wait-for-consumer=true"],
        env=env, stderr=subprocess.PIPE,
    )
    try:
        consumer = hwtensor.Consumer(_connect(name), timeout=10.0)
        got = []
        while True:
            with consumer.recv(timeout=20) as frame:
                marker = frame.marker()
                if marker.kind == "end_of_stream":
                    break
                assert marker.kind == "frame"
                assert marker.pts_ns is not None, "the buffer's PTS travels"
                t = frame.tensor
                assert (t.format, t.width, t.height) == ("i420", 320, 240)
                with t.map_read() as px:
                    got.append(np.asarray(px).tobytes())
        assert producer.wait(timeout=30) == 0, producer.stderr.read()
    finally:
        if producer.poll() is None:
            producer.kill()
    assert b"".join(got) == _reference(plugin_dir, caps, frames)
