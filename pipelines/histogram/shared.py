"""What histogram-pipeline and its check (:mod:`pipelines.histogram.check`) both use.

The layout of the run's raw result, a dict:

- ``"histograms"``: H holds one row a histogram, row 0 the counts summed over all blocks, then
  one row for each sampled block (the kernel's own counts of that block), in the order of
  :attr:`HistogramContext.sampled`. Each row is ``bins`` counts followed by the NaN count. The
  run writes H with :func:`rows` and reads it with :func:`summed`; the check reads it with
  :func:`summed` and :func:`sampled`, and a row's parts with :func:`bin_counts` and
  :func:`nan_count`.
- ``"blocks"``: one line a block (row-major block order): the values its own row counts in the
  bins, its NaN count and the row's :func:`daskgpu.verification.fingerprint` (int64 holding the
  uint64's bits), weighted by ``fingerprint_weights(bins + 1, ctx.sample_seed)``.
- ``"cells"``: the kernel's own row (counts, then NaN) of every checked cell, in cell order.
- ``"states"``: for random data drawn on NumPy workers, the generator's state as each checked
  cell's first value was drawn, as six uint64 words (:func:`daskgpu.toolkit.pcg64.state_words`);
  else no line.

The cells: a block is cut into slabs of whole rows (along its first axis) of about ``CELL``
values (random data is 1-D: runs of ``CELL`` values), numbered block by block; the run bins
each checked cell apart (one call of the kernel) and adds it into its block's row. The checked
cells (:meth:`HistogramContext.cell_plan`) are a seeded sample of them and, where the range is
the data's own, the cells holding its minimum and maximum. Where the run reports no cells
(:attr:`HistogramContext.has_cells`), the fast check recomputes a seeded sample of whole blocks
instead.

Nothing here counts a value. The check keeps its own statement of ``numpy.histogram``'s range
and edge rules: they are not shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from daskgpu.verification import Cells, Grid, Plan, Sampler, run_seed

# Blocks whose kernel histograms the run returns, to be compared bin by bin with numpy's.
SAMPLED_BLOCKS = 3
#: Values a cell holds, about (a slab of an n-D block holds whole rows).
CELL = 2**13
#: Most bins for which the run cuts blocks into cells: one kernel call a cell costs the bins
#: too, and a cell of CELL values fills at most CELL of them.
MAX_CELL_BINS = CELL


def rows(summed_counts, sampled_counts) -> list:
    """The rows of the result, in order: the summed counts, then every sampled block's."""
    return [summed_counts, *sampled_counts]


def summed(histograms):
    """Row 0 of the result: the counts summed over all blocks (bins, then the NaN count)."""
    return histograms[0]


def sampled(histograms):
    """The sampled blocks' own rows, in the order of :attr:`HistogramContext.sampled`."""
    return histograms[1:]


def bin_counts(row, bins: int):
    """The ``bins`` counts of a row (a view: changing it changes the row)."""
    return row[..., :bins]


def nan_count(row, bins: int):
    """The NaN count of a row: the entry after its ``bins`` counts."""
    return row[..., bins]


def slab_rows(shape) -> int:
    """Rows (along the first axis) of a cell of a block of ``shape``: about ``CELL`` values.

    >>> slab_rows((100_000,)), slab_rows((1000, 100)), slab_rows((10, 10**6))
    (8192, 81, 1)
    """
    row = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, CELL // max(1, row))


def slabs(shape) -> int:
    """Cells of a block of ``shape`` (a 0-d block is one cell).

    >>> slabs((100_000,)), slabs(())
    (13, 1)
    """
    return -(-shape[0] // slab_rows(shape)) if shape else 1


@dataclass(frozen=True, eq=False)
class HistogramContext:
    """What histogram-pipeline's check knows of a run.

    Attributes
    ----------
    grid : Grid
        The array's blocks.
    bins : int
        Equal-width bins.
    lo, hi : float
        The range the run binned with.
    edges : numpy.ndarray
        The edges the run reports (float64).
    dtype : str
        The values' element type.
    library : str
        The workers' array library ("numpy", "cupy").
    sampled : tuple of int
        The blocks whose own rows the run returns, in the order of those rows.
    seed : int, optional
        Random data's seed (None for an input).
    distribution : str, optional
        Random data's distribution, "uniform" or "normal" (None for an input).
    source : ArraySource, optional
        The input (its ``path`` and ``kind``), or None for random data.
    range_given : tuple of float, optional
        The range asked for; None where it is the data's finite min and max.
    extremes : tuple, optional
        Where the run's first pass found the min and max: ``((block, index), (block, index))``,
        the flat C-order index in the block (None with a given range).
    output : str, optional
        The ``--output`` path.
    """

    grid: Grid
    bins: int
    lo: float
    hi: float
    edges: np.ndarray
    dtype: str
    library: str
    sampled: tuple[int, ...]
    seed: int | None = None
    distribution: str | None = None
    source: Any = None
    range_given: tuple[float, float] | None = None
    extremes: tuple | None = None
    output: str | None = None

    @property
    def random(self) -> bool:
        """Whether the data is random (drawn from the seed), not an input."""
        return self.source is None

    @property
    def sample_seed(self) -> int:
        """The seed of the run's samples and fingerprints: random data's, an input's size."""
        return run_seed(self.seed, math.prod(self.grid.array_shape))

    @property
    def has_cells(self) -> bool:
        """Whether the run cuts its blocks into cells and reports the checked ones.

        Not with more than ``MAX_CELL_BINS`` bins, nor for random data drawn by a device,
        whose generator cannot start a cell without drawing its block before it.
        """
        return self.bins <= MAX_CELL_BINS and (not self.random or self.library == "numpy")

    @property
    def counts_everything(self) -> bool:
        """Random data in its own range: every value lies in the bins (none NaN or infinite)."""
        return self.random and self.range_given is None

    @cached_property
    def cells(self) -> Cells:
        """The cells of every block, numbered block by block."""
        return Cells(tuple(slabs(self.grid.block_shape(b)) for b in range(self.grid.blocks)))

    def cell_rows(self, cell: int) -> tuple[int, int, int]:
        """``(block, first row, stop row)`` of ``cell``."""
        block, index = self.cells.locate(cell)
        shape = self.grid.block_shape(block)
        first = index * slab_rows(shape)
        return block, first, min(first + slab_rows(shape), shape[0] if shape else 1)

    def cell_plan(self) -> Plan:
        """The checked cells: a seeded sample, and the cells holding the extremes."""
        cells, held = self.cells, []
        for block, index in self.extremes or ():
            shape = self.grid.block_shape(block)
            row = int(np.unravel_index(index, shape)[0]) if shape else 0
            held.append(cells.of(block)[row // slab_rows(shape)])
        return Plan.at("fast", cells.total, Sampler(self.sample_seed, "cells"), unit="cells",
                       always=held)

    def cuts(self) -> dict[int, list[tuple[int, int]]]:
        """The checked cells' ``(first, stop)`` rows, by block: what the run bins apart."""
        cuts: dict[int, list[tuple[int, int]]] = {}
        for cell in self.cell_plan() if self.has_cells else ():
            block, first, stop = self.cell_rows(cell)
            cuts.setdefault(block, []).append((first, stop))
        return cuts
