"""mean-pipeline against its baselines, side by side in one run.

Compute times (cluster start excluded) of the mean of an n x n float64 random array:

- seed:       da.random.random(chunks=(1000, 1000)).mean() on a 2-worker LocalCluster
- numpy:      numpy default_rng().random().mean(), one thread
- threaded:   da.random.default_rng().random() (auto chunks) .mean(), Dask's threaded scheduler
- pipeline:   daskgpu mean-pipeline on daskgpu's default CPU cluster

Also: cluster start time, the CPU layouts (processes x threads) daskgpu could default to, and
the wall time of the whole ``python cli.py run mean-pipeline``. Usage:

    python benchmarks/bench_mean.py [--size 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import summary, timed  # noqa: E402

import daskgpu  # noqa: E402
from daskgpu import clusters  # noqa: E402


def pipeline_compute(client, n: int) -> float:
    result = daskgpu.run("mean-pipeline", client=client, size=n, seed=1)
    assert result.verified, result.verification
    return result.timings["compute_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.size, args.repeat
    cores = os.cpu_count()
    print(f"mean of {n} x {n} float64 ({n * n * 8 / 1e9:.2f} GB), {cores} cores, "
          f"dask {dask.__version__}, numpy {np.__version__}, repeat {repeat}\n")

    numpy_t, _ = timed(lambda: np.random.default_rng().random((n, n)).mean(), repeat)
    threaded_t, _ = timed(
        lambda: da.random.default_rng().random((n, n)).mean().compute(scheduler="threads"),
        repeat,
    )

    results = {}
    starts = {}
    layouts = {"2 workers x 1 thread": (2, 1), "1 worker x 2 threads": (1, 2)}
    default_layout = None
    for label, (workers, threads) in layouts.items():
        opts = dict(cpu=True, workers=workers, threads_per_worker=threads, dashboard=False)
        p = clusters.plan(**opts)
        with clusters.start(p) as client:
            starts[label] = clusters.info(client).start_s
            results[label] = [pipeline_compute(client, n) for _ in range(repeat + 1)][1:]
            if label.startswith("2 workers"):
                seed_t, _ = timed(
                    lambda c=client: c.compute(
                        da.random.random((n, n), chunks=(1000, 1000)).mean()
                    ).result(),
                    repeat,
                )
    with daskgpu.cluster(cpu=True, dashboard=False) as client:
        info = clusters.info(client)
        default_layout = f"{len(client.scheduler_info()['workers'])} workers"
        default_start = info.start_s
        pipeline_t = [pipeline_compute(client, n) for _ in range(repeat + 1)][1:]

    walls = []
    for _ in range(3):
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline", "--size", str(n),
             "--quiet", "--json", "--no-dashboard"],
            check=True, capture_output=True,
        )
        walls.append(time.perf_counter() - began)

    print("compute time (cluster start excluded)")
    print(f"  seed's way (2-worker LocalCluster)  {summary(seed_t)}")
    print(f"  NumPy, one thread                   {summary(numpy_t)}")
    print(f"  Dask threaded scheduler, default_rng {summary(threaded_t)}")
    for label, times in results.items():
        print(f"  mean-pipeline, {label:21s} {summary(times)}")
    print(f"  mean-pipeline, default ({default_layout})   {summary(pipeline_t)}")
    print()
    med = statistics.median(pipeline_t)
    ratios = [
        ("seed / mean-pipeline", statistics.median(seed_t) / med, ">= 2.5"),
        ("NumPy / mean-pipeline", statistics.median(numpy_t) / med, ">= 1.6"),
        ("mean-pipeline / threaded", med / statistics.median(threaded_t), "<= 1.15"),
    ]
    for name, value, target in ratios:
        print(f"  {name:26s} {value:5.2f}x   (target {target})")
    print()
    print("cluster start")
    for label, s in starts.items():
        print(f"  {label:21s} {s:.3f} s")
    print(f"  default ({default_layout})        {default_start:.3f} s   (target <= 1.5 s)")
    print(f"wall time of `python cli.py run mean-pipeline --size {n}`: {summary(walls)}")


if __name__ == "__main__":
    main()
