"""join-pipeline's fast check, on the workers: cells of the left table drawn again and joined.

What :mod:`pipelines.join.check_cells` sends to the workers, in a module of its own that imports
little (a worker imports it to run the task). It shares no code with the computation: the
tables are drawn again from their definition (:mod:`daskgpu.data.synthetic_tables`) and joined
by a lookup, without a join, in the workers' array library (CuPy on GPU workers).
"""

from __future__ import annotations

import importlib

from daskgpu.data.synthetic_tables import left_frame, permutation, right_values
from daskgpu.toolkit import backends
from pipelines.join.shared import BLOCK_ROWS, CELL_ROWS, GROUPS


def _partners(xp, right_rows: int, seed: int):
    """``y`` of every right row (drawn again) and each key's row: ``(key - b) / a mod R``.

    The right table's row ``j`` has key ``(a j + b) mod R`` (its definition, ``a`` coprime with
    ``R``), so the partner of a left key ``k < R`` is row ``(k - b) a^-1 mod R``: a lookup
    without a join, and without a table of keys.
    """
    multiplier, offset = permutation(seed, right_rows)
    y = right_values((0, right_rows), right_rows=right_rows, seed=seed)
    inverse = pow(multiplier, -1, right_rows) if right_rows > 1 else 0
    return xp.asarray(y), lambda keys: (keys - offset) % right_rows * inverse % right_rows


def _drawn_rows(cells: list[int], sizes: dict, seed: int):
    """``(cell, keys, x)`` of each cell, drawn again by the tables' definition.

    The definition draws a whole block at a time and keeps the rows asked for: the cells of a
    block are drawn together, the rows from the first to the last of them.
    """
    per_block = BLOCK_ROWS // CELL_ROWS
    for block in sorted({c // per_block for c in cells}):
        mine = sorted(c for c in cells if c // per_block == block)
        start = mine[0] * CELL_ROWS
        frame = left_frame((start, min(sizes["rows"], (mine[-1] + 1) * CELL_ROWS)),
                           rows=sizes["rows"], right_rows=sizes["right_rows"],
                           matched=sizes["matched"], seed=seed)
        keys, x = frame["key"].to_numpy(), frame["x"].to_numpy()
        for c in mine:
            rows = slice(c * CELL_ROWS - start, (c + 1) * CELL_ROWS - start)
            yield c, keys[rows], x[rows]


def redrawn_cells(cells: list[int], sizes: dict, seed: int, library: str) -> dict:
    """Cells of the left table drawn again and joined by lookup, on a worker.

    Parameters
    ----------
    cells : list of int
        Cells of the left table (``CELL_ROWS`` rows each).
    sizes : dict
        ``rows``, ``right_rows`` and ``matched`` of the tables.
    seed : int
        The tables' seed.
    library : str
        The array library to join and sum in: ``"numpy"``, or ``"cupy"`` on GPU workers.

    Returns
    -------
    dict
        ``{c: (count, sum_xy, sum_y)}``: per-group host arrays of each cell.
    """
    xp = importlib.import_module(library)
    y_by_row, row_of = _partners(xp, sizes["right_rows"], seed)
    out = {}
    for c, keys, x in _drawn_rows(cells, sizes, seed):
        keys, x = xp.asarray(keys), xp.asarray(x)
        found = (keys >= 0) & (keys < sizes["right_rows"])
        keys, x = keys[found], x[found]
        y = y_by_row[row_of(keys)]
        group = keys % GROUPS
        out[int(c)] = tuple(backends.to_host(xp.bincount(group, weights=w, minlength=GROUPS))
                            for w in (None, x * y, y))
    return out
