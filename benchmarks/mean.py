"""mean-pipeline against its baselines, side by side in one run.

Compute times (cluster start excluded) of the mean of an n x n float64 random array:

- seed:       da.random.random(chunks=(1000, 1000)).mean() on a 2-worker LocalCluster
- numpy:      numpy default_rng().random().mean(), one thread (the pipeline's own baseline)
- threaded:   da.random.default_rng().random() (auto chunks) .mean(), Dask's threaded scheduler
- pipeline:   daskgpu mean-pipeline on daskgpu's default CPU cluster, through
``daskgpu.execution.bench``
              (what ``python cli.py bench mean-pipeline`` runs), and on two other layouts

Also: cluster start time, the CPU layouts (processes x threads) daskgpu could default to, and
the wall time of the whole ``python cli.py run mean-pipeline``. Usage:

    python -m benchmarks.mean [--size 10000] [--repeat 5]
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

import daskgpu
from benchmarks.harness import pipeline_bench, summary, timed
from daskgpu.clusters import session as sessions
from daskgpu.clusters.plan import plan

ROOT = Path(__file__).resolve().parents[1]


def start_time(workers: int, threads: int) -> float:
    """Seconds to start (and close) a CPU cluster of this layout."""
    chosen = plan(cpu=True, workers=workers, threads_per_worker=threads, dashboard=False)
    with sessions.start(chosen) as session:
        return session.start_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.size, args.repeat
    cores = os.cpu_count()
    print(f"mean of {n} x {n} float64 ({n * n * 8 / 1e9:.2f} GB), {cores} cores, "
          f"dask {dask.__version__}, numpy {np.__version__}, repeat {repeat}\n")

    threaded_t, _ = timed(
        lambda: da.random.default_rng().random((n, n)).mean().compute(scheduler="threads"),
        repeat,
    )
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        seed_t, _ = timed(
            lambda: client.compute(da.random.random((n, n), chunks=(1000, 1000)).mean()).result(),
            repeat,
        )
    params = {"size": n, "seed": 1}
    layouts = {"2 workers x 1 thread": (2, 1), "1 worker x 2 threads": (1, 2)}
    results = {label: pipeline_bench("mean-pipeline", params, workers=w, threads_per_worker=t,
                                     repeat=repeat, show=False).measurements[0]
               for label, (w, t) in layouts.items()}
    default_plan = plan(cpu=True)
    default_layout = f"{default_plan.n_workers} x {default_plan.threads_per_worker}"
    default = pipeline_bench("mean-pipeline", params, workers=default_plan.n_workers,
                             threads_per_worker=default_plan.threads_per_worker,
                             repeat=repeat).measurements[0]
    starts = {label: start_time(w, t) for label, (w, t) in layouts.items()}

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
    print(f"  seed's way (2-worker LocalCluster)   {summary(seed_t)}")
    print(f"  NumPy, one thread (the baseline)     median {default.baseline_s:.3f} s")
    print(f"  Dask threaded scheduler, default_rng {summary(threaded_t)}")
    for label, m in results.items():
        print(f"  mean-pipeline, {label:21s} {summary(m.compute_s)}")
    print(f"  mean-pipeline, default ({default_layout})     {summary(default.compute_s)}")
    print()
    med = default.median_s
    ratios = [
        ("seed / mean-pipeline", statistics.median(seed_t) / med, ">= 2.5"),
        ("NumPy / mean-pipeline", default.ratio, ">= 1.6"),
        ("mean-pipeline / threaded", med / statistics.median(threaded_t), "<= 1.15"),
    ]
    for name, value, target in ratios:
        print(f"  {name:26s} {value:5.2f}x   (target {target})")
    print()
    print("cluster start")
    for label, s in starts.items():
        print(f"  {label:21s} {s:.3f} s   (target <= 1.5 s)")
    print(f"wall time of `python cli.py run mean-pipeline --size {n}`: {summary(walls)}")


if __name__ == "__main__":
    main()
