"""trips-pipeline's recomputations: trips read again and grouped by code of the check's own.

The partitions the run should have read, read again (the trips' definition, pyarrow's or
pandas' own readers) and summed by (hour, passengers) with this module's haversines, hour and
filter, with pandas and with NumPy alone (which also recomputes the fast depth's cells from the
rows the run read); and the comparisons of tables with their recomputations.

A DataFrame in memory is read again from the object itself, never through the run's partitions:
a pandas or cuDF frame in this process, where it is, by rows with pandas' own ``iloc`` (cuDF's
copied to the host); a Dask DataFrame as its own graph's partitions, on the workers.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from daskgpu.verification import differences, replay, tolerance
from pipelines.trips.shared import COLUMNS, HOURS, SLOTS, partition_specs, synthetic_partition

if TYPE_CHECKING:  # pandas only where a frame is read (the full depth)
    import pandas as pd

#: The IUGG mean Earth radius, written out again so that the kernel's constant is checked too.
EARTH_MEAN_RADIUS_KM = 6371.0088
#: Roundings of a distance in one haversine form (sine, cosine, arcsine: an ulp, two each), terms
#: of its sums (relative_slack): enough for latitudes within 85 degrees and trips under 18,000 km;
#: next to the poles and to antipodes every haversine form loses more digits.
HAVERSINE_ROUNDINGS = 24
CSV_CHUNK_ROWS = 1_000_000
COORDINATES = ("pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")
SUMS = ("trips", "fare_sum", "distance_sum")
REPORTED = ("trips", "fare_mean", "distance_mean_km", "fare_per_km")


def expected_partitions(ctx) -> tuple[list[tuple], list[int | None]]:
    """The partitions the run should have read, in order, and each one's rows where known.

    Synthetic partitions from their specification, Parquet row groups from the files'
    metadata (read here); a CSV file's rows are known only by reading it (None).
    """
    if ctx.source is None:
        specs = partition_specs(ctx.rows, ctx.seed, ctx.partitions)
        return [("synthetic", spec) for spec in specs], [spec[1] for spec in specs]
    if ctx.source.kind == "memory":  # the frame's row ranges: frame_problem checks they tile it
        return ([("memory", i, a, b) for i, (a, b) in enumerate(ctx.bounds)],
                [b - a for a, b in ctx.bounds])
    if ctx.source.kind == "csv":
        return [("csv", file) for file in ctx.source.files], [None] * len(ctx.source.files)
    import pyarrow.parquet as pq

    metadata = {file: pq.ParquetFile(file).metadata for file in ctx.source.files}
    groups = [(f, g) for f, data in metadata.items() for g in range(data.num_row_groups)]
    return ([("parquet", f, g) for f, g in groups],
            [metadata[f].row_group(g).num_rows for f, g in groups])


def label(partition: tuple) -> str:
    """A partition's name in a problem: its number, a file's row group, a CSV file."""
    if partition[0] in ("synthetic", "memory"):
        return f"partition {partition[1] if partition[0] == 'memory' else partition[1][0]}"
    if partition[0] == "frame rows":
        return f"the frame's rows {partition[1]} to {partition[2] - 1}"
    if partition[0] == "frame partition":
        return f"the frame's own partition {partition[1]}"
    if partition[0] == "parquet":
        return f"{os.path.basename(partition[1])} row group {partition[2]}"
    return os.path.basename(partition[1])


def great_circle_asin_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Haversine in its textbook form, 2 R asin(sqrt(h)), the differences taken in degrees."""
    with np.errstate(invalid="ignore"):
        h = (np.sin(np.radians(lat2 - lat1) / 2) ** 2 + np.cos(np.radians(lat1))
             * np.cos(np.radians(lat2)) * np.sin(np.radians(lon2 - lon1) / 2) ** 2)
        return 2 * EARTH_MEAN_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))


def great_circle_atan2_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Haversine through atan2(sqrt(h), sqrt(1 - h)): a second form, for pandas' sums."""
    degree = np.pi / 180
    with np.errstate(invalid="ignore"):
        half = np.sin((lat2 - lat1) * degree / 2), np.sin((lon2 - lon1) * degree / 2)
        h = half[0] ** 2 + np.cos(lat1 * degree) * np.cos(lat2 * degree) * half[1] ** 2
        h = np.clip(h, 0.0, 1.0)
        return 2 * EARTH_MEAN_RADIUS_KM * np.arctan2(np.sqrt(h), np.sqrt(1.0 - h))


def relative_slack(trips) -> np.ndarray:
    """How far two correct sums over groups of ``trips`` trips may differ, relative to them.

    Both add the same fares, and distances each side computes by its own haversine, in other
    orders: :func:`~daskgpu.verification.tolerance` of a group's trips and a distance's
    ``HAVERSINE_ROUNDINGS`` as terms (every value kept is positive: its sum is its magnitude).
    """
    return tolerance(1.0, np.asarray(trips, dtype=np.int64) + HAVERSINE_ROUNDINGS)


def _slots(passengers) -> tuple[np.ndarray, np.ndarray]:
    """Each trip's passenger slot (the last for any other count) and whether it has one."""
    values = np.asarray(passengers, dtype=np.float64)  # whole numbers, large ones, NaN
    present = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        inside = present & (values == np.floor(values)) & (values >= 0) & (values < SLOTS - 1)
    return np.where(inside, values, SLOTS - 1).astype(np.int64), present


def recomputed_cells(cells: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Cells' dense tables from their rows, with NumPy alone, in one pass over all of them.

    ``cells``: each cell's columns (times as ``datetime64`` on the wall clock, NaT or NaN where
    missing). Returns kept trips ``(cells, HOURS, SLOTS)`` and fares and distances (km)
    ``(cells, 2, HOURS, SLOTS)``, by hour and passenger slot.
    """
    rows = {name: np.concatenate([c[name] for c in cells]) for name in cells[0]}
    owner = np.repeat(np.arange(len(cells)), [len(c["fare"]) for c in cells])
    distance = great_circle_asin_km(*(np.asarray(rows[n], dtype=np.float64)
                                      for n in COORDINATES))
    fare = np.asarray(rows["fare"], dtype=np.float64)
    times = np.asarray(rows["pickup_time"])
    hours = times.astype("datetime64[h]").astype(np.int64) % 24
    slots, counted = _slots(rows["passengers"])
    with np.errstate(invalid="ignore"):
        kept = ~np.isnat(times) & counted & (fare > 0) & (distance > 0)
    index = (owner[kept] * HOURS + hours[kept]) * SLOTS + slots[kept]
    size, shape = len(cells) * HOURS * SLOTS, (len(cells), HOURS, SLOTS)
    counts = np.bincount(index, minlength=size).reshape(shape)
    sums = [np.bincount(index, weights=w[kept], minlength=size).reshape(shape)
            for w in (fare, distance)]
    return counts, np.stack(sums, axis=1)


def dense_problems(where: str, counts, sums, want_counts, want_sums, names, slack) -> list:
    """Where a dense table differs from another, slot by slot (``slack``: of their sums)."""
    return [differences(
        got, want, what="slot", tolerance=limit,
        label=lambda i: f"{where}, hour {i // SLOTS}, passenger slot {i % SLOTS}",
        reported_as=f"{column} {{}} {names[0]}", expected_as=f"{{}} {names[1]}")
        for column, got, want, limit in (
            ("trips", counts, want_counts, 0),
            ("fare_sum", sums[0], want_sums[0], slack * want_sums[0]),
            ("distance_sum", sums[1], want_sums[1], slack * want_sums[1]))]


def in_hand(ctx) -> bool:
    """Whether the input is a pandas or cuDF frame in this process (not a Dask DataFrame)."""
    return ctx.source is not None and ctx.source.kind == "memory" and ctx.source.form != "dask"


def frame_rows(ctx) -> int:
    """The rows of a frame in memory: a pandas or cuDF frame's counted here.

    A Dask DataFrame's as the run counted them (the full depth counts them again).
    """
    return len(ctx.source.frame) if in_hand(ctx) else ctx.source.rows


def own_rows(ctx, start: int, stop: int) -> pd.DataFrame:
    """Rows ``start:stop`` of a pandas or cuDF frame in hand, its ``COLUMNS``, as pandas."""
    rows = ctx.source.frame.iloc[start:stop][list(COLUMNS)]
    return rows.to_pandas() if hasattr(rows, "to_pandas") else rows


def frame_problem(ctx) -> str | None:
    """Where the partitions of a frame in memory do not cover its rows once, in order."""
    bounds, total = list(ctx.bounds), frame_rows(ctx)
    starts, stops = [a for a, _ in bounds], [b for _, b in bounds]
    if (bounds and starts[0] == 0 and stops[-1] == total and starts[1:] == stops[:-1]
            and all(a <= b for a, b in bounds)):
        return None
    return (f"the run's {len(ctx.bounds)} partitions do not cover the frame's {total} rows "
            f"once, in order ({', '.join(f'{a}:{b}' for a, b in ctx.bounds[:4])}"
            f"{', ...' if len(ctx.bounds) > 4 else ''})")


def cell_rows(ctx, certificate: dict, partition: int, cell: int) -> dict:
    """A drawn cell's rows: from a pandas or cuDF frame in hand, read again.

    Any other input's: as the run read them (``certificate["sampled"]``).
    """
    if not in_hand(ctx):
        return certificate["sampled"][cell]["rows"]
    start = ctx.bounds[partition][0] + cell * ctx.cell_rows
    return cell_columns(own_rows(ctx, start, min(start + ctx.cell_rows,
                                                 ctx.bounds[partition][1])))


def every_partition_again(ctx, partitions: list[tuple]) -> tuple[list, str]:
    """:func:`tally` of the whole input again, and how it was read, in words.

    Files and synthetic trips: ``partitions``, on the workers. A pandas or cuDF frame in hand:
    its rows in ranges of ``CSV_CHUNK_ROWS`` of this check's own, here. A Dask DataFrame: its
    own graph's partitions, on the workers.
    """
    if ctx.source is None or ctx.source.kind != "memory":
        return (replay.on_workers(tally, [(p,) for p in partitions]),
                f"all {len(partitions)} partitions read again")
    if ctx.source.form == "dask":
        parts = ctx.source.frame[list(COLUMNS)].to_delayed()
        return (replay.on_workers(tally, [(("frame partition", j), part)
                                          for j, part in enumerate(parts)]),
                f"all {len(parts)} of the frame's own partitions computed again")
    total = frame_rows(ctx)
    ranges = [(a, min(total, a + CSV_CHUNK_ROWS)) for a in range(0, total, CSV_CHUNK_ROWS)]
    return ([tally(("frame rows", a, b), own_rows(ctx, a, b)) for a, b in ranges],
            f"all {total} rows of the frame read again")


def pandas_chunks(partition: tuple, rows=None):
    """The trips of one partition as pandas frames, read here, not by the run's reader.

    ``rows``: a frame's rows, read again by the caller (cuDF's copied to the host here).
    """
    if rows is not None:
        yield rows.to_pandas() if hasattr(rows, "to_pandas") else rows
    elif partition[0] == "synthetic":  # the data's definition, generated on the host
        yield synthetic_partition(partition[1], "pandas")
    elif partition[0] == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(partition[1]).read_row_group(partition[2], columns=list(COLUMNS))
        yield table.to_pandas()
    else:
        import pandas as pd

        with pd.read_csv(partition[1], usecols=list(COLUMNS), parse_dates=["pickup_time"],
                         chunksize=CSV_CHUNK_ROWS) as chunks:
            yield from chunks


def _floats(values) -> np.ndarray:
    return values.to_numpy(dtype=np.float64, na_value=np.nan)


def pandas_groups(trips: pd.DataFrame) -> pd.DataFrame:
    """Trips, fare and distance sums by (hour, passengers) of one frame, with pandas."""
    import pandas as pd

    distance = great_circle_atan2_km(*(_floats(trips[name]) for name in COORDINATES))
    frame = pd.DataFrame({"hour": trips["pickup_time"].dt.hour.to_numpy(),
                          "passengers": trips["passengers"].to_numpy(),
                          "fare": _floats(trips["fare"]), "distance": distance})
    frame = frame[(frame["distance"] > 0) & (frame["fare"] > 0)]
    by_group = frame.groupby(["hour", "passengers"])  # drops trips without an hour or passengers
    return pd.DataFrame({"trips": by_group.size(), "fare_sum": by_group["fare"].sum(),
                         "distance_sum": by_group["distance"].sum()})


def summed(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Tables of sums by group added."""
    import pandas as pd

    tables = [t for t in tables if len(t)]
    if not tables:
        empty = pd.MultiIndex.from_arrays([[], []], names=["hour", "passengers"])
        return pd.DataFrame({name: [] for name in SUMS}, index=empty)
    return pd.concat(tables).groupby(level=[0, 1]).sum()


def cell_columns(chunk: pd.DataFrame) -> dict:
    """A pandas frame's trips as NumPy columns: times on the wall clock, numbers as float64."""
    times = chunk["pickup_time"]
    if getattr(times.dtype, "tz", None) is not None:
        times = times.dt.tz_localize(None)
    return {"pickup_time": times.to_numpy(),
            **{name: _floats(chunk[name]) for name in COLUMNS if name != "pickup_time"}}


def tally(partition: tuple, rows=None) -> tuple:
    """``(rows, sums by pandas, problems)`` of one partition read again, on a worker.

    ``rows``: a frame's rows, read again by the caller. The problems: where its sums by NumPy
    alone, in the dense table, differ from pandas'.
    """
    count, by_pandas = 0, []
    counts, sums = np.zeros((HOURS, SLOTS), np.int64), np.zeros((2, HOURS, SLOTS))
    for chunk in pandas_chunks(partition, rows):
        count += len(chunk)
        if len(chunk):
            by_pandas.append(pandas_groups(chunk))
            more_counts, more_sums = recomputed_cells([cell_columns(chunk)])
            counts, sums = counts + more_counts[0], sums + more_sums[0]
    total = summed(by_pandas)
    index = (total.index.get_level_values(0).to_numpy(np.int64) * SLOTS
             + _slots(_floats(total.index.get_level_values(1)))[0])
    dense = [np.bincount(index, weights=_floats(total[name]), minlength=HOURS * SLOTS)
             .reshape(HOURS, SLOTS) for name in SUMS]
    return count, total, dense_problems(label(partition), dense[0], np.stack(dense[1:]), counts,
                                        sums, ("by pandas", "by NumPy"), relative_slack(counts))


def group_name(key: tuple) -> str:
    """A group's name in a problem."""
    return f"hour {key[0]:g}, passengers {key[1]:g}"


def table_problems(table: dict, sums: dict, names=("reported", "recomputed")) -> list[str]:
    """Where ``table`` (the reported columns by group) differs from the one ``sums`` give.

    Groups missing or added; trips exactly, means within the rounding of their sums (a division
    more; fare per km has two sums).
    """
    trips, fare, distance = (np.asarray(sums[name], dtype=np.float64) for name in SUMS)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = {"trips": trips, "fare_mean": fare / trips, "distance_mean_km": distance / trips,
                "fare_per_km": fare / distance}
    keys = list(zip(sums["hour"], sums["passengers"], strict=True))
    at = {key: i for i, key in enumerate(zip(table["hour"], table["passengers"], strict=True))}
    known = set(keys)
    problems = [f"{group_name(key)}: unexpected ({names[0]}: {table['trips'][i]} trips; "
                f"{names[1]}: none)" for key, i in at.items() if key not in known]
    problems += [f"{group_name(key)}: missing ({names[0]}: none; {names[1]}: {trips[j]:.0f} "
                 "trips)" for j, key in enumerate(keys) if key not in at]
    common = [j for j, key in enumerate(keys) if key in at]
    slack = relative_slack(trips[common] + 1)
    for column in REPORTED:
        expected = want[column][common]
        limit = 0 if column == "trips" else slack * np.abs(expected) * (
            2 if column == "fare_per_km" else 1)
        problems.append(differences(
            np.asarray(table[column])[[at[keys[j]] for j in common]], expected, what="group",
            label=lambda i: group_name(keys[common[i]]), tolerance=limit,
            reported_as=f"{column} {{}} {names[0]}", expected_as=f"{{}} {names[1]}"))
    return [p for p in problems if p]
