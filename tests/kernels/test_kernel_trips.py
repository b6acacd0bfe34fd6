"""daskgpu.kernels.trips: the fused trip sums (CPU twin, CUDA kernel in the simulator) vs pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from cudasim import run_in_simulator
from fake_cupy import SETUP

from daskgpu.kernels import trips
from daskgpu.kernels.haversine import haversine_numpy

HOUR_S = 3600


def unusual_trips(n: int, seed: int, passengers_float: bool = False) -> dict:
    """Trips with every unusual value: missing times, fares, coordinates and passengers, times
    before 1970, passengers out of the dense table's range, and both edges of the filter."""
    rng = np.random.default_rng(seed)
    seconds = rng.integers(-3 * 86400, 40 * 86400, n)  # some before 1970
    times = seconds.astype("datetime64[s]")
    times[rng.random(n) < 0.03] = np.datetime64("NaT")
    lat1, lat2 = rng.uniform(40.5, 40.9, (2, n))
    lon1, lon2 = rng.uniform(-74.1, -73.7, (2, n))
    same = rng.random(n) < 0.05  # zero distance: dropped
    lat2[same], lon2[same] = lat1[same], lon1[same]
    for coordinate in (lat1, lon1, lat2, lon2):
        coordinate[rng.random(n) < 0.01] = np.nan
    fare = np.round(rng.lognormal(2.5, 0.6, n), 2)
    fare[rng.random(n) < 0.03] = 0.0  # the filter's edge: dropped
    fare[rng.random(n) < 0.02] = np.finfo(np.float64).tiny  # just above it: kept
    fare[rng.random(n) < 0.02] = -5.0
    fare[rng.random(n) < 0.02] = np.nan
    passengers = rng.integers(0, 7, n)
    odd = rng.random(n) < 0.05
    passengers[odd] = rng.choice([-3, -1, 15, 16, 17, 100, 2**40], odd.sum())
    if passengers_float:
        passengers = passengers.astype(np.float64)
        passengers[rng.random(n) < 0.03] = np.nan
        passengers[rng.random(n) < 0.01] = 2.5
    return {"times": times, "passengers": passengers, "fare": fare,
            "coords": (lat1, lon1, lat2, lon2)}


def pandas_groups(t: dict) -> pd.DataFrame:
    """The same sums with pandas: a frame, a filter and a two-key groupby."""
    frame = pd.DataFrame({"time": t["times"], "passengers": t["passengers"], "fare": t["fare"],
                          "distance": haversine_numpy(*t["coords"])})
    frame = frame[(frame.distance > 0) & (frame.fare > 0)]
    frame = frame.assign(hour=frame.time.dt.hour)  # NaT and NaN keys: dropped by groupby
    grouped = frame.groupby(["hour", "passengers"])
    out = pd.DataFrame({"trips": grouped.size(), "fare_sum": grouped.fare.sum(),
                        "distance_sum": grouped.distance.sum()})
    out.index = out.index.set_levels(out.index.levels[0].astype(np.int64), level=0)
    return out


def as_groups(counts, sums, outside=None) -> pd.DataFrame:
    """The kernel's dense table (and the exact outside groups) as one frame like pandas'."""
    counts, sums = np.asarray(counts), np.asarray(sums)
    hours, riders = np.nonzero(counts[:, :trips.OUTSIDE])
    frame = pd.DataFrame({"hour": hours, "passengers": riders, "trips": counts[hours, riders],
                          "fare_sum": sums[0][hours, riders],
                          "distance_sum": sums[1][hours, riders]})
    if outside is not None:
        frame = pd.concat([frame, pd.DataFrame(dict(zip(
            ["hour", "passengers", "trips", "fare_sum", "distance_sum"], outside, strict=True)))])
    return frame.set_index(["hour", "passengers"]).sort_index()


def assert_same_groups(got: pd.DataFrame, want: pd.DataFrame):
    assert len(got) == len(want)
    np.testing.assert_array_equal(got.index.get_level_values(0), want.index.get_level_values(0))
    np.testing.assert_array_equal(got.index.get_level_values(1).to_numpy(np.float64),
                                  want.index.get_level_values(1).to_numpy(np.float64))
    np.testing.assert_array_equal(got.trips.to_numpy(), want.trips.to_numpy())
    np.testing.assert_allclose(got[["fare_sum", "distance_sum"]].to_numpy(),
                               want[["fare_sum", "distance_sum"]].to_numpy(), rtol=1e-12)


def kernel_args(t: dict) -> tuple:
    return (t["times"], HOUR_S, t["passengers"], t["fare"], *t["coords"])


@pytest.mark.parametrize("passengers_float", [False, True])
@pytest.mark.parametrize("n", [0, 1, 999, 200_003])
def test_twin_equals_a_pandas_groupby_with_every_unusual_value(n, passengers_float):
    t = unusual_trips(n, n + 7, passengers_float)
    counts, sums = trips.trip_sums(*kernel_args(t))
    assert counts.shape == (24, trips.PASSENGER_SLOTS + 1) and counts.dtype == np.int64
    assert sums.shape == (2, 24, trips.PASSENGER_SLOTS + 1) and sums.dtype == np.float64
    outside = trips.outside_sums(*kernel_args(t))
    np.testing.assert_array_equal(np.bincount(outside[0], outside[2], minlength=24),
                                  counts[:, trips.OUTSIDE])  # the same trips, by hour
    np.testing.assert_allclose(sums[:, :, trips.OUTSIDE].sum(axis=1),
                               [outside[3].sum(), outside[4].sum()], rtol=1e-12)
    assert_same_groups(as_groups(counts, sums, outside), pandas_groups(t))
    if n > 1000:
        assert counts[:, trips.OUTSIDE].sum() > 0 and counts[:, :trips.OUTSIDE].sum() > n // 2


def test_edges_of_the_filter_and_of_the_hour():
    """fare 0 and -0.0 dropped, the smallest fare kept; zero distance dropped; NaT dropped; a
    time one tick before 1970 is 23:00; passengers 15 inside, 16 and -1 outside."""
    base = np.array([0, -1, 3599, 3600, 86399, -86400 * 365, 0, 0, 0, 0, 0], "datetime64[s]")
    base[-1] = np.datetime64("NaT")
    fare = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, -0.0, 5e-324, 7.0, 8.0])
    passengers = np.array([15, 1, 2, 3, 16, -1, 1, 1, 4, 5, 1])
    lat1 = np.full(11, 40.7)
    lat2 = lat1 + 0.01
    lat2[9] = lat1[9]  # zero distance
    lon = np.full(11, -74.0)
    counts, sums = trips.trip_sums(base, HOUR_S, passengers, fare, lat1, lon, lat2, lon)
    kept = {(0, 15): 1, (23, 1): 1, (0, 2): 1, (1, 3): 1, (0, 4): 1}
    got = {(h, p): int(counts[h, p]) for h, p in zip(*np.nonzero(counts[:, :16]), strict=True)}
    assert got == kept
    assert counts[23, trips.OUTSIDE] == 1 and counts[0, trips.OUTSIDE] == 1  # 16 and -1
    assert sums[0, 0, 4] == 5e-324
    hours, riders, n, _, _ = trips.outside_sums(base, HOUR_S, passengers, fare, lat1, lon, lat2,
                                                lon)
    assert list(zip(hours, riders, n, strict=True)) == [(0, -1, 1), (23, 16, 1)]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_time_units_and_the_ticks_per_hour(unit):
    t = unusual_trips(3000, 5)
    t["times"] = t["times"].astype(f"datetime64[{unit}]") + np.timedelta64(1, unit)
    per_hour = trips.ticks_per_hour(t["times"].dtype)
    assert per_hour == 3600 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    counts, sums = trips.trip_sums(t["times"].view(np.int64), per_hour, t["passengers"],
                                   t["fare"], *t["coords"])
    outside = trips.outside_sums(t["times"], per_hour, t["passengers"], t["fare"], *t["coords"])
    assert_same_groups(as_groups(counts, sums, outside), pandas_groups(t))


def test_float32_coordinates_and_other_integer_types():
    t = unusual_trips(5000, 6)
    counts, sums = trips.trip_sums(*kernel_args(t))
    small = dict(t, passengers=t["passengers"].clip(-100, 100).astype(np.int8),
                 coords=tuple(c.astype(np.float32).astype(np.float64) for c in t["coords"]))
    want = trips.trip_sums(*kernel_args(small))
    got = trips.trip_sums(t["times"], HOUR_S, small["passengers"], t["fare"],
                          *(c.astype(np.float32) for c in t["coords"]))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(counts[:, :16], want[0][:, :16])


@pytest.mark.parametrize("args, error, match", [
    ((np.zeros(3, "i8"), 1, np.zeros(3), np.zeros(2), *[np.zeros(3)] * 4), ValueError,
     "equal length"),
    ((np.zeros((3, 1), "i8"), 1, *[np.zeros(3)] * 6), ValueError, "1-D"),
    ((np.zeros(3, "i8"), 1, np.zeros(3), np.array(["a"] * 3), *[np.zeros(3)] * 4), TypeError,
     "fare has dtype"),
    ((np.zeros(3, "i8"), 0, *[np.zeros(3)] * 6), ValueError, "per_hour"),
])
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        trips.trip_sums(*args)


def test_ticks_per_hour_refuses_other_units():
    for dtype in ("datetime64[D]", "datetime64[10s]", "int64"):
        with pytest.raises(TypeError, match="s, ms, us or ns"):
            trips.ticks_per_hour(np.dtype(dtype))


# --- CUDA kernel ----------------------------------------------------------------------------------

def test_kernel_types_and_lowers_for_a_real_gpu():
    """The simulator runs kernels as Python; this compiles the kernel for the real CUDA target."""
    import numba

    if numba.config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda is the simulator in this process")
    try:
        from numba.cuda import types
        from numba.cuda.compiler import compile_cuda
    except ImportError as e:  # pragma: no cover - numba-cuda moved its compiler
        pytest.skip(f"numba-cuda's compiler is not where this test expects it: {e}")
    for riders, coords in [(types.int64, types.float64), (types.float64, types.float32)]:
        sig = (types.Array(types.int64, 1, "A"), types.int64, types.Array(riders, 1, "A"),
               types.Array(types.float64, 1, "A"), *[types.Array(coords, 1, "A")] * 4,
               types.Array(types.int64, 2, "C"), types.Array(types.float64, 3, "C"))
        from daskgpu.kernels import trips_cuda

        cres = compile_cuda(trips_cuda.trip_sums_kernel.py_func, types.void, sig, cc=(9, 0))
        ir = cres.library.get_llvm_str()
        assert "atomicrmw add" in ir and "addrspace(3)" in ir  # shared-memory accumulators


SIMULATOR_CHECKS = """
import sys
import numpy as np
from numba import cuda
sys.path[:0] = ["tests", "tests/kernels"]
from test_kernel_trips import (HOUR_S, as_groups, assert_same_groups, kernel_args,
                               pandas_groups, unusual_trips)
from daskgpu.kernels import trips

# integer passengers are run in the CuPy test below; here float ones, with NaN and 2.5
for seed, floats in ((2, True),):
    t = unusual_trips(1000, seed, floats)
    host = kernel_args(t)
    args = [cuda.to_device(np.ascontiguousarray(a.view(np.int64) if a.dtype.kind == "M" else a))
            if isinstance(a, np.ndarray) else a for a in host]
    counts, sums = trips.trip_sums(*args)
    assert hasattr(counts, "copy_to_host"), type(counts)
    counts, sums = counts.copy_to_host(), sums.copy_to_host()
    twin = trips.trip_sums(*host)
    np.testing.assert_array_equal(counts, twin[0])
    np.testing.assert_allclose(sums, twin[1], rtol=1e-12)
    assert counts[:, trips.OUTSIDE].sum() > 0
    assert_same_groups(as_groups(counts, sums, trips.outside_sums(*host)), pandas_groups(t))
# fewer rows than one block, and none
t = unusual_trips(37, 3)
d = [cuda.to_device(a.view(np.int64) if a.dtype.kind == "M" else a) if isinstance(a, np.ndarray)
     else a for a in kernel_args(t)]
np.testing.assert_array_equal(trips.trip_sums(*d)[0].copy_to_host(),
                              trips.trip_sums(*kernel_args(t))[0])
empty = [x[:0] if hasattr(x, "shape") else x for x in d]
assert trips.trip_sums(*empty)[0].copy_to_host().sum() == 0
print("OK simulator")
"""


def test_cuda_kernel_in_simulator_equals_twin_and_pandas():
    assert "OK simulator" in run_in_simulator(SIMULATOR_CHECKS)


CUPY_INPUT = SETUP + """
import numpy as np
import fake_cupy
from daskgpu.kernels import trips as mod
from daskgpu.kernels import trips_cuda

fake_cupy.record(trips_cuda, "trip_sums_kernel")
rng = np.random.default_rng(4)
n = 300
host = [np.datetime64("2026-01-01", "s").astype(np.int64) + rng.integers(0, 86400, n),
        rng.integers(0, 20, n), rng.uniform(-1, 30, n),
        *rng.uniform(40.5, 40.9, (4, n))]
counts, sums = mod.trip_sums(*[fake_cupy.asarray(a) for a in host[:1]], 3600,
                             *[fake_cupy.asarray(a) for a in host[1:]])
assert isinstance(counts, fake_cupy.ndarray) and isinstance(sums, fake_cupy.ndarray)
twin = mod.trip_sums(host[0], 3600, *host[1:])
np.testing.assert_array_equal(counts.get(), twin[0])
np.testing.assert_allclose(sums.get(), twin[1], rtol=1e-12)
assert all(sync is False for _, sync in fake_cupy.conversions), fake_cupy.conversions
fake_cupy.assert_launched_on_cupy_stream()
print("OK cupy")
"""


def test_cupy_columns_launch_on_cupy_stream_without_host_sync():
    assert "OK cupy" in run_in_simulator(CUPY_INPUT)


GPU_TASK = SETUP + """
import sys
import numpy as np
import fake_cupy
from pipelines.trips import tasks as trips_tasks

sys.modules["cupy"].asnumpy = lambda a: a.get()  # what backends.to_host calls
partition = ("synthetic", (2, 300, 9))
on_device = trips_tasks.partial_sums(partition, fake_cupy.asarray)
on_host = trips_tasks.partial_sums(partition)
assert isinstance(on_device["counts"], np.ndarray) and isinstance(on_device["sums"], np.ndarray)
assert on_device["rows"] == on_host["rows"] == 300
np.testing.assert_array_equal(on_device["counts"], on_host["counts"])
np.testing.assert_allclose(on_device["sums"], on_host["sums"], rtol=1e-12)
assert on_host["counts"].sum() > 270
print("OK gpu task")
"""


def test_the_pipelines_gpu_task_runs_the_kernel_and_returns_host_tables():
    """A GPU worker's task: columns moved to the device, the CUDA kernel, a host table back."""
    assert "OK gpu task" in run_in_simulator(GPU_TASK)
