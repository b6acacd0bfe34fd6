"""trips-pipeline on 2 workers against the same ETL in one pandas process, same Parquet data.

    python benchmarks/bench_trips_pipeline.py [--rows 20000000] [--files 10] [--repeat 2]

Writes the trips once as Parquet files in a temporary directory, then is a thin call of
``python cli.py bench trips-pipeline --input DIR``. The pipeline's compute time includes reading
the files on the workers; the pipeline's baseline (pandas, NumPy's haversine) reads them first,
untimed, so the ratio is conservative. Target: trips-pipeline >= 1.5x pandas' rows per second.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import pipeline_bench

from pipelines import trips_pipeline

TARGET = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_file = args.rows // args.files
        for i in range(args.files):
            trips_pipeline.synthetic_partition((i, per_file, 7)).to_parquet(
                Path(tmp) / f"part-{i:03d}.parquet")
        result = pipeline_bench("trips-pipeline", {"input": tmp}, repeat=args.repeat,
                                baseline_runs=args.repeat)
    m = result.measurements[0]
    print(f"trips-pipeline / pandas: {m.ratio:.2f}x the rows/s (target >= {TARGET}x; the "
          "pipeline's time includes reading, the baseline's does not)")


if __name__ == "__main__":
    main()
