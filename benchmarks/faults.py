"""Faults for real, N times each: how many runs still finish right, and what the fault costs.

    python -m benchmarks.faults [--repeat 5] [--only worker-loss|memory|interrupts]

- worker SIGKILLed mid-run (mean, stencil, trips on two single-thread CPU workers): runs that
  finished with the verified answer equal to the clean run's, and their time against clean runs
  measured in the same session;
- memory pressure (stencil, one worker limited to 640 MiB, about 2 GB of grids): runs that
  finished verified without the worker dying, against the same run without a limit;
- SIGINT/SIGTERM at cluster start, mid-computation, while writing --output, and a double
  Ctrl-C: runs that exited with 130, no process and no output file left; seconds to exit.

The fault injection is tests/fault_injection.py, the same as the tests use.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import daskgpu
from benchmarks.harness import machine, summary, timed
from tests import fault_injection as faults

KILLED = {
    "mean-pipeline": {"size": 10000, "chunks": "1000", "seed": 5},
    "stencil-pipeline": {"size": 2000, "chunks": "400", "steps": 48},
    "trips-pipeline": {},  # Parquet input, made below
}
LIMIT = 640 * 2**20
PRESSURE = {"size": 6000, "chunks": "1000", "steps": 24, "steps_per_exchange": 4}
CLUSTER = ["--cpu", "--workers", "2", "--threads-per-worker", "1", "--no-dashboard"]
INTERRUPTS = {
    "SIGTERM at cluster start": (["run", "mean-pipeline", *CLUSTER, "--size", "4000"], "start",
                                 [signal.SIGTERM], None),
    "SIGINT mid-computation": (["run", "mean-pipeline", *CLUSTER, "--size", "200000"],
                               "compute", [signal.SIGINT], None),
    "SIGINT writing stencil .npy": (["run", "stencil-pipeline", *CLUSTER, "--size", "3000",
                                     "--chunks", "500", "--steps", "200"], "output",
                                    [signal.SIGINT], "u.npy"),
    "SIGTERM writing histogram .csv": (["run", "histogram-pipeline", *CLUSTER, "--values",
                                        "3000000", "--bins", "3000000", "--range", "0", "1",
                                        "--json"], "output", [signal.SIGTERM], "h.csv"),
    "double Ctrl-C mid-computation": (["run", "mean-pipeline", *CLUSTER, "--size", "200000"],
                                      "compute", [signal.SIGINT, signal.SIGINT], None),
}


def _cost(clean: list[float], faulty: list[float]) -> str:
    a, b = statistics.median(clean), statistics.median(faulty)
    return f"x{b / a:.2f}, +{b - a:.2f} s (median {b:.2f} s against {a:.2f} s clean)"


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1e-300)
    return a == b


def worker_loss(repeat: int, folder: str) -> None:
    from pipelines.trips import pipeline as trips_pipeline

    for i in range(12):
        trips_pipeline.synthetic_partition((i, 150_000, 11)).to_parquet(
            f"{folder}/part-{i:02d}.parquet")
    KILLED["trips-pipeline"] = {"input": folder}
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        for name, params in KILLED.items():
            clean_times, clean = timed(lambda n=name, p=params: daskgpu.run(n, client=client, **p),
                                       repeat)
            ok, times, killed = 0, [], 0
            for _ in range(repeat):
                result, kill, seconds = faults.run_killing_a_worker(client, name, 2, **params)
                killed += kill is not None
                times.append(seconds)
                ok += bool(result.verified and _same(result.value, clean.value))
            print(f"worker SIGKILL mid-run, {name}: {ok}/{repeat} verified and equal to the "
                  f"clean answer ({killed}/{repeat} runs had a worker killed mid-way); cost "
                  f"{_cost(clean_times, times)}")
            print(f"    clean {summary(clean_times)}; with a kill {summary(times)}")


def memory_pressure(repeat: int) -> None:
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as client:
        clean_times, _ = timed(lambda: daskgpu.run("stencil-pipeline", client=client, **PRESSURE),
                               repeat)
    ok, times, spilled = 0, [], []
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False,
                         memory_limit=LIMIT) as client:
        for _ in range(repeat):
            pid = client.run(os.getpid)
            watch = faults.SpillWatch(client)
            watch.start()
            began = time.perf_counter()
            result = daskgpu.run("stencil-pipeline", client=client, **PRESSURE)
            times.append(time.perf_counter() - began)
            watch.stop.set()
            watch.join()
            watch.sample()
            spilled.append(watch.written / 2**30)
            same_worker = client.run(os.getpid) == pid
            ok += bool(result.verified and same_worker)
            if not same_worker:
                client.wait_for_workers(1, timeout=120)
    grids = (PRESSURE["steps"] // PRESSURE["steps_per_exchange"] + 1) * PRESSURE["size"] ** 2 * 8
    print(f"memory pressure, stencil-pipeline ({grids / 2**30:.1f} GiB of grids, one worker "
          f"limited to {LIMIT / 2**20:.0f} MiB): {ok}/{repeat} verified without the worker "
          f"dying; {statistics.median(spilled):.1f} GiB written to disk per run (median); cost "
          f"{_cost(clean_times, times)}")
    print(f"    no limit {summary(clean_times)}; limited {summary(times)}")


def interrupts(repeat: int) -> None:
    for label, (args, phase, signals, name) in INTERRUPTS.items():
        clean, exits = 0, []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                tmp_path = Path(tmp)
                output = tmp_path / "out" / name if name else None
                run_args = list(args)
                if output is not None:
                    output.parent.mkdir()
                    run_args += ["--output", str(output)]
                r = faults.interrupt_cli(run_args, phase, signals, tmp_path, output=output)
                exits.append(r.exit_s)
                fine = bool(r.returncode == 130 and not r.left_behind
                            and not r.leftover_files and "Traceback" not in r.stderr)
                clean += fine
                if not fine:
                    print(f"    not clean: exit {r.returncode}, processes left {r.left_behind}, "
                          f"files left {r.leftover_files}; stderr:\n"
                          + "\n".join("      " + line for line in r.stderr.splitlines()[-12:]))
        print(f"interrupt, {label}: {clean}/{repeat} exited 130 with no process and no output "
              f"left; exit {summary(exits)} after the signal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=["worker-loss", "memory", "interrupts"],
                        help="run one section")
    args = parser.parse_args()
    print(machine())
    if args.only in (None, "worker-loss"):
        with tempfile.TemporaryDirectory() as folder:
            worker_loss(args.repeat, folder)
    if args.only in (None, "memory"):
        memory_pressure(args.repeat)
    if args.only in (None, "interrupts"):
        interrupts(args.repeat)


if __name__ == "__main__":
    main()
