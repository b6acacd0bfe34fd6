"""What a run's check costs beside its compute, at each depth, for every built-in pipeline.

    python -m benchmarks.verification [--rounds 1] [--only mean,histogram] [--scale both]

Each pipeline runs as a user runs it, one cold ``python cli.py run NAME --json --quiet --seed
11`` per depth and round, ``--verify fast`` and ``--verify full`` alternating, at its CPU
defaults and at a tenth of them (a tenth of the elements). For each it prints the medians of
compute_s and verify_s and their ratio, against the targets: ``fast`` at most 0.10 x compute_s
at the defaults, at most max(0.25 x compute_s, 0.05 s) at a tenth. Both depths must verify; a
run that does not is reported, and the benchmark exits 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from daskgpu.verification.depths import CHECKED as DEPTHS

ROOT = Path(__file__).resolve().parents[1]
# A tenth of each pipeline's CPU default elements (an n x n side shrinks by sqrt(10)).
TENTH = {
    "mean": {"size": 3162},
    "histogram": {"values": 10_000_000},
    "stencil": {"size": 1265},
    "trips": {"rows": 2_000_000},
    "join": {"rows": 1_000_000},
    "train": {"samples": 100_000},
    "kmeans": {"samples": 100_000},
    "matmul": {"size": 1265},
    "pca": {"samples": 100_000},
    "fft": {"size": 1296},
}
NO_SEED = {"stencil"}  # its data have no seed: the initial grid is a closed form
TARGET = {"defaults": (0.10, 0.0), "tenth": (0.25, 0.05)}


def run(name: str, depth: str, params: dict) -> dict:
    """One cold command-line run; its JSON document."""
    args = [sys.executable, str(ROOT / "cli.py"), "run", f"{name}-pipeline", "--json",
            "--quiet", "--verify", depth, "--no-dashboard"]
    if name not in NO_SEED:
        args += ["--seed", "11"]
    for key, value in params.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{name} ({depth}): exit {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def measure(name: str, params: dict, rounds: int) -> dict:
    """Medians of compute_s and verify_s at each depth, and whether every run verified."""
    seen = {depth: {"compute_s": [], "verify_s": [], "verified": True} for depth in DEPTHS}
    for _ in range(rounds):
        for depth in DEPTHS:
            document = run(name, depth, params)
            timings = document["timings"]
            seen[depth]["compute_s"].append(timings["compute_s"])
            seen[depth]["verify_s"].append(timings["verify_s"])
            seen[depth]["verified"] &= document["verified"] is True
            seen[depth]["ran"] = document["verify"]
    return {depth: {"compute_s": statistics.median(s["compute_s"]),
                    "verify_s": statistics.median(s["verify_s"]),
                    "verified": s["verified"], "ran": s["ran"]}
            for depth, s in seen.items()}


def verdict(scale: str, compute_s: float, verify_s: float) -> str:
    """Whether the fast depth meets its target at ``scale``."""
    share, floor = TARGET[scale]
    limit = max(share * compute_s, floor)
    return f"{'met' if verify_s <= limit else 'NOT met'} (limit {limit:.3f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="Runs per depth (medians).")
    parser.add_argument("--only", default="", help="Comma-separated pipelines (default: all).")
    parser.add_argument("--scale", choices=("defaults", "tenth", "both"), default="both")
    args = parser.parse_args()
    names = [n for n in TENTH if not args.only or n in args.only.split(",")]
    scales = ("defaults", "tenth") if args.scale == "both" else (args.scale,)
    failed = False
    print(f"{'pipeline':10} {'scale':9} {'depth':5} {'compute_s':>10} {'verify_s':>9} "
          f"{'verify/compute':>15}  fast target")
    for scale in scales:
        for name in names:
            params = TENTH[name] if scale == "tenth" else {}
            medians = measure(name, params, args.rounds)
            for depth in DEPTHS:
                m = medians[depth]
                ratio = m["verify_s"] / m["compute_s"] if m["compute_s"] > 0 else float("nan")
                note = verdict(scale, m["compute_s"], m["verify_s"]) if depth == "fast" else ""
                if not m["verified"]:
                    note, failed = "DID NOT VERIFY", True
                ran = "" if m["ran"] == depth else f" (ran {m['ran']})"
                print(f"{name:10} {scale:9} {depth:5} {m['compute_s']:10.3f} "
                      f"{m['verify_s']:9.3f} {ratio:15.3f}  {note}{ran}", flush=True)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
