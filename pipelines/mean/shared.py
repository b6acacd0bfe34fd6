"""What mean-pipeline and its check (:mod:`pipelines.mean.check`) both use.

The result types: :class:`~daskgpu.toolkit.reductions.BlockMean` (the mean carrying its
per-block sums) and :class:`CellMean`, which also carries the sums of the blocks' cells, the
certificate the fast check spot-checks. The geometry of the block grid and of the cells:

- a block of random data is cut into *flat cells*: runs of ``CELL`` values in the order they
  are drawn (the block's C order), the last run of a block shorter;
- a block of an input is cut into *slabs*: runs of whole rows (along the first axis) holding
  about ``CELL`` values, which the check can re-read from the file as one region.

Cells are numbered block by block, in the blocks' row-major order. Nothing here computes a mean
or a sum.
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.toolkit.reductions import BlockMean

__all__ = ["CELL", "BlockMean", "CellMean", "block_grid", "block_shape", "flat_cells",
           "slab_rows", "slabs"]

#: Values a cell holds (its last one in a block: the rest). A power of two: see
#: :mod:`pipelines.mean.tasks`, which takes a piece's sum from its cells' sums.
CELL = 2**14


class CellMean(BlockMean):
    """The mean with its per-block sums and, where the run reports them, its cells' sums.

    ``cell_sums`` is a flat float64 array, the cells of every block in block order (see the
    module docstring), or None where the run reports no cells (random data on GPU workers).
    """

    cell_sums: np.ndarray | None

    def __new__(cls, mean, block_sums, cell_sums=None):
        """The float ``mean`` with ``block_sums`` and ``cell_sums`` attached."""
        made = super().__new__(cls, mean, block_sums)
        made.cell_sums = None if cell_sums is None else np.asarray(cell_sums, dtype=np.float64)
        return made

    def __reduce__(self):
        return (CellMean, (float(self), self.block_sums, self.cell_sums))


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


def flat_cells(count: int) -> int:
    """Flat cells of a block of random data holding ``count`` values.

    >>> flat_cells(CELL), flat_cells(CELL + 1)
    (1, 2)
    """
    return -(-count // CELL)


def slab_rows(shape) -> int:
    """Rows (along the first axis) of a slab of an input's block of ``shape``.

    About ``CELL`` values, at least one row (a 0-d block is one slab of its one value).

    >>> slab_rows((1000, 100)), slab_rows((50_000,)), slab_rows((10, 10**6))
    (163, 16384, 1)
    """
    row = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, CELL // max(1, row))


def slabs(shape) -> int:
    """Slabs of an input's block of ``shape``.

    >>> slabs((1000, 100)), slabs(())
    (7, 1)
    """
    if not shape:
        return 1
    return -(-shape[0] // slab_rows(shape))
