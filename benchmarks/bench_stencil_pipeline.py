"""stencil-pipeline: k steps per halo exchange against one, each a ``bench`` of its own.

    python benchmarks/bench_stencil_pipeline.py [--size 4000] [--steps 100] [--k 4] [--repeat 3]

Two thin calls of ``python cli.py bench stencil-pipeline --steps-per-exchange K`` (k = 1, then
the given k) on 2 CPU workers; the figure is the ratio of their median compute times (target:
k = 4 at least 1.3x faster than k = 1). Each also reports the NumPy baseline.
"""

from __future__ import annotations

import argparse

from harness import pipeline_bench

TARGET = 1.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    params = dict(size=args.size, steps=args.steps, chunks=args.chunks)
    medians = {}
    for k in (1, args.k):
        result = pipeline_bench("stencil-pipeline", {**params, "steps_per_exchange": k},
                                workers=args.workers, repeat=args.repeat, baseline_runs=1)
        medians[k] = result.measurements[0].median_s
        cells = args.size**2 * args.steps / medians[k]
        print(f"  steps per exchange {k}: {cells:.3g} cell updates/s")
    print(f"k={args.k} vs k=1: {medians[1] / medians[args.k]:.2f}x faster (target >= {TARGET}x)")


if __name__ == "__main__":
    main()
