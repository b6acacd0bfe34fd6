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
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.toolkit.reductions import BlockMean
from daskgpu.verification import Cells, Grid

__all__ = ["CELL", "BlockMean", "CellMean", "MeanContext", "flat_cells", "slab_rows", "slabs"]

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


@dataclass(frozen=True)
class MeanContext:
    """What mean-pipeline's check knows of a run.

    Attributes
    ----------
    grid : Grid
        The array's blocks.
    library : str
        The workers' array library ("numpy", "cupy").
    seed : int, optional
        Random data's seed (None for an input).
    dtype : str, optional
        Random data's element type (None for an input: its own).
    source : ArraySource, optional
        The input (its ``path`` and ``kind``), or None for random data.
    """

    grid: Grid
    library: str
    seed: int | None = None
    dtype: str | None = None
    source: Any = None

    @property
    def elements(self) -> int:
        """Elements of the whole array."""
        return math.prod(self.grid.array_shape)

    @property
    def random(self) -> bool:
        """Whether the data is random (drawn from the seed), not an input."""
        return self.source is None

    @property
    def has_cells(self) -> bool:
        """Whether the run reports cells: always, but for random data drawn by a device."""
        return not self.random or self.library == "numpy"

    def cells(self) -> Cells:
        """The cells of every block: flat cells of random data, an input's slabs."""
        shapes = (self.grid.block_shape(loc) for loc in self.grid.locations())
        if self.random:
            return Cells(tuple(flat_cells(math.prod(shape)) for shape in shapes))
        return Cells(tuple(slabs(shape) for shape in shapes))
