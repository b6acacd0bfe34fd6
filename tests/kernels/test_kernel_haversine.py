"""daskgpu.kernels.haversine: CPU twin and CUDA kernel (simulator) vs NumPy and known distances."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from cudasim import run_in_simulator
from fake_cupy import SETUP
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskgpu.kernels.haversine import EARTH_RADIUS_KM as R
from daskgpu.kernels.haversine import haversine_km, haversine_numpy

HALF_CIRCUMFERENCE = math.pi * R
ONE_DEGREE = HALF_CIRCUMFERENCE / 180.0  # 111.195 km
EPS = np.finfo(np.float64).eps


def tolerance(d):
    """Allowed difference between two float64 computations of the distance ``d`` (km).

    1e-9 relative or 1e-9 km, plus what 8 ulp of the haversine term ``a`` move ``d`` by: that is
    negligible except next to antipodal points, where ``asin(sqrt(a))`` is ill-conditioned (an
    ulp of ``a`` near 1 is worth about 1e-4 km) for any implementation, NumPy's included.
    """
    d = np.asarray(d, np.float64)
    a = np.sin(d / (2 * R)) ** 2
    up = np.arcsin(np.sqrt(np.minimum(1.0, a * (1 + 8 * EPS))))
    down = np.arcsin(np.sqrt(a * (1 - 8 * EPS)))
    return 1e-9 * d + 1e-9 + 2 * R * (up - down)


def assert_close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    excess = np.abs(got[ok] - want[ok]) - tolerance(want[ok])
    assert excess.size == 0 or excess.max() <= 0, (got[ok][excess > 0], want[ok][excess > 0])


def vector_distance(lat1, lon1, lat2, lon2):
    """An independent formula: the angle between unit vectors, atan2(|n1 x n2|, n1 . n2)."""
    def unit(lat, lon):
        p, q = np.radians(np.asarray(lat, np.float64)), np.radians(np.asarray(lon, np.float64))
        return np.stack([np.cos(p) * np.cos(q), np.cos(p) * np.sin(q), np.sin(p)], axis=-1)

    n1, n2 = unit(lat1, lon1), unit(lat2, lon2)
    cross = np.linalg.norm(np.cross(n1, n2), axis=-1)
    return R * np.arctan2(cross, np.sum(n1 * n2, axis=-1))


def twin(*coords, dtype=np.float64):
    arrays = [np.asarray(c, dtype) for c in coords]
    got = haversine_km(*arrays)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == arrays[0].shape
    return got


def random_points(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-90, 90, n), rng.uniform(-180, 180, n),
            rng.uniform(-90, 90, n), rng.uniform(-180, 180, n))


# --- CPU twin: known distances -------------------------------------------------------------------

def test_identical_points_are_zero_apart():
    lat, lon = random_points(1000, 1)[:2]
    lat = np.concatenate([lat, [90.0, -90.0, 0.0, 0.0]])
    lon = np.concatenate([lon, [0.0, 123.0, 180.0, -180.0]])
    np.testing.assert_array_equal(twin(lat, lon, lat, lon), 0.0)
    np.testing.assert_array_equal(haversine_numpy(lat, lon, lat, lon), 0.0)


def test_antipodal_points_are_half_the_circumference_apart_never_nan():
    lat, lon = random_points(10_000, 2)[:2]
    lat2 = -lat
    lon2 = np.where(lon > 0, lon - 180.0, lon + 180.0)
    got = twin(lat, lon, lat2, lon2)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, HALF_CIRCUMFERENCE, rtol=0, atol=1e-3)
    exact = twin([0.0, 90.0, 0.0, 45.0], [0.0, 0.0, -180.0, 10.0],
                 [0.0, -90.0, 0.0, -45.0], [180.0, 0.0, 0.0, -170.0])
    np.testing.assert_allclose(exact, HALF_CIRCUMFERENCE, rtol=1e-15, atol=0)


def test_poles_date_line_and_a_city_pair():
    got = twin([90.0, 90.0, 0.0, 0.0, 48.8566], [0.0, 0.0, 179.5, -179.5, 2.3522],
               [-90.0, 0.0, 0.0, 0.0, 51.5074], [0.0, 77.0, -179.5, 179.5, -0.1278])
    np.testing.assert_allclose(got[:2], [HALF_CIRCUMFERENCE, HALF_CIRCUMFERENCE / 2], rtol=1e-14)
    # across the date line: 1 degree of the equator, not 359
    np.testing.assert_allclose(got[2:4], ONE_DEGREE, rtol=1e-12)
    assert abs(got[4] - 343.5) < 1.0  # Paris to London
    # every meridian meets at a pole: longitude does not matter there
    poles = twin([90.0] * 3 + [-90.0] * 3, [0.0, 45.0, -170.0] * 2, [89.0] * 3 + [-89.0] * 3,
                 [10.0, 10.0, 10.0] * 2)
    np.testing.assert_allclose(poles, ONE_DEGREE, rtol=1e-9)


def test_one_degree_along_a_meridian_and_the_equator():
    lat = np.linspace(-89.0, 89.0, 179)
    lon = np.full_like(lat, 33.0)
    np.testing.assert_allclose(twin(lat - 1.0, lon, lat, lon), ONE_DEGREE, rtol=1e-9)
    lon = np.linspace(-180.0, 179.0, 360)
    equator = np.zeros_like(lon)
    np.testing.assert_allclose(twin(equator, lon, equator, lon + 1.0), ONE_DEGREE, rtol=1e-9)


def test_nan_and_inf_in_any_input_give_nan():
    antipodal = [10.0, 20.0, -10.0, -160.0]  # a NaN must survive the clamp of a at 1
    for k in range(4):
        for bad in (np.nan, np.inf, -np.inf):
            coords = [np.full(3, c) for c in antipodal]
            coords[k][1] = bad
            got = twin(*coords)
            assert np.isnan(got[1]) and not np.isnan(got[[0, 2]]).any(), (k, bad, got)
            assert np.isnan(haversine_numpy(*coords)[1])
    got = twin([np.nan, 0.0], [0.0, np.nan], [0.0, 0.0], [180.0, 180.0])
    assert np.isnan(got).all()


# --- CPU twin: inputs ----------------------------------------------------------------------------

def test_twin_matches_numpy_and_the_vector_formula_on_many_points():
    coords = random_points(200_003, 3)
    got = twin(*coords)
    assert_close(got, haversine_numpy(*coords))
    assert_close(got, vector_distance(*coords))


def test_float32_inputs_are_computed_in_float64():
    coords32 = [c.astype(np.float32) for c in random_points(5001, 4)]
    coords64 = [c.astype(np.float64) for c in coords32]
    got = haversine_km(*coords32)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, haversine_km(*coords64))  # the same float64 arithmetic
    assert_close(got, haversine_numpy(*coords32))
    # two float32 points 1 m apart: no float32 rounding in the difference
    near = haversine_km(np.float32([45.0]), np.float32([7.0]), np.float32([45.000009]),
                        np.float32([7.0]))
    assert_close(near, haversine_numpy(45.0, 7.0, float(np.float32(45.000009)), 7.0)[None])
    # a mix of float32 and float64
    mixed = haversine_km(coords32[0], coords64[1], coords32[2], coords64[3])
    np.testing.assert_array_equal(mixed, got)


def test_empty_input():
    for dtype in (np.float64, np.float32):
        got = haversine_km(*(np.empty(0, dtype) for _ in range(4)))
        assert got.shape == (0,) and got.dtype == np.float64
    assert haversine_numpy(*(np.empty(0) for _ in range(4))).shape == (0,)


def test_pandas_series_inputs():
    coords = random_points(1000, 5)
    want = haversine_km(*coords)
    index = pd.RangeIndex(1000, 2000)  # positions count, not labels
    series = [pd.Series(c, index=index) for c in coords]
    got = haversine_km(*series)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)
    f32 = [s.astype(np.float32) for s in series]
    np.testing.assert_array_equal(haversine_km(*f32),
                                  haversine_km(*(c.astype(np.float32) for c in coords)))
    nullable = [s.astype("Float64") for s in series]
    nullable[2].iloc[7] = pd.NA
    got = haversine_km(*nullable)
    assert np.isnan(got[7]) and np.isnan(got).sum() == 1
    np.testing.assert_array_equal(np.delete(got, 7), np.delete(want, 7))
    # lists work too
    np.testing.assert_array_equal(haversine_km([0.0], [0.0], [0.0], [180.0]), [HALF_CIRCUMFERENCE])


def test_non_contiguous_read_only_and_byte_swapped_inputs():
    big = [c for c in random_points(3000, 6)]
    want = haversine_numpy(*(c[::3] for c in big))
    np.testing.assert_array_equal(haversine_km(*(c[::3] for c in big)),
                                  haversine_km(*(np.ascontiguousarray(c[::3]) for c in big)))
    assert_close(haversine_km(*(c[::3] for c in big)), want)
    assert_close(haversine_km(*(c[::-1] for c in big)), haversine_numpy(*(c[::-1] for c in big)))
    columns = np.stack(big, axis=1)  # 3000 x 4: each column is strided
    assert_close(haversine_km(*columns.T), haversine_numpy(*big))
    read_only = [c.copy() for c in big]
    for c in read_only:
        c.flags.writeable = False
    np.testing.assert_array_equal(haversine_km(*read_only), haversine_km(*big))
    swapped = [c.astype(">f8") for c in big]
    np.testing.assert_array_equal(haversine_km(*swapped), haversine_km(*big))
    before = [c.copy() for c in big]
    haversine_km(*big)
    for c, b in zip(big, before, strict=True):
        np.testing.assert_array_equal(c, b)


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((np.zeros(3), np.zeros(3), np.zeros(4), np.zeros(3)), ValueError,
         r"equal length.*lat1=3, lon1=3, lat2=4, lon2=3"),
        ((np.zeros(3), np.zeros(2), np.zeros(3), np.zeros(3)), ValueError, r"lon1=2"),
        ((np.zeros((2, 3)), np.zeros(6), np.zeros(6), np.zeros(6)), ValueError,
         r"1-D.*lat1 of shape \(2, 3\)"),
        ((np.zeros(3), np.zeros(3), np.zeros(3), np.float64(1.0)), ValueError,
         r"1-D.*lon2 of shape \(\)"),
        ((np.zeros(3, np.int64), np.zeros(3), np.zeros(3), np.zeros(3)), TypeError,
         r"float32 or float64.*lat1 of dtype int64"),
        ((np.zeros(3), np.zeros(3), np.zeros(3, np.float16), np.zeros(3)), TypeError,
         r"lat2 of dtype float16"),
    ],
)
def test_argument_errors(args, error, message):
    with pytest.raises(error, match=message):
        haversine_km(*args)


# --- CPU twin: properties ------------------------------------------------------------------------

@st.composite
def point_arrays(draw, count=2, min_size=0, max_size=40):
    n = draw(st.integers(min_size, max_size))
    lat = hnp.arrays(np.float64, n, elements=st.floats(-90, 90))
    lon = hnp.arrays(np.float64, n, elements=st.floats(-180, 180))
    out = []
    for _ in range(count):
        out += [draw(lat), draw(lon)]
    return out


@settings(max_examples=200, deadline=None)
@given(point_arrays(count=2))
def test_twin_matches_numpy_hypothesis(coords):
    got = haversine_km(*coords)
    want = haversine_numpy(*coords)
    assert_close(got, want)
    assert_close(got, vector_distance(*coords))
    assert ((got >= 0) & (got <= HALF_CIRCUMFERENCE * (1 + 1e-15))).all()


@settings(max_examples=200, deadline=None)
@given(point_arrays(count=2))
def test_symmetric_hypothesis(coords):
    lat1, lon1, lat2, lon2 = coords
    # exactly: the formula is symmetric operation by operation (sin is odd, + and * commute)
    np.testing.assert_array_equal(haversine_km(lat1, lon1, lat2, lon2),
                                  haversine_km(lat2, lon2, lat1, lon1))


@settings(max_examples=200, deadline=None)
@given(point_arrays(count=3, min_size=1))
def test_triangle_inequality_hypothesis(coords):
    lat_a, lon_a, lat_b, lon_b, lat_c, lon_c = coords
    ab = haversine_km(lat_a, lon_a, lat_b, lon_b)
    bc = haversine_km(lat_b, lon_b, lat_c, lon_c)
    ac = haversine_km(lat_a, lon_a, lat_c, lon_c)
    # 1 m: each distance may be off by ~1e-4 km next to antipodal points (see tolerance)
    assert (ac <= ab + bc + 1e-3).all()


# --- CUDA kernel ---------------------------------------------------------------------------------

def test_cuda_kernel_in_simulator():
    out = run_in_simulator(
        """
        import math
        import numpy as np
        from numba import cuda
        from daskgpu.kernels.haversine import EARTH_RADIUS_KM, haversine_km, haversine_numpy

        half = math.pi * EARTH_RADIUS_KM
        rng = np.random.default_rng(0)

        def on_device(*coords, dtype=np.float64):
            host = [np.asarray(c, dtype) for c in coords]
            dev = [cuda.to_device(c) for c in host]
            got = haversine_km(*dev)
            assert hasattr(got, "copy_to_host"), type(got)
            got = got.copy_to_host()
            assert got.dtype == np.float64 and got.shape == host[0].shape
            twin = haversine_km(*host)
            np.testing.assert_allclose(got, twin, rtol=1e-12, atol=1e-9)
            want = haversine_numpy(*host)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-3)  # 1e-3: antipodes
            for d, h in zip(dev, host):
                np.testing.assert_array_equal(d.copy_to_host(), h)  # inputs unchanged
            return got

        cases = 0
        # smaller than a block, not a multiple of the block size, more than one block
        for n in (1, 37, 300):
            for dtype in (np.float64, np.float32):
                on_device(rng.uniform(-90, 90, n), rng.uniform(-180, 180, n),
                          rng.uniform(-90, 90, n), rng.uniform(-180, 180, n), dtype=dtype)
                cases += 1

        special = on_device(
            [0.0, 0.0, 90.0, 0.0, 48.8566, 12.5, 30.0, np.nan, 0.0, 10.0],
            [0.0, 0.0, 0.0, 179.5, 2.3522, -7.0, 40.0, 0.0, 0.0, 20.0],
            [0.0, 0.0, -90.0, 0.0, 51.5074, 12.5, -30.0, 0.0, 0.0, -10.0],
            [0.0, 180.0, 0.0, -179.5, -0.1278, -7.0, -140.0, 0.0, np.nan, -160.0],
        )
        assert special[0] == 0.0 and special[5] == 0.0  # identical points
        np.testing.assert_allclose(special[[1, 2, 6, 9]], half, rtol=1e-12)  # antipodes, poles
        np.testing.assert_allclose(special[3], half / 180, rtol=1e-12)  # across the date line
        assert abs(special[4] - 343.5) < 1.0  # Paris to London
        assert np.isnan(special[7]) and np.isnan(special[8])
        assert not np.isnan(special[[0, 1, 2, 3, 4, 5, 6, 9]]).any()
        cases += 1

        # antipodal points: never NaN
        lat, lon = rng.uniform(-90, 90, 200), rng.uniform(-180, 180, 200)
        anti = on_device(lat, lon, -lat, np.where(lon > 0, lon - 180.0, lon + 180.0))
        assert not np.isnan(anti).any()
        np.testing.assert_allclose(anti, half, rtol=0, atol=1e-3)
        cases += 1

        # empty input: an empty device array, no launch
        empty = haversine_km(*(cuda.to_device(np.zeros(0)) for _ in range(4)))
        assert empty.copy_to_host().shape == (0,)
        cases += 1

        # a strided device view, a mix of float32 and float64
        big = [rng.uniform(-90, 90, 150), rng.uniform(-180, 180, 150),
               rng.uniform(-90, 90, 150).astype(np.float32), rng.uniform(-180, 180, 150)]
        views = [cuda.to_device(c)[::3] for c in big]
        got = haversine_km(*views).copy_to_host()
        np.testing.assert_allclose(got, haversine_km(*(c[::3] for c in big)), rtol=1e-12)
        cases += 1

        # a grid smaller than the input: every thread strides over several points
        from daskgpu.kernels import launch
        grid_1d = launch.grid_1d
        launch.grid_1d = lambda n, threads=32: (3, 32)
        on_device(rng.uniform(-90, 90, 300), rng.uniform(-180, 180, 300),
                  rng.uniform(-90, 90, 300), rng.uniform(-180, 180, 300))
        launch.grid_1d = grid_1d
        cases += 1

        # a cuDF-like Series: its .values is a device array
        class Series:
            def __init__(self, values):
                self.values = values

            def to_numpy(self):
                raise AssertionError("a device Series must not be copied to the host")

        host = [c.astype(np.float64) for c in big]
        got = haversine_km(*(Series(cuda.to_device(c)) for c in host))
        np.testing.assert_allclose(got.copy_to_host(), haversine_km(*host), rtol=1e-12)
        cases += 1

        # errors: host and device mixed, lengths, 2-D
        def raises(error, text, *args):
            try:
                haversine_km(*args)
            except error as e:
                assert text in str(e), str(e)
            else:
                raise AssertionError(f"no {error.__name__}")

        d3, d4 = cuda.to_device(np.zeros(3)), cuda.to_device(np.zeros(4))
        raises(TypeError, "lat2 on the host", d3, d3, np.zeros(3), d3)
        raises(ValueError, "lat1=3, lon1=3, lat2=4, lon2=3", d3, d3, d4, d3)
        raises(ValueError, "1-D", cuda.to_device(np.zeros((3, 1))), d3, d3, d3)
        raises(TypeError, "int32", cuda.to_device(np.zeros(3, np.int32)), d3, d3, d3)
        cases += 1
        print("cases", cases)
        """
    )
    assert "cases 13" in out


@pytest.mark.gpu
def test_cuda_kernel_on_gpu_matches_cpu_twin():
    import cupy

    rng = np.random.default_rng(8)
    for dtype in (np.float64, np.float32):
        for n in (0, 1, 1000, 1_000_003):
            coords = [rng.uniform(-90, 90, n), rng.uniform(-180, 180, n),
                      rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)]
            coords = [c.astype(dtype) for c in coords]
            dev = [cupy.asarray(c) for c in coords]
            got = haversine_km(*dev)
            assert isinstance(got, cupy.ndarray) and got.dtype == np.float64
            # the GPU's libdevice sin/asin differ from the host's by an ulp or so
            assert_close(cupy.asnumpy(got), haversine_km(*coords))
    # on a non-default stream, and through cuDF when it is installed
    coords = random_points(10_000, 9)
    with cupy.cuda.Stream(non_blocking=True):
        got = haversine_km(*(cupy.asarray(c) for c in coords))
        assert_close(cupy.asnumpy(got), haversine_km(*coords))
    try:
        import cudf
    except ImportError:
        return
    series = [cudf.Series(c) for c in coords]
    got = haversine_km(*series)
    assert isinstance(got, cupy.ndarray)
    assert_close(cupy.asnumpy(got), haversine_km(*coords))


# --- CuPy input, routed as on a GPU (a stand-in for CuPy in the simulator: tests/fake_cupy.py) ----

NO_SYNC = SETUP + """
import numpy as np
import fake_cupy
from daskgpu.kernels import haversine as mod
from daskgpu.kernels import haversine_cuda

fake_cupy.record(haversine_cuda, "haversine_kernel")
rng = np.random.default_rng(6)
host = [rng.uniform(-90, 90, 300), rng.uniform(-180, 180, 300),
        rng.uniform(-90, 90, 300).astype(np.float32), rng.uniform(-180, 180, 300)]
dev = [fake_cupy.asarray(c) for c in host]
del fake_cupy.conversions[:]
out = mod.haversine_km(*dev)
assert isinstance(out, fake_cupy.ndarray), type(out)
np.testing.assert_allclose(out.get(), mod.haversine_km(*host), rtol=1e-12)
fake_cupy.assert_launched_on_cupy_stream()
assert len(fake_cupy.launches) == 1, fake_cupy.launches
imported = [a for a, _ in fake_cupy.conversions]
assert [sync for _, sync in fake_cupy.conversions] == [False] * 5, fake_cupy.conversions
assert all(a is b for a, b in zip(imported, [*dev, out], strict=True))
print("OK no sync")
"""


def test_cupy_input_is_imported_without_host_sync():
    """The four CuPy inputs and the output are imported once each with ``sync=False``."""
    assert "OK no sync" in run_in_simulator(NO_SYNC)
