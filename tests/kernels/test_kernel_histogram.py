"""daskgpu.kernels.histogram: CPU twin and CUDA kernel (simulator) against numpy.histogram."""

from __future__ import annotations

import numpy as np
import pytest
from cudasim import run_in_simulator
from fake_cupy import SETUP
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daskgpu.kernels import histogram as hist_mod
from daskgpu.kernels.histogram import histogram

SIZES = [0, 1, 7, 1000, 100_003]
BINS = [1, 3, 256, 5000]


def assert_like_numpy(x, lo, hi, bins):
    """The twin's counts equal numpy.histogram's exactly; its last entry counts the NaNs."""
    got = histogram(x, lo, hi, bins)
    want, _ = np.histogram(x, bins=bins, range=(lo, hi))
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.int64 and got.shape == (bins + 1,)
    np.testing.assert_array_equal(got[:bins], want)
    assert got[bins] == np.count_nonzero(np.isnan(x))
    return got


def special_values(lo, hi, bins, dtype):
    """Edges themselves, their neighbours, NaN, ±inf and values outside [lo, hi]."""
    edges = np.linspace(lo, hi, bins + 1, dtype=np.result_type(lo, hi, np.empty(0, dtype)))
    near = np.concatenate([np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    other = np.array([np.nan, np.nan, np.inf, -np.inf, lo - 1.0, hi + 1.0, -1e30, 1e30, lo, hi])
    return np.concatenate([edges, near.astype(dtype), other]).astype(dtype)


# --- CPU twin ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("bins", BINS)
def test_twin_random_normal(dtype, size, bins):
    x = np.random.default_rng(size + bins).normal(size=size).astype(dtype)
    assert_like_numpy(x, -2.5, 2.5, bins)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bins", BINS)
@pytest.mark.parametrize("lo, hi", [(-1.0, 1.0), (0.1, 0.7), (-3, 2), (1e-3, 1e3)])
def test_twin_edges_nan_inf_outside(dtype, bins, lo, hi):
    x = special_values(lo, hi, bins, dtype)
    got = assert_like_numpy(x, lo, hi, bins)
    assert got[bins] == 2
    # the maximum value hi is in the last bin, as in numpy
    assert histogram(np.array([hi], dtype), lo, hi, bins)[bins - 1] == 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_twin_max_value_and_ranges_from_data(dtype):
    x = np.random.default_rng(1).normal(size=10_001).astype(dtype)
    lo, hi = float(x.min()), float(x.max())
    got = assert_like_numpy(x, lo, hi, 256)
    assert got[:256].sum() == x.size


def test_twin_nan_only_and_out_of_range_only():
    x = np.array([np.nan] * 5 + [np.inf, -np.inf, 5.0, -5.0])
    got = assert_like_numpy(x, -1.0, 1.0, 4)
    np.testing.assert_array_equal(got, [0, 0, 0, 0, 5])


@pytest.mark.parametrize("lo, hi", [(np.float32(-0.3), np.float32(0.7)), (np.float64(0.1), 0.7),
                                    (-1, 3), (np.int64(0), np.int64(10))])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_twin_numpy_scalar_and_int_ranges(lo, hi, dtype):
    x = np.concatenate([np.random.default_rng(2).uniform(-1, 11, 5000),
                        special_values(lo, hi, 13, dtype)]).astype(dtype)
    assert_like_numpy(x, lo, hi, 13)


def test_twin_non_contiguous_and_2d():
    rng = np.random.default_rng(3)
    x = rng.normal(size=30_001)
    x[::11] = np.nan
    assert_like_numpy(x[::3], -2.0, 2.0, 256)  # 1-D strided
    a = rng.normal(size=(301, 203)).astype(np.float32)
    assert_like_numpy(a, -2.0, 2.0, 100)  # 2-D C-contiguous
    assert_like_numpy(a.T, -2.0, 2.0, 100)  # transposed: F-contiguous
    assert_like_numpy(a[::2, 1::3], -2.0, 2.0, 100)  # neither
    assert_like_numpy(rng.normal(size=(4, 5, 6)).transpose(1, 2, 0)[:, ::2], -1.0, 1.0, 7)
    assert_like_numpy(x.astype(">f8"), -2.0, 2.0, 256)  # non-native byte order
    assert_like_numpy(np.array(0.5), 0.0, 1.0, 4)  # 0-d


def test_twin_compiles_once_per_signature():
    x = np.random.default_rng(4).normal(size=50_000)
    histogram(x, -1.0, 1.0, 10)
    signatures = list(hist_mod._histogram_cpu.signatures)
    for size, bins, (lo, hi) in [(10, 3, (0.0, 1.0)), (70_000, 256, (-3.0, 3.0)),
                                 (1, 5000, (-1e3, 1e3)), (0, 1, (0.5, 0.6))]:
        histogram(np.random.default_rng(size).normal(size=size), lo, hi, bins)
        histogram(np.random.default_rng(size).normal(size=(size, 2)), lo, hi, bins)
    assert hist_mod._histogram_cpu.signatures == signatures


@pytest.mark.parametrize("lo, hi, bins", [
    (0.0, 1.0, 256), (-0.3, 0.7, 13), (np.float32(-0.3), np.float32(0.7), 13),
    (1e3, 1e3 + 7.0, 999), (-5e5, 3e-3, 4096), (np.float64(0.1), 0.7, 300),
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_twin_shortcut_is_exact_next_to_every_edge(lo, hi, bins, dtype):
    """Values a few units of rounding either side of each edge, where a shortcut would slip."""
    edges = np.linspace(lo, hi, bins + 1, dtype=np.result_type(lo, hi, np.empty(0, dtype)))
    around = [edges.astype(dtype)]
    for direction in (-np.inf, np.inf):
        step = edges.astype(dtype)
        for _ in range(40):
            step = np.nextafter(step, np.asarray(direction, dtype))
            around.append(step)
    exact = np.linspace(float(lo), float(hi), bins + 1)
    spread = (float(hi) - float(lo)) / bins * np.array([1e-12, 1e-9, 1e-6, 1e-4, 1e-2])
    near = (exact[:, None] + np.concatenate([spread, -spread])[None, :]).ravel()
    x = np.concatenate([*around, near.astype(dtype)])
    x = np.random.default_rng(bins).permutation(x)
    assert_like_numpy(x, lo, hi, bins)


def test_twin_shortcut_steps_aside_where_rounding_spans_a_bin():
    # float32 edges 1 apart around 1e4 with a million bins: float32 cannot place values in
    # bins that narrow, so every value takes numpy's own path (and still matches it)
    assert hist_mod._sure_margin(np.dtype(np.float32), 1e4, 1e4 + 1.0, 10**6)[2] == 1.0
    assert hist_mod._sure_margin(np.dtype(np.float64), 0.0, 1.0, 256)[2] < 1e-10
    x = np.random.default_rng(9).uniform(1e4, 1e4 + 1.0, 20_000).astype(np.float32)
    assert_like_numpy(x, 1e4, 1e4 + 1.0, 1000)


@st.composite
def histogram_cases(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    lo = draw(st.floats(-1e4, 1e4))
    width = draw(st.floats(1e-2, 1e5))
    hi = lo + width
    assume(hi > lo)
    bins = draw(st.integers(1, 300))
    edges = np.linspace(lo, hi, bins + 1)
    element = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(lo - width / 4, hi + width / 4),
        st.sampled_from([*edges.tolist(), lo, hi, np.nan, np.inf, -np.inf]),
    )
    values = draw(st.lists(element, max_size=300))
    with np.errstate(over="ignore"):
        x = np.array(values, dtype=np.float64).astype(dtype)
    return x, lo, hi, bins


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histogram_cases())
def test_twin_matches_numpy_hypothesis(case):
    x, lo, hi, bins = case
    try:
        np.histogram(x, bins=bins, range=(lo, hi))
    except ValueError as e:  # a range too narrow for the bins in this precision
        assert "Too many bins" in str(e)
        with pytest.raises(ValueError, match="too many bins for the range"):
            histogram(x, lo, hi, bins)
        return
    assert_like_numpy(x, lo, hi, bins)


# --- argument checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, bins, match", [
    (0.0, 1.0, 0, "bins must be >= 1"),
    (0.0, 1.0, -3, "bins must be >= 1"),
    (1.0, 1.0, 10, "lo must be less than hi"),
    (2.0, 1.0, 10, "lo must be less than hi"),
    (np.nan, 1.0, 10, "lo must be finite"),
    (0.0, np.inf, 10, "hi must be finite"),
    (-np.inf, 0.0, 10, "lo must be finite"),
    (1.0, 1.0 + 1e-15, 1000, "too many bins for the range"),
])
def test_bad_arguments_value_error(lo, hi, bins, match):
    with pytest.raises(ValueError, match=match):
        histogram(np.zeros(3), lo, hi, bins)


@pytest.mark.parametrize("x, lo, hi, bins, match", [
    (np.zeros(3), 0.0, 1.0, 2.5, "bins must be an integer"),
    (np.zeros(3), 0.0, 1.0, True, "bins must be an integer"),
    (np.zeros(3), "0", 1.0, 10, "lo must be a real number"),
    (np.zeros(3), 0.0, None, 10, "hi must be a real number"),
    (np.zeros(3, np.int64), 0.0, 1.0, 10, "float32 or float64"),
    (np.zeros(3, np.float16), 0.0, 1.0, 10, "float32 or float64"),
    (np.zeros(3, np.complex128), 0.0, 1.0, 10, "float32 or float64"),
])
def test_bad_arguments_type_error(x, lo, hi, bins, match):
    with pytest.raises(TypeError, match=match):
        histogram(x, lo, hi, bins)


# --- CUDA kernels ---------------------------------------------------------------------------------

def test_kernels_type_and_lower_for_a_real_gpu():
    """The simulator runs kernels as Python; this compiles them for the real CUDA target."""
    import numba

    if numba.config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda is the simulator in this process")
    try:
        from numba.cuda import types
        from numba.cuda.compiler import compile_cuda
    except ImportError as e:  # pragma: no cover - numba-cuda moved its compiler
        pytest.skip(f"numba-cuda's compiler is not where this test expects it: {e}")
    for kernel in (hist_mod._histogram_shared, hist_mod._histogram_global):
        for data, scale in [(types.float64, types.float64), (types.float32, types.float64),
                            (types.float32, types.float32)]:
            sig = (types.Array(data, 1, "A"), types.Array(data, 1, "C"), data, data, data,
                   scale, scale, types.int64, types.Array(types.int64, 1, "C"))
            cres = compile_cuda(kernel.py_func, types.void, sig, cc=(9, 0))
            ir = cres.library.get_llvm_str()
            assert "atomicrmw add" in ir
            assert "fast" not in ir.split("fdiv", 1)[1].split("\n", 1)[0]  # IEEE division


SIMULATOR_CHECKS = """
import numpy as np
from numba import cuda
from daskgpu.kernels import histogram as mod
from daskgpu.kernels.histogram import histogram

rng = np.random.default_rng(11)
launches = []
for name in ("_histogram_shared", "_histogram_global"):
    kernel = getattr(mod, name)
    class Counting:
        def __init__(self, kernel, name):
            self.kernel, self.name = kernel, name
        def __getitem__(self, config):
            launches.append((self.name, config[0], config[1]))
            return self.kernel[config]
    setattr(mod, name, Counting(kernel, name))

def check(x, lo, hi, bins, host=None):
    host = x if host is None else host
    d = x if hasattr(x, "copy_to_host") else cuda.to_device(x)
    out = histogram(d, lo, hi, bins)
    assert hasattr(out, "copy_to_host"), type(out)
    got = out.copy_to_host()
    assert got.dtype == np.int64 and got.shape == (bins + 1,)
    want = np.histogram(host, bins=bins, range=(lo, hi))[0]
    np.testing.assert_array_equal(got[:bins], want)
    assert got[bins] == np.count_nonzero(np.isnan(host))
    np.testing.assert_array_equal(got, histogram(np.ascontiguousarray(host), lo, hi, bins))
    return got

def special(lo, hi, bins, dtype):
    edges = np.linspace(lo, hi, bins + 1, dtype=np.result_type(lo, hi, np.empty(0, dtype)))
    near = np.concatenate([np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    other = [np.nan, np.nan, np.inf, -np.inf, lo - 1.0, hi + 1.0, lo, hi, hi]
    return np.concatenate([edges, near.astype(dtype), np.array(other, dtype)]).astype(dtype)

# float64, 1000 values (not a multiple of the 256-thread block): normal data with edges,
# the maximum value, NaN, +-inf and values outside the range mixed in
x = rng.normal(size=1000)
s = special(-2.0, 2.0, 16, np.float64)
x[rng.choice(1000, s.size, replace=False)] = s
got = check(x, -2.0, 2.0, 16)
assert got[16] == np.count_nonzero(np.isnan(x)) > 0
assert got[15] >= 2  # hi itself, twice, in the last bin
# float32 (float32 arithmetic, as numpy), a range whose float32 rounding matters
x32 = rng.uniform(0.0, 1.0, 700).astype(np.float32)
s = special(0.1, 0.7, 7, np.float32)
x32[:s.size] = s
check(x32, 0.1, 0.7, 7)
# smaller than one block; the maximum value and NaN only
check(np.array([3.0, np.nan, 1.0, 3.0, -np.inf, np.inf, 2.0]), 1.0, 3.0, 3)
# exactly SHARED_BINS bins: still the shared-memory kernel
check(rng.normal(size=300), -3.0, 3.0, mod.SHARED_BINS)
# more bins than fit in shared memory: the global-atomics kernel
check(x, -2.0, 2.0, mod.SHARED_BINS + 904)
# non-contiguous host arrays copied to the device: a transposed 2-D array (F-contiguous on
# the device) and a strided slice (made contiguous first, as cuda.to_device requires)
a = rng.normal(size=(24, 31))
a[3, ::4] = np.nan
check(a.T, -1.5, 1.5, 9)
check(np.ascontiguousarray(x[::3]), -2.0, 2.0, 10, host=x[::3])
# device-side views: 1-D strided and 2-D neither C nor F contiguous
d = cuda.to_device(x)
check(d[::3], -2.0, 2.0, 10, host=x[::3])
check(cuda.to_device(a)[::2, ::3], -1.5, 1.5, 9, host=a[::2, ::3])
# empty input: zeros, no launch
n_before = len(launches)
np.testing.assert_array_equal(histogram(cuda.to_device(np.empty(0)), 0.0, 1.0, 4).copy_to_host(),
                              np.zeros(5, np.int64))
assert len(launches) == n_before
names = [name for name, _, _ in launches]
assert names.count("_histogram_global") == 1, launches
assert ("_histogram_shared", 4, 256) in launches, launches  # 1000 values: 4 blocks of 256
assert ("_histogram_shared", 1, 256) in launches, launches  # 7 values: 1 block
print("OK", len(launches), "launches")
"""


def test_cuda_kernels_in_simulator():
    out = run_in_simulator(SIMULATOR_CHECKS)
    assert out.startswith("OK")


# --- CuPy input, routed as on a GPU (a stand-in for CuPy in the simulator: tests/fake_cupy.py) ----

CUPY_INPUT = SETUP + """
import numpy as np
from numba import cuda
import fake_cupy
from daskgpu.kernels import histogram as mod

fake_cupy.record(mod, "_histogram_shared", "_histogram_global")
rng = np.random.default_rng(5)
x = rng.normal(size=(20, 50))
x[0, :3] = np.nan
d = fake_cupy.asarray(x)


def run(bins):
    del fake_cupy.allocations[:], fake_cupy.conversions[:], fake_cupy.launches[:]
    out = mod.histogram(d, -2.0, 2.0, bins)
    assert isinstance(out, fake_cupy.ndarray), type(out)
    got = out.get()
    np.testing.assert_array_equal(got[:bins], np.histogram(x, bins, range=(-2.0, 2.0))[0])
    assert got[bins] == 3
    return out
"""

EDGES_FROM_CUPY = CUPY_INPUT + """
def refuse(*args, **kwargs):
    raise AssertionError("allocated by numba.cuda, outside CuPy's memory pool")

cuda.to_device = cuda.device_array = cuda.device_array_like = refuse
for bins in (16, mod.SHARED_BINS + 5):
    run(bins)
    edges = np.linspace(-2.0, 2.0, bins + 1)
    made = [a for a in fake_cupy.allocations if a.shape == edges.shape
            and np.array_equal(a.get(), edges)]
    assert len(made) == 1, [a.shape for a in fake_cupy.allocations]
    # the kernels read those edges, through a view of CuPy's array
    for name, config, args in fake_cupy.launches:
        assert args[1] is made[0]._device, name
print("OK edges from CuPy")
"""

NO_SYNC = CUPY_INPUT + """
for bins in (16, mod.SHARED_BINS + 5):
    out = run(bins)
    fake_cupy.assert_launched_on_cupy_stream()
    assert fake_cupy.conversions, "no CuPy array was imported"
    assert all(sync is False for _, sync in fake_cupy.conversions), fake_cupy.conversions
    imported = [a for a, _ in fake_cupy.conversions]
    assert any(a is out for a in imported)  # the counts too, once, not at the launch
    assert len({id(a) for a in imported}) == len(imported), "an array imported twice"
print("OK no sync")
"""


def test_cupy_input_allocates_edges_through_cupy():
    """Scratch arrays for CuPy input come from CuPy's pool, never from numba.cuda's allocator.

    The simulator shows the routing (which allocator is asked), not CuPy's pool itself.
    """
    assert "OK edges from CuPy" in run_in_simulator(EDGES_FROM_CUPY)


def test_cupy_input_is_imported_without_host_sync():
    """Each CuPy array is imported once with ``sync=False``; kernels run on CuPy's stream."""
    assert "OK no sync" in run_in_simulator(NO_SYNC)
