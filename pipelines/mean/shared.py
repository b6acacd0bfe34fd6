"""What mean-pipeline and its check (:mod:`pipelines.mean.check`) both use.

The result type :class:`~daskgpu.toolkit.reductions.BlockMean` (the mean carrying its per-block
sums; in the library, so that workers unpickle it without importing the pipelines) and the
block-grid geometry of a normalised chunking. Nothing here computes a mean or a sum.
"""

from __future__ import annotations

from daskgpu.toolkit.reductions import BlockMean

__all__ = ["BlockMean", "block_grid", "block_shape"]


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
