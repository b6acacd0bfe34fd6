"""What the bench harness costs per repeat: daskgpu.run against a bare compute, side by side.

    python benchmarks/bench_harness_overhead.py [--size 10000] [--repeat 10]

Alternates, on one 2-worker CPU cluster, a bare ``client.compute`` of mean-pipeline's graph
with ``runner.run`` of the same pipeline (as ``bench`` calls it: backend detected once), and
prints the extra time of the whole repeat and of the timed compute (target: under 2 %).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import daskgpu  # noqa: E402
from daskgpu import backends, runner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    spec = daskgpu.get_pipeline("mean-pipeline")
    bare, whole, timed = [], [], []
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        backend = backends.detect(client)
        params = {"size": args.size, "seed": 1}
        runner.run(spec, client, backend=backend, **params)  # warm-up
        for _ in range(args.repeat):
            collection = spec.build(backend, **params)
            began = time.perf_counter()
            client.compute(collection).result()
            bare.append(time.perf_counter() - began)
            began = time.perf_counter()
            result = runner.run(spec, client, backend=backend, **params)
            whole.append(time.perf_counter() - began)
            timed.append(result.timings["compute_s"])
    m = statistics.median
    extra_whole = 100 * (m(whole) / m(bare) - 1)
    extra_timed = 100 * (m(timed) / m(bare) - 1)
    print(f"mean-pipeline {args.size} x {args.size}, 2 workers, median of {args.repeat}")
    print(f"  bare client.compute          {m(bare):.4f} s")
    print(f"  runner.run, whole repeat     {m(whole):.4f} s  (+{extra_whole:.1f} %)")
    print(f"  runner.run, timed compute_s  {m(timed):.4f} s  (+{extra_timed:.1f} %; target < 2 %)")


if __name__ == "__main__":
    main()
