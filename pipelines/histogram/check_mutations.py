"""The wrong results histogram-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Mutation
from pipelines.histogram import shared


def _altered(change):
    """The raw result with its summed counts (bins, not NaN) as ``change(counts, rows)`` gives."""
    def alter(raw: dict) -> dict:
        rows = np.array(raw["histograms"], copy=True)
        counts = shared.bin_counts(shared.summed(rows), rows.shape[-1] - 1)
        counts[:] = change(counts.copy(), rows)
        return {**raw, "histograms": rows}
    return alter


def _swap(counts, rows) -> np.ndarray:
    low, high = int(np.argmin(counts)), int(np.argmax(counts))
    counts[[low, high]] = counts[[high, low]]
    return counts


def _at(counts, share: int) -> np.ndarray:
    return np.arange(len(counts)) == len(counts) // share  # one bin: the middle, or a third in


# What a failed check names (Mutation.names): both depths add the blocks' totals up first.
FINGERPRINT = r"bin counts: their fingerprint \S+ is not the blocks'"
TOTAL = r"^total: \d+ counted, the blocks' own add up to"
MUTATIONS = (
    Mutation("bins reversed", _altered(lambda c, rows: c[::-1]), FINGERPRINT),
    Mutation("shifted by one bin", _altered(lambda c, rows: np.r_[0, c[:-1]]), TOTAL),
    Mutation("one bin +1", _altered(lambda c, rows: c + _at(c, 2)), TOTAL),
    Mutation("bin zeroed", _altered(lambda c, rows: np.where(_at(c, 3), 0, c)), TOTAL),
    Mutation("two bins swapped", _altered(_swap), FINGERPRINT),
    Mutation("dropped block", _altered(  # the first sampled block's own counts taken away
        lambda c, rows: c - shared.bin_counts(shared.sampled(rows)[0], len(c))), TOTAL),
)
