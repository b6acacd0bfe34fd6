"""What every benchmark here shares, on top of ``daskgpu.bench`` (the one harness).

Pipelines are measured with :func:`pipeline_bench`, a call of ``daskgpu.bench.bench`` (the
same code as ``python cli.py bench``); kernels, which are not pipelines, with :func:`timed`,
which times through ``daskgpu.timing.time_call``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daskgpu import (
    backends,  # noqa: E402
    report,  # noqa: E402
)
from daskgpu import bench as daskgpu_bench  # noqa: E402
from daskgpu.timing import time_call  # noqa: E402

CPU = backends.get("cpu")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    """Run ``fn`` once to warm up (compilation, first touch of memory), then ``repeat`` times.

    Returns the wall times of the timed runs and the last result.
    """
    results = [fn()]
    times = [time_call(CPU, lambda: results.append(fn())) for _ in range(repeat)]
    return times, results[-1]


def summary(times: list[float]) -> str:
    """``median … s (min …, max …)``."""
    return f"median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})"


def machine() -> str:
    """Cores, Numba threads and library versions, for a benchmark's heading."""
    import os

    import numba
    import numpy as np

    return (f"{os.cpu_count()} cores, {numba.get_num_threads()} numba threads, "
            f"numpy {np.__version__}, numba {numba.__version__}")


def pipeline_bench(name: str, params: dict, workers: int = 2, repeat: int = 3, warmup: int = 1,
                   baseline_runs: int | None = None, threads_per_worker: int = 1,
                   show: bool = True) -> daskgpu_bench.BenchResult:
    """``python cli.py bench NAME --cpu --workers W --repeat R --warmup U``, from Python.

    Prints the bench table (unless ``show`` is False) and returns the result; its single
    measurement holds the median compute time and the ratio baseline / median.
    """
    options = {"cpu": True, "workers": workers, "threads_per_worker": threads_per_worker,
               "dashboard": False}
    result = daskgpu_bench.bench(name, params, options, repeat=repeat, warmup=warmup,
                                 baseline_runs=baseline_runs)
    if show:
        from rich.console import Console

        Console(width=200).print(report.bench_table(result))
    if not result.verified:
        raise SystemExit(f"{name}: a run failed its verification")
    return result
