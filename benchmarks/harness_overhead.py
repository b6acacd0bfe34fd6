"""What the bench harness costs per repeat: with and without its measuring, side by side.

    python -m benchmarks.harness_overhead [--size 10000] [--repeat 10]

On one 2-worker CPU cluster, mean-pipeline (n x n) is run in rotation three ways:

- bare:      build the graph, ``client.compute(...).result()``: no harness at all
- without:   ``runner.run`` as ``bench`` calls it, with memory sampling switched off and no
             progress bar
- with:      ``runner.run`` with per-worker peak memory and Dask's progress bar (drawn to a
             buffer, as on a terminal); and each of the two alone

The harness's overhead per repeat is the extra wall time of "with" over "without", paired
within each round of the rotation (median of the differences, with a bootstrap interval), as a
share of the median compute time (target: under 2 %). Also printed: each part alone, and the
bare compute against "without" (what runner.run adds: build, verification, the report).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import statistics
import time
from collections import defaultdict
from unittest import mock

import daskgpu
from benchmarks.harness import machine
from daskgpu.execution import memory, runner


def _no_memory():
    """Switch per-worker memory sampling off (what "without" measures against)."""
    return mock.patch.multiple(memory, start=lambda client: 0.0,
                               peaks=lambda client, since: {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    spec = daskgpu.get_pipeline("mean-pipeline")
    params = {"size": args.size, "seed": 1}
    walls: dict[str, list[float]] = defaultdict(list)
    computes: dict[str, list[float]] = defaultdict(list)

    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        backend = client.backend

        def bare():
            client.compute(spec.build(backend, **params)).result()

        def without():
            with _no_memory():
                return runner.run(spec, client, backend=backend, **params)

        def with_harness():
            with contextlib.redirect_stdout(io.StringIO()):
                return runner.run(spec, client, backend=backend, progress=True, **params)

        def memory_only():
            return runner.run(spec, client, backend=backend, **params)

        def progress_only():
            with _no_memory(), contextlib.redirect_stdout(io.StringIO()):
                return runner.run(spec, client, backend=backend, progress=True, **params)

        ways = {"bare": bare, "without": without, "with": with_harness,
                "memory only": memory_only, "progress only": progress_only}
        for fn in ways.values():  # warm-up: compilation, first touch of memory
            fn()
        for i in range(args.repeat):
            names = list(ways)[i % len(ways):] + list(ways)[:i % len(ways)]  # rotate the order
            for name in names:
                began = time.perf_counter()
                result = ways[name]()
                walls[name].append(time.perf_counter() - began)
                if result is not None:
                    assert result.verified, result.verification
                    computes[name].append(result.timings["compute_s"])

    m = statistics.median
    compute = m(computes["without"])
    print(f"mean-pipeline {args.size} x {args.size}, 2 workers x 1 thread, median of "
          f"{args.repeat} (rotated order); {machine()}")
    for name, ts in walls.items():
        extra = f", compute_s {m(computes[name]):.4f} s" if name in computes else ""
        print(f"  {name:13s} whole repeat {m(ts):.4f} s{extra}")
    print("extra wall time per repeat against 'without', paired within each round "
          "(median, 95 % bootstrap interval), as a share of the compute time:")
    for name in ("with", "memory only", "progress only", "bare"):
        mid, low, high = paired(walls[name], walls["without"])
        print(f"  {name:13s} {mid * 1e3:+5.1f} ms [{low * 1e3:+.1f}, {high * 1e3:+.1f}] = "
              f"{100 * mid / compute:+.1f} % [{100 * low / compute:+.1f}, "
              f"{100 * high / compute:+.1f}]" + ("  (target < 2 %)" if name == "with" else ""))


def paired(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float, float]:
    """Median of the differences a[i] - b[i] and a 95 % bootstrap interval of it."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(draws))
    return statistics.median(diffs), medians[int(0.025 * draws)], medians[int(0.975 * draws)]

if __name__ == "__main__":
    main()
