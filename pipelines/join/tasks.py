"""What join-pipeline runs on the workers, and the lazy join and aggregate built from them.

The functions its tasks call, partition by partition: the right table keyed by its key (the
build side of a broadcast hash join, :func:`_keyed`), a left partition probed against it
(:func:`_probe`), rows counted (:func:`_row_count`) and the aggregate by group
(:func:`aggregate`, which the one-process baseline runs too). :func:`join` builds the lazy join
of the two tables the way a :class:`pipelines.join.strategy.Strategy` says, and
:func:`result_parts` the lazy reported parts from it.
"""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd

from daskgpu.data.synthetic_tables import LEFT_META, RIGHT_META
from daskgpu.toolkit import backends
from pipelines.join.shared import CELL_ROWS, GROUPS


def _row_count(frame):
    return pd.Series([len(frame)], dtype="int64")


def shares_hash_table(backend) -> bool:
    """Whether a worker's joins can share one hash table of the right table (pandas can).

    pandas keeps an index's hash table on the index: a keyed right table held by a worker is
    hashed once there, whatever the number of left partitions that probe it. cuDF builds its
    hash table in each merge (cheaply, on the GPU): there Dask's merge joins each partition.
    """
    return backend.dataframe_library == "pandas"


def _keyed(right):
    """The right table indexed by its key: the build side of a broadcast hash join."""
    return right.set_index("key")


def _probe(left, keyed):
    """The inner join of one left partition with the keyed right table (a pandas one).

    Right keys held once each are looked up in the index's hash table (built on the first
    lookup on a worker, then reused); right keys that repeat are merged instead.
    """
    index = keyed.index
    if not index.is_unique:
        return left.merge(keyed, left_on="key", right_index=True, how="inner").reset_index(
            drop=True)
    position = index.get_indexer(left["key"])
    found = position >= 0
    rows = position[found]
    return left[found].assign(**{name: keyed[name].to_numpy()[rows] for name in keyed.columns})


def aggregate(joined):
    """Per group ``key % 16``: joined rows, the sum of ``x * y`` and the mean of ``y``."""
    with_columns = joined.assign(group=joined["key"] % GROUPS, xy=joined["x"] * joined["y"])
    return with_columns.groupby("group").agg({"x": "count", "xy": "sum", "y": "mean"})


def join(left, right, strategy, shared: bool):
    """The lazy inner join of the two tables on ``key``, as ``strategy`` says.

    ``shared``: whether a worker's joins can share one hash table (:func:`shares_hash_table`).
    A broadcast join takes a right table in one partition.
    """
    if strategy.broadcast and shared:
        # One task keys the right table; Dask sends it to each worker once, and every left
        # partition probes it where that partition lives.
        keyed = right.map_partitions(_keyed, meta=_keyed(RIGHT_META))
        return left.map_partitions(_probe, keyed.to_delayed()[0],
                                   meta=_probe(LEFT_META, _keyed(RIGHT_META)))
    if strategy.broadcast:
        # A one-partition right table is merged with each left partition where it lives.
        return left.merge(right, on="key", how="inner")
    return left.merge(right, on="key", how="inner", shuffle_method=strategy.method,
                      broadcast=False)


def result_parts(joined) -> dict:
    """The lazy reported parts of a join: its row count and its aggregate, on the host."""
    totals = aggregate(joined)
    return {
        "joined_rows": joined.map_partitions(_row_count, meta=pd.Series([], dtype="int64")).sum(),
        "aggregate": totals.map_partitions(backends.to_host, meta=backends.to_host(totals._meta)),
    }


# --- certificates: the joined rows summed by cell of the left table, beside the answer --------

#: Columns of the cell certificates: per cell of the left table and group, the joined rows,
#: the sum of x*y and the sum of y.
CELL_META = pd.DataFrame({"cell": pd.Series([], dtype="int64"),
                          "group": pd.Series([], dtype="int64"),
                          "count": pd.Series([], dtype="int64"),
                          "sum_xy": pd.Series([], dtype="float64"),
                          "sum_y": pd.Series([], dtype="float64")})


def _values(column):
    """A column or index as an array where it lives: NumPy for pandas, CuPy for cuDF."""
    return column.values if hasattr(column, "to_pandas") else column.to_numpy()


def _array_module(array):
    return importlib.import_module(type(array).__module__.split(".")[0])


def _with_rows(part, starts: tuple, partition_info=None):
    """A left partition with ``row``, each row's position in the whole left table."""
    start = starts[partition_info["number"]] if partition_info else 0
    xp = _array_module(_values(part["key"]))
    return part.assign(row=xp.arange(start, start + len(part), dtype=xp.int64))


def numbered(left, bounds):
    """The left table with a ``row`` column (for joins that do not keep a partition's index)."""
    starts = tuple(int(b[0]) for b in bounds)
    return left.map_partitions(_with_rows, starts,
                               meta=LEFT_META.assign(row=pd.Series([], dtype="int64")))


def _cell_sums(joined, starts: tuple, partition_info=None) -> pd.DataFrame:
    """One joined partition summed by (cell of the left table, group), on its worker.

    A row's cell is its position in the left table (its ``row`` column, or the partition's
    start plus its index, which ``_probe`` keeps) divided by ``CELL_ROWS``. Only the non-empty
    (cell, group) sums travel, as a small host table.
    """
    if len(joined) == 0:
        return CELL_META
    if "row" in joined.columns:
        rows = _values(joined["row"])
    else:
        rows = _values(joined.index) + (starts[partition_info["number"]] if partition_info else 0)
    keys, x, y = (_values(joined[name]) for name in ("key", "x", "y"))
    xp = _array_module(keys)
    cell = rows // CELL_ROWS
    first = int(cell.min())
    span = (int(cell.max()) - first + 1) * GROUPS
    slot = (cell - first) * GROUPS + keys % GROUPS
    count = xp.bincount(slot, minlength=span)
    sums = [xp.bincount(slot, weights=w, minlength=span) for w in (x * y, y)]
    kept = xp.flatnonzero(count)
    host = [backends.to_host(kept), *(backends.to_host(a[kept]) for a in (count, *sums))]
    return pd.DataFrame({"cell": first + host[0] // GROUPS, "group": host[0] % GROUPS,
                         "count": host[1].astype(np.int64), "sum_xy": host[2],
                         "sum_y": host[3]})


def cell_certificates(joined, bounds):
    """The lazy cell certificates of a join: per (left cell, group) count, sum x*y, sum y."""
    starts = tuple(int(b[0]) for b in bounds)
    return joined.map_partitions(_cell_sums, starts, meta=CELL_META)
