"""What histogram-pipeline and its check (:mod:`pipelines.histogram.check`) both use.

The layout of the run's raw result, a dict:

- ``"histograms"``: H holds one row a histogram, row 0 the counts summed over all blocks, then
  one row for each sampled block (the kernel's own counts of that block), in the order of
  ``context["sampled"]``. Each row is ``bins`` counts followed by the NaN count. The run writes
  H with :func:`rows` and reads it with :func:`summed`; the check reads it with :func:`summed`
  and :func:`sampled`, and a row's parts with :func:`bin_counts` and :func:`nan_count`.
- ``"blocks"``: one line a block (row-major block order): the values its own row counts in the
  bins, its NaN count and the row's :func:`fingerprint` (int64 holding the uint64's bits).
- ``"cells"``: the kernel's own row (counts, then NaN) of every checked cell, in cell order.
- ``"states"``: for random data drawn on NumPy workers, the generator's state as each checked
  cell's first value was drawn, as six uint64 words: NumPy ``PCG64``'s 128-bit state and
  increment (high, then low halves), its buffered-half flag and buffered half; else no line.

The cells: a block is cut into slabs of whole rows (along its first axis) of about ``CELL``
values (random data is 1-D: runs of ``CELL`` values), numbered block by block; the run bins
each checked cell apart (one call of the kernel) and adds it into its block's row. The checked
cells are a seeded sample of them and, where the range is the data's own, the cells holding its
minimum and maximum. Where the run reports no cells (:func:`reports_cells`), the fast check
recomputes a seeded sample of whole blocks instead.

Nothing here counts a value. The check keeps its own statement of ``numpy.histogram``'s range
and edge rules: they are not shared.
"""

from __future__ import annotations

import math

import numpy as np

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
    """The sampled blocks' own rows, in the order of ``context["sampled"]``."""
    return histograms[1:]


def bin_counts(row, bins: int):
    """The ``bins`` counts of a row (a view: changing it changes the row)."""
    return row[..., :bins]


def nan_count(row, bins: int):
    """The NaN count of a row: the entry after its ``bins`` counts."""
    return row[..., bins]


def reports_cells(bins: int, drawn_on_device: bool) -> bool:
    """Whether the run cuts its blocks into cells.

    Not with more than ``MAX_CELL_BINS`` bins, nor for random data drawn by CuPy, whose
    generator cannot start a cell without drawing its block before it.
    """
    return bins <= MAX_CELL_BINS and not drawn_on_device


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


def fingerprint_weights(width: int, seed: int) -> np.ndarray:
    """The weights of :func:`fingerprint` for rows of ``width``: pseudo-random odd uint64.

    Weight ``j`` is SplitMix64's output for ``j`` (its finalising mix of ``j`` times the golden
    ratio's 64 bits plus a key drawn from ``seed``), made odd: every bin has its own weight,
    unrelated to its neighbours'.
    """
    key = np.random.SeedSequence((int(seed), 0xF1A6)).generate_state(1, np.uint64)[0]
    z = np.arange(width, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def fingerprint(row, weights: np.ndarray) -> int:
    """``sum(weights * row)`` modulo 2**64, as int64 bits: a row's short certificate.

    Adding rows adds their fingerprints (modulo 2**64), so the summed counts' fingerprint is
    the total of the blocks'; two rows that differ have equal fingerprints only by a
    coincidence of the weights.
    """
    # uint64 arrays wrap around: the arithmetic is exact modulo 2**64.
    total = (np.asarray(row).astype(np.uint64) * weights).sum(dtype=np.uint64)
    return int(np.array(total, dtype=np.uint64).view(np.int64))
