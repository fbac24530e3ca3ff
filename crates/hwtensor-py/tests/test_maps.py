import numpy as np
import pytest

import hwtensor


def test_a_write_map_gives_a_writable_array_whose_bytes_reach_the_tensor_at_the_end():
    t = hwtensor.Tensor((1080, 1920, 4), memory="shm")
    m = t.map_write()
    with m as a:
        assert a.flags.writeable and a.shape == (1080, 1920, 4)
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
    t = hwtensor.Tensor.image(hwtensor.ImageSpec("rgba", 4, 4), memory="mem", access="read")
    with pytest.raises(hwtensor.AccessError):
        with t.map_write():
            pass


def test_a_gpu_tensor_maps_through_its_own_copy_and_round_trips(gpu):
    t = hwtensor.Tensor((256, 256), "float32", memory="gpu")
    with t.map_write() as a:
        a[:] = np.arange(256, dtype=np.float32)
    with t.map_read() as b:
        assert np.array_equal(b[3], np.arange(256, dtype=np.float32))


def test_a_read_map_of_host_memory_is_zero_copy_and_no_view_of_it_is_writable():
    t = hwtensor.Tensor((64, 64), memory="shm")
    with t.map_write() as a:
        a[...] = 5
    first = t.map_read()
    with first as b:
        v = b[16:]
        assert not v.flags.writeable
        with pytest.raises(ValueError):
            v.setflags(write=True)
    with t.map_read() as c:  # the same bytes, not a copy of them
        assert int(c.sum()) == 5 * 64 * 64


@pytest.mark.parametrize("memory", ["mem", "shm", "dmabuf"], indirect=True)
def test_a_view_derived_in_a_write_block_cannot_write_the_tensor_after_it(memory):
    t = hwtensor.Tensor((4096,), memory=memory)
    with t.map_write() as a:
        a[:] = 1
        tail = a[16:]
        flat = a.reshape(-1)
        plain = np.asarray(a)[::2]
    with t.map_write() as live:  # the next user's map
        live[:] = 2
        tail[:] = 9  # stale: lands in the old map's own copy
        flat[0] = 9
        plain[:] = 9
    with t.map_read() as r:
        assert int(r.min()) == 2 == int(r.max())


def test_a_gpu_array_kept_after_its_block_reads_what_was_mapped_and_never_freed_memory(gpu):
    t = hwtensor.Tensor((1 << 20,), memory="gpu")
    with t.map_write() as a:
        a[:] = 3
    with t.map_read() as b:
        view = b[1:]
    # Staging buffers of the map are gone: the arrays read the map's own copy.
    for _ in range(3):
        with t.map_write() as w:
            w[:] = 4
    assert int(b.sum()) == 3 * (1 << 20)
    assert int(view.sum()) == 3 * ((1 << 20) - 1)
    with t.map_write() as c:
        kept = c[8:]
    kept[:] = 9  # writes the old copy only
    with t.map_read() as r:
        assert int(r.max()) == 4


def test_a_shm_write_map_points_at_the_memory_itself_and_copies_nothing():
    t = hwtensor.Tensor((2160, 3840, 4), memory="shm")
    with t.map_write() as a:
        a[0, 0, 0] = 42
        # What the block writes is in the shared memory at once, not at the block's end.
        with pytest.raises(hwtensor.BusyError):
            t.map_read().__enter__()
        fd = t.fd()
        import os
        assert os.pread(fd, 1, 0) == b"\x2a"


def test_a_view_kept_past_a_shm_write_block_still_reads_what_the_buffer_held():
    t = hwtensor.Tensor((4096,), memory="shm")
    with t.map_write() as a:
        a[:] = 3
        kept = a[8:]
    assert int(kept[0]) == 3
    kept[0] = 99  # a private page: the buffer never sees it
    with t.map_read() as r:
        assert int(r[8]) == 3


def test_a_write_map_of_a_huge_sparse_shm_tensor_maps_without_allocating_it():
    t = hwtensor.Tensor((1 << 40,), memory="shm")
    with t.map_write() as a:
        a[(1 << 40) - 1] = 5
        assert a.shape == (1 << 40,)
    with t.map_read() as r:
        assert int(r[(1 << 40) - 1]) == 5
