"""What a command-line run costs beyond its compute, measured on whole processes in one run.

    python benchmarks/bench_start_finish.py [--size 10000] [--repeat 3]

- ``cli.py --help`` and ``cli.py list``: wall time of the whole process (target < 0.3 s).
- ``cli.py run mean-pipeline --size N``: wall time of the whole process against its own
  ``compute_s`` (target: whole process <= compute + 1.5 s), with the phases it reports.
- The first compute on a fresh cluster, with the workers warmed for the pipeline as they start
  (the default) and without (``DASKGPU_WORKER__WARM_UP_ON_START=false``), in alternating rounds.
- The same whole run with the dashboard served (the command's default; the figures above are
  with ``--no-dashboard``: serving it imports Bokeh as the scheduler starts).
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


def run_mean(size: int, warm: bool, method: str = "forkserver", dashboard: bool = False
             ) -> tuple[float, dict]:
    env = dict(os.environ, DASKGPU_WORKER__WARM_UP_ON_START="true" if warm else "false",
               DASKGPU_WORKER__CPU_START_METHOD=method)
    seconds, out = wall(["run", "mean-pipeline", "--size", str(size), "--json", "--quiet",
                         *([] if dashboard else ["--no-dashboard"])], env)
    return seconds, json.loads(out)["timings"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    quick = {name: [wall(argv)[0] for _ in range(args.repeat + 2)]
             for name, argv in (("--help", ["--help"]), ("list", ["list"]))}
    runs: dict[bool, list[tuple[float, dict]]] = {True: [], False: []}
    spawned: list[tuple[float, dict]] = []
    served: list[tuple[float, dict]] = []
    for _ in range(args.repeat):
        for warm in (True, False):
            runs[warm].append(run_mean(args.size, warm))
        spawned.append(run_mean(args.size, True, "spawn"))
        served.append(run_mean(args.size, True, dashboard=True))

    print(f"{os.cpu_count()} cores; medians of {args.repeat} alternating rounds")
    for name, times in quick.items():
        print(f"  cli.py {name:7s} whole process {statistics.median(times):.3f} s "
              "(target < 0.3 s)")
    walls = [w for w, _ in runs[True]]
    computes = [t["compute_s"] for _, t in runs[True]]
    overhead = statistics.median(w - c for w, c in zip(walls, computes, strict=True))
    # The figures leave verification out (it is timed apart): both are shown.
    unverified = statistics.median(w - t["compute_s"] - t["verify_s"] for w, t in runs[True])
    print(f"  cli.py run mean-pipeline --size {args.size}: whole process "
          f"{statistics.median(walls):.2f} s, compute {statistics.median(computes):.2f} s: "
          f"compute + {overhead:.2f} s; without the verification, compute + {unverified:.2f} s "
          "(target <= compute + 1.5 s)")
    phases = {p: statistics.median(t[p] for _, t in runs[True]) for p in PHASES}
    print("    phases: " + ", ".join(f"{p} {v:.2f}" for p, v in phases.items()))
    with_dashboard = statistics.median(w - t["compute_s"] - t["verify_s"] for w, t in served)
    print(f"  the same with the dashboard served (the default; the numbers above are with "
          f"--no-dashboard): without the verification, compute + {with_dashboard:.2f} s, "
          f"cluster_start_s {statistics.median(t['cluster_start_s'] for _, t in served):.2f}")
    spawn_overhead = statistics.median(w - t["compute_s"] for w, t in spawned)
    print(f"  the same, workers spawned (distributed's default): compute + {spawn_overhead:.2f} s"
          f"; forked from the preloaded server: {spawn_overhead - overhead:.2f} s less")
    for phase in ("cluster_start_s", "close_s"):
        print(f"    {phase}: spawned {statistics.median(t[phase] for _, t in spawned):.2f} s, "
              f"forked {phases[phase]:.2f} s")
    cold = statistics.median(t["compute_s"] for _, t in runs[False])
    warm = statistics.median(computes)
    print(f"  first compute, workers warmed as they start {warm:.2f} s, not warmed {cold:.2f} s: "
          f"{cold / warm:.2f}x faster warmed")


if __name__ == "__main__":
    main()
