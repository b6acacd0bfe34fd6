"""kmeans-pipeline's Lloyd iterations against scikit-learn's and dask-ml's KMeans, same cores.

    python -m benchmarks.kmeans [--samples 10000000] [--features 32] [--k 16]
        [--iterations 10] [--rounds 3] [--workers 2]

The same Lloyd iterations (float32 points from ``--k`` Gaussian blobs, ``--k`` centroids,
from the same random initial centroids: seeded points of the data) by three contenders, in
alternating rounds:

- kmeans-pipeline's loop (:func:`pipelines.kmeans.tasks.lloyd`, what a run's ``compute_s``
  times after the initialisation) on ``daskgpu.cluster(cpu=True)`` of ``--workers`` single-threaded
  workers, on its shards drawn once on the workers (one per worker, as ``--chunks auto``
  makes them): ``--iterations`` iterations and its final pass;
- scikit-learn's ``KMeans(algorithm="lloyd", n_init=1, init=<the same centroids>,
  max_iter=--iterations, tol=0)`` in its own process, kept alive between rounds, on the same
  points (the pipeline's shards, drawn there and stacked), its OpenMP and BLAS threads limited
  to ``--workers`` (the same cores);
- dask-ml's ``KMeans(init=<the same centroids>, max_iter=--iterations, tol=0)`` (the Dask
  peer; in the ``bench`` extra, skipped with a line where ``dask_ml`` does not import) on the
  same cluster, fitting a dask array whose chunks are the pipeline's shards where they live
  (nothing is copied). Its ``fit`` makes two passes besides its iterations: a check of the
  input for NaN and infinity before them, and the final labels and inertia after them. Its
  centroids are float64 from its second iteration on, so scikit-learn's
  ``pairwise_distances_argmin_min``, which it calls on each chunk, computes in float64 (on a
  float64 copy of the chunk) from then on; the initial centroids are given as float32, as to
  scikit-learn, so that its first iteration does not.

The figure is seconds per iteration: each contender's whole call over the iterations it ran
(all make one more pass for the final labels or inertia, dask-ml the input check too). For
dask-ml and the pipeline, the iterations alone are timed too (dask-ml's own per-iteration
timer, its log lines "Lloyd loop"; the pipeline's ``step_s``). Every contender's first round
is a warm-up, except dask-ml's: a fit of the first ``WARM_UP_ROWS`` rows of each shard warms it
(numba compiles its sums on each worker) and its whole fits are the timed rounds only. Each
peer must run the same number of iterations as the pipeline and end at the same centroids (to
float32 rounding) before the ratio of the medians is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TARGET = 1.0
DASK_ML_TARGET = 2.0  # at least twice as fast per iteration as dask-ml
SEED = 14
# Centroids of two contenders may differ by this much (in blob standard deviations):
# scikit-learn's float32 distances (|x|^2 - 2 x.c + |c|^2, errors of ~1e-3 where |x| ~ 20)
# assign points near a boundary otherwise (measured: 1.2e-3 at 5e5 points, 5 iterations from
# random centroids, 8.5e-4 at 1e7 points, 10 iterations); the iteration count is compared too.
CENTROIDS_ATOL = 5e-3
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
DASK_ML_LOGGER = "dask_ml.cluster.k_means"
# dask-ml's warm-up: a fit of these first rows of each shard, not a whole round (its fit of
# 1e7 points takes a minute or more); what it warms is numba's compilation on each worker.
WARM_UP_ROWS = 2_000


def shard_arguments(args) -> tuple[list[tuple], tuple[int, ...]]:
    """The shards of a run with ``--chunks auto`` on ``--workers`` single-threaded workers."""
    from daskgpu.toolkit.numeric import shard_sizes
    from pipelines.kmeans.tasks import blob_centres

    per_shard = -(-args.samples // args.workers)
    sizes = shard_sizes(args.samples, per_shard)
    centres = blob_centres(SEED, args.k, args.features)
    return ([(SEED, i, rows, args.features, "float32", "numpy", centres)
             for i, rows in enumerate(sizes)], sizes)


def peer_process(args) -> None:
    """Run as ``--peer``: draw the points, then one fit per line read, its seconds out."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    from pipelines.kmeans.tasks import make_shard

    arguments, _sizes = shard_arguments(args)
    x = np.concatenate([make_shard(*a) for a in arguments])
    start = np.load(args.out + ".init.npy")
    print("ready", flush=True)
    for _line in sys.stdin:
        with threadpool_limits(limits=args.workers):
            began = time.perf_counter()
            fitted = KMeans(args.k, init=start.astype(np.float32), n_init=1,
                            max_iter=args.iterations, tol=0, algorithm="lloyd").fit(x)
            seconds = time.perf_counter() - began
        np.save(args.out, fitted.cluster_centers_.astype(np.float64))
        print(json.dumps({"seconds": seconds, "iterations": int(fitted.n_iter_)}), flush=True)


class Peer:
    """scikit-learn in its own process, limited to ``--workers`` threads."""

    def __init__(self, args, folder: str):
        env = {**os.environ, **{v: str(args.workers) for v in THREAD_VARIABLES}}
        self.out = os.path.join(folder, "sklearn.npy")
        np.save(self.out + ".init.npy", args.start)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.kmeans", "--peer", "--samples", str(args.samples),
             "--features", str(args.features), "--k", str(args.k), "--iterations",
             str(args.iterations), "--workers", str(args.workers), "--out", self.out],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            cwd=ROOT)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"the scikit-learn peer did not start: {line!r}")

    def run(self) -> dict:
        """One fit in the peer: its seconds and iterations."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def centroids(self) -> np.ndarray:
        """The final centroids of the peer's last fit."""
        return np.load(self.out)

    def close(self) -> None:
        """End the peer process."""
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class LoopTimes(logging.Handler):
    """The seconds of each of dask-ml's Lloyd iterations, from its log ("Finished Lloyd loop")."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the duration of a finished Lloyd iteration."""
        if (record.msg.startswith("Finished") and len(record.args) == 2
                and str(record.args[0]).startswith("Lloyd loop")):
            self.seconds.append(record.args[1].total_seconds())


class DaskML:
    """dask-ml's KMeans on the cluster, on a dask array of the pipeline's shards (one a chunk)."""

    def __init__(self, args, shards, sizes):
        import dask
        import dask.array as da
        from dask_ml.cluster import KMeans
        from distributed import wait

        self.kmeans, self.args = KMeans, args
        # Persisted, as dask-ml asks, so that every fit starts from the same keys (the chunks
        # are the shards themselves, held under a second key where they are).
        self.x = da.concatenate([da.from_delayed(dask.delayed(shard), (rows, args.features),
                                                 np.float32)
                                 for shard, rows in zip(shards, sizes, strict=True)]).persist()
        wait(self.x)
        self.loop = LoopTimes()
        logger = logging.getLogger(DASK_ML_LOGGER)
        logger.setLevel(logging.INFO)
        logger.addHandler(self.loop)
        logger.propagate = False

    def warm_up(self) -> None:
        """One fit of the first ``WARM_UP_ROWS`` rows of each shard (numba compiles on each)."""
        import dask.array as da
        from distributed import wait

        parts = [self.x.blocks[i][:WARM_UP_ROWS] for i in range(self.x.numblocks[0])]
        few = da.concatenate(parts).persist()
        wait(few)
        self.run(few)

    def run(self, x=None) -> dict:
        """One fit: its seconds, iterations, the seconds of each iteration, final centroids."""
        self.loop.seconds.clear()
        began = time.perf_counter()
        fitted = self.kmeans(self.args.k, init=self.args.start.astype(np.float32), n_init=1,
                             max_iter=self.args.iterations, tol=0).fit(self.x if x is None else x)
        seconds = time.perf_counter() - began
        return {"seconds": seconds, "iterations": int(fitted.n_iter_),
                "loop_s": list(self.loop.seconds),
                "centroids": np.asarray(fitted.cluster_centers_, dtype=np.float64)}


def compare(args) -> None:
    from distributed import wait

    import daskgpu
    from benchmarks.harness import machine
    from daskgpu.toolkit import data_parallel
    from pipelines.kmeans.init import gather_rows, random_rows
    from pipelines.kmeans.tasks import lloyd, make_shard

    arguments, sizes = shard_arguments(args)
    print(f"{args.samples} x {args.features} float32, k = {args.k}, {args.iterations} Lloyd "
          f"iterations from random centroids; {len(sizes)} shards on {args.workers} worker(s) "
          f"x 1 thread; {machine()}")
    has_dask_ml = dask_ml_importable()
    per_iteration = {"kmeans-pipeline": [], "scikit-learn": [], "dask-ml": []}
    loop_only = {"kmeans-pipeline": [], "dask-ml": []}
    with tempfile.TemporaryDirectory() as folder, \
            daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                            dashboard=False) as session:
        client = session.client
        shards = data_parallel.place(client, make_shard, arguments)
        wait(shards)
        args.start = gather_rows(client, shards, sizes, random_rows(SEED, args.samples, args.k))
        peer = Peer(args, folder)
        dask_peer = DaskML(args, shards, sizes) if has_dask_ml else None
        if dask_peer is not None:
            dask_peer.warm_up()
        dasks = None
        try:
            for round_ in range(args.rounds + 1):
                began = time.perf_counter()
                ours = lloyd(client, shards, args.start, args.iterations, 0.0)
                ours_s = (time.perf_counter() - began) / ours["iterations"]
                theirs = peer.run()
                theirs_s = theirs["seconds"] / theirs["iterations"]
                shown = "warm-up" if round_ == 0 else f"round {round_}"
                line = (f"{shown}: kmeans-pipeline {ours_s:.4f} s/iteration "
                        f"({ours['iterations']}), scikit-learn {theirs_s:.4f} s/iteration "
                        f"({theirs['iterations']})")
                if dask_peer is not None and round_:
                    dasks = dask_peer.run()
                    dasks_s = dasks["seconds"] / dasks["iterations"]
                    line += f", dask-ml {dasks_s:.4f} s/iteration ({dasks['iterations']})"
                elif dask_peer is not None:
                    line += f" (dask-ml warmed up on {WARM_UP_ROWS} rows of each shard)"
                print(line, flush=True)
                if round_:
                    per_iteration["kmeans-pipeline"].append(ours_s)
                    per_iteration["scikit-learn"].append(theirs_s)
                    loop_only["kmeans-pipeline"].append(statistics.mean(ours["step_s"]))
                    if dask_peer is not None:
                        per_iteration["dask-ml"].append(dasks_s)
                        loop_only["dask-ml"].append(statistics.mean(dasks["loop_s"]))
            agree("scikit-learn", ours, theirs["iterations"], peer.centroids())
            if dasks is not None:
                agree("dask-ml", ours, dasks["iterations"], dasks["centroids"])
        finally:
            peer.close()
    report(per_iteration, loop_only)


def dask_ml_importable() -> bool:
    """Whether dask-ml's round can run; says so either way."""
    try:
        import dask_ml.cluster
    except ImportError as exc:
        print(f"dask-ml: not importable ({exc}; pip install dask-ml, in the bench extra): "
              "its round is skipped")
        return False
    print(f"dask-ml {dask_ml.__version__}: KMeans(init=<the same centroids>, tol=0) on "
          "the same cluster, its chunks the pipeline's shards")
    return True


def report(per_iteration: dict, loop_only: dict) -> None:
    """The medians and the ratios against the targets."""
    median = {n: statistics.median(t) for n, t in per_iteration.items() if t}
    print("median s/iteration: " + ", ".join(f"{n} {t:.4f}" for n, t in median.items()))
    ratio = median["scikit-learn"] / median["kmeans-pipeline"]
    print(f"kmeans-pipeline vs scikit-learn (same cores, same init): {ratio:.2f}x "
          f"(target >= {TARGET}x: {'met' if ratio >= TARGET else 'NOT met'})")
    if "dask-ml" in median:
        ratio = median["dask-ml"] / median["kmeans-pipeline"]
        print(f"kmeans-pipeline vs dask-ml (same cluster, same shards, same init): {ratio:.2f}x "
              f"(target >= {DASK_ML_TARGET}x: {'met' if ratio >= DASK_ML_TARGET else 'NOT met'})")
        ours, dasks = (statistics.median(loop_only[n]) for n in ("kmeans-pipeline", "dask-ml"))
        print(f"iterations alone (no final pass, no input check): kmeans-pipeline {ours:.4f} "
              f"s/iteration, dask-ml {dasks:.4f}: {dasks / ours:.2f}x")


def agree(name: str, ours: dict, iterations: int, centroids: np.ndarray) -> None:
    """Stop unless peer ``name`` ran the pipeline's iterations to the same centroids."""
    if ours["iterations"] != iterations:
        raise SystemExit(f"iterations differ: kmeans-pipeline {ours['iterations']}, "
                         f"{name} {iterations}")
    off = float(np.abs(ours["centroids"][-1] - centroids).max())
    if off > CENTROIDS_ATOL:
        raise SystemExit(f"{name}'s final centroids differ by {off:.3g} (> {CENTROIDS_ATOL}): "
                         "no ratio")
    last = float(np.sqrt(((ours["centroids"][-1] - ours["centroids"][-2]) ** 2).sum(axis=1))
                 .max())
    print(f"{name} agrees: {ours['iterations']} iterations, final centroids within {off:.2g} "
          f"(the last iteration moved them by up to {last:.2g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        peer_process(args)
        return
    compare(args)


if __name__ == "__main__":
    main()
