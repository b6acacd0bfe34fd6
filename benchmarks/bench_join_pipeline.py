"""join-pipeline on a 2-worker CPU cluster against one pandas merge in this process, side by side.

    python benchmarks/bench_join_pipeline.py [--rows 10000000] [--match 0.3] [--repeat 3]

Both join the same tables (the same seed and module functions; pandas gets them concatenated
here, untimed) and compute the same aggregate. The pipeline's compute time includes generating
the tables on the workers; the pandas time is the merge and the aggregate only. Throughput is
left + right rows per second of the median run; the ratio is reported, with no target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import daskgpu  # noqa: E402
import pipelines.join_pipeline as jp  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--match", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    params = dict(rows=args.rows, match=args.match, seed=args.seed)
    times: dict[str, list[float]] = {"join-pipeline": [], "pandas": []}

    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                         dashboard=False) as client:
        daskgpu.run("join-pipeline", client=client, rows=100_000, seed=1)  # warm the workers
        for _ in range(args.repeat):
            result = daskgpu.run("join-pipeline", client=client, **params)
            assert result.verified, result.verification
            times["join-pipeline"].append(result.timings["compute_s"])
    partitions = result.data["left_partitions"]

    t0 = time.perf_counter()
    left, right = jp.pandas_tables(args.rows, args.match, args.seed, partitions)
    generate_s = time.perf_counter() - t0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        totals = jp.aggregate(left.merge(right, on="key", how="inner"))
        times["pandas"].append(time.perf_counter() - t0)
    counts = totals["x"].reindex(range(jp.GROUPS), fill_value=0).tolist()
    assert counts == result.value["aggregate"]["count"], "pandas and the pipeline disagree"

    elements = len(left) + len(right)
    print(f"join-pipeline {args.rows} x {len(right)} rows, match {args.match} "
          f"({result.value['joined_rows']} joined), {partitions} partitions, join: "
          f"{result.data['join']}; {args.workers} workers x 1 thread; median of {args.repeat}")
    rate = {}
    for name, ts in times.items():
        rate[name] = elements / statistics.median(ts)
        what = ("generate + join + aggregate on the cluster" if name == "join-pipeline"
                else "merge + aggregate in this process")
        print(f"  {name:>13}: median {statistics.median(ts):.3f} s (min {min(ts):.3f}, max "
              f"{max(ts):.3f}), {rate[name]:.3g} rows/s  [{what}]")
    print(f"  (pandas generating the same tables here, untimed above: {generate_s:.3f} s)")
    print(f"  join-pipeline / pandas: {rate['join-pipeline'] / rate['pandas']:.2f}x "
          "the rows/s (reported, no target)")


if __name__ == "__main__":
    main()
