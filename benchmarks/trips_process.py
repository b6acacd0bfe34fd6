"""What a user waits for: the whole trips-pipeline command against a whole Polars script.

    python -m benchmarks.trips_process [--rows 10000000] [--files 8] [--rounds 3] [--dir DIR]

Both sides are whole processes started fresh, on the same Parquet files, in alternating rounds:

- ``python cli.py run trips-pipeline --input 'DIR/*.parquet' --cpu --json --no-dashboard``: the
  import, the cluster's start, the compute, the (fast) verification and the close, as a user
  types it;
- ``python SCRIPT DIR``: a Polars script doing the same query (a lazy ``scan_parquet``, the
  haversine as expressions, the filter, the group by, the means), its import included, using
  every core.

The answers (each group's trips exactly, the means to 1e-9 relative) are compared before any
ratio is printed. Target: the trips process takes at most 2x the Polars process. The phases
the run reports (``import_s``, ``cluster_start_s``, ``compute_s``, ``verify_s``, ``close_s``) are
printed beside it. Polars is in the ``bench`` extra: ``pip install -e .[bench]``.

Then the same against a cluster already running, as someone running many short jobs keeps
one: ``dask scheduler`` and ``dask worker --nworkers CORES --nthreads 1`` started here (warmed
by one run first), and the command given ``--scheduler-file``, alternating with Polars again
(``--no-existing`` leaves this out).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.trips import _write
from daskgpu.kernels.haversine import EARTH_RADIUS_KM

ROOT = Path(__file__).resolve().parents[1]
TARGET = 2.0
RTOL = 1e-9
PHASES = ("import_s", "cluster_start_s", "compute_s", "verify_s", "close_s")
COLUMNS = ("hour", "passengers", "trips", "fare_mean", "distance_mean_km", "fare_per_km")

POLARS_SCRIPT = f"""
import json, math, sys
import polars as pl

rad = math.pi / 180.0
lat1, lon1, lat2, lon2 = (pl.col(c) * rad for c in
                          ("pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon"))
a = (((lat2 - lat1) / 2).sin() ** 2
     + lat1.cos() * lat2.cos() * ((lon2 - lon1) / 2).sin() ** 2)
distance = (2 * {EARTH_RADIUS_KM!r} * a.clip(0.0, 1.0).sqrt().arcsin()).alias("distance")
out = (pl.scan_parquet(sys.argv[1] + "/*.parquet")
       .select(pl.col("pickup_time").dt.hour().alias("hour"), "passengers", "fare", distance)
       .filter((pl.col("distance") > 0) & (pl.col("fare") > 0))
       .group_by("hour", "passengers")
       .agg(pl.len().alias("trips"), pl.col("fare").sum().alias("fare_sum"),
            pl.col("distance").sum().alias("distance_sum"))
       .with_columns((pl.col("fare_sum") / pl.col("trips")).alias("fare_mean"),
                     (pl.col("distance_sum") / pl.col("trips")).alias("distance_mean_km"),
                     (pl.col("fare_sum") / pl.col("distance_sum")).alias("fare_per_km"))
       .sort("hour", "passengers")
       .collect())
print(json.dumps({{c: out[c].to_list() for c in {list(COLUMNS)!r}}}))
"""


def _timed(command: list[str]) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed: {done.stderr.strip()[-500:]}")
    return seconds, done.stdout


def run_trips(folder: Path, cluster: list[str] | None = None) -> tuple[float, dict, dict]:
    """Seconds of the whole command, its answer table, and the phases it reported.

    ``cluster``: the options of an existing cluster (default: ``--cpu``, one started for the run).
    """
    seconds, out = _timed([sys.executable, str(ROOT / "cli.py"), "run", "trips-pipeline",
                           "--input", f"{folder}/*.parquet", *(cluster or ["--cpu"]), "--json",
                           "--quiet", "--no-dashboard"])
    document = json.loads(out)
    if not document["verified"]:
        raise SystemExit(f"trips-pipeline failed its verification: {document['verification']}")
    return seconds, document["value"]["table"], document["timings"]


def run_polars(script: Path, folder: Path) -> tuple[float, dict]:
    """Seconds of the whole Polars process, and its answer table."""
    seconds, out = _timed([sys.executable, str(script), str(folder)])
    return seconds, json.loads(out)


@contextlib.contextmanager
def existing_cluster(scratch: Path):
    """A ``dask scheduler`` and its workers, running until the block ends.

    ``dask worker`` starts one single-threaded process per core; yields the run's options to
    use the cluster.
    """
    from distributed import Client

    address_file = scratch / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env, "cwd": ROOT}
    started = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                 "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                 "--scheduler-file", str(address_file)], **quiet)]
    try:
        started.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
             str(address_file), "--nworkers", str(os.cpu_count()), "--nthreads", "1",
             "--no-dashboard"], **quiet))
        with Client(scheduler_file=str(address_file), timeout=60) as client:
            client.wait_for_workers(os.cpu_count(), timeout=60)
        yield ["--scheduler-file", str(address_file)]
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)


def alternate(folder: Path, script: Path, rounds: int, cluster: list[str] | None = None):
    """``rounds`` of the trips command then the Polars script, answers compared each time."""
    ours, theirs, phases = [], [], []
    for _ in range(rounds):
        seconds, table, timings = run_trips(folder, cluster)
        ours.append(seconds)
        phases.append(timings)
        polars_s, answer = run_polars(script, folder)
        theirs.append(polars_s)
        agree(table, answer)
    return ours, theirs, phases


def report(label: str, ours: list[float], theirs: list[float], phases: list[dict]) -> None:
    """The medians, their ratio against the target, and the run's phases."""
    median_ours, median_theirs = statistics.median(ours), statistics.median(theirs)
    ratio = median_ours / median_theirs
    print(f"  {label}: trips-pipeline process {median_ours:.2f} s   Polars process "
          f"{median_theirs:.2f} s   trips / Polars = {ratio:.2f}x (target <= {TARGET:g}x): "
          f"{'met' if ratio <= TARGET else 'NOT met'}")
    print("    trips-pipeline phases (median): " + ", ".join(
        f"{p} {statistics.median(t.get(p) or 0.0 for t in phases):.2f}" for p in PHASES))


def agree(ours: dict, theirs: dict) -> None:
    """Stop, printing no ratio, unless both tables hold the same groups, trips and means."""
    exact = ("hour", "passengers", "trips")
    if any(list(map(int, ours[c])) != list(map(int, theirs[c])) for c in exact):
        raise SystemExit("Polars and trips-pipeline disagree on the groups or their trips; "
                         "no ratio printed")
    for c in ("fare_mean", "distance_mean_km", "fare_per_km"):
        if not np.allclose(ours[c], theirs[c], rtol=RTOL, atol=0):
            raise SystemExit(f"Polars and trips-pipeline disagree on {c} (beyond {RTOL:g} "
                             "relative); no ratio printed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None,
                        help="Parquet files written before (else written to a temporary one)")
    parser.add_argument("--no-existing", action="store_true",
                        help="leave out the rounds against a cluster already running")
    args = parser.parse_args()
    if importlib.util.find_spec("polars") is None:
        raise SystemExit("this benchmark runs Polars itself, not installed here; install the "
                         "benchmark's extra with: pip install -e .[bench]")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or Path(scratch)
        if args.dir is None:
            _write(folder, args.rows, args.files)
        script = Path(scratch) / "trips_polars.py"
        script.write_text(POLARS_SCRIPT)
        run_polars(script, folder)  # the files into the page cache, Polars' first import
        started = alternate(folder, script, args.rounds)
        print(f"{args.rows:,} rows in {args.files} Parquet files, {os.cpu_count()} cores, "
              f"{args.rounds} alternating rounds (medians); answers agree")
        report("a cluster started for the run (--cpu)", *started)
        if not args.no_existing:
            with existing_cluster(Path(scratch)) as cluster:
                run_trips(folder, cluster)  # its workers import and load the kernels once
                report("a cluster already running (--scheduler-file)",
                       *alternate(folder, script, args.rounds, cluster))


if __name__ == "__main__":
    main()
