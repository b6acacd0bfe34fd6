"""Equal-width histogram with NaN count: ``numpy.histogram(x, bins, range=(lo, hi))``, exactly.

What the CUDA kernel does that ``cupy.histogram`` does not: ``cupy.histogram`` (without CUB)
binary-searches the bin edges for every value and counts it with one global-memory atomic, which
every thread on the device contends for; counting NaN values takes another pass
(``cupy.isnan(x).sum()``). Here one pass does it all: each value's bin is computed in O(1) with
numpy's own arithmetic, every block counts into a private histogram in shared memory
(shared-memory atomics, contended only within the block) with an extra slot for NaN, and at the
end adds its counts to the global result with one atomic per non-empty bin. For more bins than
fit in shared memory (``SHARED_BINS``) a second kernel counts with global atomics directly.

The bin of each value follows numpy's uniform-bin algorithm (``numpy/lib/_histograms_impl.py``)
in numpy's dtypes, so the counts equal numpy's exactly: values outside ``[lo, hi]`` (and
``±inf``) are not counted, the last bin includes ``hi``. The same two functions (first guess,
correction) are compiled for the CPU twin (``numba.njit``, parallel over thread-private
histograms) and, as device functions, for the CUDA kernels.

On the CPU the correction's lookups and branches cost more than the division (3.5 ns a value):
the twin first places each value with a float64 multiply in a loop that vectorises
(``_sure_bin``), where the position is further from an edge than any rounding of numpy's
(``_sure_margin``), and takes numpy's path for the rest (next to an edge, outside, NaN): the same
counts at about 1.6 ns a value. The CUDA kernels keep numpy's path (a GPU's pass is bound by
memory bandwidth; float64 arithmetic would slow float32 data on GPUs with few float64 units).
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
# The CPU twin's block: first guesses for this many values at once (fits in L1 with its data).
_CPU_BLOCK = 1024
# Below this many elements per thread the CPU twin uses fewer threads (start-up dominates).
_MIN_PER_THREAD = 1 << 15
# The CPU twin's float64 shortcut is off where its margin would reach this far into a bin.
_MAX_MARGIN = 0.01

_SIGNED_TO_UNSIGNED = {
    np.byte: np.ubyte,
    np.short: np.ushort,
    np.intc: np.uintc,
    np.int_: np.uint,
    np.longlong: np.ulonglong,
}


def _first_guess(v, lo_s, denom, nbins_f, bins):
    """The first guess numpy makes at the bin of ``v``: ``int((v - lo) / (hi - lo) * bins)``.

    In numpy's dtypes (``lo_s``: the subtraction's, ``denom``/``nbins_f``: the scaling's).
    Clamped to ``0..bins-1`` (numpy moves ``bins``, i.e. ``v == hi``, into the last bin; the
    clamp also keeps NaN and out-of-range values, discarded later, safe to convert).
    """
    zero = nbins_f - nbins_f  # 0 in the scaling dtype, so float32 stays float32
    f = (v - lo_s) / denom * nbins_f
    f = f if f >= zero else zero
    f = f if f <= nbins_f else nbins_f
    k = int(f)
    return k if k < bins else bins - 1


def _correct(v, k, edges, lo_c, hi_c, bins):
    """Bin of ``v`` from the guess ``k``: ``0..bins-1``, ``bins`` for NaN, -1 if not counted.

    numpy keeps ``lo <= v <= hi`` (compared in ``lo_c``/``hi_c``'s dtype), then corrects the
    guess by one where rounding put ``v`` next to its bin: down if ``v < edges[k]``, else up
    if ``v >= edges[k + 1]`` (never past the last bin, which includes ``hi``).
    """
    if not (v >= lo_c and v <= hi_c):
        return bins if v != v else -1
    if v < edges[k]:
        return k - 1
    if k != bins - 1 and v >= edges[k + 1]:
        return k + 1
    return k


_first_guess_cpu = numba.njit(inline="always", cache=True)(_first_guess)
_correct_cpu = numba.njit(inline="always", cache=True)(_correct)
_first_guess_gpu = cuda.jit(device=True, inline=True)(_first_guess)
_correct_gpu = cuda.jit(device=True, inline=True)(_correct)


@numba.njit(inline="always", cache=True)
def _sure_bin(v, lo, scale, nbins_f, margin):  # pragma: no cover - compiled
    """The bin of ``v`` where float64 arithmetic alone settles it, else -1.

    ``f = (v - lo) * scale`` in float64 is the bin position; when its fraction is more than
    ``margin`` away from a whole number (and ``0 <= f < bins``), every rounding numpy's own
    computation could make is smaller than that margin, so numpy puts ``v`` in bin ``int(f)``.
    Branch-free, so a loop of it vectorises; NaN fails every comparison and comes back -1.
    """
    f = (np.float64(v) - lo) * scale
    inside = (f >= 0.0) & (f < nbins_f)
    f = f if inside else 0.0
    k = int(f)
    rest = f - k
    sure = inside & (rest > margin) & (rest < 1.0 - margin)
    return k if sure else -1


@numba.njit(parallel=True, cache=True)
def _histogram_cpu(x, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins, lo, scale, margin,
                   nchunks):  # pragma: no cover
    """CPU twin: ``nchunks`` contiguous slices, one private histogram each, then summed.

    Each slice goes in blocks of ``_CPU_BLOCK``: a loop that vectorises finds the bins float64
    settles (``_sure_bin``), then a scalar loop counts them and bins the rest (values near an
    edge, outside the range, NaN) with numpy's own arithmetic (first guess, correction).
    """
    n = x.shape[0]
    private = np.zeros((nchunks, bins + 1), np.int64)
    step = (n + nchunks - 1) // nchunks
    scale_f = np.float64(bins) * scale
    for c in prange(nchunks):
        counts = np.zeros(bins + 1, np.int64)
        sure = np.empty(_CPU_BLOCK, np.int64)
        stop = min(n, (c + 1) * step)
        for start in range(c * step, stop, _CPU_BLOCK):
            block = x[start:min(stop, start + _CPU_BLOCK)]
            for j in range(block.shape[0]):
                sure[j] = _sure_bin(block[j], lo, scale_f, np.float64(bins), margin)
            for j in range(block.shape[0]):
                k = sure[j]
                if k < 0:
                    v = block[j]
                    k = _first_guess_cpu(v, lo_s, denom, nbins_f, bins)
                    k = _correct_cpu(v, k, edges, lo_c, hi_c, bins)
                    if k < 0:
                        continue
                counts[k] += 1
        private[c, :] = counts
    return private.sum(axis=0)


@cuda.jit
def _histogram_shared(x, edges, lo_c, hi_c, lo_s, denom, nbins_f, bins, out):  # pragma: no cover
    """One pass; each block counts into shared memory, then adds its counts to ``out``."""
    counts = cuda.shared.array(_SHARED_SLOTS, np.uint32)
    tid = cuda.threadIdx.x
    for j in range(tid, bins + 1, cuda.blockDim.x):
        counts[j] = 0
    cuda.syncthreads()
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        v = x[i]
        k = _first_guess_gpu(v, lo_s, denom, nbins_f, bins)
        k = _correct_gpu(v, k, edges, lo_c, hi_c, bins)
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
        v = x[i]
        k = _first_guess_gpu(v, lo_s, denom, nbins_f, bins)
        k = _correct_gpu(v, k, edges, lo_c, hi_c, bins)
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
    if np.any(edges[:-1] >= edges[1:]):  # as numpy: bins that would have no width
        raise ValueError(f"too many bins for the range: {bins} bins over [{lo}, {hi}] do not "
                         f"all have a width in {bin_type} (use fewer bins or a wider range)")
    lo_c = np.result_type(data, lo).type(lo)
    hi_c = np.result_type(data, hi).type(hi)
    sub_type = np.result_type(np.empty(0, bin_type), lo)
    lo_s = sub_type.type(lo)
    width = _unsigned_subtract(hi, lo)
    f_type = np.result_type(np.empty(0, sub_type), width)
    return edges, (lo_c, hi_c, lo_s, f_type.type(width), f_type.type(bins), bins)


def _sure_margin(dtype, lo, hi, bins: int) -> tuple[float, float, float]:
    """``lo``, ``1 / (hi - lo)`` and the margin (in bins) ``_sure_bin`` needs, in float64.

    The margin bounds, with a wide factor, how far numpy's numbers can lie from the exact bin
    position: its edges (``linspace``'s dtype, float32 for float32 lo and hi even for float64
    data, then the edges' dtype), first guess and range check round at most at the coarsest
    dtype's unit roundoff, relative to ``max(|lo|, |hi|)`` or the width. Where the margin is
    not small (float32 far from 0, millions of bins) every value takes numpy's path.
    """
    u = max(float(np.finfo(np.result_type(lo, hi, 1.0)).eps),  # eps: twice the unit roundoff
            float(np.finfo(np.result_type(lo, hi, np.empty(0, dtype))).eps))
    lo64, hi64 = float(lo), float(hi)
    width = hi64 - lo64
    if not (math.isfinite(width) and width > 0):
        return lo64, 0.0, 1.0
    relative = max(abs(lo64), abs(hi64)) / width + 1.0
    margin = 16.0 * u * relative * bins + 8.0 * float(np.finfo(np.float64).eps) * bins
    return lo64, 1.0 / width, (margin if margin < _MAX_MARGIN else 1.0)


def _host(x: np.ndarray, lo, hi, bins: int) -> np.ndarray:
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if x.ndim != 1:
        x = x.ravel(order="K")  # a view where the memory allows; order does not matter here
    edges, scalars = _binning(x.dtype, lo, hi, bins)
    nchunks = max(1, min(numba.get_num_threads(), x.shape[0] // _MIN_PER_THREAD))
    return _histogram_cpu(x, edges, *scalars, *_sure_margin(x.dtype, lo, hi, bins), nchunks)


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


def _to_device(x, host: np.ndarray, stream):
    """``host`` copied to the device, in the memory ``x`` is in (CuPy's pool for CuPy data)."""
    if launch.is_cupy(x):
        import cupy

        # numba.cuda's own allocator is outside CuPy's pool: with the pool holding most of the
        # device, even this small allocation could fail. CuPy copies on its current stream.
        return launch.to_numba(cupy.asarray(host))
    return cuda.to_device(host, stream=stream)


def _device(x, lo, hi, bins: int):
    if launch.is_cupy(x):
        x = x.ravel()  # cupy copies on the device only when it must
    d = launch.to_numba(x)
    edges, scalars = _binning(np.dtype(d.dtype), lo, hi, bins)
    stream = launch.stream_for(x)
    out = launch.like(x, (bins + 1,), np.int64)
    if d.size == 0:
        return out
    d_edges = _to_device(x, edges, stream)
    d_out = launch.to_numba(out)
    kernel = _histogram_shared if bins <= SHARED_BINS else _histogram_global
    for piece in _flat_pieces(d):
        n = piece.shape[0]
        blocks, threads = launch.grid_1d(n)
        blocks = max(blocks, -(-n // _MAX_PER_BLOCK))
        kernel[blocks, threads, stream](piece, d_edges, *scalars, d_out)
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
        If ``bins < 1``, ``lo`` or ``hi`` is not finite, ``lo >= hi``, or, as in numpy, the
        range is too narrow for ``bins`` distinct edges in the data's precision.
    TypeError
        If ``bins`` is not an integer, ``lo``/``hi`` not real numbers, or the data not float32
        or float64.
    """
    if launch.on_host(x):
        bins = _check_args(x.dtype, lo, hi, bins)
        with launch.worker_threads():
            return _host(x, lo, hi, bins)
    bins = _check_args(np.dtype(x.dtype), lo, hi, bins)
    return _device(x, lo, hi, bins)
