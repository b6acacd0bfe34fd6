"""trips-pipeline's recomputations: trips read again and grouped by code of the check's own.

The partitions the run should have read, read again (the trips' definition, pyarrow's or
pandas' own readers) and summed by (hour, passengers) with this module's haversines, hour and
filter, with pandas and with NumPy alone (which also recomputes the fast depth's cells from the
rows the run read); and the comparisons of tables with their recomputations.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from daskgpu.verification import differences, tolerance
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
    if ctx.source.kind == "csv":
        return [("csv", file) for file in ctx.source.files], [None] * len(ctx.source.files)
    import pyarrow.parquet as pq

    metadata = {file: pq.ParquetFile(file).metadata for file in ctx.source.files}
    groups = [(f, g) for f, data in metadata.items() for g in range(data.num_row_groups)]
    return ([("parquet", f, g) for f, g in groups],
            [metadata[f].row_group(g).num_rows for f, g in groups])


def label(partition: tuple) -> str:
    """A partition's name in a problem: its number, a file's row group, a CSV file."""
    if partition[0] == "synthetic":
        return f"partition {partition[1][0]}"
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


def pandas_chunks(partition: tuple):
    """The trips of one partition as pandas frames, read here, not by the run's reader."""
    if partition[0] == "synthetic":  # the data's definition, generated on the host
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


def tally(partition: tuple) -> tuple:
    """``(rows, sums by pandas, problems)`` of one partition read again, on a worker.

    The problems: where its sums by NumPy alone, in the dense table, differ from pandas'.
    """
    rows, by_pandas = 0, []
    counts, sums = np.zeros((HOURS, SLOTS), np.int64), np.zeros((2, HOURS, SLOTS))
    for chunk in pandas_chunks(partition):
        rows += len(chunk)
        if len(chunk):
            by_pandas.append(pandas_groups(chunk))
            times = chunk["pickup_time"]
            if getattr(times.dtype, "tz", None) is not None:
                times = times.dt.tz_localize(None)
            cell = {"pickup_time": times.to_numpy(),
                    **{name: _floats(chunk[name]) for name in COLUMNS if name != "pickup_time"}}
            more_counts, more_sums = recomputed_cells([cell])
            counts, sums = counts + more_counts[0], sums + more_sums[0]
    total = summed(by_pandas)
    index = (total.index.get_level_values(0).to_numpy(np.int64) * SLOTS
             + _slots(_floats(total.index.get_level_values(1)))[0])
    dense = [np.bincount(index, weights=_floats(total[name]), minlength=HOURS * SLOTS)
             .reshape(HOURS, SLOTS) for name in SUMS]
    return rows, total, dense_problems(label(partition), dense[0], np.stack(dense[1:]), counts,
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
