"""join-pipeline on a 2-worker CPU cluster against its one-process pandas baseline.

    python benchmarks/bench_join_pipeline.py [--rows 10000000] [--match 0.3] [--repeat 3]

A thin call of ``python cli.py bench join-pipeline``: the pipeline's compute time includes
generating the tables on the workers; the baseline (the pipeline's own, on the same tables) is
the merge and the aggregate in this process. The ratio is reported, with no target.
"""

from __future__ import annotations

import argparse

from harness import pipeline_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--match", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result = pipeline_bench("join-pipeline", dict(rows=args.rows, match=args.match,
                                                  seed=args.seed),
                            workers=args.workers, repeat=args.repeat)
    m = result.measurements[0]
    print(f"join-pipeline / pandas baseline: {m.ratio:.2f}x the rows/s (reported, no target)")


if __name__ == "__main__":
    main()
