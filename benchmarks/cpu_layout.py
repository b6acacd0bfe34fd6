"""Which CPU layout is fastest for every built-in pipeline: W workers x T threads, same cores.

    python -m benchmarks.cpu_layout [--repeat 5]

Both layouts of the machine's cores (one single-threaded worker per core, and one worker with a
thread per core) are started side by side; each pipeline then runs on them in alternating
order, and the median compute times are printed with their ratio. Each worker's kernels use
exactly its own thread count (Numba, and BLAS through distributed's one-thread pools), so the
layouts do equal work with equal threads. The default layout is
``daskgpu.cpu.threads-per-worker`` (daskgpu.yaml).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import dask.system

from benchmarks.harness import machine
from daskgpu.clusters import session
from daskgpu.execution import runner
from daskgpu.toolkit import registry

# Sizes that keep every pipeline's compute near a second on two cores.
PARAMS = {
    "mean-pipeline": {"size": 10_000, "seed": 1},
    "histogram-pipeline": {"values": 50_000_000, "bins": 256, "seed": 1},
    "stencil-pipeline": {"size": 2_000, "steps": 40},
    "trips-pipeline": {"rows": 4_000_000, "seed": 1},
    "join-pipeline": {"rows": 2_000_000, "seed": 1},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cores = dask.system.CPU_COUNT
    layouts = {f"{cores} workers x 1 thread": (cores, 1), f"1 worker x {cores} threads": (1, cores)}
    print(f"median compute_s of {args.repeat} runs after one warm-up, layouts alternating; "
          f"{machine()}")
    with contextlib.ExitStack() as stack:
        sessions = {label: stack.enter_context(session.cluster(
            cpu=True, workers=w, threads_per_worker=t, dashboard=False))
            for label, (w, t) in layouts.items()}
        for name, params in PARAMS.items():
            spec = registry.get(name)
            resolved = {label: spec.resolve(s.backend, **params) for label, s in sessions.items()}
            times: dict[str, list[float]] = {label: [] for label in sessions}
            for i in range(args.repeat + 1):
                order = list(sessions) if i % 2 == 0 else list(reversed(sessions))
                for label in order:
                    result = runner.execute(spec, sessions[label], resolved[label])
                    assert result.verified, result.verification
                    if i:  # the first round warms up (compilation, first touch)
                        times[label].append(result.timings["compute_s"])
            medians = {label: statistics.median(ts) for label, ts in times.items()}
            first, second = medians.values()
            print(f"  {name:20s} " + "  ".join(f"{label}: {m:.3f} s" for label, m in
                                                medians.items())
                  + f"  ratio {second / first:.2f} (>1: the first layout is faster)")


if __name__ == "__main__":
    main()
