"""histogram-pipeline's work on the cluster: the data, the kernel on every block, the rows.

The values are drawn on the workers (:func:`daskgpu.data.synthetic.random_array`) or read from
a ``.npy``/Zarr input. Every block is binned where it lives by daskgpu's own kernel
(:func:`daskgpu.kernels.histogram.histogram`: ``bins`` counts, then the NaN count); the blocks'
counts are summed with a Dask tree reduction, and the sampled blocks' own counts join the sum
as the rows of the result (layout: :mod:`pipelines.histogram.shared`). Without a given range, a
first pass finds the data's finite min and max. :mod:`pipelines.histogram.pipeline` assembles
the :class:`~daskgpu.toolkit.registry.Workload` around what is built here.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from daskgpu.data import array_input, synthetic
from daskgpu.errors import ParameterError
from daskgpu.kernels.histogram import histogram
from daskgpu.toolkit import chunking, reductions
from daskgpu.toolkit.registry import Resolved
from pipelines.histogram import shared


def _block_histogram(block, lo, hi, bins):
    return histogram(block, lo, hi, bins)


def _block_finite_extent(block):
    finite = block[np.isfinite(block)]
    if finite.size == 0:
        return [np.inf, -np.inf]
    return [float(finite.min()), float(finite.max())]


def make_data(resolved: Resolved) -> tuple[da.Array, dict]:
    """The lazy values of a run (the input read, or random data drawn), and what describes them."""
    backend, chunks = resolved.backend, resolved["chunks"]
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        block = chunking.resolve_chunks(chunks, source.shape, source.dtype.itemsize, backend)
        return array_input.to_dask(source, block, backend), {"source": resolved["input"]}
    dtype = np.dtype(resolved["dtype"])
    shape = (resolved["values"],)
    block = chunking.resolve_chunks(chunks, shape, dtype.itemsize, backend)
    seed, distribution = resolved["seed"], resolved["distribution"]
    data = synthetic.random_array(shape, block, dtype, seed, backend, distribution)
    return data, {"source": f"random {distribution}", "seed": seed}


def finite_range(data: da.Array) -> tuple[float, float]:
    """The default range: the data's finite min and max, found by a first pass over the blocks.

    Raises
    ------
    ParameterError
        The data holds no finite value.
    """
    extent = reductions.per_block(data, _block_finite_extent, 2)
    axes = reductions.grid_axes(extent)
    lo, hi = dask.compute(extent[..., 0].min(axis=axes), extent[..., 1].max(axis=axes))
    lo, hi = float(lo), float(hi)
    if not math.isfinite(lo):
        raise ParameterError("the data holds no finite value to take a range from; give --range")
    return widened(lo, hi)


def widened(lo: float, hi: float) -> tuple[float, float]:
    """The range the run bins with: ``numpy.histogram``'s rule for an empty one (lo == hi)."""
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)  # numpy.histogram's rule


def sampled_blocks(numblocks: tuple[int, ...], seed: int) -> list[tuple[int, ...]]:
    """The blocks whose own counts the run returns: ``SAMPLED_BLOCKS`` chosen with ``seed``."""
    total = math.prod(numblocks)
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(total, size=min(shared.SAMPLED_BLOCKS, total), replace=False))
    return [tuple(int(i) for i in np.unravel_index(flat, numblocks)) for flat in chosen]


def histograms(data: da.Array, lo: float, hi: float, bins: int,
               sampled: list[tuple[int, ...]]) -> da.Array:
    """The lazy rows of the result: the kernel on every block, summed, then the sampled blocks'.

    Shaped ``(1 + len(sampled), bins + 1)``, as :mod:`pipelines.histogram.shared` lays it out.
    """
    per_block = reductions.per_block(data, _block_histogram, bins + 1, "int64",
                                     lo=lo, hi=hi, bins=bins)
    counts = per_block.sum(axis=reductions.grid_axes(per_block))
    # The sampled blocks' own counts, already computed for the sum: returning them adds a few
    # small transfers, no work (measured: one kernel call a block).
    return da.concatenate([row[None, :] for row in shared.rows(
        counts, (per_block[loc] for loc in sampled))])
