"""trips-pipeline against Polars, DuckDB and one pandas process on the same Parquet files and cores.

    python -m benchmarks.trips [--rows 20000000] [--files 10] [--rounds 5]
        [--workers 2] [--no-pandas]

Writes the trips once as Parquet files in a temporary directory, then runs alternating rounds
(the order rotates each round) of the same query, end to end (reading the files included):

- trips-pipeline on a CPU cluster of ``--workers`` single-threaded workers, started once, run
  once in full (its verification must pass), then timed building and computing its graph (the
  tasks read the files and run the fused kernel; verification is not repeated);
- Polars: a lazy ``scan_parquet`` of the files, the haversine as expressions, filter, group by,
  ``collect()``, with ``POLARS_MAX_THREADS`` = the workers' cores;
- DuckDB: the same query in SQL over ``read_parquet``, with ``threads`` = the same;
- one pandas process (``--no-pandas`` to skip): ``read_parquet`` of the 7 columns, NumPy's
  haversine, filter, groupby.

Every contender's table (trips, fare and distance sums by pickup hour and passengers) must agree
with trips-pipeline's (trips exactly, sums to 1e-9 relative) before any ratio is printed. Each
ratio is the peer's median time over trips-pipeline's. Targets: >= 1.0x Polars, >= 1.5x DuckDB.

The peers are in the ``bench`` extra, never in the CPU install: ``pip install -e .[bench]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from daskgpu.kernels.haversine import EARTH_RADIUS_KM
from pipelines.trips import pipeline as trips_pipeline

TARGETS = {"Polars": 1.0, "DuckDB": 1.5}
PEERS = ("polars", "duckdb")
INSTALL = "pip install -e .[bench]"
RTOL = 1e-9
COORDS = ("pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")


def _require_peers() -> None:
    missing = [name for name in PEERS if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"this benchmark runs {' and '.join(missing)} itself, not installed "
                         f"here; install the benchmark's extra with: {INSTALL}")


def _write(folder: Path, rows: int, files: int) -> None:
    per_file = rows // files
    for i in range(files):
        trips_pipeline.synthetic_partition((i, per_file, 7)).to_parquet(
            folder / f"part-{i:03d}.parquet")


def _table(hours, passengers, trips, fares, distances) -> pd.DataFrame:
    """One contender's answer in a common form, sorted by (hour, passengers)."""
    frame = pd.DataFrame({"hour": np.asarray(hours, np.int64),
                          "passengers": np.asarray(passengers, np.int64),
                          "trips": np.asarray(trips, np.int64),
                          "fare_sum": np.asarray(fares, np.float64),
                          "distance_sum": np.asarray(distances, np.float64)})
    return frame.sort_values(["hour", "passengers"]).reset_index(drop=True)


class Daskgpu:
    """trips-pipeline on one long-lived CPU cluster: verified once, then timed without checks."""

    name = "trips-pipeline"

    def __init__(self, folder: Path, workers: int):
        import daskgpu

        self._cluster = daskgpu.cluster(cpu=True, workers=workers, threads_per_worker=1,
                                        dashboard=False)
        self.session = self._cluster.__enter__()
        result = daskgpu.run("trips-pipeline", self.session, input=str(folder))
        if not result.verified:
            raise SystemExit(f"trips-pipeline failed its verification: {result.verification}")
        self.spec = daskgpu.get_pipeline("trips-pipeline")
        self.resolved = self.spec.resolve(self.session.backend, input=str(folder))

    def __call__(self) -> tuple[float, pd.DataFrame]:
        """Build and compute (the runner's ``compute_s``: the tasks read the files)."""
        start = time.perf_counter()
        workload = self.spec.workload(self.session.backend, self.resolved)
        raw = self.session.client.compute(workload.collection).result()
        seconds = time.perf_counter() - start
        t = raw["table"]  # columns as NumPy arrays (see pipelines/trips/tasks.py)
        return seconds, _table(t["hour"], t["passengers"], t["trips"], t["fare_sum"],
                               t["distance_sum"])

    def close(self) -> None:
        """Close the cluster."""
        self._cluster.__exit__(None, None, None)


class Polars:
    """The query as a Polars lazy frame over ``scan_parquet``."""

    name = "Polars"

    def __init__(self, folder: Path, threads: int):
        os.environ["POLARS_MAX_THREADS"] = str(threads)  # read when polars is first imported
        import polars as pl

        self.pl, self.pattern = pl, str(folder / "*.parquet")

    def __call__(self) -> tuple[float, pd.DataFrame]:
        """Seconds of the query, and its answer."""
        pl = self.pl
        start = time.perf_counter()
        rad = np.pi / 180.0
        lat1, lon1, lat2, lon2 = (pl.col(c) * rad for c in COORDS)
        a = (((lat2 - lat1) / 2).sin() ** 2
             + lat1.cos() * lat2.cos() * ((lon2 - lon1) / 2).sin() ** 2)
        distance = (2 * EARTH_RADIUS_KM * a.clip(0.0, 1.0).sqrt().arcsin()).alias("distance")
        out = (pl.scan_parquet(self.pattern)
               .select(pl.col("pickup_time").dt.hour().alias("hour"), "passengers", "fare",
                       distance)
               .filter((pl.col("distance") > 0) & (pl.col("fare") > 0))
               .group_by("hour", "passengers")
               .agg(pl.len().alias("trips"), pl.col("fare").sum().alias("fare_sum"),
                    pl.col("distance").sum().alias("distance_sum"))
               .collect())
        seconds = time.perf_counter() - start
        return seconds, _table(*(out[c].to_numpy() for c in
                                 ("hour", "passengers", "trips", "fare_sum", "distance_sum")))


class DuckDB:
    """The query in DuckDB's SQL over ``read_parquet``."""

    name = "DuckDB"

    def __init__(self, folder: Path, threads: int):
        import duckdb

        self.con = duckdb.connect()
        self.con.execute(f"SET threads = {int(threads)}")
        pattern = str(folder / "*.parquet").replace("'", "''")
        self.sql = f"""
            WITH t AS (
              SELECT hour(pickup_time) AS hour, passengers, fare,
                     2 * {EARTH_RADIUS_KM} * asin(sqrt(least(1.0, greatest(0.0,
                       pow(sin(radians(dropoff_lat - pickup_lat) / 2), 2)
                       + cos(radians(pickup_lat)) * cos(radians(dropoff_lat))
                       * pow(sin(radians(dropoff_lon - pickup_lon) / 2), 2))))) AS distance
              FROM read_parquet('{pattern}'))
            SELECT hour, passengers, count(*) AS trips, sum(fare) AS fare_sum,
                   sum(distance) AS distance_sum
            FROM t WHERE distance > 0 AND fare > 0 GROUP BY hour, passengers"""

    def __call__(self) -> tuple[float, pd.DataFrame]:
        """Seconds of the query, and its answer."""
        start = time.perf_counter()
        out = self.con.execute(self.sql).fetchnumpy()
        seconds = time.perf_counter() - start
        return seconds, _table(*(out[c] for c in
                                 ("hour", "passengers", "trips", "fare_sum", "distance_sum")))


class Pandas:
    """The query in one pandas process."""

    name = "pandas"

    def __init__(self, folder: Path):
        self.files = sorted(folder.glob("*.parquet"))

    def __call__(self) -> tuple[float, pd.DataFrame]:
        """Seconds of the query, and its answer."""
        from daskgpu.kernels.haversine import haversine_numpy

        start = time.perf_counter()
        frame = pd.concat([pd.read_parquet(f, columns=list(trips_pipeline.COLUMNS))
                           for f in self.files], ignore_index=True)
        distance = haversine_numpy(*(frame[c].to_numpy() for c in COORDS))
        kept = frame.assign(distance=distance, hour=frame["pickup_time"].dt.hour)
        kept = kept[(kept["distance"] > 0) & (kept["fare"] > 0)]
        g = kept.groupby(["hour", "passengers"]).agg(
            trips=("fare", "size"), fare_sum=("fare", "sum"), distance_sum=("distance", "sum"))
        seconds = time.perf_counter() - start
        g = g.reset_index()
        return seconds, _table(*(g[c] for c in
                                 ("hour", "passengers", "trips", "fare_sum", "distance_sum")))


def _agree(name: str, got: pd.DataFrame, want: pd.DataFrame) -> None:
    keys = ["hour", "passengers", "trips"]
    if len(got) != len(want) or not (got[keys].to_numpy() == want[keys].to_numpy()).all():
        raise SystemExit(f"{name} and trips-pipeline disagree on the groups or their trips; "
                         "no ratio printed")
    sums = ["fare_sum", "distance_sum"]
    if not np.allclose(got[sums].to_numpy(), want[sums].to_numpy(), rtol=RTOL, atol=0):
        raise SystemExit(f"{name} and trips-pipeline disagree on the sums (beyond {RTOL:g} "
                         "relative); no ratio printed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-pandas", action="store_true", help="skip the pandas process")
    args = parser.parse_args()
    _require_peers()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write(folder, args.rows, args.files)
        ours = Daskgpu(folder, args.workers)
        try:
            contenders = [ours, Polars(folder, args.workers), DuckDB(folder, args.workers)]
            if not args.no_pandas:
                contenders.append(Pandas(folder))
            times = {c.name: [] for c in contenders}
            answers = {c.name: c()[1] for c in contenders}  # warm-up, and the answers
            for r in range(args.rounds):
                shift = r % len(contenders)
                for contender in contenders[shift:] + contenders[:shift]:
                    seconds, answers[contender.name] = contender()
                    times[contender.name].append(seconds)
        finally:
            ours.close()
    for name, answer in answers.items():
        if name != ours.name:
            _agree(name, answer, answers[ours.name])
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.rows} rows in {args.files} Parquet files, {args.workers} cores, "
          f"{args.rounds} alternating rounds (median s; answers agree):")
    for name, seconds in median.items():
        print(f"  {name:15s} {seconds:7.3f} s   (min {min(times[name]):.3f}, "
              f"max {max(times[name]):.3f})")
    for name, target in TARGETS.items():
        print(f"trips-pipeline vs {name}: {median[name] / median[ours.name]:.2f}x "
              f"(target >= {target}x)")
    if "pandas" in median:
        print(f"trips-pipeline vs pandas: {median['pandas'] / median[ours.name]:.2f}x")


if __name__ == "__main__":
    main()
