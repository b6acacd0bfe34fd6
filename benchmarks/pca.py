"""pca-pipeline against scikit-learn's ``PCA(svd_solver="covariance_eigh")``, on the same file.

    python -m benchmarks.pca [--samples 1000000] [--features 256] [--components 10]
        [--dtype float64] [--method auto] [--rounds 3] [--workers 2] [--generated]

The rows (``z diag(sigma) V^T``, pca-pipeline's own specification, :mod:`pipelines.pca.shared`)
are written once to a ``.npy`` file, untimed. Then, in alternating rounds:

- pca-pipeline, ``daskgpu.run(..., input=FILE)`` on one CPU LocalCluster of ``--workers``
  single-threaded workers: its ``compute_s`` (the blocks read from the file, reduced, joined,
  the small ``eigh`` or SVD; verified after, untimed), the components written with ``--output``;
- scikit-learn in a fresh process whose BLAS uses every core: ``np.load(FILE)`` and
  ``PCA(components, svd_solver="covariance_eigh").fit``, both timed (as a user's script would
  run them), its explained variances and components saved.

Before any ratio, every round's answers are compared: the explained variances within the
tolerance of :func:`daskgpu.execution.answers.tolerance` for the dtype and the rows, and the
subspaces (the cosines of the principal angles between the two sets of components, at least
``1 - 1e-6``). The ratio printed is scikit-learn's median over the pipeline's (target at least
1.0). ``--generated`` also times the pipeline on the same rows drawn on its workers (no file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import daskgpu
from benchmarks.harness import machine
from daskgpu.execution import answers

TARGET = 1.0
# Cosines of the principal angles between the two subspaces at least 1 - SUBSPACE.
SUBSPACE = 1e-6
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITE_ROWS = 65_536


def write_rows(path: str, samples: int, features: int, dtype: str, seed: int) -> None:
    """The rows ``z diag(sigma) V^T`` (pca-pipeline's specification) to a ``.npy`` file."""
    from pipelines.pca import shared

    frame = (shared.spectrum(features)[:, None] * shared.basis(seed, features).T)
    rng = np.random.default_rng(np.random.SeedSequence((seed, 7)))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(samples, features))
    for first in range(0, samples, WRITE_ROWS):
        count = min(WRITE_ROWS, samples - first)
        out[first:first + count] = rng.standard_normal((count, features)) @ frame
    out.flush()
    del out


def peer(args) -> None:
    """Run as ``--peer FILE``: scikit-learn's covariance PCA of the file, timed with its load."""
    from sklearn.decomposition import PCA

    began = time.perf_counter()
    x = np.load(args.peer)
    fitted = PCA(args.components, svd_solver="covariance_eigh").fit(x)
    seconds = time.perf_counter() - began
    np.savez(args.out, explained_variance=fitted.explained_variance_,
             components=fitted.components_)
    print(json.dumps({"seconds": seconds}), flush=True)


def sklearn_round(path: str, components: int, out: str) -> tuple[float, dict]:
    """One scikit-learn fit in a fresh process (every core's BLAS): seconds and its answer."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.pca", "--peer", path, "--components",
         str(components), "--out", out], capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"scikit-learn's PCA failed: {proc.stderr.strip().splitlines()[-1:]}")
    seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
    with np.load(out) as saved:
        return seconds, {key: saved[key] for key in saved.files}


def disagreement(ours: dict, theirs: dict, dtype: str, samples: int) -> str | None:
    """How two PCAs of the same rows differ: explained variances, then the subspaces."""
    rtol = answers.tolerance(dtype, samples)
    wrong = answers.difference(list(ours["explained_variance"]),
                               list(theirs["explained_variance"]), rtol=rtol)
    if wrong:
        return f"explained variances: {wrong} (relative tolerance {rtol:.3g})"
    cosines = np.linalg.svd(np.asarray(ours["components"]) @ np.asarray(
        theirs["components"]).T, compute_uv=False)
    if not cosines.min() >= 1 - SUBSPACE:
        return (f"subspaces: the smallest cosine of their principal angles is "
                f"{cosines.min():.9f} (at least {1 - SUBSPACE} expected)")
    return None


def pipeline_round(session, params: dict, components_out: str) -> tuple[float, dict, dict]:
    """One verified pca-pipeline run: compute seconds, its answer, what the run reported."""
    result = daskgpu.run("pca-pipeline", session, **params, output=components_out,
                         overwrite=True)
    if not result.verified:
        raise SystemExit(f"the run failed its verification: {result.verification}")
    answer = {"explained_variance": result.data["explained_variance"],
              "components": np.load(components_out)}
    return result.timings["compute_s"], answer, result.data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--components", type=int, default=10)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--generated", action="store_true",
                        help="Also time the pipeline on the rows drawn on its workers.")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        peer(args)
        return
    print(f"pca-pipeline --method {args.method} against scikit-learn covariance_eigh, "
          f"{args.samples} x {args.features} {args.dtype}, {args.components} components, "
          f"{args.workers} single-threaded CPU workers; {machine()}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rows.npy")
        write_rows(path, args.samples, args.features, args.dtype, args.seed)
        params = {"input": path, "components": args.components, "method": args.method,
                  "chunks": args.chunks}
        generated = {"samples": args.samples, "features": args.features,
                     "components": args.components, "method": args.method,
                     "chunks": args.chunks, "dtype": args.dtype, "seed": args.seed}
        ours_s, theirs_s, drawn_s = [], [], []
        with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                             dashboard=False) as session:
            daskgpu.run("pca-pipeline", session, samples=2000, features=args.features)
            for round_ in range(args.rounds):
                seconds, ours, data = pipeline_round(session, params,
                                                     os.path.join(folder, "ours.npy"))
                their_seconds, theirs = sklearn_round(path, args.components,
                                                      os.path.join(folder, "theirs.npz"))
                wrong = disagreement(ours, theirs, args.dtype, args.samples)
                if wrong:
                    raise SystemExit(f"round {round_ + 1}: scikit-learn and pca-pipeline "
                                     f"disagree: {wrong}")
                ours_s.append(seconds)
                theirs_s.append(their_seconds)
                line = (f"round {round_ + 1}: pca-pipeline {seconds:.3f} s ({data['method']}, "
                        f"{data['blocks']} blocks), scikit-learn {their_seconds:.3f} s "
                        f"(np.load + fit); answers agree")
                if args.generated:
                    drawn = daskgpu.run("pca-pipeline", session, **generated)
                    if not drawn.verified:
                        raise SystemExit(f"the generated run failed: {drawn.verification}")
                    drawn_s.append(drawn.timings["compute_s"])
                    line += f"; generated on the workers {drawn_s[-1]:.3f} s"
                print(line, flush=True)
    ours_m, theirs_m = statistics.median(ours_s), statistics.median(theirs_s)
    print(f"pca-pipeline median {ours_m:.3f} s, scikit-learn median {theirs_m:.3f} s "
          f"({os.cpu_count()} BLAS threads)")
    print(f"ratio scikit-learn / pca-pipeline: {theirs_m / ours_m:.2f}x (target >= {TARGET}x)")
    if drawn_s:
        print(f"ratio scikit-learn (from the file) / pca-pipeline on rows drawn on its workers: "
              f"{theirs_m / statistics.median(drawn_s):.2f}x")


if __name__ == "__main__":
    main()
