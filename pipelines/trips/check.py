"""trips-pipeline's check, declared on :mod:`daskgpu.verification`; the steps both depths share.

The run returns a certificate of every partition (``raw["partitions"]``; its dense table, its
trips of other passenger counts grouped exactly, its cells' rows and projected tables). Both
depths establish, reading no trip again, that the reported table, rows, kept trips and groups
are the partitions' tables added, each partition read its planned rows and is the sum of its
cells, and its other passenger counts are grouped exactly. ``fast`` then recomputes a seeded
sample of cells from their rows (:mod:`.check_fast`); ``full`` first reads every trip again
(:mod:`.check_full`). Nothing is shared with the computation but :mod:`pipelines.trips.shared`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from daskgpu.verification import Check, differences, tolerance
from pipelines.trips.check_fast import cells_recomputed
from pipelines.trips.check_full import every_trip_again
from pipelines.trips.check_mutations import MUTATIONS
from pipelines.trips.check_replay import (
    SUMS,
    expected_partitions,
    frame_problem,
    frame_rows,
    label,
    table_problems,
)
from pipelines.trips.shared import HOURS, SLOTS, TripsContext, cell_count, projection_weights


@dataclass(frozen=True)
class Computed:
    """What the check reads of a run: its reported value and its partitions' certificates."""

    value: dict
    certificates: list


#: The projections of a table: trips, fares and distances on each of the two weights.
PROJECTIONS = ("trips", "trips weighted", "fares", "fares weighted", "distances",
               "distances weighted")


def read(workload, raw: dict) -> Computed:
    """The reported value (the means by group, rows, kept trips, groups) and the certificates."""
    return Computed(workload.present(workload, raw), raw["partitions"])


def certified_sums(certificates: list[dict]) -> dict:
    """Sums by group of the partitions' tables: ``hour``, ``passengers`` and ``SUMS``, sorted.

    The dense tables and the exact groups of other passenger counts, added in partition order.
    """
    counts = sum((c["counts"] for c in certificates), np.zeros((HOURS, SLOTS), np.int64))
    sums = sum((c["sums"] for c in certificates), np.zeros((2, HOURS, SLOTS)))
    groups = {(int(h), int(s)): [counts[h, s], sums[0, h, s], sums[1, h, s]]
              for h, s in zip(*np.nonzero(counts[:, :SLOTS - 1]), strict=True)}
    for outside in (c["outside"] for c in certificates if c["outside"] is not None):
        for key, row in zip(outside.index, outside[list(SUMS)].to_numpy(), strict=True):
            total = groups.setdefault(key, [0, 0.0, 0.0])
            total[:] = [a + b for a, b in zip(total, row, strict=True)]
    keys = sorted(groups)
    return {"hour": [k[0] for k in keys], "passengers": [k[1] for k in keys],
            **{name: np.array([groups[k][i] for k in keys]) for i, name in enumerate(SUMS)}}


def reported_as_certified(ctx: TripsContext, r: Computed, verdict) -> None:
    """The reported table, rows, kept trips and groups are the partitions' tables added."""
    sums = certified_sums(r.certificates)
    verdict.fail_all(table_problems(r.value["table"], sums, ("reported", "certified")))
    totals = {"rows": sum(c["rows"] for c in r.certificates), "kept": int(sum(sums["trips"])),
              "groups": len(sums["trips"])}
    for name, want in totals.items():
        verdict.require(r.value[name] == want, f"{name} {r.value[name]} reported, {want} certified")
    if verdict.ok:
        verdict.establish(f"{totals['groups']} groups, {totals['rows']} rows and "
                          f"{totals['kept']} kept trips agree with the certificates of "
                          f"{len(r.certificates)} partitions")


def partitions_as_planned(ctx: TripsContext, r: Computed, verdict) -> None:
    """The certificates name the input's partitions in order, each with its rows.

    A CSV file's rows are planned from its lines, which bound them (pandas skips blank lines).
    A frame in memory's partitions are row ranges that must cover its rows once, in order.
    """
    expected, known = expected_partitions(ctx)
    if ctx.source is not None and ctx.source.kind == "memory":
        if not verdict.note(frame_problem(ctx)):
            return
        verdict.establish(f"its {len(expected)} partitions cover the frame's "
                          f"{frame_rows(ctx)} rows once, in order")
    got = [tuple(c["partition"]) for c in r.certificates]
    if not verdict.require(got == expected and len(ctx.planned_rows) == len(expected),
                           f"the run's certificates name {len(got)} partitions, not the "
                           f"{len(expected)} of its input in order"):
        return
    for partition, defined, planned, c in zip(expected, known, ctx.planned_rows,
                                              r.certificates, strict=True):
        rows = c["rows"]
        verdict.require(rows <= planned if defined is None else rows == planned == defined,
                        f"{label(partition)}: {rows} rows read, {planned} planned"
                        + ("" if defined is None else f", {defined} defined"))


def cells_add_up(ctx: TripsContext, r: Computed, verdict) -> None:
    """Every partition is cut into its cells and is their sum: counts exactly, sums to rounding."""
    weights = projection_weights(ctx.sample_seed)
    for c in r.certificates:
        verdict.note(_cells_problem(label(c["partition"]), c, ctx.cell_rows, weights))
    if verdict.ok:
        verdict.establish("each partition's table the sum of its cells'")


def _cells_problem(name: str, c: dict, cell_rows: int, weights: np.ndarray) -> str | None:
    rows, sizes = c["rows"], c["cell_rows"]
    cells = cell_count(rows, cell_rows)
    if not np.array_equal(sizes, np.minimum(cell_rows, rows - cell_rows * np.arange(cells))):
        return (f"{name}: {len(sizes)} cells of {int(np.sum(sizes))} rows, not the {cells} "
                f"cells of its {rows} rows")
    # Trips exactly (integers below 2**53); sums (positive) to the rounding of both sides.
    table = np.concatenate([c["counts"].reshape(-1) @ weights,
                            (c["sums"].reshape(2, -1) @ weights.astype(np.float64)).ravel()])
    by_cells = np.concatenate([c["cell_counts"].sum(axis=0), [
        math.fsum(c["cell_sums"][:, k, j]) for k in range(2) for j in range(2)]])
    limit = [0, 0, *tolerance(1.0, cells + HOURS * SLOTS + 1) * by_cells[2:]]
    return differences(table, by_cells, what="projection", tolerance=limit, form=".17g",
                       label=lambda i: f"{name}: {PROJECTIONS[i]}", reported_as="{} in its table",
                       expected_as=f"{{}} in its {cells} cells'")


def outside_grouped(ctx: TripsContext, r: Computed, verdict) -> None:
    """Each partition's dense column of other passenger counts is its trips grouped exactly."""
    for c in r.certificates:
        grouped = np.zeros((3, HOURS))
        if c["outside"] is not None:
            hours = c["outside"].index.get_level_values(0).to_numpy().astype(np.int64)
            grouped = np.stack([np.bincount(hours, c["outside"][n].to_numpy(float), HOURS)
                                for n in SUMS])
        dense = np.stack([c["counts"][:, SLOTS - 1], *c["sums"][:, :, SLOTS - 1]])
        slack = tolerance(1.0, dense[0])  # the values are positive
        verdict.note(differences(
            dense, grouped, what="sum", tolerance=[[0] * HOURS, *(slack * dense[1:])],
            label=lambda i, c=c: f"{label(c['partition'])}, hour {i % HOURS}: other passenger "
                                 f"counts' {('trips', 'fares', 'distances')[i // HOURS]}",
            reported_as="{} in its table", expected_as="{} grouped exactly"))


SHARED = (reported_as_certified, partitions_as_planned, cells_add_up, outside_grouped)
CHECK = Check(fast=(*SHARED, cells_recomputed), full=(every_trip_again, *SHARED), read=read,
              mutations=MUTATIONS)
