"""trips-pipeline's fast check: the run's certificates, tied together, and a sample of cells.

Beside its answer, the run returns a certificate of every partition (``raw["partitions"]``):
its dense table by hour and passenger slot (the layout of :mod:`pipelines.trips.shared`), its
exactly grouped trips outside the dense slots, and for each cell of ``CELL_ROWS`` rows (one
kernel call each; the partition's table is their sum) the cell's rows and its table projected
on ``projection_weights`` (its totals and a seeded random projection). For the cells the plan
draws (``spot_checks.sample_size`` of all, with the run's seed), it also returns the cell's
table and its rows as read.

This module establishes, reading no data again:

- the reported table, rows, kept trips and groups equal the sum of the partitions' tables
  (trips exactly, means to a relative ``RTOL``);
- every partition holds the rows planned for it (synthetic partitions, Parquet row groups from
  their metadata) and is cut into its cells; its table projects onto the sum of its cells'
  projections (counts exactly, sums to their rounding), and its dense column of other passenger
  counts onto its exactly grouped trips;
- each drawn cell's table matches its projections, and a recomputation from its rows with
  NumPy alone (this package's own haversine, hour and filter), group by group.

It shares no code with the computation (only :mod:`pipelines.trips.shared`). The drawn cells'
rows come back with the result (a few MB on the host, on any backend): nothing is computed on
the workers. What it cannot see, the full depth does: that the rows the run read are the data
(it reads them again).
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.registry import Resolved, Verification, Workload
from pipelines.trips.check import (
    COORDINATES,
    REPORTED,
    SUMS,
    _by_group,
    _differences,
    _expected_rows,
    _great_circle_asin_km,
    _label,
    _summary,
    _wall_clock_hours,
)
from pipelines.trips.shared import (
    CELL_ROWS,
    HOURS,
    SLOTS,
    cell_count,
    partition_specs,
    projection_weights,
)

#: Relative tolerance of a drawn cell's sums against their recomputation (two haversine forms,
#: added in the same order).
CELL_RTOL = 1e-9
#: At most this many problems are named in a failed check's detail.
SHOWN = 4
EPS = float(np.finfo(np.float64).eps)


def _expected_partitions(resolved: Resolved) -> tuple[list, list]:
    """The partitions the run should have read, and each one's rows where known apart.

    Synthetic partitions from their specification, Parquet row groups from the files'
    metadata (read here); a CSV file's rows are known only by reading it (``None``).
    """
    if resolved["input"] is None:
        specs = partition_specs(resolved["rows"], resolved["seed"], resolved["partitions"])
        return [("synthetic", spec) for spec in specs], [spec[1] for spec in specs]
    source = resolved.inputs["input"]
    if source.kind == "csv":
        return [("csv", file) for file in source.files], [None] * len(source.files)
    import pyarrow.parquet as pq

    expected, rows = [], []
    for file in source.files:
        metadata = pq.ParquetFile(file).metadata
        for group in range(metadata.num_row_groups):
            expected.append(("parquet", file, group))
            rows.append(metadata.row_group(group).num_rows)
    return expected, rows


def _plan_problems(resolved: Resolved, planned: list[int], certificates: list) -> list[str]:
    """Partitions missing, added or reordered, and rows other than planned or defined.

    A CSV file's rows are planned from its lines, which bound them (pandas skips blank lines).
    """
    expected, known = _expected_partitions(resolved)
    got = [tuple(c["partition"]) for c in certificates]
    if got != [tuple(p) for p in expected] or len(planned) != len(expected):
        return [f"the run's certificates name {len(got)} partitions, not the "
                f"{len(expected)} of its input in order"]
    problems = []
    for partition, defined, plan, certificate in zip(expected, known, planned, certificates,
                                                     strict=True):
        rows = certificate["rows"]
        if defined is None:
            fits = rows <= plan
        else:
            fits = rows == plan == defined
        if not fits:
            problems.append(f"{_label(partition)}: {rows} rows read, {plan} planned"
                            + ("" if defined is None else f", {defined} defined"))
    return problems


def _certified_sums(certificates: list[dict]) -> dict[str, list]:
    """Trips, fare and distance sums by (hour, passengers) of all partitions' tables.

    As columns (``hour``, ``passengers`` and ``SUMS``), one entry per group, in group order:
    the dense tables added in partition order, then each partition's exact groups of other
    passenger counts added to theirs.
    """
    groups: dict[tuple, list] = {}
    for certificate in certificates:
        counts, sums = certificate["counts"], certificate["sums"]
        for hour, slot in zip(*np.nonzero(counts[:, :SLOTS - 1]), strict=True):
            _add(groups, (int(hour), int(slot)), (counts[hour, slot], sums[0][hour, slot],
                                                  sums[1][hour, slot]))
        outside = certificate["outside"]
        if outside is not None:
            for key, row in zip(outside.index, outside[list(SUMS)].to_numpy(), strict=True):
                _add(groups, key, row)
    keys = sorted(groups)
    return {"hour": [k[0] for k in keys], "passengers": [k[1] for k in keys],
            **{name: [groups[k][i] for k in keys] for i, name in enumerate(SUMS)}}


def _add(groups: dict[tuple, list], key: tuple, values) -> None:
    total = groups.setdefault(key, [0, 0.0, 0.0])
    total[0] += int(values[0])
    total[1] += float(values[1])
    total[2] += float(values[2])


def _close(a: float, b: float, terms: int) -> bool:
    """Two sums of the same ``terms`` non-negative values, added in other orders."""
    return abs(a - b) <= (2 * terms + 8) * EPS * max(abs(a), abs(b))


def _outside_problems(name: str, certificate: dict) -> list[str]:
    """The dense column of other passenger counts against the trips grouped exactly."""
    outside = certificate["outside"]
    by_hour = np.zeros((3, HOURS))
    if outside is not None:
        hours = outside.index.get_level_values(0).to_numpy().astype(np.int64)
        for row, column in enumerate(SUMS):
            by_hour[row] = np.bincount(hours, weights=outside[column].to_numpy(dtype=float),
                                       minlength=HOURS)
    dense = (certificate["counts"][:, SLOTS - 1], *certificate["sums"][:, :, SLOTS - 1])
    for hour in range(HOURS):
        count = int(dense[0][hour])
        if by_hour[0][hour] != count or not all(
                _close(dense[k][hour], by_hour[k][hour], count) for k in (1, 2)):
            table, grouped = ((f"{v[0][hour]:.0f} trips, fares {v[1][hour]:.12g}, distances "
                               f"{v[2][hour]:.12g} km") for v in (dense, by_hour))
            return [f"{name}, hour {hour}: other passenger counts in its table ({table}) "
                    f"differ from their exact groups ({grouped})"]
    return []


def _cell_problems(name: str, certificate: dict, cell_rows: int, weights: np.ndarray) -> list:
    """A partition's cells against its rows and table: counts exactly, sums to rounding."""
    rows = certificate["rows"]
    cells = cell_count(rows, cell_rows)
    sizes = certificate["cell_rows"]
    expected = np.full(cells, cell_rows, np.int64)
    if cells:
        expected[-1] = rows - (cells - 1) * cell_rows
    if len(sizes) != cells or not np.array_equal(sizes, expected):
        return [f"{name}: {len(sizes)} cells of {int(np.sum(sizes))} rows, not the {cells} cells "
                f"of its {rows} rows"]
    table_counts = certificate["counts"].reshape(-1) @ weights
    if not np.array_equal(certificate["cell_counts"].sum(axis=0), table_counts):
        return [f"{name}: its table's trips differ from its {cells} cells' (by "
                f"{int(certificate['cell_counts'][:, 0].sum() - table_counts[0])} in all)"]
    terms = cells + HOURS * SLOTS
    for k, what in enumerate(("fare", "distance")):
        table = certificate["sums"][k].reshape(-1) @ weights.astype(np.float64)
        cell_sums = [math.fsum(certificate["cell_sums"][:, k, j]) for j in range(2)]
        if not all(_close(a, b, terms) for a, b in zip(cell_sums, table, strict=True)):
            return [f"{name}: its table's {what} sums differ from its {cells} cells' "
                    f"({table[0]:.17g} vs {cell_sums[0]:.17g} in all)"]
    return []


def _slots(passengers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each trip's passenger slot (the last for any other count) and whether it has one."""
    values = np.asarray(passengers)
    if values.dtype.kind in "iub":
        present = np.ones(len(values), bool)
        inside = (values >= 0) & (values < SLOTS - 1)
    else:
        values = values.astype(np.float64)
        present = ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            inside = present & (values == np.floor(values)) & (values >= 0) & (values < SLOTS - 1)
    return np.where(inside, values, SLOTS - 1).astype(np.int64), present


def recomputed_cells(cells: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Cells' dense tables from their rows, with NumPy alone, in one pass over all of them.

    Parameters
    ----------
    cells : list of dict
        Each cell's columns as read (``COLUMNS``; times as ``datetime64``, NaT or NaN where
        missing).

    Returns
    -------
    counts : numpy.ndarray
        int64, ``(cells, HOURS, SLOTS)``: kept trips by hour and passenger slot.
    sums : numpy.ndarray
        float64, ``(cells, 2, HOURS, SLOTS)``: their fares, then their distances in km.
    """
    rows = {name: np.concatenate([c[name] for c in cells]) for name in cells[0]}
    owner = np.repeat(np.arange(len(cells)), [len(c["fare"]) for c in cells])
    distance = _great_circle_asin_km(*(np.asarray(rows[n], dtype=np.float64)
                                       for n in COORDINATES))
    fare = np.asarray(rows["fare"], dtype=np.float64)
    hours, timed = _wall_clock_hours(rows["pickup_time"])
    slots, counted = _slots(rows["passengers"])
    with np.errstate(invalid="ignore"):
        kept = timed & counted & (fare > 0) & (distance > 0)
    table = HOURS * SLOTS
    index = owner[kept] * table + hours[kept] * SLOTS + slots[kept]
    size = len(cells) * table
    counts = np.bincount(index, minlength=size)
    sums = [np.bincount(index, weights=w[kept], minlength=size) for w in (fare, distance)]
    shape = (len(cells), HOURS, SLOTS)
    return counts.reshape(shape), np.stack([s.reshape(shape) for s in sums], axis=1)


def _kept_cell_problems(where: str, k: int, certificate: dict, weights: np.ndarray) -> list:
    """A drawn cell the run kept: its rows and table against its cell's certificate."""
    cell = certificate["sampled"].get(k)
    if cell is None:
        return [f"{where}: drawn, but the run kept no rows of it"]
    rows = len(cell["rows"]["pickup_time"])
    if rows != certificate["cell_rows"][k]:
        return [f"{where}: {rows} rows kept, {certificate['cell_rows'][k]} summed"]
    projected = cell["sums"].reshape(2, -1) @ weights.astype(np.float64)
    if not (np.array_equal(cell["counts"].reshape(-1) @ weights, certificate["cell_counts"][k])
            and all(_close(a, b, HOURS * SLOTS) for a, b in
                    zip(projected.reshape(-1), certificate["cell_sums"][k].reshape(-1),
                        strict=True))):
        return [f"{where}: its table differs from its projections"]
    return []


def _recomputed_problems(where: str, cell: dict, counts: np.ndarray, sums: np.ndarray) -> list:
    """A drawn cell's table against its recomputation from its rows, group by group."""
    wrong_sums = ~np.isclose(cell["sums"], sums, rtol=CELL_RTOL, atol=0)
    for column, wrong, got, want in (
            ("trips", cell["counts"] != counts, cell["counts"], counts),
            ("fare_sum", wrong_sums[0], cell["sums"][0], sums[0]),
            ("distance_sum", wrong_sums[1], cell["sums"][1], sums[1])):
        if wrong.any():
            hour, slot = np.argwhere(wrong)[0]
            return [f"{where}, hour {hour}, passenger slot {slot}: {column} "
                    f"{got[hour, slot]:.12g} summed, {want[hour, slot]:.12g} recomputed "
                    "from its rows"]
    return []


def _sample_problems(drawn: list, certificates: list[dict], weights: np.ndarray) -> tuple:
    """The drawn cells against their certificates and their rows recomputed; how many."""
    problems, kept = [], []
    for p, k in drawn:
        certificate = certificates[p]
        if k >= len(certificate["cell_rows"]):  # a CSV's last lines may hold no rows
            continue
        where = f"{_label(certificate['partition'])} cell {k}"
        found = _kept_cell_problems(where, k, certificate, weights)
        problems += found
        if not found:
            kept.append((where, certificate["sampled"][k]))
    if kept:
        counts, sums = recomputed_cells([cell["rows"] for _, cell in kept])
        for i, (where, cell) in enumerate(kept):
            problems += _recomputed_problems(where, cell, counts[i], sums[i])
    return problems, len(kept)


def _sample_seed(resolved: Resolved) -> int:
    if resolved["input"] is None:
        return resolved["seed"]
    return resolved.inputs["input"].rows  # read data has no seed: a fixed one from its size


def _drawn(resolved: Resolved, ctx: dict) -> tuple[list[tuple[int, int]], int]:
    """The drawn cells as (partition, cell) and the number of cells they are drawn from."""
    counts = [cell_count(r, ctx["cell_rows"]) for r in ctx["planned_rows"]]
    population = sum(counts)
    drawn = spot_checks.seeded_sample(population, spot_checks.sample_size(population),
                                      _sample_seed(resolved))
    first = np.cumsum([0, *counts])
    where = np.searchsorted(first, drawn, side="right") - 1
    return [(int(p), int(c - first[p])) for p, c in zip(where, drawn, strict=True)], population


def _reported_problems(value: dict, certificates: list[dict]) -> tuple[list[str], dict]:
    """The reported table, rows, kept trips and groups against the partitions' tables."""
    sums = _certified_sums(certificates)
    expected = _expected_rows(sums)
    problems = []
    wrong = _differences(_by_group(value["table"]), expected, REPORTED, ("reported", "certified"))
    if wrong:
        problems.append(_summary(wrong, len(expected),
                                 "disagree with the partitions' certificates"))
    totals = {"rows": sum(c["rows"] for c in certificates), "kept": sum(sums["trips"]),
              "groups": len(expected)}
    for name, want in totals.items():
        if value[name] != want:
            problems.append(f"{name} {value[name]} reported, {want} certified")
    return problems, totals


def _failed(problems: list[str]) -> Verification:
    more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return Verification(False, "; ".join(problems[:SHOWN]) + more)


def verify_fast(workload: Workload, raw: dict) -> Verification:
    """The reported table against the run's certificates, and a seeded sample of cells.

    Parameters
    ----------
    workload : Workload
        The run's workload: its resolved values and its cell plan (``context``).
    raw : dict
        The computed result: ``rows``, ``table`` and the partitions' certificates
        (``partitions``).

    Returns
    -------
    Verification
        Passed, with the sample's promise in words; or failed, naming what disagreed.
    """
    resolved, ctx = workload.resolved, workload.context
    certificates = raw["partitions"]
    problems, totals = _reported_problems(workload.present(workload, raw), certificates)
    plan = _plan_problems(resolved, ctx["planned_rows"], certificates)
    if plan:
        return _failed(problems + plan)
    cell_rows = CELL_ROWS[resolved.backend.dataframe_library]
    weights = projection_weights(_sample_seed(resolved))
    for certificate in certificates:
        name = _label(certificate["partition"])
        problems += _outside_problems(name, certificate)
        problems += _cell_problems(name, certificate, cell_rows, weights)
    drawn, population = _drawn(resolved, ctx)
    found, checked = _sample_problems(drawn, certificates, weights)
    problems += found
    if problems:
        return _failed(problems)
    return Verification(
        True, f"{totals['groups']} groups, {totals['rows']} rows and {totals['kept']} kept trips "
        f"agree with the certificates of {len(certificates)} partitions, each partition's "
        f"table with its cells'; {spot_checks.detection(checked, population, 'cells')} "
        "(recomputed from their rows with NumPy and this package's own haversine)")
