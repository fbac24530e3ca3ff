import numpy as np
import pytest

import hwtensor


def test_a_write_map_gives_a_writable_array_over_the_tensor():
    t = hwtensor.Tensor((1080, 1920, 4), memory="shm")
    m = t.map_write()
    with m as a:
        assert a.flags.writeable and a.shape == (1080, 1920, 4)
        # No copy: the array's address is the map's.
        assert a.ctypes.data == m.__array_interface__["data"][0]
        a[...] = 7
    with t.map_read() as b:
        assert not b.flags.writeable
        assert int(b.sum()) == 7 * 1080 * 1920 * 4


def test_a_write_map_excludes_every_other_map_until_its_block_ends():
    t = hwtensor.Tensor((64,))
    with t.map_write():
        with pytest.raises(hwtensor.BusyError):
            with t.map_read():
                pass
    with t.map_read() as a:
        assert a.shape == (64,)


def test_an_array_kept_after_its_block_is_read_only_and_still_readable():
    t = hwtensor.Tensor((16,), memory="mem")
    with t.map_write() as a:
        a[:] = 3
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1
    assert int(a.sum()) == 48
    # The map has ended: a new write map is free to start.
    with t.map_write() as again:
        again[0] = 9


def test_an_ended_map_cannot_start_again():
    t = hwtensor.Tensor((4,))
    m = t.map_read()
    with m:
        pass
    with pytest.raises(BufferError, match="ended"):
        with m:
            pass


def test_a_tensor_declared_read_only_refuses_a_write_map():
    t = hwtensor.Tensor.image(4, 4, "rgba", memory="mem", access="read")
    with pytest.raises(hwtensor.AccessError):
        with t.map_write():
            pass


def test_a_gpu_tensor_maps_through_its_own_copy_and_round_trips(gpu):
    t = hwtensor.Tensor((256, 256), "float32", memory="gpu")
    with t.map_write() as a:
        a[:] = np.arange(256, dtype=np.float32)
    with t.map_read() as b:
        assert np.array_equal(b[3], np.arange(256, dtype=np.float32))
