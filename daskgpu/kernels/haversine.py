"""Great-circle distance in kilometres between pairs of points given in degrees (haversine).

For points ``(φ1, λ1)`` and ``(φ2, λ2)`` on a sphere of the Earth's mean radius
(``EARTH_RADIUS_KM``), in the numerically stable haversine form::

    a = sin²(Δφ/2) + cos φ1 cos φ2 sin²(Δλ/2)
    d = 2 R asin(sqrt(a))      with a clamped to [0, 1]

The clamp keeps ``asin`` from giving NaN where rounding pushes ``a`` just above 1 (the textbook
product form does, for antipodal points; latitudes outside [-90, 90] might); NaN (or ±inf) in
any input still gives NaN. Everything is computed in float64, whatever the
input dtype (float32 or float64), so two nearby float32 points are subtracted without losing
digits.

``haversine_km`` dispatches on its input:

- a device array (CuPy, a cuDF Series through its ``.values``, anything with
  ``__cuda_array_interface__``, a Numba device array): ``haversine_kernel`` (in
  :mod:`daskgpu.kernels.haversine_cuda`, loaded with numba.cuda on first use), one grid-stride
  pass in which each thread reads its 4 coordinates and writes 1 distance. The same formula as a
  CuPy expression (``haversine_numpy`` on CuPy arrays) launches about twenty element-wise
  kernels (the differences, the radians conversions and halvings, 2 sines, 2 cosines, the
  products and the sum, the clamp, the square root, the arcsine, the scaling), each reading one
  or two full-size arrays and writing a full-size temporary: some ten intermediate arrays and
  about 50 passes through device memory, where the fused kernel makes 4 reads and 1 write per
  point, allocates only the output, and keeps every intermediate in registers.
- a NumPy array (or a pandas Series, through ``.to_numpy()``): ``_haversine_cpu``, the
  ``numba.njit(parallel=True)`` twin, the same fused pass split across cores.

The twin and the kernel share one function, ``distance``, which evaluates ``cos φ1 cos φ2`` as
``cos²((φ1 + φ2)/2) - sin²(Δφ/2)`` (an identity): three sines and cosines per point instead of
four, the largest cost on a CPU. For latitudes in [-90, 90] that is as accurate as the textbook
product (``cos²`` of the mean latitude is never below ``sin²(Δφ/2)``, so ``a`` keeps a relative
error of a few ulp); the results agree with ``haversine_numpy``, the textbook form in vectorised
NumPy (the reference and the benchmark baseline), to about 1e-12 relative, except next to
antipodal points, where ``asin(sqrt(a))`` turns an ulp of ``a`` into about 1e-4 km for any
implementation.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from daskgpu.kernels import launch

__all__ = ["EARTH_RADIUS_KM", "haversine_km", "haversine_numpy"]

#: Mean Earth radius (IUGG), in kilometres.
EARTH_RADIUS_KM = 6371.0088
# Degrees to radians, the one constant used by every implementation (as numpy.radians does).
_RAD = math.pi / 180.0
_DIAMETER_KM = 2.0 * EARTH_RADIUS_KM
_NAMES = ("lat1", "lon1", "lat2", "lon2")


def distance(lat1, lon1, lat2, lon2):
    """Distance in km between two points in degrees (any float type; computed in float64).

    ``a`` is clamped with comparisons that are false for NaN, so NaN passes through.
    """
    p1 = np.float64(lat1)
    p2 = np.float64(lat2)
    s_phi = math.sin((p2 - p1) * _RAD / 2.0)
    s_lam = math.sin((np.float64(lon2) - np.float64(lon1)) * _RAD / 2.0)
    c_mid = math.cos((p1 + p2) * _RAD / 2.0)
    # cos φ1 cos φ2 = cos²((φ1 + φ2)/2) - sin²(Δφ/2): one cosine fewer than the textbook form
    a = s_phi * s_phi + (c_mid * c_mid - s_phi * s_phi) * s_lam * s_lam
    a = 1.0 if a > 1.0 else a
    a = 0.0 if a < 0.0 else a
    return _DIAMETER_KM * math.asin(math.sqrt(a))


distance_cpu = numba.njit(inline="always", cache=True, fastmath=False)(distance)


@numba.njit(parallel=True, cache=True, fastmath=False)
def _haversine_cpu(lat1, lon1, lat2, lon2, out):  # pragma: no cover - compiled
    """CPU twin: one fused pass, the points split across cores, into the preallocated ``out``."""
    for i in prange(out.shape[0]):
        out[i] = distance_cpu(lat1[i], lon1[i], lat2[i], lon2[i])


def _is_device(x) -> bool:
    # The CUDA simulator's arrays have copy_to_host but no __cuda_array_interface__.
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host")


def _unwrap(x):
    """An array from ``x``: NumPy and device arrays as they are, Series through their values.

    A cuDF Series (or Index, or column) goes through ``.values``, a CuPy array on the device (no
    copy), even though it has a ``__cuda_array_interface__`` itself: the result is then a CuPy
    array on CuPy's current stream. A pandas Series goes through ``.to_numpy()`` (a nullable
    ``Float64`` one with ``<NA>`` as NaN); anything else through ``numpy.asarray``.
    """
    if isinstance(x, np.ndarray) or hasattr(x, "copy_to_host"):  # NumPy, Numba device array
        return x
    values = getattr(x, "values", None)
    if values is not None and _is_device(values):
        return values
    if _is_device(x):
        return x
    if hasattr(x, "to_numpy"):
        numpy_dtype = getattr(getattr(x, "dtype", None), "numpy_dtype", None)
        if numpy_dtype is not None and np.dtype(numpy_dtype).kind == "f":
            return x.to_numpy(dtype=numpy_dtype, na_value=np.nan)
        return x.to_numpy()
    return np.asarray(x)


def _checked(args) -> tuple[list, int]:
    """The four inputs as arrays, all on the host or all on the device, 1-D, equal lengths."""
    arrays = [_unwrap(x) for x in args]
    host = [launch.on_host(x) for x in arrays]
    if any(host) and not all(host):
        where = ", ".join(f"{n} on the {'host' if h else 'device'}"
                          for n, h in zip(_NAMES, host, strict=True))
        raise TypeError(f"haversine_km needs all four arrays on the host or all on the device, "
                        f"got {where}")
    shapes = [tuple(x.shape) for x in arrays]
    for name, shape in zip(_NAMES, shapes, strict=True):
        if len(shape) != 1:
            raise ValueError(f"haversine_km needs 1-D arrays, got {name} of shape {shape}")
    lengths = [s[0] for s in shapes]
    if len(set(lengths)) != 1:
        given = ", ".join(f"{n}={k}" for n, k in zip(_NAMES, lengths, strict=True))
        raise ValueError(f"haversine_km needs arrays of equal length, got lengths {given}")
    for name, x in zip(_NAMES, arrays, strict=True):
        dtype = np.dtype(x.dtype)
        if dtype.kind != "f" or dtype.itemsize not in (4, 8):
            raise TypeError(f"haversine_km needs float32 or float64 degrees, got {name} of "
                            f"dtype {dtype}")
    return arrays, lengths[0]


def _host(arrays, n: int) -> np.ndarray:
    # Numba reads native byte order only; any layout and read-only arrays are fine as they are.
    arrays = [x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("=")) for x in arrays]
    out = np.empty(n, np.float64)
    if n:
        _haversine_cpu(*arrays, out)
    return out


def _device(arrays, n: int):
    from daskgpu.kernels import haversine_cuda  # numba.cuda loads only where a device is used

    first = arrays[0]
    stream = launch.stream_for(first)
    out = launch.like(first, (n,), np.float64)
    if n == 0:
        return out
    views = [launch.to_numba(x) for x in (*arrays, out)]
    blocks, threads = launch.grid_1d(n)
    haversine_cuda.haversine_kernel[blocks, threads, stream](*views)
    return out


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km between ``(lat1, lon1)`` and ``(lat2, lon2)``, elementwise.

    Haversine on a sphere of radius ``EARTH_RADIUS_KM`` (6371.0088 km, the mean radius),
    computed in float64 in one fused pass (see the module docstring). NumPy inputs (and pandas
    Series) run the parallel CPU twin; device inputs (CuPy arrays, cuDF Series, anything with
    ``__cuda_array_interface__``, Numba device arrays) launch the CUDA kernel on the current
    device and stream.

    Parameters
    ----------
    lat1, lon1, lat2, lon2 : array_like
        1-D float32 or float64 arrays of equal length, in degrees, all on the host or all on
        the device; any strides. Latitudes belong in [-90, 90]; longitudes may take any value
        (only differences matter, so 179.5 and -179.5 are 1 degree apart).

    Returns
    -------
    numpy.ndarray or device array
        float64 distances in km, in the same memory as ``lat1`` (a CuPy array for CuPy or cuDF
        inputs). NaN where any of the four inputs is NaN; antipodal points give
        ``pi * EARTH_RADIUS_KM``, never NaN.

    Raises
    ------
    ValueError
        If an input is not 1-D, or the lengths differ (the message names them).
    TypeError
        If an input is not float32 or float64, or some inputs are on the host and some on the
        device.
    """
    arrays, n = _checked((lat1, lon1, lat2, lon2))
    if launch.on_host(arrays[0]):
        with launch.worker_threads():
            return _host(arrays, n)
    return _device(arrays, n)


def haversine_numpy(lat1, lon1, lat2, lon2):
    """The same haversine distance by vectorised NumPy: the reference for ``haversine_km``.

    Parameters
    ----------
    lat1, lon1, lat2, lon2 : numpy.ndarray
        Coordinates in degrees, broadcastable against each other; converted to float64.

    Returns
    -------
    numpy.ndarray
        float64 distances in km (NaN where an input is NaN).
    """
    p1 = np.asarray(lat1, dtype=np.float64)
    p2 = np.asarray(lat2, dtype=np.float64)
    l1 = np.asarray(lon1, dtype=np.float64)
    l2 = np.asarray(lon2, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # sin(±inf) is NaN, as documented: no warning
        s_phi = np.sin((p2 - p1) * _RAD / 2.0)
        s_lam = np.sin((l2 - l1) * _RAD / 2.0)
        a = s_phi * s_phi + np.cos(p1 * _RAD) * np.cos(p2 * _RAD) * s_lam * s_lam
        return _DIAMETER_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
