"""What join-pipeline runs on the workers, and the lazy join and aggregate built from them.

The functions its tasks call, partition by partition: the right table keyed by its key (the
build side of a broadcast hash join, :func:`_keyed`), a left partition probed against it
(:func:`_probe`), rows counted (:func:`_row_count`) and the aggregate by group
(:func:`aggregate`, which the one-process baseline runs too). :func:`join` builds the lazy join
of the two tables the way a :class:`pipelines.join.strategy.Strategy` says, and
:func:`result_parts` the lazy reported parts from it.
"""

from __future__ import annotations

import pandas as pd

from daskgpu.data.synthetic_tables import LEFT_META, RIGHT_META
from daskgpu.toolkit import backends
from pipelines.join.shared import GROUPS


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
