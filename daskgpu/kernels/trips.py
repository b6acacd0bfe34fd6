"""Trip sums by pickup hour and passengers in one pass: distance, filter and group together.

For each trip ``i`` of a partition, given as columns (pickup time as int64 ticks, passengers,
fare and the four coordinates in degrees), ``trip_sums`` keeps it when

- the pickup time is present (not NaT, i.e. not ``INT64_MIN``),
- the passengers are present (not NaN in a float column),
- ``fare > 0`` (so not NaN) and the haversine distance ``> 0`` (so no NaN coordinate),

and adds 1, the fare and the distance to the cell ``(hour, passengers)`` of a small dense table:
``HOURS`` rows by ``PASSENGER_SLOTS + 1`` columns. Passengers ``0 .. PASSENGER_SLOTS - 1`` have a
column each; every other value (negative, larger, or not a whole number) goes to the last column,
``OUTSIDE``, which counts those trips per hour but cannot tell their passengers apart:
``outside_sums`` then groups just those trips exactly, on the host, so that no value is lost or
merged (a partition with none, the usual case, never runs it).

The hour is computed from the ticks arithmetically: ``floor(ticks / ticks_per_hour) mod 24``, with
floor division (numba follows Python's integer semantics on both targets), so times before 1970
get the hour their clock shows. The distance is ``haversine_km``'s own function, so a trip's
distance is the same number whichever way it is computed.

The CUDA kernel (``trip_sums_kernel``, in :mod:`daskgpu.kernels.trips_cuda`, loaded with
numba.cuda on first use) runs a grid-stride loop; each block accumulates into the
table in shared memory (a uint32 count and two float64 sums per cell, shared-memory atomics
contended only within the block), then adds its non-empty cells to the global table with one
atomic each. The CPU twin (``_trip_sums_cpu``, ``numba.njit(parallel=True)``) splits the rows
into contiguous slices, one private table each, summed at the end: no races, and the same cell
function (``cell``) decides every trip on both.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from daskgpu.kernels import launch
from daskgpu.kernels.haversine import distance_cpu, haversine_km

__all__ = ["HOURS", "NAT", "OUTSIDE", "PASSENGER_SLOTS", "outside_sums", "ticks_per_hour",
           "trip_sums"]

HOURS = 24
#: Passenger counts with a column of their own in the dense table: 0 .. PASSENGER_SLOTS - 1.
PASSENGER_SLOTS = 16
#: The table's column for every other passenger count (negative, larger, fractional).
OUTSIDE = PASSENGER_SLOTS
WIDTH = PASSENGER_SLOTS + 1
CELLS = HOURS * WIDTH  # a global constant, as cuda.shared.array's shape must be
#: The int64 value of NaT (a missing time).
NAT = np.iinfo(np.int64).min
# Per-block counters are uint32: no block may see more rows than this.
_MAX_PER_BLOCK = 2**31
# Below this many rows per thread the CPU twin uses fewer threads (start-up dominates).
_MIN_PER_THREAD = 1 << 15
_NAMES = ("ticks", "passengers", "fare", "lat1", "lon1", "lat2", "lon2")
_SECONDS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def cell(t, per_hour, p, f):
    """The table cell of a trip with ticks ``t``, passengers ``p``, fare ``f``; -1: dropped.

    Checks everything but the distance: a present time, present passengers, ``f > 0``.
    """
    if t == NAT or p != p or not f > 0:
        return -1
    hour = (t // per_hour) % HOURS
    slot = OUTSIDE
    if p >= 0 and p < PASSENGER_SLOTS:
        k = int(p)
        if k == p:
            slot = k
    return hour * WIDTH + slot


_cell_cpu = numba.njit(inline="always", cache=True)(cell)


@numba.njit(parallel=True, cache=True, fastmath=False)
def _trip_sums_cpu(ticks, per_hour, passengers, fare, lat1, lon1, lat2, lon2,
                   nchunks):  # pragma: no cover - compiled
    """CPU twin: ``nchunks`` contiguous slices, a private table each, then summed."""
    n = ticks.shape[0]
    counts = np.zeros((nchunks, CELLS), np.int64)
    sums = np.zeros((nchunks, 2, CELLS), np.float64)
    step = (n + nchunks - 1) // nchunks
    for c in prange(nchunks):
        for i in range(c * step, min(n, (c + 1) * step)):
            cell = _cell_cpu(ticks[i], per_hour, passengers[i], fare[i])
            if cell < 0:
                continue
            d = distance_cpu(lat1[i], lon1[i], lat2[i], lon2[i])
            if d > 0:
                counts[c, cell] += 1
                sums[c, 0, cell] += fare[i]
                sums[c, 1, cell] += d
    total_counts = np.zeros(CELLS, np.int64)
    total_sums = np.zeros((2, CELLS), np.float64)
    for c in range(nchunks):
        for j in range(CELLS):
            total_counts[j] += counts[c, j]
            total_sums[0, j] += sums[c, 0, j]
            total_sums[1, j] += sums[c, 1, j]
    return total_counts, total_sums


def ticks_per_hour(dtype) -> int:
    """Ticks of a ``datetime64`` ``dtype`` in one hour (``s``, ``ms``, ``us`` or ``ns`` units).

    Raises
    ------
    TypeError
        For another dtype or unit (convert those to ``datetime64[s]`` first).
    """
    dtype = np.dtype(dtype)
    unit, count = np.datetime_data(dtype) if dtype.kind == "M" else (None, 0)
    if unit not in _SECONDS or count != 1:
        raise TypeError(f"trip_sums needs datetime64 ticks in s, ms, us or ns, got {dtype}")
    return 3600 * _SECONDS[unit]


def _host_dtype(name: str, x: np.ndarray) -> np.ndarray:
    """``x`` in the dtype the twin is compiled for (a copy only for other dtypes)."""
    kind = x.dtype.kind
    if name == "ticks" and kind == "M":
        return x.view(np.int64)  # no copy
    if name == "ticks":
        want = np.int64 if kind in "iu" else None
    elif name == "passengers":
        want = np.int64 if kind in "iub" else (np.float64 if kind == "f" else None)
    else:
        want = np.float64 if kind in "iuf" else None
    if want is None:
        raise TypeError(f"trip_sums: {name} has dtype {x.dtype}, not a number")
    return x if x.dtype == want else x.astype(want)


def _checked(arrays) -> int:
    host = [launch.on_host(x) for x in arrays]
    if any(host) and not all(host):
        raise TypeError("trip_sums needs all columns on the host or all on the device")
    lengths = {}
    for name, x in zip(_NAMES, arrays, strict=True):
        if len(x.shape) != 1:
            raise ValueError(f"trip_sums needs 1-D columns, got {name} of shape {x.shape}")
        lengths[name] = x.shape[0]
    if len(set(lengths.values())) != 1:
        given = ", ".join(f"{n}={k}" for n, k in lengths.items())
        raise ValueError(f"trip_sums needs columns of equal length, got lengths {given}")
    return arrays[0].shape[0]


def _host(arrays, per_hour: int, n: int):
    arrays = [_host_dtype(name, x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("=")))
              for name, x in zip(_NAMES, arrays, strict=True)]
    nchunks = max(1, min(numba.get_num_threads(), n // _MIN_PER_THREAD))
    counts, sums = _trip_sums_cpu(arrays[0], np.int64(per_hour), *arrays[1:], nchunks)
    return counts.reshape(HOURS, WIDTH), sums.reshape(2, HOURS, WIDTH)


def _device(arrays, per_hour: int, n: int):
    from daskgpu.kernels import trips_cuda  # numba.cuda loads only where a device is used

    first = arrays[0]
    stream = launch.stream_for(first)
    counts = launch.like(first, (HOURS, WIDTH), np.int64)
    sums = launch.like(first, (2, HOURS, WIDTH), np.float64)
    if n:
        views = [launch.to_numba(x) for x in arrays]
        blocks, threads = launch.grid_1d(n)
        blocks = max(blocks, math.ceil(n / _MAX_PER_BLOCK))
        trips_cuda.trip_sums_kernel[blocks, threads, stream](
            views[0], np.int64(per_hour), *views[1:], launch.to_numba(counts),
            launch.to_numba(sums))
    return counts, sums


def trip_sums(ticks, per_hour, passengers, fare, lat1, lon1, lat2, lon2):
    """Trips kept, fare and distance sums by ``(hour, passengers)``, in one pass.

    Parameters
    ----------
    ticks : array
        Pickup times as int64 ticks since 1970 (``datetime64`` values viewed as int64, NaT as
        ``NAT``); a NumPy ``datetime64`` array is taken as it is.
    per_hour : int
        Ticks in one hour (``ticks_per_hour(dtype)``).
    passengers : array
        Integer, or float with NaN for missing values.
    fare, lat1, lon1, lat2, lon2 : array
        Fares and coordinates in degrees (float32 or float64; NaN for missing values).

    All columns 1-D of one length, all NumPy (the parallel CPU twin runs) or all on the device
    (CuPy or Numba arrays: the CUDA kernel runs on the current device and stream; device columns
    must already be int64 ticks and float32/float64 or int64 values).

    Returns
    -------
    counts : array
        int64, ``(HOURS, PASSENGER_SLOTS + 1)``: kept trips by hour and passengers; the last
        column, ``OUTSIDE``, counts kept trips whose passengers have no column of their own.
    sums : array
        float64, ``(2, HOURS, PASSENGER_SLOTS + 1)``: fare sums, then distance sums (km).

    Both in the memory of ``ticks`` (NumPy, or device arrays for device columns).

    Raises
    ------
    ValueError
        If a column is not 1-D or the lengths differ.
    TypeError
        For non-numeric columns, or some on the host and some on the device.
    """
    arrays = list((ticks, passengers, fare, lat1, lon1, lat2, lon2))
    n = _checked(arrays)
    if int(per_hour) <= 0:
        raise ValueError(f"per_hour must be positive, got {per_hour}")
    if launch.on_host(arrays[0]):
        with launch.worker_threads():
            return _host(arrays, int(per_hour), n)
    return _device(arrays, int(per_hour), n)


def outside_sums(ticks, per_hour, passengers, fare, lat1, lon1, lat2, lon2):
    """The trips ``trip_sums`` counts in ``OUTSIDE``, grouped by their own hour and passengers.

    NumPy on host columns (as ``trip_sums`` takes them); only the trips in question are
    selected, so it costs a few vectorised passes over the partition.

    Returns
    -------
    tuple of numpy.ndarray
        ``(hours, passengers, counts, fare_sums, distance_sums)``, one entry per group,
        sorted by hour then passengers; passengers keep their column's dtype.
    """
    ticks = np.asarray(ticks)
    if ticks.dtype.kind == "M":
        ticks = ticks.view(np.int64)
    passengers, fare = np.asarray(passengers), np.asarray(fare)
    with np.errstate(invalid="ignore"):
        inside = (passengers >= 0) & (passengers < PASSENGER_SLOTS)
        if passengers.dtype.kind == "f":
            inside &= np.floor(passengers) == passengers
            present = ~np.isnan(passengers)
        else:
            present = True
        rows = np.flatnonzero((ticks != NAT) & present & ~inside & (fare > 0))
    distance = haversine_km(*(np.asarray(c)[rows] for c in (lat1, lon1, lat2, lon2)))
    rows, distance = rows[distance > 0], distance[distance > 0]
    hours = (ticks[rows] // int(per_hour)) % HOURS
    riders = passengers[rows]
    if rows.size == 0:
        return hours, riders, np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    order = np.lexsort((riders, hours))
    hours, riders = hours[order], riders[order]
    starts = np.flatnonzero(np.r_[True, (hours[1:] != hours[:-1]) | (riders[1:] != riders[:-1])])
    counts = np.diff(np.r_[starts, rows.size]).astype(np.int64)
    fares = np.add.reduceat(fare[rows][order].astype(np.float64), starts)
    distances = np.add.reduceat(distance[order], starts)
    return hours[starts], riders[starts], counts, fares, distances
