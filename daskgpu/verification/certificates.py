"""Certificates: small witnesses a run computes beside its answer, and how a check reads them.

- Sums of parts: a run reports each block's (shard's, partition's) total together with its
  cells' totals; :func:`cell_totals` adds the cells up by part, and :func:`parts_add_up` says
  where a part's reported total is not its cells' within rounding (:mod:`.bounds`). The cells
  themselves are then spot-checked by an independent recomputation (:mod:`.plans`,
  :mod:`.replay`), so a check that a part's total is right costs a few cells, not the part.
- Fingerprints: a row of integer counts carried as one 64-bit number, ``sum(w * row) mod 2**64``
  with odd pseudo-random weights :func:`fingerprint_weights`. Adding rows adds their
  fingerprints, so a total's fingerprint is its parts' added up; a count changed, moved or lost
  between parts and total shows unless the weights conspire (about 2**-63 for one change).
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification.bounds import tolerance
from daskgpu.verification.verdict import differences


def cell_totals(cells, owners, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Each part's total of its cells, and the total of their absolute values (float64).

    Parameters
    ----------
    cells : array_like, shape (cells, ...)
        The cells' reported values (a row a cell).
    owners : array_like of int, shape (cells,)
        The part of every cell (:meth:`~daskgpu.verification.plans.Cells.owners`).
    parts : int
        How many parts there are.

    >>> totals, magnitudes = cell_totals([1.0, -2.0, 3.0], [0, 0, 1], 2)
    >>> totals.tolist(), magnitudes.tolist()
    ([-1.0, 3.0], [3.0, 3.0])
    """
    cells = np.asarray(cells, dtype=np.float64)
    owners = np.asarray(owners, dtype=np.int64)
    totals = np.zeros((parts, *cells.shape[1:]))
    magnitudes = np.zeros_like(totals)
    np.add.at(totals, owners, cells)
    np.add.at(magnitudes, owners, np.abs(cells))
    return totals, magnitudes


def parts_add_up(reported, cells, owners, *, terms: int, dtype="float64", what: str = "block",
                 label=None, reported_as: str = "reported",
                 expected_as: str = "its cells' total") -> str | None:
    """Where a part's reported total is not the total of its cells; None if nowhere.

    Both add the same values in other orders: they agree within
    :func:`~daskgpu.verification.bounds.tolerance` of the cells' magnitude, ``terms`` the
    values a part holds, the run's sums in ``dtype``.

    >>> parts_add_up([3.0, 3.0], [1.0, 2.0, 3.5], [0, 0, 1], terms=2) is None
    False
    """
    reported = np.asarray(reported, dtype=np.float64)
    totals, magnitudes = cell_totals(cells, owners, reported.shape[0])
    magnitudes = np.maximum(magnitudes, np.abs(reported))
    limit = tolerance(magnitudes, terms, dtype)
    return differences(reported, totals, what=what, reported_as=reported_as,
                       expected_as=expected_as, tolerance=limit, label=label)


def sums_by_cell(values, cell: int, xp=np):
    """Sums of ``values`` (rows first) over each run of ``cell`` rows, the last run shorter.

    In the array library ``xp`` of ``values`` (a device's arrays stay there): the cell sums a
    run certifies, recomputed by a check from the rows again.

    >>> sums_by_cell(np.arange(5.0), 2).tolist()
    [1.0, 5.0, 4.0]
    """
    if pad := -values.shape[0] % cell:
        values = xp.concatenate([values, xp.zeros((pad, *values.shape[1:]), values.dtype)])
    return values.reshape(-1, cell, *values.shape[1:]).sum(axis=1)


def exact_total(values) -> float:
    """The correctly rounded total of ``values`` (:func:`math.fsum`), NaN if one is NaN."""
    flat = np.ravel(np.asarray(values, dtype=np.float64))
    if np.isnan(flat).any():
        return math.nan
    return math.fsum(flat.tolist())


def fingerprint_weights(width: int, seed: int) -> np.ndarray:
    """The weights of :func:`fingerprint` for rows of ``width``: pseudo-random odd uint64.

    Weight ``j`` is SplitMix64's output for ``j`` (its finalising mix of ``j`` times the golden
    ratio's 64 bits plus a key drawn from ``seed``), made odd: every entry has its own weight,
    unrelated to its neighbours'.
    """
    key = np.random.SeedSequence((int(seed), 0xF1A6)).generate_state(1, np.uint64)[0]
    z = np.arange(width, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def fingerprint(row, weights: np.ndarray) -> int:
    """``sum(weights * row)`` modulo 2**64, as int64 bits: a row of counts' short certificate.

    >>> w = fingerprint_weights(3, 1)
    >>> (fingerprint([1, 2, 3], w) + fingerprint([4, 5, 6], w)) % 2**64 == (
    ...     fingerprint([5, 7, 9], w) % 2**64)
    True
    """
    # uint64 arrays wrap around: the arithmetic is exact modulo 2**64.
    total = (np.asarray(row).astype(np.uint64) * weights).sum(dtype=np.uint64)
    return int(np.array(total, dtype=np.uint64).view(np.int64))
