"""What join-pipeline and its independent check share: the group count and the reported value.

The aggregate groups joined rows by ``key % GROUPS``; :func:`present` turns a computed (or
baseline) result into the reported value. The pipeline (:mod:`pipelines.join_pipeline`) reports
through it and the check (:mod:`pipelines.join_check`) reads the reported value through it, so
neither module imports the other.
"""

from __future__ import annotations

import math

GROUPS = 16  # the aggregate groups by key % GROUPS


def present(workload, raw: dict) -> dict:
    """The reported value: the joined row count and, per group ``0..GROUPS-1``, the aggregate.

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
