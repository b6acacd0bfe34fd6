"""Equal-width histogram with NaN count: ``numpy.histogram(x, bins, range=(lo, hi))``, exactly.

The CUDA kernel does in one pass over the data what ``cupy.histogram`` does in several: CuPy
checks the range, computes bin indices into a temporary index array and then counts it with
one global atomic per element. Here every block keeps a private histogram in shared memory
(shared-memory atomics, which do not contend across the device), strides over the input once,
counts the NaN values in the same pass (an extra slot after the last bin), and finally adds its
private counts to the global result with one atomic per non-empty bin. For more bins than fit in
shared memory (``SHARED_BINS``) a second kernel counts with global atomics directly.

The bin of each value is computed with numpy's own uniform-bin algorithm
(``numpy/lib/_histograms_impl.py``), in numpy's dtypes, so the counts equal numpy's exactly:
values outside ``[lo, hi]`` (and ``±inf``) are not counted, the last bin includes ``hi``.
The same device function is compiled for the CPU twin (``numba.njit``, parallel over
thread-private histograms) and for the CUDA kernels.
"""

from __future__ import annotations

import math
import numbers
import operator

import numba
import numpy as np
from numba import cuda, prange

from daskgpu.kernels import launch

__all__ = ["SHARED_BINS", "histogram"]

#: Most bins (NaN slot not included) a block counts in shared memory; more use global atomics.
SHARED_BINS = 4096
_SHARED_SLOTS = SHARED_BINS + 1  # a global constant, as cuda.shared.array's shape must be
# Per-block counters are uint32: no block may see more elements than this.
_MAX_PER_BLOCK = 2**31
# Below this many elements per thread the CPU twin uses fewer threads (start-up dominates).
_MIN_PER_THREAD = 1 << 15

_SIGNED_TO_UNSIGNED = {
    np.byte: np.ubyte,
    np.short: np.ushort,
    np.intc: np.uintc,
    np.int_: np.uint,
    np.longlong: np.ulonglong,
}


def _bin_of(v, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins):
    """Bin of ``v``: ``0..bins-1``, ``bins`` for NaN, ``-1`` when it is not counted.

    numpy's algorithm: keep ``lo <= v <= hi`` (compared in ``lo_c``/``hi_c``'s dtype), then
    ``f = (v - lo) / (hi - lo) * bins`` in numpy's dtypes, truncate, put ``hi`` into the last
    bin, and correct by one against the edges where rounding put ``v`` in a neighbour.
    """
    if v != v:
        return bins
    if not (v >= lo_c and v <= hi_c):
        return -1
    f = (v - lo_s) / denom * nbins_f
    k = int(f)
    if k == bins:
        k = bins - 1
    if v < edges[k]:
        k -= 1
    if k != bins - 1 and v >= edges[k + 1]:
        k += 1
    return k


_bin_of_cpu = numba.njit(inline="always", cache=False)(_bin_of)
_bin_of_gpu = cuda.jit(device=True, inline=True)(_bin_of)


@numba.njit(parallel=True, cache=False)
def _histogram_cpu(x, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins, nchunks):  # pragma: no cover
    """CPU twin: ``nchunks`` contiguous slices, one private histogram each, then summed."""
    n = x.shape[0]
    private = np.zeros((nchunks, bins + 1), np.int64)
    step = (n + nchunks - 1) // nchunks
    for c in prange(nchunks):
        stop = min(n, (c + 1) * step)
        for i in range(c * step, stop):
            k = _bin_of_cpu(x[i], edges, lo_c, hi_c, lo_s, denom, nbins_f, bins)
            if k >= 0:
                private[c, k] += 1
    out = np.zeros(bins + 1, np.int64)
    for c in range(nchunks):
        for j in range(bins + 1):
            out[j] += private[c, j]
    return out


@cuda.jit
def _histogram_shared(x, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins, out):  # pragma: no cover
    """One pass; each block counts into shared memory, then adds its counts to ``out``."""
    counts = cuda.shared.array(_SHARED_SLOTS, np.uint32)
    tid = cuda.threadIdx.x
    for j in range(tid, bins + 1, cuda.blockDim.x):
        counts[j] = 0
    cuda.syncthreads()
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        k = _bin_of_gpu(x[i], edges, lo_c, hi_c, lo_s, denom, nbins_f, bins)
        if k >= 0:
            cuda.atomic.add(counts, k, 1)
    cuda.syncthreads()
    for j in range(tid, bins + 1, cuda.blockDim.x):
        c = counts[j]
        if c != 0:
            cuda.atomic.add(out, j, np.int64(c))


@cuda.jit
def _histogram_global(x, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins, out):  # pragma: no cover
    """One pass for more bins than fit in shared memory: global atomics on ``out``."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        k = _bin_of_gpu(x[i], edges, lo_c, hi_c, lo_s, denom, nbins_f, bins)
        if k >= 0:
            cuda.atomic.add(out, k, 1)


def _check_args(dtype, lo, hi, bins) -> int:
    if isinstance(bins, bool | np.bool_):
        raise TypeError(f"bins must be an integer >= 1, got {bins!r}")
    try:
        bins = operator.index(bins)
    except TypeError:
        raise TypeError(f"bins must be an integer >= 1, got {bins!r}") from None
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    for name, value in (("lo", lo), ("hi", hi)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool | np.bool_):
            raise TypeError(f"{name} must be a real number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if not lo < hi:
        raise ValueError(f"lo must be less than hi, got lo={lo!r}, hi={hi!r}")
    if dtype.kind != "f" or dtype.itemsize not in (4, 8):
        raise TypeError(f"histogram needs float32 or float64 data, got {dtype}")
    return bins


def _unsigned_subtract(a, b):
    """``a - b`` as numpy's histogram computes its range width (unsigned for integer types)."""
    dt = np.result_type(a, b)
    unsigned = _SIGNED_TO_UNSIGNED.get(dt.type)
    if unsigned is None:
        return np.subtract(a, b, dtype=dt)
    return np.subtract(np.asarray(a, dtype=dt), np.asarray(b, dtype=dt),
                       casting="unsafe", dtype=unsigned)


def _binning(dtype, lo, hi, bins):
    """The edges and the typed scalars numpy's uniform-bin code uses for data of ``dtype``.

    numpy 2's promotion rules decide every dtype here (a Python ``lo`` is weak, a NumPy scalar
    is not), so ``lo``/``hi`` are used as given, never converted first.
    """
    data = np.empty(0, dtype)
    bin_type = np.result_type(lo, hi, data)
    edges = np.linspace(lo, hi, bins + 1, endpoint=True, dtype=bin_type)
    lo_c = np.result_type(data, lo).type(lo)
    hi_c = np.result_type(data, hi).type(hi)
    sub_type = np.result_type(np.empty(0, bin_type), lo)
    lo_s = sub_type.type(lo)
    width = _unsigned_subtract(hi, lo)
    f_type = np.result_type(np.empty(0, sub_type), width)
    return edges, (lo_c, hi_c, lo_s, f_type.type(width), f_type.type(bins), bins)


def _host(x: np.ndarray, lo, hi, bins: int) -> np.ndarray:
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if x.ndim != 1:
        x = x.ravel(order="K")  # a view where the memory allows; order does not matter here
    edges, scalars = _binning(x.dtype, lo, hi, bins)
    nchunks = max(1, min(numba.get_num_threads(), x.shape[0] // _MIN_PER_THREAD))
    return _histogram_cpu(x, edges, *scalars, nchunks)


def _flat_pieces(d):
    """1-D device arrays (views) that together hold every element of the device array ``d``."""
    if d.ndim == 1:
        yield d
    elif d.size == 0:
        return
    elif d.ndim == 0 or d.is_c_contiguous():
        yield d.reshape(d.size)
    elif d.is_f_contiguous():
        yield d.reshape(d.size, order="F")
    else:  # neither layout: one piece per leading index (rare; each piece may be strided)
        for i in range(d.shape[0]):
            yield from _flat_pieces(d[i])


def _device(x, lo, hi, bins: int):
    if type(x).__module__.split(".")[0] == "cupy":
        x = x.ravel()  # cupy copies on the device only when it must
    d = x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)  # a Numba array already
    edges, scalars = _binning(np.dtype(d.dtype), lo, hi, bins)
    stream = launch.stream_for(x)
    out = launch.like(x, (bins + 1,), np.int64)
    if d.size == 0:
        return out
    d_edges = cuda.to_device(edges, stream=stream)
    kernel = _histogram_shared if bins <= SHARED_BINS else _histogram_global
    for piece in _flat_pieces(d):
        n = piece.shape[0]
        blocks, threads = launch.grid_1d(n)
        blocks = max(blocks, -(-n // _MAX_PER_BLOCK))
        kernel[blocks, threads, stream](piece, d_edges, *scalars, out)
    return out


def histogram(x, lo: float, hi: float, bins: int):
    """Counts of ``bins`` equal-width bins over ``[lo, hi]``, and the number of NaN values.

    Parameters
    ----------
    x : numpy.ndarray or device array
        Data of any shape and layout, float32 or float64. A NumPy array runs the parallel CPU
        twin; a CuPy or Numba device array (anything with ``__cuda_array_interface__``) runs
        the CUDA kernel on the current device and stream.
    lo, hi : float
        Finite range, ``lo < hi``; used with numpy's promotion rules, as ``numpy.histogram``
        would (a Python float is weak, so float32 data is binned in float32).
    bins : int
        Number of equal-width bins, at least 1.

    Returns
    -------
    numpy.ndarray or device array
        int64, length ``bins + 1``, in the same memory as ``x``: entries ``0..bins-1`` equal
        ``numpy.histogram(x, bins=bins, range=(lo, hi))[0]`` (the last bin includes ``hi``;
        values outside the range and ``±inf`` are not counted); entry ``bins`` is the number
        of NaN values.

    Raises
    ------
    ValueError
        If ``bins < 1``, ``lo`` or ``hi`` is not finite, or ``lo >= hi``.
    TypeError
        If ``bins`` is not an integer, ``lo``/``hi`` not real numbers, or the data not float32
        or float64.
    """
    if launch.on_host(x):
        bins = _check_args(x.dtype, lo, hi, bins)
        return _host(x, lo, hi, bins)
    bins = _check_args(np.dtype(x.dtype), lo, hi, bins)
    return _device(x, lo, hi, bins)
