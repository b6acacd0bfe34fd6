"""trips-pipeline's full-only step: every trip read again, and the reported table recomputed.

Every partition is read again on the workers and summed with pandas and with NumPy alone, which
must agree (:func:`~pipelines.trips.check_replay.tally`); pandas' sums must give the table. A
frame in memory is read again from the object itself
(:func:`~pipelines.trips.check_replay.every_partition_again`).
"""

from __future__ import annotations

from pipelines.trips.check_replay import (
    every_partition_again,
    expected_partitions,
    summed,
    table_problems,
)
from pipelines.trips.shared import TripsContext


def every_trip_again(ctx: TripsContext, r, verdict) -> None:
    """The reported table, rows, kept trips and groups against every partition read again."""
    partitions, _ = expected_partitions(ctx)
    tallies, read = every_partition_again(ctx, partitions)
    verdict.fail_all(p for t in tallies for p in t[2])  # first: the check's own two paths
    sums = summed([t[1] for t in tallies]).reset_index().to_dict(orient="list")
    verdict.fail_all(table_problems(r.value["table"], sums))
    rows, kept, groups = sum(t[0] for t in tallies), int(sum(sums["trips"])), len(sums["trips"])
    for name, want in (("rows", rows), ("kept", kept), ("groups", groups)):
        verdict.require(r.value[name] == want, f"{name} {r.value[name]} reported, {want} "
                                               "recomputed")
    if verdict.ok:
        verdict.establish(f"{groups} groups, {rows} rows and {kept} kept trips agree with every "
                          f"trip recomputed with pandas and its own haversine ({read}), each "
                          "partition's trips summed the same by NumPy alone")
