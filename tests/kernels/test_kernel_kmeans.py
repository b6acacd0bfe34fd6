"""daskgpu.kernels.kmeans: one Lloyd pass (CPU twin, CUDA kernel in the simulator) vs NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from cudasim import run_in_simulator
from fake_cupy import SETUP

from daskgpu.kernels import kmeans


def numpy_pass(x: np.ndarray, c: np.ndarray):
    """The same pass in plain NumPy, float64: nearest centroid by argmin (lowest index wins)."""
    x64, c64 = x.astype(np.float64), c.astype(x.dtype).astype(np.float64)
    dist = ((x64[:, None, :] - c64[None, :, :]) ** 2).sum(axis=2)
    finite = np.isfinite(dist).any(axis=1)
    labels = np.argmin(np.where(np.isfinite(dist), dist, np.inf), axis=1)[finite]
    k = c.shape[0]
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, labels, x64[finite])
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return sums, counts, float(dist[finite, labels].sum() if finite.any() else 0.0)


def blobs(n: int, d: int, k: int, seed: int, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, (k, d))
    x = centres[rng.integers(0, k, n)] + rng.standard_normal((n, d))
    return x.astype(dtype), centres + rng.standard_normal((k, d))


def assert_pass_equal(got, want, rtol=1e-12):
    sums, counts, inertia = (np.asarray(a) for a in got)
    assert sums.dtype == np.float64 and counts.dtype == np.int64 and inertia.shape == (1,)
    np.testing.assert_array_equal(counts, want[1])
    np.testing.assert_allclose(sums, want[0], rtol=rtol, atol=1e-9)
    assert inertia[0] == pytest.approx(want[2], rel=max(rtol, 1e-12), abs=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("n", "d", "k"), [(0, 3, 2), (1, 1, 1), (997, 5, 7), (60_001, 32, 16),
                                          (300, 2, 64)])
def test_twin_equals_numpy(n, d, k, dtype):
    x, c = blobs(n, d, k, n + d + k, dtype)
    got = kmeans.kmeans_pass(x, c)
    assert_pass_equal(got, numpy_pass(x, c), rtol=1e-12 if dtype == np.float64 else 1e-6)
    assert int(got[1].sum()) == n


def test_ties_go_to_the_lowest_index_and_empty_clusters_count_zero():
    # every point equally far from centroids 1 and 3 (mirror images), far from 0 and 2
    x = np.array([[0.0, 1.0], [0.0, -2.0], [0.0, 0.0]])
    c = np.array([[100.0, 0.0], [1.0, 0.0], [50.0, 50.0], [-1.0, 0.0], [1.0, 0.0]])
    sums, counts, inertia = kmeans.kmeans_pass(x, c)
    np.testing.assert_array_equal(counts, [0, 3, 0, 0, 0])
    np.testing.assert_array_equal(sums[1], [0.0, -1.0])
    assert not sums[[0, 2, 3, 4]].any()
    assert inertia[0] == pytest.approx(2 + 5 + 1)


def test_points_without_a_finite_distance_are_left_out():
    x = np.array([[1.0, 1.0], [np.nan, 0.0], [np.inf, 0.0], [2.0, 2.0]])
    sums, counts, inertia = kmeans.kmeans_pass(x, np.zeros((1, 2)))
    assert counts.tolist() == [2] and sums.tolist() == [[3.0, 3.0]] and inertia[0] == 10.0


@pytest.mark.parametrize(("x", "c", "error", "match"), [
    (np.zeros(3), np.zeros((1, 1)), ValueError, "2-D"),
    (np.zeros((3, 2)), np.zeros((1, 3)), ValueError, "features"),
    (np.zeros((3, 2)), np.zeros((0, 2)), ValueError, "at least one"),
    (np.zeros((3, 2), np.int64), np.zeros((1, 2)), TypeError, "float32 or float64"),
])
def test_bad_shapes_and_dtypes_are_refused(x, c, error, match):
    with pytest.raises(error, match=match):
        kmeans.kmeans_pass(x, c)


SIMULATED = SETUP + """
import numpy as np
from numba import cuda
import fake_cupy
from daskgpu.kernels import kmeans
sys.path.insert(0, "tests/kernels")
import test_kernel_kmeans as t

def check(x, c, exact=True):
    host = kmeans.kmeans_pass(x, c)
    want = t.numpy_pass(x, c)
    t.assert_pass_equal(host, want, 1e-12 if x.dtype == np.float64 else 1e-6)
    for device in (cuda.to_device(x), fake_cupy.asarray(x)):
        got = kmeans.kmeans_pass(device, c)
        got = [a.get() if hasattr(a, "get") else a.copy_to_host() for a in got]
        t.assert_pass_equal(got, want, 1e-12 if x.dtype == np.float64 else 1e-6)
        np.testing.assert_array_equal(got[1], host[1])

# 300 points over 2 blocks of 256 threads (more threads than points in the second block)
x, c = t.blobs(300, 3, 5, 1)
check(x, c)
check(x.astype(np.float32), c)
check(x[:7], c)                       # k > points in the block, empty clusters
check(x[:40], c[:1])                  # k = 1
check(np.zeros((0, 3)), c)            # no points
# ties: every point equally far from centroids 1 and 3; 0, 2 and 4 empty
tie = np.array([[0.0, 1.0], [0.0, -2.0], [0.0, 0.0]] * 20)
check(tie, np.array([[100.0, 0.0], [1.0, 0.0], [50.0, 50.0], [-1.0, 0.0], [1.0, 0.0]]))
# more k x d than shared memory holds: the global-memory kernel
kmeans.SHARED_CELLS = 4
check(x[:50], c)
assert any(ptr == fake_cupy.STREAM_PTR for ptr, _ in fake_cupy.streams)  # CuPy's stream
print("ok")
"""


def test_cuda_kernel_in_the_simulator_equals_the_twin_and_numpy():
    assert run_in_simulator(SIMULATED).strip().endswith("ok")
