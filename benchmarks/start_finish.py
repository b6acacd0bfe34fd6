"""What a command-line run costs beyond its compute, measured on whole processes in one run.

    python -m benchmarks.start_finish [--size 10000] [--repeat 3]

- ``cli.py --help`` and ``cli.py list``: wall time of the whole process (target < 0.3 s).
- ``cli.py run mean-pipeline --size N`` as a user types it (the dashboard served, its pages built
  on the first visit): wall time of the whole process against its own ``compute_s`` (target:
  whole process <= compute + 1.5 s), with the phases it reports.
- The same with the dashboard built as the scheduler starts, as Dask does
  (``DASKGPU_DASHBOARD_ON_FIRST_VISIT=false``: the scheduler imports Bokeh), and with
  ``--no-dashboard``, in alternating rounds; and what the first visit then costs: the first
  dashboard page (built on that request) against the next one, in a process of its own.
- The first compute on a fresh cluster, with the workers warmed for the pipeline as they start
  (the default) and without (``DASKGPU_WORKER__WARM_UP_ON_START=false``), in alternating rounds.
- The same whole run with CPU workers forked from a preloaded server (the default) and spawned
  one by one (``DASKGPU_WORKER__CPU_START_METHOD=spawn``, distributed's default), alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("import_s", "cluster_start_s", "build_s", "compute_s", "verify_s", "close_s")


def wall(args: list[str], env: dict | None = None) -> tuple[float, str]:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True,
                          text=True, check=True, env=env, cwd=ROOT)
    return time.perf_counter() - began, proc.stdout


def run_mean(size: int, extra_env: dict | None = None, dashboard: bool = True
             ) -> tuple[float, dict]:
    env = dict(os.environ, **(extra_env or {}))
    seconds, out = wall(["run", "mean-pipeline", "--size", str(size), "--json", "--quiet",
                         *([] if dashboard else ["--no-dashboard"])], env)
    return seconds, json.loads(out)["timings"]


FIRST_VISIT = """
import sys, time, urllib.request
import daskgpu

def page(link):
    began = time.perf_counter()
    with urllib.request.urlopen(link, timeout=60) as response:
        response.read()
    return time.perf_counter() - began

if __name__ == "__main__":
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                         dashboard_address="127.0.0.1:0") as session:
        print(page(session.dashboard), page(session.dashboard))
"""


def first_visit() -> tuple[float, float]:
    """Seconds for the first dashboard page of a fresh cluster, and for the same page again."""
    out = subprocess.run([sys.executable, "-c", FIRST_VISIT], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    return float(out[-2]), float(out[-1])


def beyond_compute(runs: list[tuple[float, dict]], verify: bool = False) -> float:
    """Median of whole process minus compute (and minus verification unless ``verify``)."""
    return statistics.median(w - t["compute_s"] - (0.0 if verify else t["verify_s"])
                             for w, t in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    quick = {name: [wall(argv)[0] for _ in range(args.repeat + 2)]
             for name, argv in (("--help", ["--help"]), ("list", ["list"]))}
    variants = {
        "default": {},
        "built at start": {"DASKGPU_DASHBOARD_ON_FIRST_VISIT": "false"},
        "not warmed": {"DASKGPU_WORKER__WARM_UP_ON_START": "false"},
        "spawned": {"DASKGPU_WORKER__CPU_START_METHOD": "spawn"},
    }
    runs: dict[str, list[tuple[float, dict]]] = {name: [] for name in [*variants, "no dashboard"]}
    visits = []
    for _ in range(args.repeat):
        for name, env in variants.items():
            runs[name].append(run_mean(args.size, env))
        runs["no dashboard"].append(run_mean(args.size, dashboard=False))
        visits.append(first_visit())

    print(f"{os.cpu_count()} cores; medians of {args.repeat} alternating rounds")
    for name, times in quick.items():
        print(f"  cli.py {name:7s} whole process {statistics.median(times):.3f} s "
              "(target < 0.3 s)")
    default = runs["default"]
    walls = [w for w, _ in default]
    computes = [t["compute_s"] for _, t in default]
    # The figures leave verification out (it is timed apart): both are shown.
    print(f"  cli.py run mean-pipeline --size {args.size}: whole process "
          f"{statistics.median(walls):.2f} s, compute {statistics.median(computes):.2f} s: "
          f"compute + {beyond_compute(default, verify=True):.2f} s; without the verification, "
          f"compute + {beyond_compute(default):.2f} s (target <= compute + 1.5 s)")
    phases = {p: statistics.median(t[p] for _, t in default) for p in PHASES}
    print("    phases: " + ", ".join(f"{p} {v:.2f}" for p, v in phases.items()))
    for name, what in (("built at start", "the dashboard built as the scheduler starts (Dask's "
                        "way)"), ("no dashboard", "--no-dashboard")):
        print(f"  the same with {what}: without the verification, compute + "
              f"{beyond_compute(runs[name]):.2f} s, cluster_start_s "
              f"{statistics.median(t['cluster_start_s'] for _, t in runs[name]):.2f}")
    print(f"  the first dashboard page, built on that visit: "
          f"{statistics.median(v[0] for v in visits):.2f} s; the same page again "
          f"{statistics.median(v[1] for v in visits):.2f} s")
    spawned = runs["spawned"]
    print(f"  the same, workers spawned (distributed's default): compute + "
          f"{beyond_compute(spawned, verify=True):.2f} s; forked from the preloaded server: "
          f"{beyond_compute(spawned, verify=True) - beyond_compute(default, verify=True):.2f} s "
          "less")
    for phase in ("cluster_start_s", "close_s"):
        print(f"    {phase}: spawned {statistics.median(t[phase] for _, t in spawned):.2f} s, "
              f"forked {phases[phase]:.2f} s")
    cold = statistics.median(t["compute_s"] for _, t in runs["not warmed"])
    warm = statistics.median(computes)
    print(f"  first compute, workers warmed as they start {warm:.2f} s, not warmed {cold:.2f} s: "
          f"{cold / warm:.2f}x faster warmed")


if __name__ == "__main__":
    main()
