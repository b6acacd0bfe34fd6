"""What mean-pipeline and its check (:mod:`pipelines.mean_check`) both use.

The result type :class:`BlockMean` (the mean carrying its per-block sums) and the block-grid
geometry of a normalised chunking. Nothing here computes a mean or a sum.
"""

from __future__ import annotations

import numpy as np


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


def block_grid(chunk_sizes) -> tuple[int, ...]:
    """Blocks along each axis of normalised ``chunk_sizes``.

    Parameters
    ----------
    chunk_sizes : tuple of tuple of int
        The block sizes along every axis, as :func:`dask.array.core.normalize_chunks` gives.

    Returns
    -------
    tuple of int
        The shape of the block grid.
    """
    return tuple(len(sizes) for sizes in chunk_sizes)


def block_shape(chunk_sizes, location) -> tuple[int, ...]:
    """Shape of the block at grid ``location``.

    Parameters
    ----------
    chunk_sizes : tuple of tuple of int
        The block sizes along every axis, as :func:`dask.array.core.normalize_chunks` gives.
    location : tuple of int
        The block's index along every axis of the block grid.

    Returns
    -------
    tuple of int
        The block's shape.
    """
    return tuple(sizes[i] for sizes, i in zip(chunk_sizes, location, strict=True))
