"""``daskgpu.ml.KMeans.fit`` against scikit-learn's ``KMeans.fit``, same cores, same init.

    python -m benchmarks.ml_kmeans [--samples 2000000] [--features 32] [--k 16]
        [--iterations 10] [--rounds 2] [--workers 2] [--small]

The points (float32, ``--k`` Gaussian blobs of kmeans-pipeline's scheme, seed ``SEED``) are
drawn once in this process, untimed, as a NumPy array: what a user holds. Then, in alternating
rounds after one warm-up round each:

- ``daskgpu.ml.KMeans(k, init="random", n_init=1, max_iter=--iterations, tol=0,
  random_state=SEED).fit(X, session=session)`` on ``daskgpu.cluster(cpu=True)`` of
  ``--workers`` single-threaded workers, started once before the rounds: the cluster's
  start-up is not part of a fit's time (a user who passes a session pays it once). A fit's
  time is all of ``fit``: sending ``X`` to the workers, the seeded initial points, the
  iterations, the verification (``verify="fast"``, the default) and ``labels_``, computed in
  this process from the centroids;
- scikit-learn's ``KMeans(k, init=<the same points>, n_init=1, max_iter=--iterations, tol=0,
  algorithm="lloyd").fit(X)`` in this process, its OpenMP and BLAS threads limited to
  ``--workers`` (the same cores; the cluster's workers are idle meanwhile). The initial
  points are the rows kmeans-pipeline's random initialisation documents for the seed
  (:func:`pipelines.kmeans.init.random_rows`), so both start alike and run the same Lloyd
  iterations; with ``tol=0`` both stop when no point changes cluster (no centroid moves), or
  after ``--iterations``.

Before any ratio, the answers are compared: the same iterations, final centroids within
``CENTROIDS_ATOL`` (scikit-learn's float32 distances put points near a boundary either way),
inertias within ``INERTIA_RTOL`` (scikit-learn's recomputed in float64 at its centroids,
untimed), and the same labels but for points within a tie: whose
squared distances to the two centroids differ by no more than the centroids' difference and
float32 rounding can move them (:func:`ties_only`). Printed: the
median fit seconds, their ratio (scikit-learn's over ours: above 1, ours is faster), the
verification's share of our fit (``result_.timings["verify_s"]`` over the fit's seconds) and
our median seconds per iteration (the run's ``iteration_s``). Each round's line splits our fit:
``X`` sent and made into the workers' shards (the run's ``build_s``), the clustering
(``compute_s``: initial points, iterations, the cells' sums its check reads), the verification
(``verify_s``), and ``labels_`` with the rest.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

SEED = 14
CENTROIDS_ATOL = 5e-3  # in blob standard deviations (as benchmarks/kmeans.py, measured there)
INERTIA_RTOL = 1e-4
# A float32 squared distance |x|^2 - 2 x.c + |c|^2 is off by up to about this share of
# |x|^2 + |c|^2 (a few roundings of 6e-8 each, summed over the features).
FLOAT32_SHARE = 1e-5
SMALL = {"samples": 20_000, "features": 8, "k": 4, "iterations": 10, "rounds": 1}


def points(samples: int, features: int, k: int) -> np.ndarray:
    """``samples`` float32 points of ``k`` blobs, drawn as kmeans-pipeline draws its own."""
    from pipelines.kmeans.tasks import blob_centres, make_shard

    centres = blob_centres(SEED, k, features)
    return make_shard(SEED, 0, samples, features, "float32", "numpy", centres)


def ours(args, x: np.ndarray, session) -> dict:
    """One ``daskgpu.ml.KMeans.fit``: its seconds and what it found."""
    from daskgpu.ml import KMeans

    began = time.perf_counter()
    model = KMeans(args.k, init="random", n_init=1, max_iter=args.iterations, tol=0,
                   random_state=SEED).fit(x, session=session)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "iterations": model.n_iter_, "centroids": model.cluster_centers_,
            "inertia": model.inertia_, "labels": model.labels_, "verified": model.verified_,
            "verify_s": float(model.result_.timings["verify_s"]),
            "build_s": float(model.result_.timings["build_s"]),
            "compute_s": float(model.result_.timings["compute_s"]),
            "iteration_s": float(model.result_.data["iteration_s"])}


def theirs(args, x: np.ndarray) -> dict:
    """One scikit-learn ``KMeans.fit`` from the same initial points: seconds and answer."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    from pipelines.kmeans.init import random_rows

    start = x[random_rows(SEED, len(x), args.k)]
    with threadpool_limits(limits=args.workers):
        began = time.perf_counter()
        model = KMeans(args.k, init=start, n_init=1, max_iter=args.iterations, tol=0,
                       algorithm="lloyd").fit(x)
        seconds = time.perf_counter() - began
    centroids = np.asarray(model.cluster_centers_, dtype=np.float64)
    return {"seconds": seconds, "iterations": int(model.n_iter_), "centroids": centroids,
            "inertia": inertia64(x, centroids), "reported_inertia": float(model.inertia_),
            "labels": model.labels_}


def inertia64(x: np.ndarray, centroids: np.ndarray, rows: int = 65_536) -> float:
    """The inertia of ``x`` at ``centroids``, in float64.

    scikit-learn sums float32 points' distances in float32: 4.7e-4 off, relative, at
    2,000,000 x 32.
    """
    total, norms = 0.0, (centroids ** 2).sum(axis=1)
    for first in range(0, len(x), rows):
        p = x[first:first + rows].astype(np.float64)
        total += float(np.maximum((p ** 2).sum(axis=1)[:, None] - 2 * p @ centroids.T + norms,
                                  0).min(axis=1).sum())
    return total


def agree(x: np.ndarray, mine: dict, peer: dict) -> str:
    """What was compared, in words; ``SystemExit`` (no ratio) where the answers differ."""
    if mine["iterations"] != peer["iterations"]:
        raise SystemExit(f"iterations differ: daskgpu {mine['iterations']}, scikit-learn "
                         f"{peer['iterations']}: no ratio")
    off = float(np.abs(mine["centroids"] - peer["centroids"]).max())
    if off > CENTROIDS_ATOL:
        raise SystemExit(f"final centroids differ by {off:.3g} (> {CENTROIDS_ATOL}): no ratio")
    apart = abs(mine["inertia"] - peer["inertia"]) / max(abs(peer["inertia"]), 1e-300)
    if apart > INERTIA_RTOL:
        raise SystemExit(f"inertias differ by {apart:.3g} relative (> {INERTIA_RTOL}; "
                         "scikit-learn's recomputed in float64): no ratio")
    labelled = ties_only(x, mine, peer, off)
    if not mine["verified"]:
        raise SystemExit("daskgpu's fit did not verify: no ratio")
    return (f"answers agree: {mine['iterations']} iterations each, final centroids within "
            f"{off:.2g}, inertias within {apart:.2g} relative, {labelled} labels apart (each "
            "point within a tie); daskgpu's fit verified")


def ties_only(x: np.ndarray, mine: dict, peer: dict, off: float) -> int:
    """How many points the two label apart; ``SystemExit`` unless each is within a tie.

    Where scikit-learn picked centroid ``b`` and daskgpu ``a``, the two squared distances at
    daskgpu's centroids may differ by what centroids ``off`` apart in each feature move them
    (``2 delta (d_a + d_b) + 2 delta^2``, ``delta = off sqrt(features)``), and by float32
    rounding.
    """
    ours, theirs = np.asarray(mine["labels"]), np.asarray(peer["labels"])
    apart = np.flatnonzero(ours != theirs)
    if not len(apart):
        return 0
    p, c = x[apart].astype(np.float64), mine["centroids"]
    near_a = np.sqrt(((p - c[ours[apart]]) ** 2).sum(axis=1))
    near_b = np.sqrt(((p - c[theirs[apart]]) ** 2).sum(axis=1))
    delta = off * np.sqrt(x.shape[1])
    allowed = (2 * delta * (near_a + near_b) + 2 * delta ** 2
               + FLOAT32_SHARE * ((p ** 2).sum(axis=1) + (c ** 2).sum(axis=1).max()))
    wrong = np.flatnonzero(np.abs(near_a ** 2 - near_b ** 2) > allowed)
    if len(wrong):
        i = int(apart[wrong[0]])
        raise SystemExit(f"point {i} labelled {ours[i]} by daskgpu, {theirs[i]} by "
                         "scikit-learn, and not within a tie: no ratio")
    return len(apart)


def compare(args, session=None) -> dict:
    """The rounds, the comparison, the figures (printed, and returned for tests)."""
    from benchmarks.harness import machine, on_a_started_cluster

    x = points(args.samples, args.features, args.k)
    print(f"{args.samples} x {args.features} float32 in memory (NumPy), k = {args.k}, "
          f"init: the same {args.k} seeded points, n_init=1, max_iter={args.iterations}, "
          f"tol=0; {machine()}")
    if session is None:
        return on_a_started_cluster(args.workers, lambda started: _rounds(args, x, started))
    return _rounds(args, x, session)


def _rounds(args, x: np.ndarray, session) -> dict:
    mine_s, theirs_s, shares, per_iteration = [], [], [], []
    for round_ in range(args.rounds + 1):
        mine, peer = ours(args, x, session), theirs(args, x)
        compared = agree(x, mine, peer)
        shown = "warm-up" if round_ == 0 else f"round {round_}"
        rest = mine["seconds"] - mine["build_s"] - mine["compute_s"] - mine["verify_s"]
        print(f"{shown}: daskgpu.ml.KMeans.fit {mine['seconds']:.3f} s (X to the workers' "
              f"shards {mine['build_s']:.3f}, clustering {mine['compute_s']:.3f}, verification "
              f"{mine['verify_s']:.3f}, labels_ and the rest {rest:.3f}), scikit-learn "
              f"KMeans.fit {peer['seconds']:.3f} s; {compared}", flush=True)
        if round_:
            mine_s.append(mine["seconds"])
            theirs_s.append(peer["seconds"])
            shares.append(mine["verify_s"] / mine["seconds"])
            per_iteration.append(mine["iteration_s"])
    figures = {"daskgpu_s": statistics.median(mine_s), "sklearn_s": statistics.median(theirs_s),
               "verify_share": statistics.median(shares),
               "iteration_s": statistics.median(per_iteration), "compared": compared,
               "answers": (mine, peer)}
    figures["ratio"] = figures["sklearn_s"] / figures["daskgpu_s"]
    print(f"median fit: daskgpu {figures['daskgpu_s']:.3f} s, scikit-learn "
          f"{figures['sklearn_s']:.3f} s: scikit-learn / daskgpu = {figures['ratio']:.2f}x "
          f"(same cores, same init)")
    print(f"verification: {figures['verify_share']:.1%} of daskgpu's fit; daskgpu's Lloyd "
          f"iteration {figures['iteration_s']:.4f} s (median)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true",
                        help="the small twin the tests run: " + ", ".join(
                            f"--{name} {value}" for name, value in SMALL.items()))
    args = parser.parse_args()
    if args.small:
        vars(args).update(SMALL)
    compare(args)


if __name__ == "__main__":
    main()
