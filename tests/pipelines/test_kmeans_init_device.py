"""k-means|| on device shards (kmeans-pipeline's initialisation), run on CPU through the strict
CuPy stand-in: it refuses implicit host conversions and host operands, so each step that runs
where a shard lives (sampling far points, picking rows) must keep to the device and hand only
small host results back. Each is compared with the same step on the same points in NumPy.

The kernel's counts-and-cost pass (each round's cost, the candidates' weights) runs as a NumPy
reference on the stand-in's values (``strict_cupy.host_kernel``): what is under test is the code
around it.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.kmeans import init as kmeans_init
from pipelines.kmeans import tasks as kmeans_steps
from pipelines.kmeans.baseline import InProcess


def _counts_cost(x, candidates):
    """The counts-and-cost pass in NumPy: points nearest each candidate (float64 distances,
    the lowest index on ties), their total squared distance; non-finite points nowhere."""
    x = x[np.isfinite(x).all(axis=1)].astype(np.float64)
    distances = ((x[:, None, :] - candidates) ** 2).sum(axis=2)
    nearest = distances.argmin(axis=1)
    return (np.bincount(nearest, minlength=len(candidates)).astype(np.int64),
            np.array([distances.min(axis=1, initial=np.inf).sum()]))


@pytest.fixture
def device_kernels(cupy_stand_in, monkeypatch):
    """The stand-in, the kernel's counts-and-cost pass run in NumPy on its values."""
    import strict_cupy

    monkeypatch.setattr(kmeans_steps, "kmeans_counts_cost", strict_cupy.host_kernel(_counts_cost))
    return cupy_stand_in


def _points(dtype: str) -> np.ndarray:
    """230 normal points with a NaN row and an infinite coordinate (no finite distance)."""
    x = np.random.default_rng(7).standard_normal((230, 5)).astype(dtype)
    x[17] = np.nan
    x[150, 2] = np.inf
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sample_far_on_a_device_shard_samples_and_costs_as_on_numpy(cupy_stand_in, monkeypatch,
                                                                    dtype):
    monkeypatch.setattr(kmeans_init, "SLAB", 64)  # four slabs of the shard, the last short
    host = _points(dtype)
    candidates = host[[0, 99]].astype(np.float64)
    cost = float(np.nansum(np.where(np.isinf(host).any(axis=1), np.nan, (
        (host[:, None, :].astype(np.float64) - candidates) ** 2).sum(axis=2).min(axis=1))))
    arguments = (candidates, cost, 40.0, 5, 1, 2)
    got = kmeans_init.sample_far(cupy_stand_in.asarray(host), *arguments, start=1000, cell=50)
    want = kmeans_init.sample_far(host, *arguments, start=1000, cell=50)
    rows, points, costs, kept = got
    assert all(type(part) is np.ndarray for part in got)  # small results, on the host
    assert points.dtype == np.float64 and costs.shape == kept.shape == (5,)  # cells of 50
    for mine, theirs in zip(got, want, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert 10 < len(rows) < 200 and rows.min() >= 1000 and kept.sum() == len(rows)
    assert 1017 not in rows and 1150 not in rows  # no finite distance: never sampled
    np.testing.assert_array_equal(points, host[rows - 1000].astype(np.float64))
    assert costs.sum() == pytest.approx(cost, rel=1e-12)  # the shard's cost, cell by cell


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pick_rows_of_a_device_shard_are_host_float64_in_the_order_asked(cupy_stand_in, dtype):
    host = np.arange(36, dtype=dtype).reshape(12, 3) / 7
    rows = np.array([7, 0, 11, 7])
    got = kmeans_steps.pick_rows(cupy_stand_in.asarray(host), rows)
    assert type(got) is np.ndarray and got.dtype == np.float64
    np.testing.assert_array_equal(got, host[rows].astype(np.float64))


@pytest.mark.parametrize("method", ["k-means||", "random"])
def test_initial_centroids_of_device_shards_are_those_of_the_same_points_on_numpy(
        device_kernels, method):
    """The whole initialisation, as the run drives it (here, each task computed at once):
    rows gathered across shards, k-means||'s rounds, weights and per-cell certificates."""
    cupy = device_kernels
    centres = kmeans_steps.blob_centres(3, 5, 4)
    sizes = (300, 250)
    shards = [kmeans_steps.make_shard(3, i, n, 4, "float32", "numpy", centres)
              for i, n in enumerate(sizes)]
    on_device = [cupy.asarray(shard) for shard in shards]
    got, chosen = kmeans_init.initial_centroids(InProcess(), on_device, sizes, 3, 5, method)
    want, expected = kmeans_init.initial_centroids(InProcess(), shards, sizes, 3, 5, method)
    np.testing.assert_array_equal(got, want)
    assert set(chosen) == set(expected)
    for key, value in expected.items():
        assert value is None or type(chosen[key]) is np.ndarray, key  # on the host
        np.testing.assert_array_equal(chosen[key], value, err_msg=key)
    assert (chosen["rows"] >= sizes[0]).any() and (chosen["rows"] < sizes[0]).any()


@pytest.mark.parametrize("on_device", [False, True])
def test_a_point_with_an_infinite_coordinate_is_never_sampled(cupy_stand_in, on_device):
    """It counts nowhere (the kernel's rule, and the check's: candidates must be finite), even
    where its distance to every candidate is +inf, which any probability would take."""
    host = np.random.default_rng(2).standard_normal((40, 3))
    host[5, 1] = np.inf
    candidates = np.array([[0.0, -1.0, 0.0], [1.0, -2.0, 1.0]])  # +inf - 2 (-inf) = +inf
    x = cupy_stand_in.asarray(host) if on_device else host
    rows, points, costs, kept = kmeans_init.sample_far(x, candidates, 1.0, 1e6, 3, 0, 0,
                                                       cell=8)
    assert 5 not in rows and np.isfinite(points).all()
    assert len(rows) == 39 and kept.tolist() == [7, 8, 8, 8, 8]  # every finite point: factor 1e6
    assert np.isfinite(costs).all()
