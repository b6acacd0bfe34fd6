"""What every benchmark here shares, on top of ``daskgpu.execution.bench`` (the one harness).

Pipelines are measured with :func:`pipeline_bench`, a call of ``daskgpu.execution.bench.bench`` (the
same code as ``python cli.py bench``); kernels, which are not pipelines, with :func:`timed`,
which times through ``daskgpu.toolkit.timing.time_call``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daskgpu.execution import bench as daskgpu_bench
from daskgpu.execution import report
from daskgpu.toolkit import backends
from daskgpu.toolkit.timing import time_call

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


def on_a_started_cluster(workers: int, rounds: Callable[[Any], Any]) -> Any:
    """``rounds(session)`` on a CPU cluster of ``workers`` one-thread workers started here.

    Its start is printed and is not part of a fit's time: the fits are passed the session.
    """
    import time

    import daskgpu

    began = time.perf_counter()
    with daskgpu.cluster(cpu=True, workers=workers, threads_per_worker=1,
                         dashboard=False) as started:
        print(f"cluster of {workers} x 1-thread workers started in "
              f"{time.perf_counter() - began:.2f} s (not part of a fit: passed as session=)")
        return rounds(started)


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


BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

_BASELINE = """
import json, sys
import daskgpu
spec = daskgpu.get_pipeline({name!r})
resolved = spec.resolve(None, **json.loads({params!r}))
seconds, answer = spec.baseline(resolved)
print(json.dumps({{"seconds": seconds, "answer": answer}},
                 default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
"""


def baseline_in_a_process(name: str, params: dict, all_blas_threads: bool = False
                          ) -> tuple[float, Any]:
    """Seconds and answer of pipeline ``name``'s own baseline, run in a fresh process.

    ``all_blas_threads``: that process's BLAS on every core (a single NumPy call as a user on
    this machine would run it), whatever this process's environment limits it to.
    """
    import json
    import os
    import subprocess

    env = dict(os.environ)
    if all_blas_threads:
        env.update({variable: str(os.cpu_count()) for variable in BLAS_THREADS})
    root = str(Path(__file__).resolve().parents[1])
    code = _BASELINE.format(name=name, params=json.dumps(params))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True, cwd=root)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["seconds"]), out["answer"]


_NVTX_STAND_IN = "def start_range(*a, **k):\n    return None\n\n\ndef end_range(*a, **k):\n" \
                 "    return None\n"


def local_cupy(address: str, operation: str, *options: str, runs: int = 3) -> list[float]:
    """Wall clocks of dask-cuda's ``local_cupy -t cpu --operation OPERATION`` on a scheduler.

    It runs on the cluster at ``address`` (ours: it cannot start a CPU cluster where there is
    no NVML); ``options`` are its own (``-s``, ``-c``, ``-2``, ...). It imports ``nvtx`` for
    profiling ranges only; where that is not installed, a stand-in that does nothing is put on
    its path.
    """
    import importlib.util
    import os
    import re
    import subprocess
    import tempfile

    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as stand_in:
        if importlib.util.find_spec("nvtx") is None:
            Path(stand_in, "nvtx.py").write_text(_NVTX_STAND_IN)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [stand_in, env.get("PYTHONPATH")]))
        proc = subprocess.run(
            [sys.executable, "-m", "dask_cuda.benchmarks.local_cupy", "-t", "cpu",
             "--operation", operation, *options, "--runs", str(runs),
             "--no-show-p2p-bandwidth", "--scheduler-address", address],
            capture_output=True, text=True, env=env, check=True, cwd=stand_in)
    unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
    times = []  # the lines "1.23 s | 456 MiB/s" right below the "Wall clock" header
    for line in proc.stdout.split("Wall clock", 1)[-1].splitlines()[1:]:
        found = re.match(r"\s*([\d.]+) (s|ms|us)\s+\|", line)
        if found:
            times.append(float(found.group(1)) * unit[found.group(2)])
        elif times and line.strip():
            break
    if not times:
        raise SystemExit(f"local_cupy printed no wall clock:\n{proc.stdout}")
    return times
