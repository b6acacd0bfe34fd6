"""join-pipeline: an inner join of two synthetic tables and a small aggregate (shuffle-heavy).

Modelled on dask-cuda's merge benchmark. The left table has ``rows`` rows (``key`` int64,
``x`` float64), the right table ``rows // 10`` rows (``key`` int64, ``y`` float64) with unique
keys. Both are generated on the workers, partition by partition, from a seed; neither is ever
built in the client. Exactly ``round(match * rows)`` left rows find a partner, so the joined
row count is known in advance and checked exactly.

Verification needs no join: right keys are ``0..R-1`` once each, so a dense ``y[key]`` array
built from the right table joins every left row by lookup (see :mod:`pipelines.join.check`,
which shares no code with this module).

The tables come from :mod:`daskgpu.data.synthetic_tables` (how they are made is said there). How
they are joined, a broadcast of the right table or a hash shuffle of both, is chosen by size in
:mod:`pipelines.join.strategy` and stated in the result.

This module holds the parameters, ``settle``, the one-process baseline, :func:`present` (the
reported value, which the check reads through the workload) and ``prepare``, which assembles the
workload; what runs on the workers, and the lazy join and aggregate made of it, is in
:mod:`pipelines.join.tasks`.
"""

from __future__ import annotations

import math

from daskgpu.data.synthetic_tables import pandas_tables, partition_bounds, right_size, tables
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends
from daskgpu.toolkit.params import Param, bounded_float, choice, non_negative_int, positive_int
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from pipelines.join import SUMMARY
from pipelines.join import strategy as join_strategy
from pipelines.join.check import CHECK
from pipelines.join.shared import GROUPS, JoinContext
from pipelines.join.tasks import (
    aggregate,
    cell_certificates,
    join,
    numbered,
    result_parts,
    shares_hash_table,
)

CPU_DEFAULT_ROWS = 10_000_000
GPU_DEFAULT_ROWS = 100_000_000
MAX_ROWS = 10**10  # right keys are (a * j + b) mod R in int64: R * a must stay below 2**63
# Left rows per partition at most: enough partitions to busy every CPU thread and keep each
# shuffle piece small; a GPU wants fewer, larger partitions (160 MB of left table each).
CPU_PARTITION_ROWS = 1_000_000
GPU_PARTITION_ROWS = 10_000_000
BROADCAST = ("auto", "true", "false")
SHUFFLE = ("auto", *join_strategy.METHODS)
ROW_BYTES = 16  # an int64 key and a float64 value
MAX_PARTITIONS = 100_000  # a shuffle of more would not fit in one graph


def _rows(value) -> int:
    number = positive_int(value)
    if number > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS:.0e} rows")
    return number


PARAMS = (
    Param("rows", _rows, None, f"Rows of the left table; the right one has rows // 10 "
          f"[default: {CPU_DEFAULT_ROWS:.0e} on CPU, {GPU_DEFAULT_ROWS:.0e} on GPUs].", "N"),
    Param("match", bounded_float(0.0, 1.0, "the fraction of left rows that find a partner"), 0.3,
          "Fraction of left rows with a partner in the right table.", "F"),
    Param("partitions", positive_int, None, "Partitions of the left table [default: a multiple "
          f"of the worker threads, at most {CPU_PARTITION_ROWS:.0e} rows each on CPU, "
          f"{GPU_PARTITION_ROWS:.0e} on GPUs].", "N"),
    Param("broadcast", choice(BROADCAST), "auto", "Broadcast join: auto (broadcast the right "
          "table when it fits a worker comfortably and costs less than a shuffle), true "
          "(broadcast the right table, in one partition) or false (hash-shuffle both).",
          "auto|true|false", BROADCAST),
    Param("shuffle", choice(SHUFFLE), "auto", "Shuffle method of a shuffle join: auto (tasks, "
          "measured faster here, or Dask's dataframe.shuffle.method where set), tasks or p2p; "
          "giving a method asks for a shuffle join.", "auto|tasks|p2p", SHUFFLE),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
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


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Choose rows and partitions for the backend, and refuse impossible partition counts.

    More partitions than rows, or than one graph holds, are refused before a cluster starts.
    """
    values = dict(values)
    given = values["rows"] is not None
    rows = values["rows"] = values["rows"] or default_rows(backend)
    partitions = values["partitions"]
    if partitions is not None and partitions > rows:
        source = f"--rows {rows}" if given else f"--rows defaults to {rows} here"
        raise ParameterError(
            f"--partitions {partitions}: more partitions than left rows ({source}); "
            f"give at most {rows} partitions, or a larger --rows"
        )
    if partitions is not None and partitions > MAX_PARTITIONS:
        raise ParameterError(
            f"--partitions {partitions}: at most {MAX_PARTITIONS:.0e} partitions fit in one "
            "graph; give fewer"
        )
    if partitions is None:
        values["partitions"] = default_partitions(rows, backend)
    _check_strategy(backend, values["broadcast"], values["shuffle"])
    return values, {}


def _check_strategy(backend, broadcast: str, shuffle: str) -> None:
    """Refuse a shuffle method with a broadcast join, and p2p on cuDF (dask-cudf lacks it)."""
    if broadcast == "true" and shuffle != "auto":
        raise ParameterError(
            f"--shuffle {shuffle}: a broadcast join shuffles nothing; give --broadcast true or "
            "--shuffle, not both"
        )
    if shuffle == "p2p" and backend.dataframe_library == "cudf":
        raise ParameterError(
            "--shuffle p2p: dask-cudf does not take Dask's p2p shuffle; give --shuffle tasks "
            "on GPU workers"
        )


def present(workload, raw: dict) -> dict:
    """The reported value: the joined row count and, per group ``0..GROUPS-1``, the aggregate.

    The workload's ``present`` (the check reads the reported value through it) and the
    baseline's answer.

    Parameters
    ----------
    workload : Workload or None
        The workload the result came from (unused; None for a baseline's answer).
    raw : dict
        ``joined_rows`` (a number) and ``aggregate`` (a host table indexed by group, with the
        columns ``x`` (count), ``xy`` (sum of x*y) and ``y`` (mean of y)).

    Returns
    -------
    dict
        ``joined_rows`` and ``aggregate`` (``group``, ``count``, ``sum_xy``, ``mean_y``; a group
        without rows has count 0, sum_xy 0.0 and mean_y None).
    """
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


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """One ``merge`` and the aggregate on the same tables, in one process: seconds and answer.

    The answer has the form of the run's reported value. pandas on CPU, cuDF on a GPU worker.
    The tables are generated here first, untimed (the pipeline's compute also generates them
    on the workers).
    """
    backend = resolved.backend
    left, right = pandas_tables(resolved["rows"], resolved["match"], resolved["seed"],
                                resolved["partitions"])
    left = backends.from_pandas(left, backend.dataframe_library)
    right = backends.from_pandas(right, backend.dataframe_library)

    def join_and_aggregate():
        joined = left.merge(right, on="key", how="inner")
        return {"joined_rows": len(joined), "aggregate": aggregate(joined)}

    seconds, raw = timed(backend, join_and_aggregate)
    return seconds, present(None, backends.to_host(raw))


@pipeline(
    "join-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy join, its row count and its aggregate."""
    backend = resolved.backend
    backends.require_dataframe_library(backend, "join-pipeline")
    rows, match, seed = resolved["rows"], resolved["match"], resolved["seed"]
    partitions = resolved["partitions"]
    shared = shares_hash_table(backend)
    strategy = join_strategy.choose(
        backend, left_rows=rows, right_rows=right_size(rows), left_partitions=partitions,
        row_bytes=ROW_BYTES, broadcast=resolved["broadcast"], shuffle=resolved["shuffle"],
        builds=backend.workers if shared else partitions)
    left, right, sizes = tables(backend, rows, match, partitions, seed,
                                right_partitions=1 if strategy.broadcast else None)
    bounds = partition_bounds(rows, partitions)
    # A broadcast probe keeps each left partition's index, which places its rows; a merge
    # does not, so the rows carry their position through it.
    keeps_index = strategy.broadcast and shared
    joined = join(left if keeps_index else numbered(left, bounds), right, strategy, shared)
    join_name = strategy.name
    if not strategy.broadcast and 1 in (partitions, sizes["right_partitions"]):
        join_name = "single partition (a table in one partition needs no shuffle)"
    # The reported value, and beside it the cell certificates that the check reads (a few
    # hundred bytes per cell): the fast check draws a sample of cells again, the full one
    # recomputes every cell from the tables.
    collection = {**result_parts(joined), "cells": cell_certificates(joined, bounds)}
    right_rows = sizes["right_rows"]
    return Workload(
        collection=collection,
        bytes_are="generated",
        elements=rows + right_rows,
        nbytes=(rows + right_rows) * ROW_BYTES,
        description={
            "left": f"{rows} rows (key int64, x float64)",
            "right": f"{right_rows} rows (key int64, y float64), unique keys",
            "left_partitions": partitions,
            "right_partitions": sizes["right_partitions"],
            "matched_rows": sizes["matched"],
            "match": match,
            "join": join_name,
            "join_reason": strategy.reason,
            "seed": seed,
        },
        context=JoinContext(rows, right_rows, sizes["matched"], seed, partitions, left, right,
                            backend.array_library, max(1, backend.threads)),
        present=present,
    )
