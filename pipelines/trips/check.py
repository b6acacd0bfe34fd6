"""trips-pipeline's independent verification: the reported table against every trip read again.

It establishes that each (hour, passengers) group's trips, mean fare, mean distance and fare per
km, and the rows, kept trips and groups, agree with a recomputation of every partition on the
workers: read again (not through the run's reader) and aggregated with pandas and this
module's own haversine, with a seeded sample of partitions recomputed with NumPy alone too. It
shares no code with the computation it checks (only the trips' definition, from
:mod:`pipelines.trips.shared`), and declares the alterations of a result it must catch
(``MUTATIONS``).

That is the full depth; the fast one, :mod:`pipelines.trips.check_cells`, reads no trip again:
it ties the run's certificates of every partition and cell to the answer and recomputes a seeded
sample of cells from their rows, building on this module's comparisons and haversine.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import dask
import numpy as np

from daskgpu.toolkit.registry import Mutation, Resolved, Verification, Workload
from pipelines.trips.shared import COLUMNS, partition_specs, synthetic_partition

if TYPE_CHECKING:
    import pandas as pd

#: Relative tolerance of the reported means against the recomputed ones.
RTOL = 1e-9
#: The IUGG mean Earth radius, written out again so that the kernel's constant is checked too.
EARTH_MEAN_RADIUS_KM = 6371.0088
#: Partitions (synthetic partitions, Parquet row groups or CSV files) also recomputed with NumPy.
SAMPLED_PARTITIONS = 3
CSV_CHUNK_ROWS = 1_000_000
TREE_WIDTH = 8
REPORTED = ("trips", "fare_mean", "distance_mean_km", "fare_per_km")
SUMS = ("trips", "fare_sum", "distance_sum")
COORDINATES = ("pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")


def _check_partitions(resolved: Resolved) -> list[tuple]:
    """What verify reads, one task each: synthetic partitions, Parquet row groups, CSV files."""
    if resolved["input"] is None:
        specs = partition_specs(resolved["rows"], resolved["seed"], resolved["partitions"])
        return [("synthetic", spec) for spec in specs]
    source = resolved.inputs["input"]
    if source.kind == "csv":
        return [("csv", file) for file in source.files]
    import pyarrow.parquet as pq

    return [("parquet", file, group) for file in source.files
            for group in range(pq.ParquetFile(file).num_row_groups)]


def _label(partition: tuple) -> str:
    if partition[0] == "synthetic":
        return f"partition {partition[1][0]}"
    if partition[0] == "parquet":
        return f"{os.path.basename(partition[1])} row group {partition[2]}"
    return os.path.basename(partition[1])


def _pandas_chunks(partition: tuple):
    """The trips of one check partition as pandas frames, read here, not by the run's reader."""
    kind = partition[0]
    if kind == "synthetic":  # the data's definition, generated on the host
        yield synthetic_partition(partition[1], "pandas")
    elif kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(partition[1]).read_row_group(partition[2], columns=list(COLUMNS))
        yield table.to_pandas()
    else:
        import pandas as pd

        with pd.read_csv(partition[1], usecols=list(COLUMNS), parse_dates=["pickup_time"],
                         chunksize=CSV_CHUNK_ROWS) as chunks:
            yield from chunks


def _floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


def _great_circle_asin_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Haversine in its textbook form: 2 R asin(sqrt(h))."""
    phi1, phi2 = np.radians(lat1), np.radians(lat2)
    with np.errstate(invalid="ignore"):
        h = (np.sin((phi2 - phi1) / 2) ** 2
             + np.cos(phi1) * np.cos(phi2) * np.sin(np.radians(lon2 - lon1) / 2) ** 2)
        return 2 * EARTH_MEAN_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0, 1)))


def _great_circle_atan2_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Haversine through atan2(sqrt(h), sqrt(1 - h)): a second form, for the NumPy sample."""
    degree = np.pi / 180
    with np.errstate(invalid="ignore"):
        half_dlat = np.sin((lat2 - lat1) * degree / 2)
        half_dlon = np.sin((lon2 - lon1) * degree / 2)
        h = half_dlat * half_dlat + (np.cos(lat1 * degree) * np.cos(lat2 * degree)
                                     * half_dlon * half_dlon)
        h = np.minimum(np.maximum(h, 0.0), 1.0)
        return 2 * EARTH_MEAN_RADIUS_KM * np.arctan2(np.sqrt(h), np.sqrt(1.0 - h))


def _pandas_groups(trips: pd.DataFrame) -> pd.DataFrame:
    """Trips, fare and distance sums by (hour, passengers) of one frame, with pandas."""
    import pandas as pd

    distance = _great_circle_asin_km(*(_floats(trips[name]) for name in COORDINATES))
    frame = pd.DataFrame({"hour": trips["pickup_time"].dt.hour.to_numpy(),
                          "passengers": trips["passengers"].to_numpy(),
                          "fare": _floats(trips["fare"]), "distance": distance})
    frame = frame[(frame["distance"] > 0) & (frame["fare"] > 0)]
    by_group = frame.groupby(["hour", "passengers"])  # drops trips without an hour or passengers
    return pd.DataFrame({"trips": by_group.size(), "fare_sum": by_group["fare"].sum(),
                         "distance_sum": by_group["distance"].sum()})


def _wall_clock_hours(times) -> tuple[np.ndarray, np.ndarray]:
    """Hour of day of each time (as the table's clock reads it) and whether there is one.

    ``times``: a pandas series (with or without a time zone) or NumPy ``datetime64`` values.
    """
    if getattr(times.dtype, "tz", None) is not None:
        times = times.dt.tz_localize(None)
    stamps = times.to_numpy() if hasattr(times, "to_numpy") else np.asarray(times)
    hours = stamps.astype("datetime64[h]").astype(np.int64) % 24
    return hours, ~np.isnat(stamps)


def _whole_numbers(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    if series.dtype.kind in "iu" and not series.hasnans:
        return series.to_numpy(dtype=np.int64), np.ones(len(series), bool)
    values = _floats(series)
    present = np.isfinite(values)
    return np.where(present, values, 0).astype(np.int64), present


def _numpy_groups(trips: pd.DataFrame) -> pd.DataFrame:
    """The same sums with NumPy only: a combined key, np.unique and weighted bincounts."""
    import pandas as pd  # the frame it is given, and the table it returns

    distance = _great_circle_atan2_km(*(_floats(trips[name]) for name in COORDINATES))
    fare = _floats(trips["fare"])
    hours, timed = _wall_clock_hours(trips["pickup_time"])
    passengers, counted = _whole_numbers(trips["passengers"])
    kept = (distance > 0) & (fare > 0) & timed & counted
    keys, group = np.unique(passengers[kept] * 24 + hours[kept], return_inverse=True)
    index = pd.MultiIndex.from_arrays([keys % 24, keys // 24], names=["hour", "passengers"])
    return pd.DataFrame({
        "trips": np.bincount(group, minlength=len(keys)),
        "fare_sum": np.bincount(group, weights=fare[kept], minlength=len(keys)),
        "distance_sum": np.bincount(group, weights=distance[kept], minlength=len(keys)),
    }, index=index)


def _summed(tables: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

    tables = [t for t in tables if len(t)]
    if not tables:
        empty = pd.MultiIndex.from_arrays([[], []], names=["hour", "passengers"])
        return pd.DataFrame({name: [] for name in SUMS}, index=empty)
    return pd.concat(tables).groupby(level=[0, 1]).sum()


def _tally(partition: tuple, sampled: bool) -> tuple:
    """``(rows, pandas sums, NumPy sums or None)`` of one check partition, on a worker."""
    rows, by_pandas, by_numpy = 0, [], []
    for chunk in _pandas_chunks(partition):
        rows += len(chunk)
        if len(chunk):
            by_pandas.append(_pandas_groups(chunk))
            if sampled:
                by_numpy.append(_numpy_groups(chunk))
    return rows, _summed(by_pandas), _summed(by_numpy) if sampled else None


def _added(*tallies: tuple) -> tuple:
    return sum(t[0] for t in tallies), _summed([t[1] for t in tallies]), None


def _sampled(count: int, seed: int) -> list[int]:
    """The check partitions also recomputed with NumPy, chosen with ``seed``."""
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(count, min(count, SAMPLED_PARTITIONS),
                                              replace=False))


def _sample_seed(resolved: Resolved) -> int:
    if resolved["input"] is None:
        return resolved["seed"]
    return resolved.inputs["input"].rows  # read data has no seed: a fixed one from its size


def _recomputed(partitions: list[tuple], sampled: list[int]):
    """All partitions' totals (summed in a tree on the cluster) and the sampled tallies."""
    tallies = [dask.delayed(_tally, pure=True)(p, i in sampled)
               for i, p in enumerate(partitions)]
    level = tallies
    while len(level) > 1:
        level = [dask.delayed(_added, pure=True)(*level[i:i + TREE_WIDTH])
                 for i in range(0, len(level), TREE_WIDTH)]
    total, samples = dask.compute(level[0], [tallies[i] for i in sampled])
    return total, samples


def _pair(got, want) -> tuple[str, str]:
    """Two numbers written short, with more digits where the short forms look the same."""
    for digits in (6, 12, 17):
        a, b = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if a != b:
            return a, b
    return a, b


def _agree(got, want, exact: bool) -> bool:
    """Counts equal; other numbers as ``numpy.isclose(got, want, RTOL, 0, equal_nan=True)``."""
    if exact:
        return int(got) == int(want)
    got, want = float(got), float(want)
    return got == want or abs(got - want) <= RTOL * abs(want) or (got != got and want != want)


def _group_name(key: tuple) -> str:
    return f"hour {key[0]:g}, passengers {key[1]:g}"


def _by_group(rows: dict) -> dict[tuple, dict]:
    """``{(hour, passengers): {column: value}}`` of a table given as columns of lists."""
    names = list(rows)
    return {(r[0], r[1]): dict(zip(names[2:], r[2:], strict=True))
            for r in zip(*rows.values(), strict=True)}


def _expected_rows(sums: dict) -> dict[tuple, dict]:
    """The reported columns computed from independent sums, given as columns of the groups.

    ``sums`` maps ``hour``, ``passengers`` and ``SUMS`` to equal-length sequences.
    """
    trips, fare, distance = (np.asarray(sums[name]) for name in SUMS)
    with np.errstate(divide="ignore", invalid="ignore"):
        columns = {"trips": trips, "fare_mean": fare / trips, "distance_mean_km": distance / trips,
                   "fare_per_km": fare / distance}
    return {key: {name: values[i] for name, values in columns.items()}
            for i, key in enumerate(zip(sums["hour"], sums["passengers"], strict=True))}


def _differences(got: dict, expected: dict, columns, names: tuple[str, str]) -> list[str]:
    """One line per group where ``got`` and ``expected`` disagree, in group order."""
    lines = []
    for key in sorted(set(got) | set(expected)):
        if key not in got:
            lines.append(f"{_group_name(key)}: missing ({names[0]}: none; {names[1]}: "
                         f"{int(expected[key]['trips'])} trips)")
        elif key not in expected:
            lines.append(f"{_group_name(key)}: unexpected ({names[0]}: "
                         f"{int(got[key]['trips'])} trips; {names[1]}: none)")
        else:
            for column in columns:
                a, b = got[key][column], expected[key][column]
                if not _agree(a, b, exact=column == "trips"):
                    a, b = _pair(a, b)
                    lines.append(f"{_group_name(key)}: {column} {a} {names[0]}, {b} {names[1]}")
                    break
    return lines


def _summary(lines: list[str], of: int, what: str) -> str:
    return f"{len(lines)} of {of} groups {what} (first: {lines[0]})"


def verify(workload: Workload, raw: dict, depth: str = "full") -> Verification:
    """The reported table against an independent recomputation of every trip, or a sample.

    ``depth="full"``: every partition is read again (not through the run's reader) and
    aggregated with pandas and this module's own haversine: each group's trips must be equal
    and its means within RTOL, and rows, kept and groups must match. A seeded sample of
    partitions is also aggregated with NumPy alone (another haversine form, np.unique groups)
    and must match pandas there.

    ``depth="fast"``: the run's certificates of every partition and cell, tied to the answer
    and to each other, and a seeded sample of cells recomputed from their rows
    (:mod:`pipelines.trips.check_cells`).
    """
    if depth == "fast":
        # Imported here: check_cells builds on this module's comparisons and haversine.
        from pipelines.trips.check_cells import verify_fast

        return verify_fast(workload, raw)
    resolved = workload.resolved
    value = workload.present(workload, raw)  # the run's reported value
    partitions = _check_partitions(resolved)
    sampled = _sampled(len(partitions), _sample_seed(resolved))
    (rows, sums, _), samples = _recomputed(partitions, sampled)
    expected = _expected_rows(_columns(sums))
    problems = []
    wrong = _differences(_by_group(value["table"]), expected, REPORTED,
                         ("reported", "recomputed"))
    if wrong:
        problems.append(_summary(wrong, len(expected), "disagree with the recomputation"))
    kept = int(sums["trips"].sum())
    for name, got, want in (("rows", value["rows"], rows), ("kept", value["kept"], kept),
                            ("groups", value["groups"], len(expected))):
        if got != want:
            problems.append(f"{name} {got} reported, {want} recomputed")
    for i, (_, by_pandas, by_numpy) in zip(sampled, samples, strict=True):
        wrong = _differences(_by_group(_columns(by_numpy)), _by_group(_columns(by_pandas)),
                             SUMS, ("by NumPy", "by pandas"))
        if wrong:
            problems.append(f"sampled {_label(partitions[i])}: "
                            + _summary(wrong, len(by_pandas), "differ"))
    if problems:
        return Verification(False, "; ".join(problems))
    return Verification(
        True, f"{len(expected)} groups, {rows} rows and {kept} kept trips agree with every trip "
        f"recomputed with pandas and its own haversine ({len(partitions)} partitions read "
        f"again), and {len(sampled)} sampled partitions with NumPy alone")


def _columns(sums: pd.DataFrame) -> dict[str, list]:
    return sums.reset_index().to_dict(orient="list")


def _altered(raw: dict, **columns) -> dict:
    """``raw`` with some of its table's columns (NumPy arrays, see ``tasks._result``) replaced."""
    return {**raw, "table": {**raw["table"], **columns}}


def _triple_fares(raw: dict) -> dict:
    return _altered(raw, fare_sum=raw["table"]["fare_sum"] * 3)


def _unit_distances(raw: dict) -> dict:
    return _altered(raw, distance_sum=np.ones_like(raw["table"]["distance_sum"]))


def _one_more_trip(raw: dict) -> dict:
    trips = raw["table"]["trips"].copy()
    trips[0] += 1
    return _altered(raw, trips=trips)


def _swap_two_groups(raw: dict) -> dict:
    """The sums of the groups with the fewest and the most trips exchanged."""
    table = raw["table"]
    rows = [int(np.argmin(table["trips"])), int(np.argmax(table["trips"]))]
    swapped = {}
    for name in SUMS:
        values = table[name].copy()
        values[rows] = values[rows[::-1]]
        swapped[name] = values
    return _altered(raw, **swapped)


def _drop_a_group(raw: dict) -> dict:
    return {**raw, "table": {name: values[1:] for name, values in raw["table"].items()}}


MUTATIONS = (
    Mutation("fare_sum tripled", _triple_fares, r"passengers -?\d+: fare_mean \S+ reported"),
    Mutation("distance_sum set to 1", _unit_distances,
             r"passengers -?\d+: distance_mean_km \S+ reported"),
    Mutation("one group's trips +1", _one_more_trip, r"passengers -?\d+: trips \d+ reported"),
    Mutation("two groups swapped", _swap_two_groups,
             r"^2 of \d+ groups disagree .*passengers -?\d+: trips \d+ reported"),
    Mutation("a group dropped", _drop_a_group, r"passengers -?\d+: missing \(reported: none"),
)
