"""join-pipeline: an inner join of two synthetic tables and a small aggregate (shuffle-heavy).

Modelled on dask-cuda's merge benchmark. The left table has ``rows`` rows (``key`` int64,
``x`` float64), the right table ``rows // 10`` rows (``key`` int64, ``y`` float64) with unique
keys. Both are generated on the workers, partition by partition, from a seed; neither is ever
built in the client. Exactly ``round(match * rows)`` left rows find a partner, so the joined
row count is known in advance and checked exactly.

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

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

from daskgpu import backends
from daskgpu.bench import time_call
from daskgpu.errors import ParameterError
from daskgpu.params import Param, bounded_float, choice, non_negative_int, positive_int
from daskgpu.registry import Verification, Workload, pipeline

CPU_DEFAULT_ROWS = 10_000_000
GPU_DEFAULT_ROWS = 100_000_000
MAX_ROWS = 10**10  # right keys are (a * j + b) mod R in int64: R * a must stay below 2**63
# Left rows per partition at most: enough partitions to busy every CPU thread and keep each
# shuffle piece small; a GPU wants fewer, larger partitions (160 MB of left table each).
CPU_PARTITION_ROWS = 1_000_000
GPU_PARTITION_ROWS = 10_000_000
BLOCK_ROWS = 1 << 16  # rows drawn from one random stream: the unit of reproducibility
GROUPS = 16  # the aggregate groups by key % GROUPS
SAMPLE_ROWS = 100_000  # about this many joined rows are compared with pandas.merge
BROADCAST = {"auto": None, "true": True, "false": False}
MAX_PARTITIONS = 100_000  # a shuffle of more would not fit in one graph
_LEFT, _RIGHT, _PERMUTATION = 0, 1, 2  # spawn keys of the random streams


def _rows(value) -> int:
    number = positive_int(value)
    if number > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS:.0e} rows")
    return number


PARAMS = (
    Param("rows", _rows, None, f"rows of the left table; the right one has rows // 10 "
          f"[default: {CPU_DEFAULT_ROWS:.0e} on CPU, {GPU_DEFAULT_ROWS:.0e} on GPUs]", "N"),
    Param("match", bounded_float(0.0, 1.0, "the fraction of left rows that find a partner"), 0.3,
          "fraction of left rows with a partner in the right table", "F"),
    Param("partitions", positive_int, None, "partitions of the left table [default: a multiple "
          f"of the worker threads, at most {CPU_PARTITION_ROWS:.0e} rows each on CPU, "
          f"{GPU_PARTITION_ROWS:.0e} on GPUs]", "N"),
    Param("broadcast", choice(tuple(BROADCAST)), "auto", "broadcast join: auto (Dask's "
          "heuristic), true (broadcast the right table) or false (hash-shuffle both)",
          "auto|true|false", tuple(BROADCAST)),
    Param("seed", non_negative_int, None, "random seed [default: fresh, reported]", "INT"),
)


def default_rows(backend) -> int:
    """Left rows when none are given: 10^7 on CPU, 10^8 on GPUs."""
    return GPU_DEFAULT_ROWS if backend.is_gpu else CPU_DEFAULT_ROWS


def default_partitions(rows: int, backend) -> int:
    """A multiple of the worker threads, each partition at most the backend's row limit."""
    limit = GPU_PARTITION_ROWS if backend.is_gpu else CPU_PARTITION_ROWS
    slots = max(1, backend.threads)
    parts = math.ceil(max(1, math.ceil(rows / limit)) / slots) * slots
    return max(1, min(parts, rows))


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
    y = np.empty(stop - start, dtype=np.float64)
    for block in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        b0, b1 = block * BLOCK_ROWS, min(right_rows, (block + 1) * BLOCK_ROWS)
        block_y = _stream(seed, _RIGHT, block).random(b1 - b0)
        lo, hi = max(start, b0), min(stop, b1)
        y[lo - start : hi - start] = block_y[lo - b0 : hi - b0]
    return backends.from_pandas(pd.DataFrame({"key": keys, "y": y}), library)


def _bounds(total: int, parts: int) -> list[tuple[int, int]]:
    return [(p * total // parts, (p + 1) * total // parts) for p in range(parts)]


def _empty(**dtypes) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


LEFT_META = _empty(key="int64", x="float64")
RIGHT_META = _empty(key="int64", y="float64")
JOINED_META = _empty(key="int64", x="float64", y="float64")


def tables(backend, rows: int, match: float, partitions: int, seed: int):
    """The lazy left and right tables, generated on the workers, and their sizes.

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
    right_parts = min(partitions, right_rows)
    multiplier, offset = permutation(seed, right_rows)
    # the collections' meta must have the partitions' type
    left_meta = backends.from_pandas(LEFT_META, library)
    right_meta = backends.from_pandas(RIGHT_META, library)
    left = dd.from_map(
        left_frame, _bounds(rows, partitions), meta=left_meta, label="join-left",
        rows=rows, right_rows=right_rows, matched=matched, seed=seed, library=library,
    )
    right = dd.from_map(
        right_frame, _bounds(right_rows, right_parts), meta=right_meta, label="join-right",
        right_rows=right_rows, multiplier=multiplier, offset=offset, seed=seed,
        library=library,
    )
    return left, right, {"right_rows": right_rows, "matched": matched,
                         "right_partitions": right_parts}


def _keys_below(frame, limit):
    return backends.to_host(frame[frame["key"] < limit])


def _row_count(frame):
    return pd.Series([len(frame)], dtype="int64")


def aggregate(joined):
    """Per group ``key % 16``: joined rows, the sum of ``x * y`` and the mean of ``y``."""
    with_columns = joined.assign(group=joined["key"] % GROUPS, xy=joined["x"] * joined["y"])
    return with_columns.groupby("group").agg({"x": "count", "xy": "sum", "y": "mean"})


def sample_limit(right_rows: int, matched: int) -> int:
    """Keys below this are sampled: about SAMPLE_ROWS joined rows, at most SAMPLE_ROWS keys."""
    return max(1, min(right_rows, SAMPLE_ROWS, -(-right_rows * SAMPLE_ROWS // max(1, matched))))


def _join_algorithm(graph_keys) -> str:
    names = {str(k[0] if isinstance(k, tuple) else k) for k in graph_keys}
    if any("broadcastjoin" in n or "bcast" in n for n in names):
        return "broadcast"
    if any("hash-join" in n or "shuffle" in n for n in names):
        return "hash shuffle"
    return "single partition"


def check(*, rows, match, partitions, broadcast, seed) -> None:
    """Refuse more partitions than rows, or than one graph holds, before a cluster starts."""
    _check_partitions(partitions, rows or CPU_DEFAULT_ROWS, given=rows is not None)
    if partitions is not None and partitions > MAX_PARTITIONS:
        raise ParameterError(
            f"--partitions {partitions}: at most {MAX_PARTITIONS:.0e} partitions fit in one "
            "graph; give fewer"
        )


def _check_partitions(partitions, rows: int, given: bool = True) -> None:
    if partitions is not None and partitions > rows:
        source = f"--rows {rows}" if given else f"--rows defaults to {rows} on CPU"
        raise ParameterError(
            f"--partitions {partitions}: more partitions than left rows ({source}); "
            f"give at most {rows} partitions, or a larger --rows"
        )


def verify(workload: Workload, raw: dict) -> Verification:
    """The exact joined row count, and on the sampled keys the rows of ``pandas.merge``."""
    ctx = workload.context
    expected, limit = ctx["matched"], ctx["sample_limit"]
    joined = int(raw["joined_rows"])
    counted = int(raw["aggregate"]["x"].sum())
    truth = raw["left_sample"].merge(raw["right_sample"], on="key", how="inner")
    columns = ["key", "x", "y"]
    truth = truth[columns].sort_values(columns, ignore_index=True)
    got = raw["joined_sample"][columns].sort_values(columns, ignore_index=True)
    same = truth.shape == got.shape and bool((truth.to_numpy() == got.to_numpy()).all())
    ok = joined == expected and counted == expected and same
    return Verification(
        bool(ok),
        f"joined {joined} rows, expected round(match * rows) = {expected}; the aggregate counts "
        f"{counted}; on keys below {limit} the join's {len(got)} rows "
        f"{'equal' if same else 'DIFFER from'} pandas.merge's {len(truth)}",
    )


def pandas_tables(rows: int, match: float, seed: int, partitions: int):
    """The pipeline's two tables, generated partition by partition here and concatenated."""
    right_rows = right_size(rows)
    matched = matched_rows(rows, match)
    a, b = permutation(seed, right_rows)
    left = pd.concat([left_frame(bounds, rows=rows, right_rows=right_rows, matched=matched,
                                 seed=seed) for bounds in _bounds(rows, partitions)],
                     ignore_index=True)
    right = pd.concat([right_frame(bounds, right_rows=right_rows, multiplier=a, offset=b,
                                   seed=seed)
                       for bounds in _bounds(right_rows, min(partitions, right_rows))],
                      ignore_index=True)
    return left, right


def baseline(backend, *, rows, match, partitions, broadcast, seed) -> float:
    """Seconds of one ``merge`` and the aggregate on the same tables, in one process.

    pandas on CPU, cuDF on a GPU worker. The tables are generated here first, untimed (the
    pipeline's compute also generates them on the workers).
    """
    rows = rows or default_rows(backend)
    partitions = partitions or default_partitions(rows, backend)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    left, right = pandas_tables(rows, match, seed, partitions)
    left = backends.from_pandas(left, backend.dataframe_library)
    right = backends.from_pandas(right, backend.dataframe_library)
    return time_call(backend, lambda: aggregate(left.merge(right, on="key", how="inner")))


@pipeline(
    "join-pipeline",
    "Inner join of two synthetic tables (shuffle-heavy, like dask-cuda's merge benchmark) "
    "and a group-by aggregate",
    PARAMS,
    verify,
    check,
    baseline=baseline,
)
def prepare(backend, *, rows, match, partitions, broadcast, seed) -> Workload:
    """Build the lazy join, its aggregate, the exact row count and a sample to check."""
    backends.require_dataframe_library(backend, "join-pipeline")
    rows = rows or default_rows(backend)
    _check_partitions(partitions, rows)
    partitions = partitions or default_partitions(rows, backend)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    left, right, sizes = tables(backend, rows, match, partitions, seed)
    # dask-cudf does not take Dask's default p2p shuffle: use its default, tasks.
    method = None
    if backend.is_gpu:
        method = dask.config.get("dataframe.shuffle.method", None) or "tasks"
    joined = left.merge(right, on="key", how="inner", shuffle_method=method,
                        broadcast=BROADCAST[broadcast])
    totals = aggregate(joined)
    limit = sample_limit(sizes["right_rows"], sizes["matched"])
    parts = {
        "joined_rows": joined.map_partitions(_row_count, meta=pd.Series([], dtype="int64")).sum(),
        "aggregate": totals.map_partitions(backends.to_host, meta=backends.to_host(totals._meta)),
        "left_sample": left.map_partitions(_keys_below, limit, meta=LEFT_META),
        "right_sample": right.map_partitions(_keys_below, limit, meta=RIGHT_META),
        "joined_sample": joined.map_partitions(_keys_below, limit, meta=JOINED_META),
    }
    # Computed together (the runner takes a dict): the parts share the tables and the join.
    collection = parts
    right_rows = sizes["right_rows"]
    return Workload(
        collection=collection,
        elements=rows + right_rows,
        nbytes=(rows + right_rows) * 16,
        description={
            "left": f"{rows} rows (key int64, x float64)",
            "right": f"{right_rows} rows (key int64, y float64), unique keys",
            "left_partitions": partitions,
            "right_partitions": sizes["right_partitions"],
            "matched_rows": sizes["matched"],
            "match": match,
            "join": _join_algorithm(joined.optimize().__dask_graph__().keys()),
            "broadcast": broadcast,
            "seed": seed,
        },
        context={"matched": sizes["matched"], "sample_limit": limit, "rows": rows},
        present=_present,
    )


def _present(workload: Workload, raw: dict) -> dict:
    table = raw["aggregate"].reindex(range(GROUPS))
    counts = table["x"].fillna(0).astype("int64")
    return {
        "joined_rows": int(raw["joined_rows"]),
        "aggregate": {
            "group": list(range(GROUPS)),
            "count": counts.tolist(),
            "sum_xy": table["xy"].fillna(0.0).tolist(),
            "mean_y": [None if math.isnan(v) else v for v in table["y"].tolist()],
        },
    }
