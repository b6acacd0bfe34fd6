"""stencil-pipeline: k steps per halo exchange against one, side by side on one cluster.

    python benchmarks/bench_stencil_pipeline.py [--size 4000] [--steps 100] [--k 4] [--repeat 3]

Runs alternate between k and 1 so that both see the same machine state; the figure is the
ratio of median compute times (target: k = 4 at least 1.3x faster than k = 1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import daskgpu  # noqa: E402


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
    times: dict[int, list[float]] = {1: [], args.k: []}
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                         dashboard=False) as client:
        daskgpu.run("stencil-pipeline", client=client, size=200, steps=4)  # compile kernels
        for _ in range(args.repeat):
            for k in times:
                result = daskgpu.run("stencil-pipeline", client=client, steps_per_exchange=k,
                                     **params)
                assert result.verified, result.verification
                times[k].append(result.timings["compute_s"])
    data = result.data
    print(f"stencil-pipeline {args.size} x {args.size}, {args.steps} steps, chunks "
          f"{data['chunks']} ({data['blocks']} blocks), {args.workers} workers x 1 thread, "
          f"median of {args.repeat}")
    for k, ts in times.items():
        cells = args.size**2 * args.steps / statistics.median(ts)
        print(f"  steps per exchange {k}: median {statistics.median(ts):.3f} s "
              f"(min {min(ts):.3f}, max {max(ts):.3f}), {cells:.3g} cell updates/s")
    ratio = statistics.median(times[1]) / statistics.median(times[args.k])
    print(f"  k={args.k} vs k=1: {ratio:.2f}x faster (target >= 1.3x)")


if __name__ == "__main__":
    main()
