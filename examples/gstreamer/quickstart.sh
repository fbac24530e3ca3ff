#!/bin/bash
# The README's GStreamer snippet: one gst-launch-1.0 publishes test video on a hwtensor channel,
# another receives it with hwtensorsrc, as two processes. Here with a bounded number of frames,
# checked on arrival. Usage: examples/gstreamer/quickstart.sh [PLUGIN_DIR] (default: the
# workspace's target/debug, built by cargo build -p hwtensor-gst).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The plugin alone in a folder of its own: GStreamer loads every library in GST_PLUGIN_PATH,
# and target/ also holds the Python extension, which it would try as a plugin (a warning).
plugins="$PWD/target/gst-plugins"
mkdir -p "$plugins"
ln -sf "${1:-$PWD/target/debug}/libgsthwtensor.so" "$plugins/libgsthwtensor.so"
export GST_PLUGIN_PATH="$plugins"
frames=30
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# The producer: videotestsrc writes straight into the channel's buffers (hwtensorsink's pool).
gst-launch-1.0 -q videotestsrc num-buffers=$frames ! video/x-raw,format=I420,width=640,height=480 \
  ! hwtensorsink socket=@hwtensor-quickstart wait-for-consumer=true &
producer=$!
# The consumer, in another process: each buffer is the frame's own shared memory.
gst-launch-1.0 -q hwtensorsrc socket=@hwtensor-quickstart ! filesink location="$out"
wait $producer

want=$((640 * 480 * 3 / 2 * frames))
got=$(stat -c %s "$out")
[ "$got" -eq "$want" ] || { echo "the consumer wrote $got bytes, not $want"; exit 1; }
echo "$frames I420 frames crossed from one gst-launch-1.0 to another"
