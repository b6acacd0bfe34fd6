"""histogram-pipeline's independent recomputations: values drawn again or re-read, and binned.

``numpy.histogram``'s edge rule is stated again here, apart from the run's. Blocks are had again
and binned where they live (:func:`block_row`), checked cells in this process (:func:`cell_values`).
An input, a file or an array in memory, is re-read through
:func:`daskgpu.verification.replay.region`, apart from the run's graph.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu.toolkit import pcg64
from daskgpu.toolkit.backends import to_host
from daskgpu.verification import fingerprint, fingerprint_weights, replay
from pipelines.histogram.shared import HistogramContext


def edges(dtype, lo: float, hi: float, bins: int) -> np.ndarray:
    """The edges numpy.histogram bins data of ``dtype`` with (float32 data: float32 edges)."""
    return np.histogram_bin_edges(np.empty(0, dtype), bins, range=(lo, hi)).astype(np.float64)


def counted(values, lo: float, hi: float, bins: int, library: str = "numpy") -> np.ndarray:
    """``numpy.histogram``'s counts of ``values`` in [lo, hi], then their NaN count (int64).

    On a device, the library's own histogram of NumPy's edges (its own would be its
    ``linspace``'s), NaN left out first (its search would count them). On the host.
    """
    flat = values.ravel()
    nan = flat != flat
    if library == "numpy":
        counts = np.histogram(flat, bins=bins, range=(lo, hi))[0]
    else:
        xp = importlib.import_module(library)
        binned = xp.histogram(flat[~nan], bins=xp.asarray(edges(flat.dtype, lo, hi, bins)))[0]
        counts = to_host(binned)
    return np.append(np.asarray(counts, dtype=np.int64), int(nan.sum()))


def located(ctx: HistogramContext, block: int):
    """What a worker needs to have ``block`` again: its seed, or its region of the input.

    Random data: a tuple, what :func:`daskgpu.verification.replay.redraw` takes. An input: its
    region read again, lazily (:func:`daskgpu.verification.replay.region`); passed to a task
    run by :mod:`daskgpu.verification.replay`, it arrives as an array.
    """
    if ctx.random:
        return (ctx.seed, block, ctx.grid.block_shape(block), ctx.dtype, ctx.library,
                ctx.distribution)
    return replay.region(ctx.source, ctx.grid.region(block), ctx.dtype)


def block_row(where, binning: tuple) -> tuple[np.ndarray, list]:
    """A block again, binned where it lives: its row (counts, then NaN) and its line.

    ``where``: :func:`located`'s (an input's region read); ``binning``: ``(lo, hi, bins,
    fingerprint seed)``. The line: the values in the bins, NaN, the row's fingerprint, the
    block's finite min and max.
    """
    drawn = isinstance(where, tuple)
    values = replay.redraw(*where) if drawn else np.asarray(where)
    lo, hi, bins, seed = binning
    row = counted(values, lo, hi, bins, where[4] if drawn else "numpy")
    finite = values[np.isfinite(values)]
    extent = ([float(to_host(finite.min())), float(to_host(finite.max()))] if finite.size
              else [math.inf, -math.inf])
    weights = fingerprint_weights(bins + 1, seed)
    return row, [int(row[:bins].sum()), int(row[bins]), fingerprint(row, weights), *extent]


def cell_values(ctx: HistogramContext, cell: int, words=None, out: np.ndarray | None = None):
    """The values of ``cell`` (flat, C order), drawn again or re-read; or why they cannot be.

    Uniform values: the block's generator advanced to the cell's first value. Normal values,
    whose sampler takes a varying number of words: from the state the run noted (``words``),
    once shown to lie on the block's stream at a plausible distance (``pcg64.place``). An
    input's slab: read again, lazily (:func:`daskgpu.verification.replay.region`: a file's by
    ``numpy.load`` or Zarr in a task, an array's from the object; compute it, then flatten).
    ``out``: a buffer for random values.
    """
    block, first, stop = ctx.cell_rows(cell)
    if not ctx.random:
        region = list(ctx.grid.region(block))
        if region:  # a slab of whole rows (all of a 0-d block)
            region[0] = slice(region[0].start + first, region[0].start + stop)
        return replay.region(ctx.source, tuple(region), ctx.dtype)
    out = np.empty(stop - first, ctx.dtype) if out is None else out[:stop - first]
    if ctx.distribution != "normal":
        return replay.uniform_at(ctx.seed, block, first, stop - first, ctx.dtype, out=out)
    rng = replay.stream(ctx.seed, block)
    placed = pcg64.place(rng.bit_generator, first, words, np.dtype(ctx.dtype).itemsize == 4)
    return placed or rng.standard_normal(out=out, dtype=ctx.dtype)  # the problem, or the values
