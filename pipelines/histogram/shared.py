"""What histogram-pipeline and its check (:mod:`pipelines.histogram.check`) both use.

The layout of the run's raw result, ``{"histograms": H}``: H holds one row a histogram, row 0
the counts summed over all blocks, then one row for each sampled block (the kernel's own counts
of that block), in the order of ``context["sampled"]``. Each row is ``bins`` counts followed by
the NaN count. The run writes H with :func:`rows` and reads it with :func:`summed`; the check
reads it with :func:`summed` and :func:`sampled`, and a row's parts with :func:`bin_counts` and
:func:`nan_count`. Nothing here counts a value.

The check keeps its own statement of ``numpy.histogram``'s range and edge rules: they are not
shared.
"""

from __future__ import annotations

# Blocks whose kernel histograms the run returns, to be compared bin by bin with numpy's.
SAMPLED_BLOCKS = 3


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
