"""Arrays in memory as inputs (daskgpu.data.memory_input): named, checked, moved once, read
again from the object; CuPy's branch through the strict CuPy stand-in (tests/strict_cupy.py)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from daskgpu.data import array_input, memory_input
from daskgpu.errors import InputFileError, InputTypeError
from daskgpu.toolkit.backends import Backend
from daskgpu.verification import replay

CPU = Backend("cpu", "numpy", "pandas", (), 1, 1)
GPU = Backend("gpu", "cupy", "cudf", (), 1, 1)


def blocks_of(array: da.Array) -> list:
    with dask.config.set(scheduler="sync"):
        return list(dask.compute(*array.to_delayed().ravel()))


def test_a_numpy_array_is_sent_in_the_pipelines_blocks_without_a_rechunk():
    values = np.arange(60.0).reshape(12, 5)
    source = array_input.open_array(values)
    assert source.in_memory and source.path == "numpy.ndarray float64 (12, 5)"
    data = array_input.to_dask(source, (4, 5), CPU)
    assert data.chunks == ((4, 4, 4), (5,))
    # each block is its own piece of the graph: nothing but the blocks, no getter of the whole
    assert len(dict(data.__dask_graph__())) == 3
    assert np.array_equal(np.concatenate(blocks_of(data)), values)
    assert array_input.rechunking(source, (4, 5)) == {}


def test_a_dask_array_keeps_blocks_that_suit_and_is_rechunked_saying_so_where_not():
    values = np.arange(60.0).reshape(12, 5)
    lazy = da.from_array(values, chunks=(4, 5))
    source = array_input.open_array(lazy)
    assert source.path == "dask.array.Array float64 (12, 5)"
    assert array_input.to_dask(source, (4, 5), CPU) is lazy
    assert array_input.rechunking(source, (6, 5)) == {
        "rechunked": "rechunked from blocks of (4, 5) to (6, 5), the pipeline's"}
    assert array_input.to_dask(source, (6, 5), CPU).chunks == ((6, 6), (5,))
    read = replay.region(source, (slice(3, 9),))
    assert isinstance(read, da.Array) and np.array_equal(read.compute(), values[3:9])


def test_an_array_of_unknown_sizes_or_of_no_array_type_is_refused_in_one_line():
    masked = da.arange(10, chunks=5)
    with pytest.raises(InputFileError, match="sizes are unknown; call its compute_chunk_sizes"):
        array_input.open_array(masked[masked > 3])
    with pytest.raises(InputTypeError, match=r"^--input: a dict is not an input daskgpu reads"):
        array_input.open_array({"x": 1})
    with pytest.raises(InputFileError, match=r"float16 values; a numeric array of float32 or "
                                             r"float64 is needed \(convert it with x.astype"):
        array_input.open_array(np.zeros((3, 3), np.float16), dtypes=("float32", "float64"))


def test_a_cupy_array_stays_on_the_device_and_is_refused_by_cpu_workers(cupy_stand_in):
    values = np.arange(24, dtype=np.float32).reshape(6, 4)
    on_device = cupy_stand_in.asarray(values)
    source = array_input.open_array(on_device)
    assert source.path == "cupy.ndarray float32 (6, 4)"
    assert memory_input.library(on_device) == "cupy"
    with pytest.raises(InputFileError, match="CuPy data, and the workers are CPU workers"):
        array_input.to_dask(source, (3, 4), CPU)
    blocks = blocks_of(array_input.to_dask(source, (3, 4), GPU))
    assert all(isinstance(b, cupy_stand_in.ndarray) for b in blocks)  # never through NumPy
    assert np.array_equal(np.concatenate([b.get() for b in blocks]), values)
    read = replay.region(source, (slice(2, 5),))  # from the blocks sent, to the host explicitly
    assert isinstance(read, da.Array)
    with dask.config.set(scheduler="sync"):
        assert type(read.compute()) is np.ndarray
        assert np.array_equal(read.compute(), values[2:5])
    unsent = replay.region(array_input.open_array(on_device), (slice(2, 5),))
    assert type(unsent) is np.ndarray and np.array_equal(unsent, values[2:5])


def test_a_numpy_array_given_to_gpu_workers_is_moved_block_by_block(cupy_stand_in):
    values = np.arange(24.0).reshape(6, 4)
    blocks = blocks_of(array_input.to_dask(array_input.open_array(values), (2, 4), GPU))
    assert len(blocks) == 3 and all(isinstance(b, cupy_stand_in.ndarray) for b in blocks)
    assert np.array_equal(np.concatenate([b.get() for b in blocks]), values)


def test_the_blocks_sent_are_held_by_the_source_and_never_travel_with_a_copy_of_it():
    """A check's task is handed a copy of the source without its reader: the blocks the run
    sent must not come along (a task would be handed the whole array)."""
    import dataclasses
    import pickle

    values = np.arange(60.0).reshape(12, 5)
    source = array_input.open_array(values)
    data = array_input.to_dask(source, (4, 5), CPU)
    assert source.sent == [data]  # noted once, where it was sent
    assert dataclasses.replace(source, reader=None).sent == []
    assert pickle.loads(pickle.dumps(source)).sent == []
    read = replay.region(source, (slice(3, 9),))  # sliced from the blocks sent
    assert isinstance(read, da.Array) and np.array_equal(read.compute(scheduler="sync"),
                                                         values[3:9])
