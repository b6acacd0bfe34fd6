"""join-pipeline's recomputations, run on the workers: joins by lookup, never by a join.

:func:`redrawn_cells` draws cells again from the tables' definition
(:mod:`daskgpu.data.synthetic_tables`), :func:`lookup_totals` reads every left row of the run's
tables; only per-cell totals travel back. Nothing is shared with the computation.
"""

from __future__ import annotations

import importlib
from itertools import groupby
from typing import NamedTuple

import dask
import numpy as np

from daskgpu.data.synthetic_tables import left_frame, permutation, right_values
from daskgpu.toolkit import backends
from pipelines.join.shared import BLOCK_ROWS, CELL_ROWS, GROUPS


class Sums(NamedTuple):
    """Joined rows, sum of x*y and sum of y, by cell (rows) and group (columns): float64."""

    count: np.ndarray
    sum_xy: np.ndarray
    sum_y: np.ndarray


def _partners(xp, right_rows: int, seed: int):
    """``y`` of every right row, drawn again, and each key's row.

    Right row ``j`` has key ``(a j + b) mod R`` (``a`` coprime with ``R``), so the partner of a
    left key ``k < R`` is row ``(k - b) a^-1 mod R``: a lookup without a table of keys.
    """
    multiplier, offset = permutation(seed, right_rows)
    y = right_values((0, right_rows), right_rows=right_rows, seed=seed)
    inverse = pow(multiplier, -1, right_rows) if right_rows > 1 else 0
    return xp.asarray(y), lambda keys: (keys - offset) % right_rows * inverse % right_rows


def redrawn_cells(cells, rows: int, right_rows: int, matched: int, seed: int,
                  library: str = "numpy") -> Sums:
    """Cells of the left table (sorted) drawn again, joined by lookup and summed by group.

    ``rows``, ``right_rows``, ``matched`` and ``seed`` define the tables, drawn a block at a
    time (a block's cells together); the lookups and sums run in ``library`` ("numpy", or
    "cupy" on GPU workers), and come back as host arrays.
    """
    xp = importlib.import_module(library)
    y_by_row, row_of = _partners(xp, right_rows, seed)
    cells, out = [int(c) for c in cells], np.zeros((3, len(cells), GROUPS))
    for _, mine in groupby(range(len(cells)), key=lambda i: cells[i] * CELL_ROWS // BLOCK_ROWS):
        mine = list(mine)
        start = cells[mine[0]] * CELL_ROWS
        frame = left_frame((start, min(rows, (cells[mine[-1]] + 1) * CELL_ROWS)), rows=rows,
                           right_rows=right_rows, matched=matched, seed=seed)
        for i in mine:
            rows_of_cell = slice(cells[i] * CELL_ROWS - start, (cells[i] + 1) * CELL_ROWS - start)
            keys, x = (xp.asarray(frame[name].to_numpy()[rows_of_cell]) for name in ("key", "x"))
            found = (keys >= 0) & (keys < right_rows)
            keys, x = keys[found], x[found]
            y = y_by_row[row_of(keys)]
            for k, weights in enumerate((None, x * y, y)):
                out[k, i] = backends.to_host(xp.bincount(keys % GROUPS, weights=weights,
                                                         minlength=GROUPS))
    return Sums(*out)


def _host_keys_and_y(part):
    frame = backends.to_host(part)
    return frame["key"].to_numpy(), frame["y"].to_numpy()


def _y_by_key(pieces, right_rows: int):
    """A dense lookup ``y[key]`` built from the right table, and what its keys were.

    The lookup stands for the join only if the keys are ``0..right_rows-1``, once each: the
    second value says whether they are (``(rows, distinct keys in range, keys repeated)``).
    """
    keys = np.concatenate([k for k, _ in pieces])
    y = np.concatenate([v for _, v in pieces])
    in_range = (keys >= 0) & (keys < right_rows)
    holders = np.bincount(keys[in_range], minlength=right_rows)
    lookup = np.full(right_rows, np.nan)
    lookup[keys[in_range]] = y[in_range]
    return lookup, (len(keys), int(np.count_nonzero(holders)), int(np.count_nonzero(holders > 1)))


def _looked_up(part, start: int, lookup):
    """One left partition (first row ``start``) joined by lookup: its rows, first cell, sums."""
    frame = backends.to_host(part)
    keys, x = frame["key"].to_numpy(), frame["x"].to_numpy()
    found = np.flatnonzero((keys >= 0) & (keys < len(lookup)))
    first = start // CELL_ROWS
    slot = ((start + found) // CELL_ROWS - first) * GROUPS + keys[found] % GROUPS
    span = (-(-(start + len(frame)) // CELL_ROWS) - first) * GROUPS
    y = lookup[keys[found]]
    sums = [np.bincount(slot, weights=w, minlength=span) for w in (None, x[found] * y, y)]
    return len(frame), first, np.stack(sums).reshape(3, -1, GROUPS)


def lookup_totals(left, right, right_rows: int, starts, cells: int):
    """Every left row joined by lookup on the workers: ``(left rows, right keys, Sums)``.

    Each right partition is moved to host memory on its worker, one task builds the dense
    ``y[key]`` lookup, each left partition (first rows ``starts``) is joined by it where it
    lives; only the cells' totals and the right keys' summary (:func:`_y_by_key`) come back.
    """
    pieces = [dask.delayed(_host_keys_and_y)(part) for part in right.to_delayed()]
    lookup, right_keys = dask.delayed(_y_by_key, nout=2)(pieces, right_rows)
    parts = [dask.delayed(_looked_up)(part, start, lookup)
             for part, start in zip(left.to_delayed(), starts, strict=True)]
    right_keys, *parts = dask.compute(right_keys, *parts)
    sums = np.zeros((3, cells, GROUPS))
    for _, first, part in parts:
        kept = max(0, min(part.shape[1], cells - first))  # none past the cells of --rows
        sums[:, first:first + kept] += part[:, :kept]
    return sum(p[0] for p in parts), right_keys, Sums(*sums)
