"""The wrong results mean-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification import Mutation
from pipelines.mean.shared import BlockMean, CellMean


def _elements(raw: BlockMean) -> int:
    """The element count a result's mean was divided by (its sums' total / its mean)."""
    return round(math.fsum(raw.block_sums.ravel().tolist()) / float(raw))


def _from_sums(raw: BlockMean, sums: np.ndarray, divisor: int | None = None) -> CellMean:
    """A result with ``sums``, its mean recomputed from them as a buggy run would.

    Its cells' sums, the certificate, stay as they were.
    """
    divisor = divisor if divisor is not None else _elements(raw)
    return CellMean(math.fsum(sums.ravel().tolist()) / divisor, sums, _cells(raw))


def _cells(raw: BlockMean) -> np.ndarray | None:
    return getattr(raw, "cell_sums", None)


def _changed(change):
    def alter(raw: BlockMean) -> CellMean:
        sums = raw.block_sums.copy()
        return _from_sums(raw, change(sums))
    return alter


def _repeated_seed(sums: np.ndarray) -> np.ndarray:
    sums.ravel()[1] = sums.ravel()[0]  # block 1 drawn with block 0's seed (blocks of one shape)
    return sums


def _lost_block(sums: np.ndarray) -> np.ndarray:
    sums.ravel()[sums.size // 2] = 0.0
    return sums


# What a failed check's detail names (a regular expression, see Mutation.names).
BLOCK_RECOMPUTED = r"block \([\d, ]+\): sum \S+ reported, \S+ recomputed"
GRID = r"^block sums: \d+ for a grid of"
MUTATIONS = (
    Mutation("constant 0.5", lambda raw: CellMean(0.5, raw.block_sums, _cells(raw)),
             r"^mean 0\.5 is not the block sums' total"),
    Mutation("dropped block", _changed(lambda s: np.delete(s.ravel(), s.size // 2)), GRID),
    Mutation("duplicated block", _changed(lambda s: np.append(s.ravel(), s.ravel()[0])), GRID),
    Mutation("repeated per-block seed", _changed(_repeated_seed),
             r"blocks \(0, 0\) and \(0, 1\): identical sums|block \(0, 1\): sum \S+ reported"),
    Mutation("wrong divisor",
             lambda raw: _from_sums(raw, raw.block_sums, _elements(raw) - 1),
             r"^mean \S+ is not the block sums' total"),
    Mutation("block sums accumulated in float32",
             _changed(lambda s: s.astype(np.float32).astype(np.float64)), BLOCK_RECOMPUTED),
    Mutation("a block's sum lost (zero)", _changed(_lost_block),
             r"block \([\d, ]+\): sum 0 (is|reported)"),
    # Every sum moved to the next block: the total (and the mean) unchanged.
    Mutation("block sums in the wrong places",
             _changed(lambda s: np.roll(s.ravel(), 1).reshape(s.shape)), BLOCK_RECOMPUTED),
)
