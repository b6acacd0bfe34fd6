"""Means as a flat tree of per-block sums, finished on the host.

Each block is reduced to one float64 sum where it lives (NumPy or CuPy block), and only those
host floats travel: the rest of the tree is plain NumPy, so the client never receives a device
array (it would need a CUDA context to unpickle one).
"""

from __future__ import annotations

import math

import dask.array as da
import numpy as np

from daskgpu.toolkit.backends import to_host

# Every level of the tree is a round trip between workers: keep it flat up to this width.
MAX_FAN_IN = 64


def _block_sum(block):
    # float() of a CuPy 0-d array copies 8 bytes to the host.
    return np.full((1,) * block.ndim, float(block.sum(dtype=np.float64)))


def block_sums(arr: da.Array) -> da.Array:
    """One float64 host sum per block of ``arr`` (shape: the block grid)."""
    return arr.map_blocks(
        _block_sum,
        chunks=tuple((1,) * len(c) for c in arr.chunks),
        dtype=np.float64,
        meta=np.empty((0,) * arr.ndim, dtype=np.float64),
    )


def mean_from_sums(sums: da.Array, count: int) -> da.Array:
    """The lazy mean, given per-block sums and the number of elements they cover."""
    return sums.sum(split_every=min(MAX_FAN_IN, max(4, sums.npartitions))) / count


def mean(arr: da.Array) -> da.Array:
    """The lazy float64 mean of ``arr``, for NumPy or CuPy blocks alike."""
    return mean_from_sums(block_sums(arr), math.prod(arr.shape))


def _apply_to_block(block, block_func=None, width=1, ndim=1, result_dtype="float64", **kwargs):
    result = np.asarray(to_host(block_func(block, **kwargs)), dtype=result_dtype)
    return result.reshape((1,) * ndim + (width,))


def per_block(arr: da.Array, func, width: int, dtype="float64", **kwargs) -> da.Array:
    """``func(block, **kwargs)`` (a length-``width`` vector) for every block, on the host.

    The result has the block grid's shape plus a last axis of ``width``; reduce it over the
    grid axes (``.sum(axis=...)``, ``.min(...)``) with an ordinary Dask tree reduction.
    """
    grid = tuple((1,) * len(c) for c in arr.chunks)
    return arr.map_blocks(
        _apply_to_block,
        block_func=func,
        width=width,
        ndim=arr.ndim,
        result_dtype=np.dtype(dtype).name,
        dtype=dtype,
        chunks=grid + ((width,),),
        new_axis=[arr.ndim],
        meta=np.empty((0,) * (arr.ndim + 1), dtype=dtype),
        **kwargs,
    )


def grid_axes(arr: da.Array) -> tuple[int, ...]:
    """The block-grid axes of a :func:`per_block` result (all but the last)."""
    return tuple(range(arr.ndim - 1))


class BlockMean(float):
    """The mean, a float, carrying the per-block float64 sums it was reduced from.

    The reported value is ``float(result)``; ``block_sums`` (shaped as the block grid) is what
    ``verify`` checks. Arithmetic gives plain floats, so the built collection composes.
    """

    block_sums: np.ndarray

    def __new__(cls, mean, block_sums):
        """The float ``mean`` with ``block_sums`` attached."""
        made = super().__new__(cls, mean)
        made.block_sums = np.asarray(block_sums, dtype=np.float64)
        return made

    def __reduce__(self):
        return (BlockMean, (float(self), self.block_sums))


def block_mean(block_sums, elements: int) -> BlockMean:
    """The mean from the per-block float64 sums (host floats): their total over ``elements``.

    A task's function lives here rather than in a pipeline module: workers import it when they
    unpickle the task, and importing the pipelines package would add a second to a cold start.
    """
    sums = np.asarray(block_sums, dtype=np.float64)
    return BlockMean(float(sums.sum()) / elements, sums)
