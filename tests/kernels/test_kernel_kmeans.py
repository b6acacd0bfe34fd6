"""daskgpu.kernels.kmeans: the Lloyd pass and k-means||'s counts and cost (CPU twins, CUDA
kernels in the simulator) vs NumPy; the kernels' plans and grid."""

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


def far_points(dtype=np.float32):
    """Points with finite coordinates whose float32 squared distances to every centroid
    overflow (rows 1 and 3), among ordinary ones, a NaN and an infinite one."""
    x = np.array([[1.0, 2.0, 0.0], [1e20, 0.0, 0.0], [np.nan, 0.0, 0.0], [0.0, -3e19, 4e19],
                  [-2.0, 1.0, 1.0], [np.inf, 1.0, 1.0]], dtype)
    c = np.array([[0.0, 0.0, 0.0], [5e19, 0.0, 0.0], [0.0, -1e19, 1e19]])
    return x, c


def assert_pass_equal(got, want, rtol=1e-12):
    sums, counts, inertia = (np.asarray(a) for a in got)
    assert sums.dtype == np.float64 and counts.dtype == np.int64 and inertia.shape == (1,)
    np.testing.assert_array_equal(counts, want[1])
    np.testing.assert_allclose(sums, want[0], rtol=rtol, atol=1e-9)
    assert inertia[0] == pytest.approx(want[2], rel=max(rtol, 1e-12), abs=1e-9)


def assert_counts_cost_equal(got, want, rtol=1e-12):
    counts, cost = (np.asarray(a) for a in got)
    assert counts.dtype == np.int64 and cost.dtype == np.float64 and cost.shape == (1,)
    np.testing.assert_array_equal(counts, want[1])
    assert cost[0] == pytest.approx(want[2], rel=max(rtol, 1e-12), abs=1e-9)


CASES = [(0, 3, 2), (10, 0, 3), (1, 1, 1), (997, 5, 7), (60_001, 32, 16), (300, 2, 64),
         (400, 4, 300)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("n", "d", "k"), CASES)
def test_twins_equal_numpy(n, d, k, dtype):
    x, c = blobs(n, d, k, n + d + k, dtype)
    want = numpy_pass(x, c)
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    got = kmeans.kmeans_pass(x, c)
    assert_pass_equal(got, want, rtol)
    assert int(got[1].sum()) == n
    assert_counts_cost_equal(kmeans.kmeans_counts_cost(x, c), want, rtol)


def test_ties_go_to_the_lowest_index_and_empty_clusters_count_zero():
    # every point equally far from centroids 1 and 3 (mirror images), far from 0 and 2
    x = np.array([[0.0, 1.0], [0.0, -2.0], [0.0, 0.0]])
    c = np.array([[100.0, 0.0], [1.0, 0.0], [50.0, 50.0], [-1.0, 0.0], [1.0, 0.0]])
    sums, counts, inertia = kmeans.kmeans_pass(x, c)
    np.testing.assert_array_equal(counts, [0, 3, 0, 0, 0])
    np.testing.assert_array_equal(sums[1], [0.0, -1.0])
    assert not sums[[0, 2, 3, 4]].any()
    assert inertia[0] == pytest.approx(2 + 5 + 1)
    counts, cost = kmeans.kmeans_counts_cost(x, c)
    assert counts.tolist() == [0, 3, 0, 0, 0] and cost[0] == pytest.approx(8)


def test_points_without_a_finite_distance_are_left_out():
    x = np.array([[1.0, 1.0], [np.nan, 0.0], [np.inf, 0.0], [2.0, 2.0]])
    sums, counts, inertia = kmeans.kmeans_pass(x, np.zeros((1, 2)))
    assert counts.tolist() == [2] and sums.tolist() == [[3.0, 3.0]] and inertia[0] == 10.0
    counts, cost = kmeans.kmeans_counts_cost(x, np.zeros((1, 2)))
    assert counts.tolist() == [2] and cost[0] == 10.0


def test_float32_points_whose_squares_overflow_are_measured_in_float64():
    """Kernel twin and the pipeline's float64 check count the same points: the finite ones."""
    from pipelines.kmeans.check_replay import lloyd_totals

    x, c = far_points()
    with np.errstate(over="ignore"):
        assert np.isinf(((x[1] - c.astype(np.float32)) ** 2).sum(axis=1)).all()
    want = numpy_pass(x, c)
    assert want[1].tolist() == [2, 1, 1]  # the float64 nearest of rows 1 and 3
    sums, counts, inertia = kmeans.kmeans_pass(x, c)
    assert_pass_equal((sums, counts, inertia), want, rtol=1e-6)
    assert_counts_cost_equal(kmeans.kmeans_counts_cost(x, c), want, rtol=1e-6)
    checked = lloyd_totals(np, x, c[None], np.ones((3, 1)), "float32", True)[0]
    assert checked.points == int(counts.sum()) == 4
    np.testing.assert_array_equal(checked.counts, counts)
    assert checked.inertia == pytest.approx(inertia[0], rel=1e-6)


@pytest.mark.parametrize(("x", "c", "error", "match"), [
    (np.zeros(3), np.zeros((1, 1)), ValueError, "2-D"),
    (np.zeros((3, 2)), np.zeros((1, 3)), ValueError, "features"),
    (np.zeros((3, 2)), np.zeros((0, 2)), ValueError, "at least one"),
    (np.zeros((3, 2), np.int64), np.zeros((1, 2)), TypeError, "float32 or float64"),
])
@pytest.mark.parametrize("function", [kmeans.kmeans_pass, kmeans.kmeans_counts_cost])
def test_bad_shapes_and_dtypes_are_refused(function, x, c, error, match):
    with pytest.raises(error, match=match):
        function(x, c)


# --------------------------------------------------------------------------- plans and grid


H200 = {"MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233_472, "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
        "MAX_REGISTERS_PER_MULTIPROCESSOR": 65_536, "MAX_BLOCKS_PER_MULTIPROCESSOR": 32}


def test_resident_blocks_take_the_tightest_limit():
    # 256 threads x 64 registers: 4 blocks fill the register file (65,536)
    assert kmeans.resident_blocks(256, 1024, H200) == 4
    # shared memory: 233,472 // (44 KiB + 1 KiB reserved) = 5
    assert kmeans.resident_blocks(128, 44 * 1024, H200) == 5
    # threads: 2048 // 1024 = 2; blocks: at most 32 of 32 threads
    assert kmeans.resident_blocks(1024, 0, dict(H200, MAX_REGISTERS_PER_MULTIPROCESSOR=2**20)) == 2
    assert kmeans.resident_blocks(32, 0, H200) == 32
    # a smaller GPU's limits
    assert kmeans.resident_blocks(256, 40 * 1024, dict(
        H200, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=102_400)) == 2


def test_the_target_pass_fits_and_its_grid_fills_the_h200_without_oversubscribing():
    plan = kmeans.pass_plan(np.float32, 32, 16)
    assert plan.staged and plan.held and plan.threads == 256
    assert plan.shared_bytes <= kmeans.SHARED_BYTES
    per_sm = kmeans.resident_blocks(plan.threads, plan.shared_bytes, H200)
    assert per_sm * plan.shared_bytes <= H200["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"]
    assert per_sm * plan.threads * kmeans.REGISTERS_PER_THREAD <= 65_536
    assert kmeans.grid_blocks(100_000_000, plan, per_sm, H200) == 132 * per_sm
    assert kmeans.grid_blocks(1000, plan, per_sm, H200) == 4  # no idle block


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_plan_fits_its_shared_memory_in_whole_warps(dtype):
    item = np.dtype(dtype).itemsize
    for d in (1, 2, 3, 8, 31, 32, 33, 64, 100, 500, 3000):
        for k in (1, 2, 5, 16, 64, 300, 2048, 10_000):
            plan = kmeans.pass_plan(dtype, d, k)
            assert plan.shared_bytes <= kmeans.SHARED_BYTES and plan.threads % 32 == 0
            assert 32 <= plan.threads <= 256
            if plan.held:
                assert plan.capacity >= k
            if d <= 16 and k <= 64:
                assert plan.held and plan.staged
        plan = kmeans.counts_cost_plan(dtype, d)
        assert plan.shared_bytes <= kmeans.SHARED_BYTES and plan.threads % 32 == 0
        assert 1 <= plan.capacity <= kmeans.CANDIDATE_TILE_ROWS
        assert plan.staged == (32 * (d | 1) * item <= (kmeans.SHARED_BYTES - 64) // 2)
    assert kmeans.counts_cost_plan(dtype, 20_000) is None  # not one row: the pass kernel's way


@pytest.mark.parametrize("d", [1, 2, 3, 16, 31, 32, 33, 64])
def test_padded_rows_start_in_distinct_banks(d):
    stride = d | 1
    assert stride >= d and stride % 2 == 1
    # 32 lanes reading 4-byte elements from their own rows: 32 banks
    assert len({(lane * stride) % 32 for lane in range(32)}) == 32
    # 8-byte elements are served a half-warp at a time: 16 lanes, 16 distinct bank pairs
    assert len({(lane * stride * 2) % 32 for lane in range(16)}) == 16


# --------------------------------------------------------------------------- the simulator


SIMULATED = SETUP + """
import numpy as np
from numba import cuda
import fake_cupy
sys.path.insert(0, "tests/kernels")
import simwarp
simwarp.install()
from daskgpu.kernels import kmeans
import test_kernel_kmeans as t

def on_host(arrays):
    return [a.get() if hasattr(a, "get") else a.copy_to_host() for a in arrays]

def check(x, c, devices=(cuda.to_device,)):
    rtol = 1e-12 if x.dtype == np.float64 else 1e-6
    want = t.numpy_pass(x, c)
    host = kmeans.kmeans_pass(x, c)
    t.assert_pass_equal(host, want, rtol)
    host_cc = kmeans.kmeans_counts_cost(x, c)
    t.assert_counts_cost_equal(host_cc, want, rtol)
    for to_device in devices:
        device = to_device(x)
        got = on_host(kmeans.kmeans_pass(device, c))
        t.assert_pass_equal(got, want, rtol)
        np.testing.assert_array_equal(got[1], host[1])
        got = on_host(kmeans.kmeans_counts_cost(device, c))
        t.assert_counts_cost_equal(got, want, rtol)
        np.testing.assert_array_equal(got[0], host_cc[0])
"""

SIMULATED_CASES = SIMULATED + """
# 300 points over 2 blocks of 256 threads (the second tile holds 44 points), Numba and CuPy
x, c = t.blobs(300, 3, 5, 1)
check(x, c, (cuda.to_device, fake_cupy.asarray))
assert any(ptr == fake_cupy.STREAM_PTR for ptr, _ in fake_cupy.streams)  # CuPy's stream
# the rest in blocks of 64 threads (fewer threads to simulate)
kmeans.MAX_THREADS = 64
x = x[:150]
check(x.astype(np.float32), c)
check(x[:7], c)                       # k > points in the block, empty clusters
check(x[:40], c[:1])                  # k = 1
check(np.zeros((0, 3)), c)            # no points
check(np.zeros((5, 0)), c[:, :0])     # no features: all nearest the first
check(x[:, :1].copy(), c[:, :1])      # one feature
# ties: every point equally far from centroids 1 and 3; 0, 2 and 4 empty
tie = np.array([[0.0, 1.0], [0.0, -2.0], [0.0, 0.0]] * 20)
check(tie, np.array([[100.0, 0.0], [1.0, 0.0], [50.0, 50.0], [-1.0, 0.0], [1.0, 0.0]]))
# NaN and infinite coordinates inside a tile, and float32 squares that overflow
far, c_far = t.far_points()
check(far, c_far)
check(np.concatenate([x[:30].astype(np.float32), far, x[30:60].astype(np.float32)]),
      np.concatenate([c_far, c]))
check(far.astype(np.float64), c_far)
# every lane of a warp with its own nearest (64 points, each its own centroid), then all alike
check(x[:64], x[:64])
check(np.repeat(x[:1], 64, axis=0), c)
# k-means||: more candidates than a tile (64 rows): 2 tiles, the last partial
check(x, x[::2])
# a non-contiguous view of points
check(np.asfortranarray(x), c)
assert simwarp.calls["shfl_down_sync"] > 0 and simwarp.calls["match_any_sync"] > 0
print("ok")
"""

SIMULATED_PLANS = SIMULATED + """
kmeans.MAX_THREADS = 64
x, c = t.blobs(150, 3, 5, 2)
big_k = np.concatenate([c] * 13)[:64] + np.arange(64)[:, None] * 1e-3
plans = []
def planned(budget, d, k):
    kmeans.SHARED_BYTES = budget
    plans.append((kmeans.pass_plan(np.float64, d, k), kmeans.counts_cost_plan(np.float64, d)))
    return plans[-1]

# held, staged in 64 threads; candidate tiles of 52 rows in one warp
p, q = planned(2048, 3, 5)
assert p.held and p.staged and p.threads == 64, p
assert q.staged and q.threads == 32 and q.capacity == 52, q
check(x, c)
check(x, x[::3])
# held, points read in place; candidates 24 rows a tile, read in place
p, q = planned(600, 3, 5)
assert p.held and not p.staged and p.threads == 64, p
assert not q.staged and q.capacity == 24, q
check(x, c)
check(x, x[::3])
# centroids and sums in global memory, points staged in one warp
p, _ = planned(1000, 3, 64)
assert not p.held and p.staged and p.threads == 32, p
check(x, big_k)
# candidates one row at a time
_, q = planned(48, 3, 5)
assert q.capacity == 1, q
check(x[:100], c)
# neither: the old global-memory path; counts and cost through the pass kernel
p, q = planned(32, 3, 64)
assert not p.held and not p.staged and q is None, (p, q)
check(x, big_k)
check(x.astype(np.float32), big_k)
kmeans.SHARED_BYTES = 48 * 1024
# one block, one SM: every block strides over several tiles
kmeans._SM90_LIMITS.update(MULTIPROCESSOR_COUNT=1, MAX_BLOCKS_PER_MULTIPROCESSOR=1)
check(np.concatenate([x, x, x]), c)
check(np.concatenate([x, x, x]).astype(np.float32), x[::3])
print("ok")
"""


def test_cuda_kernels_in_the_simulator_equal_the_twins_and_numpy():
    assert run_in_simulator(SIMULATED_CASES).strip().endswith("ok")


def test_every_kind_of_plan_runs_in_the_simulator():
    assert run_in_simulator(SIMULATED_PLANS).strip().endswith("ok")
