"""trips-pipeline on 2 workers against the same ETL in one pandas process, same Parquet data.

    python benchmarks/bench_trips_pipeline.py [--rows 20000000] [--repeat 2]

Both read the same Parquet files (written once, in a temporary directory) and compute distance
(daskgpu's kernel vs NumPy's vectorised haversine), filter, group and aggregate; reading is
timed on both sides. Target: trips-pipeline >= 1.5x the rows per second of pandas.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

import daskgpu  # noqa: E402
from daskgpu.kernels.haversine import haversine_numpy  # noqa: E402
from pipelines import trips_pipeline  # noqa: E402


def pandas_etl(folder: Path) -> pd.DataFrame:
    frame = pd.read_parquet(folder, columns=list(trips_pipeline.COLUMNS))
    frame["distance_km"] = haversine_numpy(
        frame["pickup_lat"].to_numpy(), frame["pickup_lon"].to_numpy(),
        frame["dropoff_lat"].to_numpy(), frame["dropoff_lon"].to_numpy())
    return trips_pipeline.finish(trips_pipeline._aggregate(frame))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        per_file = args.rows // args.files
        for i in range(args.files):
            trips_pipeline.synthetic_partition((i, per_file, 7)).to_parquet(
                folder / f"part-{i:03d}.parquet")
        rows = per_file * args.files
        pandas_times, pipeline_times = [], []
        with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1,
                             dashboard=False) as client:
            daskgpu.run("trips-pipeline", client=client, rows=10_000)  # compile the kernel
            for _ in range(args.repeat):
                began = time.perf_counter()
                expected = pandas_etl(folder)
                pandas_times.append(time.perf_counter() - began)
                result = daskgpu.run("trips-pipeline", client=client, input=str(folder))
                assert result.verified, result.verification
                pipeline_times.append(result.timings["compute_s"])
        assert int(expected["trips"].sum()) == result.value["kept"]
    pandas_rate = rows / statistics.median(pandas_times)
    pipeline_rate = rows / statistics.median(pipeline_times)
    print(f"trips ETL on {rows:,} rows in {args.files} Parquet files, median of {args.repeat}")
    print(f"  pandas, one process      {statistics.median(pandas_times):.3f} s  "
          f"{pandas_rate:.3g} rows/s")
    print(f"  trips-pipeline, 2 x 1    {statistics.median(pipeline_times):.3f} s  "
          f"{pipeline_rate:.3g} rows/s")
    print(f"  ratio {pipeline_rate / pandas_rate:.2f}x  (target >= 1.5x)")


if __name__ == "__main__":
    main()
