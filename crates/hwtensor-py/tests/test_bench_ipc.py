"""bench_ipc.py cannot rot: its statistics are pinned, and its harness runs end to end on shm
frames (the GPU contenders need PyTorch with CUDA and run on the GPU machine)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import bench_ipc  # noqa: E402


def test_percentiles_are_nearest_rank_values_that_occurred():
    samples = list(range(1, 101))  # 1..100
    assert bench_ipc.percentile(samples, 50) == 50
    assert bench_ipc.percentile(samples, 99) == 99
    assert bench_ipc.percentile(samples, 100) == 100
    assert bench_ipc.percentile([7], 99) == 7
    assert bench_ipc.percentile([5, 1, 3], 50) == 3
    with pytest.raises(ValueError):
        bench_ipc.percentile([], 50)
    with pytest.raises(ValueError):
        bench_ipc.percentile([1], 0)
    s = bench_ipc.summary([1000, 2000, 3000])
    assert s == {"n": 3, "median_us": 2.0, "p99_us": 3.0}


def test_contenders_run_in_alternating_blocks():
    order = []

    def contender(name):
        def run(frames):
            order.append(name)
            return [frames] * frames, [2 * frames] * frames

        return run

    results = bench_ipc.alternate({"a": contender("a"), "b": contender("b")}, 3, 2, warm_up=0)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert results["a"] == ([2] * 6, [4] * 6)


def test_each_blocks_warm_up_frames_run_but_are_left_out_of_the_samples():
    def run(frames):
        # The first frame of a block pays its consumer's start-up.
        one_way = [1_000_000] + [frames] * (frames - 1)
        return one_way, [2 * f for f in one_way]

    results = bench_ipc.alternate({"a": run}, 2, 4, warm_up=1)
    assert results["a"] == ([5] * 8, [10] * 8)


def test_the_harness_measures_the_channel_across_processes_end_to_end():
    rows = bench_ipc.main(["--self-test", "--frames", "12", "--blocks", "3", "--sizes", "1080p"])
    [(size, name, one_way, round_trip)] = rows
    assert (size, name, one_way["n"], round_trip["n"]) == ("1080p", "hwtensor-shm", 12, 12)
    assert 0 < one_way["median_us"] <= round_trip["median_us"]


def test_a_contender_with_a_view_of_no_known_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="'dlpack'.*from_dlpack"):
        bench_ipc.hwtensor_contender("x", "gpu", (4, 4, 4), "dlpack")
