"""Synthetic left and right tables for joins: generated partition by partition, from a seed.

The left table has ``rows`` rows (``key`` int64, ``x`` float64), the right table ``rows // 10``
rows (``key`` int64, ``y`` float64) with unique keys. Exactly ``round(match * rows)`` left rows
find a partner, so a join's row count is known in advance.

How the tables are made (deterministic for a seed, whatever the partitioning):

* Rows are drawn in fixed blocks of :data:`BLOCK_ROWS` rows, each from its own
  ``SeedSequence(seed, spawn_key=(table, block))``; a partition generates the blocks it covers
  and keeps its rows, so the tables do not depend on the number of partitions.
* Right row ``j`` has key ``(a * j + b) mod R``, a permutation of ``0..R-1`` (``a`` coprime
  with ``R``; ``a`` and ``b`` from the seed): unique keys, scattered over the partitions.
* Left block ``[b0, b1)`` holds exactly ``floor(M b1 / N) - floor(M b0 / N)`` matching rows
  (``M = round(match * N)``), at random positions, with keys drawn from ``0..R-1``; the other
  rows get keys of ``R`` or more, which no right row has. The blocks' counts add up to ``M``.
"""

from __future__ import annotations

import math

import dask.dataframe as dd
import numpy as np
import pandas as pd

from daskgpu.toolkit import backends

BLOCK_ROWS = 1 << 16  # rows drawn from one random stream: the unit of reproducibility
_LEFT, _RIGHT, _PERMUTATION = 0, 1, 2  # spawn keys of the random streams


def right_size(rows: int) -> int:
    """Rows of the right table: rows // 10, at least one."""
    return max(1, rows // 10)


def matched_rows(rows: int, match: float) -> int:
    """How many left rows have a partner: round(match * rows) (half to even)."""
    return min(rows, round(match * rows))


def permutation(seed: int, right_rows: int) -> tuple[int, int]:
    """``(a, b)`` such that ``j -> (a j + b) mod right_rows`` is a permutation of the keys."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_PERMUTATION,)))
    a = int(rng.integers(1, max(2, min(right_rows, 2**31))))
    while math.gcd(a, right_rows) != 1:
        a += 1
    return a, int(rng.integers(0, right_rows))


def _stream(seed: int, table: int, block: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(table, block)))


def left_frame(bounds, *, rows, right_rows, matched, seed, library="pandas"):
    """Rows ``bounds = (start, stop)`` of the left table (``key``, ``x``).

    Parameters
    ----------
    bounds : tuple of int
        First and one-past-last row.
    rows, right_rows, matched : int
        Sizes of the tables and the number of left rows with a partner.
    seed : int
    library : {"pandas", "cudf"}
        The partition type to return (generated with NumPy either way).
    """
    start, stop = bounds
    keys = np.empty(stop - start, dtype=np.int64)
    x = np.empty(stop - start, dtype=np.float64)
    for block in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        b0, b1 = block * BLOCK_ROWS, min(rows, (block + 1) * BLOCK_ROWS)
        n, m = b1 - b0, matched * b1 // rows - matched * b0 // rows
        rng = _stream(seed, _LEFT, block)
        block_keys = rng.integers(right_rows, right_rows + rows, size=n, dtype=np.int64)
        block_keys[rng.choice(n, size=m, replace=False)] = rng.integers(
            0, right_rows, size=m, dtype=np.int64
        )
        block_x = rng.random(n)
        lo, hi = max(start, b0), min(stop, b1)
        keys[lo - start : hi - start] = block_keys[lo - b0 : hi - b0]
        x[lo - start : hi - start] = block_x[lo - b0 : hi - b0]
    return backends.from_pandas(pd.DataFrame({"key": keys, "x": x}), library)


def right_frame(bounds, *, right_rows, multiplier, offset, seed, library="pandas"):
    """Rows ``bounds = (start, stop)`` of the right table (``key``, ``y``); keys are unique.

    Parameters
    ----------
    bounds : tuple of int
        First and one-past-last row.
    right_rows : int
        Rows of the right table.
    multiplier, offset : int
        Row ``j`` has key ``(multiplier * j + offset) % right_rows`` (see :func:`permutation`).
    seed : int
    library : {"pandas", "cudf"}
        The partition type to return (generated with NumPy either way).
    """
    start, stop = bounds
    j = np.arange(start, stop, dtype=np.int64)
    keys = (j * multiplier + offset) % right_rows
    y = right_values(bounds, right_rows=right_rows, seed=seed)
    return backends.from_pandas(pd.DataFrame({"key": keys, "y": y}), library)


def right_values(bounds, *, right_rows, seed) -> np.ndarray:
    """The ``y`` column of rows ``bounds = (start, stop)`` of the right table, alone.

    A whole block's values are drawn straight into the result; a block cut by ``bounds`` is
    drawn whole and cut.
    """
    start, stop = bounds
    y = np.empty(stop - start, dtype=np.float64)
    for block in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        b0, b1 = block * BLOCK_ROWS, min(right_rows, (block + 1) * BLOCK_ROWS)
        lo, hi = max(start, b0), min(stop, b1)
        stream = _stream(seed, _RIGHT, block)
        if (lo, hi) == (b0, b1):
            stream.random(out=y[lo - start : hi - start])
        else:
            y[lo - start : hi - start] = stream.random(b1 - b0)[lo - b0 : hi - b0]
    return y


def partition_bounds(total: int, parts: int) -> list[tuple[int, int]]:
    """``(start, stop)`` rows of each of ``parts`` near-equal partitions of ``total`` rows."""
    return [(p * total // parts, (p + 1) * total // parts) for p in range(parts)]


def _empty(**dtypes) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


LEFT_META = _empty(key="int64", x="float64")
RIGHT_META = _empty(key="int64", y="float64")


def tables(backend, rows: int, match: float, partitions: int, seed: int,
           right_partitions: int | None = None):
    """The lazy left and right tables, generated on the workers, and their sizes.

    The collections' meta is pandas whatever the backend: the client builds no cuDF object
    (that would create a CUDA context in it), while each partition is made where it is
    computed, as ``backend.dataframe_library`` says.

    Parameters
    ----------
    backend : Backend
    rows, match, partitions, seed
        Left rows, the fraction of them with a partner, left partitions and the seed.
    right_partitions : int, optional
        Partitions of the right table (default: as many as the left one, at most its rows).

    Returns
    -------
    left, right : dask DataFrame
        pandas partitions, or cuDF ones where ``backend.dataframe_library`` is ``cudf``.
    sizes : dict
        ``right_rows``, ``matched`` and the right table's ``partitions``.
    """
    library = backend.dataframe_library
    right_rows = right_size(rows)
    matched = matched_rows(rows, match)
    right_parts = min(right_partitions or partitions, right_rows)
    multiplier, offset = permutation(seed, right_rows)
    left = dd.from_map(
        left_frame, partition_bounds(rows, partitions), meta=LEFT_META, label="join-left",
        rows=rows, right_rows=right_rows, matched=matched, seed=seed, library=library,
    )
    right = dd.from_map(
        right_frame, partition_bounds(right_rows, right_parts), meta=RIGHT_META, label="join-right",
        right_rows=right_rows, multiplier=multiplier, offset=offset, seed=seed,
        library=library,
    )
    return left, right, {"right_rows": right_rows, "matched": matched,
                         "right_partitions": right_parts}


def pandas_tables(rows: int, match: float, seed: int, partitions: int):
    """The pipeline's two tables, generated partition by partition here and concatenated."""
    right_rows = right_size(rows)
    matched = matched_rows(rows, match)
    a, b = permutation(seed, right_rows)
    left = pd.concat([left_frame(bounds, rows=rows, right_rows=right_rows, matched=matched,
                                 seed=seed) for bounds in partition_bounds(rows, partitions)],
                     ignore_index=True)
    right = pd.concat([right_frame(bounds, right_rows=right_rows, multiplier=a, offset=b,
                                   seed=seed)
                       for bounds in partition_bounds(right_rows, min(partitions, right_rows))],
                      ignore_index=True)
    return left, right
