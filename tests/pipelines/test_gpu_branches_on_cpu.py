"""The CuPy and cuDF branches of the library, run on CPU through stand-ins for those libraries.

What this shows: each branch calls the array library it is named (never NumPy behind its back),
in the order and with the seeds the verification relies on, and hands results to the host. What
it cannot show: CuPy's and cuDF's own behaviour (their generators, their memory).
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pandas as pd
import pytest

from daskgpu.data import synthetic
from daskgpu.toolkit import backends

DEVICE = "fake_device_array_library"


class DeviceArray:
    """An array the way the library sees a CuPy one: it has ``__cuda_array_interface__``."""

    def __init__(self, values):
        self.values = np.asarray(values)
        self.ndim = self.values.ndim

    @property
    def __cuda_array_interface__(self):
        return self.values.__array_interface__

    def __iadd__(self, other):
        self.values = self.values + np.asarray(other.values if isinstance(other, DeviceArray)
                                               else other)
        return self


class DeviceFrame:
    """A frame the way the library sees a cuDF one: it has ``to_pandas``."""

    def __init__(self, frame):
        self.frame = frame

    def to_pandas(self):
        return self.frame


@pytest.fixture
def device_library(monkeypatch):
    """A module standing in for CuPy: a recording generator (integer seeds, as CuPy's)."""
    drawn: list[tuple[int, int]] = []

    class Generator:
        def __init__(self, seed):
            assert isinstance(seed, int)  # CuPy's default_rng takes an integer seed
            self.seed, self.rng = seed, np.random.default_rng(seed)

        def random(self, size, dtype):
            drawn.append((self.seed, size))
            return DeviceArray(self.rng.random(size, dtype=dtype))

    module = types.ModuleType(DEVICE)
    module.random = types.SimpleNamespace(default_rng=Generator)
    module.zeros = lambda shape, dtype: DeviceArray(np.zeros(shape, dtype))
    DeviceArray.sum = lambda self, dtype: DeviceArray(self.values.sum(dtype=dtype))
    DeviceArray.__float__ = lambda self: float(self.values)
    monkeypatch.setitem(sys.modules, DEVICE, module)
    module.drawn = drawn
    return module


def test_device_block_sums_draw_each_block_in_pieces_from_its_own_seed(device_library):
    chunks = ((5, 4), (7,))
    sums = [synthetic._uniform_block_sum(
        {None: {"chunk-location": (i, 0)}}, seed=11, value_dtype="float64",
        library=DEVICE, chunks_of_data=chunks, stream_elements=8) for i in range(2)]
    # Each block: its own integer seed from its SeedSequence, drawn in pieces of at most 8.
    seeds = [int(np.random.SeedSequence(11, spawn_key=(i,)).generate_state(1, np.uint64)[0])
             for i in range(2)]
    assert device_library.drawn == [(seeds[0], 8), (seeds[0], 8), (seeds[0], 8),
                                    (seeds[0], 8), (seeds[0], 3),
                                    (seeds[1], 8), (seeds[1], 8), (seeds[1], 8), (seeds[1], 4)]
    for total, seed, n in zip(sums, seeds, (35, 28), strict=True):
        assert total.shape == (1, 1) and isinstance(total, np.ndarray)  # on the host
        want = math.fsum(np.random.default_rng(seed).random(n))  # one draw of the whole block
        assert total[0, 0] == pytest.approx(want, rel=1e-14)


def test_device_block_sum_equals_the_sum_of_the_block_drawn_whole(device_library):
    """What mean-pipeline's check recomputes (a block drawn whole) is what the run summed."""
    info = {None: {"chunk-location": (1, 0), "num-chunks": (2, 1), "chunk-shape": (4, 7)}}
    block = synthetic._random_block(info, seed=3, value_dtype="float64", library=DEVICE)
    streamed = synthetic._uniform_block_sum(info, seed=3, value_dtype="float64", library=DEVICE,
                                            chunks_of_data=((5, 4), (7,)), stream_elements=5)
    assert streamed[0, 0] == pytest.approx(float(block.values.sum()), rel=1e-14)


def test_to_host_moves_device_arrays_and_frames_recursively(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        asnumpy=lambda a: np.array(a.values)))
    frame = pd.DataFrame({"a": [1, 2]})
    got = backends.to_host({"counts": DeviceArray([3, 4]), "total": DeviceArray(np.float64(7.5)),
                            "table": DeviceFrame(frame), "plain": 2})
    assert isinstance(got["counts"], np.ndarray) and got["counts"].tolist() == [3, 4]
    assert got["total"] == 7.5 and isinstance(got["total"], float)  # 0-d: a Python scalar
    assert got["table"] is frame and got["plain"] == 2


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


class CudfFrame(pd.DataFrame):
    """A partition the way the library sees a cuDF one: its own type, with ``to_pandas``."""

    def to_pandas(self):
        return pd.DataFrame(self)


@pytest.fixture
def fake_cudf(monkeypatch):
    """A module standing in for cuDF that counts the frames it makes."""
    import importlib.machinery

    module = types.ModuleType("cudf")
    module.__spec__ = importlib.machinery.ModuleSpec("cudf", None)  # found by find_spec
    module.made = []

    def from_pandas(frame):
        module.made.append(len(frame))
        return CudfFrame(frame)

    module.from_pandas = from_pandas
    monkeypatch.setitem(sys.modules, "cudf", module)
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
    left, right = workload.context["left"], workload.context["right"]
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
