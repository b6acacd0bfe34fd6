"""The CuPy and cuDF branches of the library, run on CPU through strict stand-ins for those
libraries (tests/strict_cupy.py; cuDF partitions as pandas frames whose columns' values are
stand-in device arrays).

What this shows: each branch calls the array library it is named (never NumPy behind its back,
never a host conversion CuPy would refuse), in the order and with the seeds the verification
relies on, hands results to the host, and computes what the NumPy branch computes. What it
cannot show: CuPy's and cuDF's own behaviour (their generators, their memory).
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pandas as pd
import pytest

from daskgpu.data import synthetic
from daskgpu.toolkit import backends, numeric


@pytest.fixture
def device_library(cupy_stand_in, monkeypatch):
    """The strict CuPy stand-in, the device's generators recording each draw: ``drawn``,
    (first key word, size)."""
    drawn: list[tuple[int, int]] = []
    device_generator = numeric.CounterGenerator  # the stand-in's, recording its keys
    draw = device_generator.random

    def random(self, size=None, dtype=np.float64, out=None):
        drawn.append((self.key[0], size))
        return draw(self, size, dtype=dtype, out=out)

    monkeypatch.setattr(device_generator, "random", random)
    cupy_stand_in.drawn = drawn
    return cupy_stand_in


def test_device_block_sums_draw_each_block_in_pieces_from_its_own_seed(device_library):
    chunks = ((5, 4), (7,))
    sums = [synthetic._uniform_block_sum(
        {None: {"chunk-location": (i, 0)}}, seed=11, value_dtype="float64",
        library="cupy", chunks_of_data=chunks, stream_elements=8) for i in range(2)]
    # Each block: its own key from its SeedSequence, drawn in pieces of at most 8.
    seeds = [int(np.random.SeedSequence(11, spawn_key=(i,)).generate_state(1, np.uint64)[0])
             for i in range(2)]
    assert device_library.drawn == [(seeds[0], 8), (seeds[0], 8), (seeds[0], 8),
                                    (seeds[0], 8), (seeds[0], 3),
                                    (seeds[1], 8), (seeds[1], 8), (seeds[1], 8), (seeds[1], 4)]
    for i, (total, n) in enumerate(zip(sums, (35, 28), strict=True)):
        assert total.shape == (1, 1) and isinstance(total, np.ndarray)  # on the host
        whole = numeric.CounterGenerator(np, np.random.SeedSequence(11, spawn_key=(i,)))
        want = math.fsum(whole.random(n))  # one draw of the whole block
        assert total[0, 0] == pytest.approx(want, rel=1e-14)


def test_device_block_sum_equals_the_sum_of_the_block_drawn_whole(device_library):
    """What mean-pipeline's check recomputes (a block drawn whole) is what the run summed."""
    info = {None: {"chunk-location": (1, 0), "num-chunks": (2, 1), "chunk-shape": (4, 7)}}
    block = synthetic._random_block(info, seed=3, value_dtype="float64", library="cupy")
    assert isinstance(block, device_library.ndarray) and block.shape == (4, 7)
    streamed = synthetic._uniform_block_sum(info, seed=3, value_dtype="float64", library="cupy",
                                            chunks_of_data=((5, 4), (7,)), stream_elements=5)
    assert streamed[0, 0] == pytest.approx(float(block.get().sum()), rel=1e-14)


def test_to_host_moves_device_arrays_and_frames_recursively(cupy_stand_in):
    import strict_cupy

    frame = pd.DataFrame({"a": [1, 2]})
    counts = cupy_stand_in.asarray([3, 4])
    got = backends.to_host({"counts": counts, "total": (counts * 2.5).sum() / 2,
                            "table": strict_cupy.DataFrame(frame), "plain": 2})
    assert isinstance(got["counts"], np.ndarray) and got["counts"].tolist() == [3, 4]
    assert got["total"] == 8.75 and isinstance(got["total"], float)  # 0-d: a Python scalar
    assert isinstance(got["table"], pd.DataFrame) and got["plain"] == 2
    pd.testing.assert_frame_equal(got["table"], frame)


def _shuffle_tasks(backend, **params) -> set[str]:
    import daskgpu

    spec = daskgpu.get_pipeline("join-pipeline")
    workload = spec.workload(backend, rows=20_000, match=0.3, seed=1, partitions=4,
                             broadcast="false", **params)
    keys = workload.collection["aggregate"].optimize().__dask_graph__().keys()
    names = {str(k[0] if isinstance(k, tuple) else k) for k in keys}
    return {n.rsplit("-", 1)[0] for n in names if "shuffle" in n or "hash-join" in n}


def test_join_on_gpu_workers_shuffles_with_tasks_unless_told_otherwise():
    """dask-cudf does not take Dask's p2p shuffle: tasks, or the method Dask is configured with."""
    import dask

    import daskgpu
    from daskgpu.errors import ParameterError

    # A GPU backend computing on pandas: the choice depends on the backend, not on cuDF.
    gpu = backends.Backend("gpu", "numpy", "pandas", (), 2, 2)
    assert "taskshuffle" in _shuffle_tasks(gpu)
    with dask.config.set({"dataframe.shuffle.method": "disk"}):
        assert "taskshuffle" not in _shuffle_tasks(gpu)
    with pytest.raises(ParameterError, match="--shuffle p2p: dask-cudf does not take"):
        daskgpu.get_pipeline("join-pipeline").resolve(
            backends.Backend("gpu", "cupy", "cudf", (), 1, 1), shuffle="p2p")


class CudfSeries(pd.Series):
    """A column the way the library sees a cuDF one: ``.values`` in device memory (a strict
    CuPy stand-in array), the host through ``to_pandas``."""

    @property
    def _constructor(self):
        return CudfSeries

    @property
    def _constructor_expanddim(self):
        return CudfFrame

    @property
    def values(self):
        return sys.modules["cupy"].asarray(self.to_numpy())

    def to_pandas(self):
        return pd.Series(self.to_numpy(), index=pd.Index(self.index), name=self.name)


class CudfFrame(pd.DataFrame):
    """A partition the way the library sees a cuDF one: its own type, with ``to_pandas``, its
    columns :class:`CudfSeries`. pandas underneath, so that Dask's dataframe code runs on it."""

    @property
    def _constructor(self):
        return CudfFrame

    @property
    def _constructor_sliced(self):
        return CudfSeries

    def assign(self, **columns):
        """cuDF's: device arrays taken as columns (NumPy ones too, as pandas takes them)."""
        cupy = sys.modules["cupy"]
        return super().assign(**{name: value.get() if isinstance(value, cupy.ndarray) else value
                                 for name, value in columns.items()})

    def to_pandas(self):
        return pd.DataFrame(self)


def _group_split_cudf(frame, partition, k, ignore_index=False):
    """Dask's shuffle split of a :class:`CudfFrame`: its partition numbers are a device column
    (cuDF's own split takes them there); pandas' split, given them on the host."""
    from dask.dataframe.backends import group_split_pandas

    return group_split_pandas(frame, partition.to_numpy(), k, ignore_index)


@pytest.fixture
def fake_cudf(cupy_stand_in, monkeypatch):
    """A module standing in for cuDF that counts the frames it makes (its columns' values are
    the strict CuPy stand-in's arrays)."""
    import importlib.machinery

    module = types.ModuleType("cudf")
    module.__spec__ = importlib.machinery.ModuleSpec("cudf", None)  # found by find_spec
    module.made = []

    def from_pandas(frame):
        module.made.append(len(frame))
        return CudfFrame(frame)

    module.from_pandas = from_pandas
    monkeypatch.setitem(sys.modules, "cudf", module)
    from dask.dataframe.dispatch import group_split_dispatch

    group_split_dispatch.register(CudfFrame, _group_split_cudf)
    return module


@pytest.mark.parametrize("strategy", [{}, {"broadcast": "false"}])
def test_join_graph_for_cudf_workers_holds_no_cudf_object_in_the_client(fake_cudf, strategy):
    """The client builds pandas meta only; the partitions are cuDF where they are computed.

    A cuDF meta frame in the client would create a CUDA context there (and dask-cudf's
    meta_nonempty would fill it with device data). Computed here with the synchronous
    scheduler, standing for the workers, the tables' partitions come out of the stand-in.
    """
    import dask

    import daskgpu

    gpu = backends.Backend("gpu", "cupy", "cudf", (), 1, 1)
    spec = daskgpu.get_pipeline("join-pipeline")
    workload = spec.workload(gpu, rows=20_000, match=0.3, seed=1, partitions=4, **strategy)
    assert fake_cudf.made == []  # nothing made in the client
    left, right = workload.context.left, workload.context.right
    for collection in (left, right, *workload.collection.values()):
        assert type(collection._meta).__module__.split(".")[0] in ("pandas", "numpy")
    with dask.config.set(scheduler="sync"):
        parts = [part.compute() for part in left.to_delayed()[:2]]
        assert all(type(p) is CudfFrame for p in parts)  # made as cuDF, where computed
        raw = dict(zip(workload.collection, dask.compute(*workload.collection.values()),
                       strict=True))
        check = spec.verify(workload, raw)
    assert sum(fake_cudf.made) >= 20_000 + 2_000  # both tables, partition by partition
    assert check.ok, check.detail
    assert raw["joined_rows"] == 6_000
    cpu = backends.Backend("cpu", "numpy", "pandas", (), 1, 1)
    on_cpu = spec.workload(cpu, rows=20_000, match=0.3, seed=1, partitions=4, **strategy)
    with dask.config.set(scheduler="sync"):
        want = dict(zip(on_cpu.collection, dask.compute(*on_cpu.collection.values()),
                        strict=True))
    for name in ("aggregate", "cells"):  # the pandas branch's tables, row for row
        got, expected = (backends.to_host(table) for table in (raw[name], want[name]))
        columns = list(expected.columns)
        pd.testing.assert_frame_equal(
            pd.DataFrame(got).sort_values(columns[:2]).reset_index(drop=True),
            pd.DataFrame(expected).sort_values(columns[:2]).reset_index(drop=True),
            check_exact=False, rtol=1e-12)
