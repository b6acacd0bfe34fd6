"""``daskgpu.ml.MLPClassifier.fit`` against scikit-learn's ``MLPClassifier.fit``, same cores.

    python -m benchmarks.ml_mlp [--samples 60000] [--epochs 5] [--batch-size 128]
        [--rounds 2] [--workers 2] [--small]

The seed's network, ``Dense(128, relu) -> Dense(10, softmax)`` on 784 features, trained by
Adam (learning rate 0.001) for ``--epochs`` epochs of mini-batches of ``--batch-size`` rows,
on the MNIST-shaped data of ``examples/mnist_mlp.py`` (``--samples`` training rows and a sixth
as many test rows of float32 pixels in [0, 1], labelled by a seeded linear teacher), drawn once
in this process, untimed, as NumPy arrays: what a user holds. Then, in alternating rounds
after one warm-up round each:

- ``daskgpu.ml.MLPClassifier((128,), batch_size=..., max_iter=--epochs, random_state=SEED)
  .fit(X, y, session=session)`` on ``daskgpu.cluster(cpu=True)`` of ``--workers``
  single-threaded workers, started once before the rounds (a user who passes a session pays
  it once). A fit's time is all of ``fit``: sending ``X`` and ``y`` to the workers, the
  training, its verification (``verify="fast"``, the default), the weights read back;
- scikit-learn's ``MLPClassifier((128,), solver="adam", batch_size=..., max_iter=--epochs,
  random_state=SEED).fit(X, y)`` in this process, its BLAS threads limited to ``--workers``
  (the same cores; the cluster's workers idle meanwhile).

The two cannot train the same weights (their initial weights and batch orders are each their
own, scikit-learn adds an L2 penalty of 1e-4): before any ratio their answers are compared by
what they are for, the accuracy on the held-out test rows, which must be within
``ACCURACY_POINTS`` of each other (``--points``; the small twin's 2 epochs on 3000 rows,
0.05), and daskgpu's fit must have verified. Printed: the median
fit seconds, their ratio (scikit-learn's over ours: above 1, ours is faster), both accuracies,
the verification's share of our fit (``result_.timings["verify_s"]`` over the fit's seconds),
and where our fit's time went: ``X`` sent and made into the workers' shards (``build_s``), the
training (``compute_s``: the steps, each step's weights and Adam's gradient coming back for
the check; the median step and its computing), the verification, and the rest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

SEED = 0
ACCURACY_POINTS = 0.01  # the target: accuracy within 1 point of scikit-learn's
SMALL = {"samples": 3000, "epochs": 2, "rounds": 1, "points": 0.05}


def data(samples: int):
    """The example's MNIST-shaped rows: ``(x, y, x_test, y_test)``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from mnist_mlp import mnist_shaped

    return mnist_shaped(samples, max(1, samples // 6), SEED)


def _model(args) -> dict:
    return {"hidden_layer_sizes": (128,), "solver": "adam", "batch_size": args.batch_size,
            "max_iter": args.epochs, "random_state": SEED}


def ours(args, rows, session) -> dict:
    """One ``daskgpu.ml.MLPClassifier.fit``: its seconds, accuracy and where the time went."""
    from daskgpu.ml import MLPClassifier

    x, y, x_test, y_test = rows
    began = time.perf_counter()
    model = MLPClassifier(**_model(args)).fit(x, y, session=session)
    seconds = time.perf_counter() - began
    timings, about = model.result_.timings, model.result_.data
    return {"seconds": seconds, "accuracy": model.score(x_test, y_test),
            "verified": model.verified_, "steps": model.t_,
            **{key: float(timings[key]) for key in ("build_s", "compute_s", "verify_s")},
            "step_s": float(about["step_s"]), "step_compute_s": float(about["step_compute_s"])}


def theirs(args, rows) -> dict:
    """One scikit-learn ``MLPClassifier.fit``: its seconds and accuracy."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    x, y, x_test, y_test = rows
    with threadpool_limits(limits=args.workers), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter epochs, as asked
        began = time.perf_counter()
        model = MLPClassifier(**_model(args)).fit(x, y)
        seconds = time.perf_counter() - began
    return {"seconds": seconds, "accuracy": model.score(x_test, y_test)}


def agree(mine: dict, peer: dict, points: float = ACCURACY_POINTS) -> str:
    """What was compared, in words; ``SystemExit`` (no ratio) where the answers differ."""
    if not mine["verified"]:
        raise SystemExit("daskgpu's fit did not verify: no ratio")
    apart = abs(mine["accuracy"] - peer["accuracy"])
    if apart > points:
        raise SystemExit(f"test accuracies differ by {apart:.4f} (daskgpu {mine['accuracy']:.4f}"
                         f", scikit-learn {peer['accuracy']:.4f}; > {points}): no ratio")
    return (f"test accuracy daskgpu {mine['accuracy']:.4f}, scikit-learn "
            f"{peer['accuracy']:.4f} (within {apart:.4f}); daskgpu's fit verified")


def compare(args, session=None) -> dict:
    """The rounds, the comparison, the figures (printed, and returned for tests)."""
    from benchmarks.harness import machine, on_a_started_cluster

    rows = data(args.samples)
    per_epoch = -(-args.samples // args.batch_size)
    print(f"{args.samples} x 784 float32 in memory (NumPy), {len(rows[2])} test rows; "
          f"Dense(128, relu) -> Dense(10, softmax), Adam, {args.epochs} epochs of "
          f"{per_epoch} batches of {args.batch_size}; {machine()}")
    if session is None:
        return on_a_started_cluster(args.workers, lambda started: _rounds(args, rows, started))
    return _rounds(args, rows, session)


def _rounds(args, rows, session) -> dict:
    mine_s, theirs_s, shares, kept = [], [], [], []
    for round_ in range(args.rounds + 1):
        mine, peer = ours(args, rows, session), theirs(args, rows)
        compared = agree(mine, peer, args.points)
        shown = "warm-up" if round_ == 0 else f"round {round_}"
        rest = mine["seconds"] - mine["build_s"] - mine["compute_s"] - mine["verify_s"]
        print(f"{shown}: daskgpu.ml.MLPClassifier.fit {mine['seconds']:.3f} s (X to the "
              f"workers' shards {mine['build_s']:.3f}, training {mine['compute_s']:.3f}: "
              f"{mine['steps']} steps, median {mine['step_s'] * 1e3:.2f} ms of which "
              f"{mine['step_compute_s'] * 1e3:.2f} ms computing; verification "
              f"{mine['verify_s']:.3f}, the rest {rest:.3f}), scikit-learn "
              f"MLPClassifier.fit {peer['seconds']:.3f} s; {compared}", flush=True)
        if round_:
            mine_s.append(mine["seconds"])
            theirs_s.append(peer["seconds"])
            shares.append(mine["verify_s"] / mine["seconds"])
            kept.append((mine, peer))
    figures = {"daskgpu_s": statistics.median(mine_s), "sklearn_s": statistics.median(theirs_s),
               "verify_share": statistics.median(shares), "compared": compared,
               "answers": kept[-1]}
    figures["ratio"] = figures["sklearn_s"] / figures["daskgpu_s"]
    print(f"median fit: daskgpu {figures['daskgpu_s']:.3f} s, scikit-learn "
          f"{figures['sklearn_s']:.3f} s: scikit-learn / daskgpu = {figures['ratio']:.2f}x "
          f"(same cores, same network, solver, batches and epochs)")
    print(f"verification: {figures['verify_share']:.1%} of daskgpu's fit")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--points", type=float, default=ACCURACY_POINTS,
                        help="test accuracies this far apart at most [0.01]")
    parser.add_argument("--small", action="store_true",
                        help="the small twin: " + ", ".join(
                            f"--{name} {value}" for name, value in SMALL.items()))
    args = parser.parse_args()
    if args.small:
        vars(args).update(SMALL)
    compare(args)


if __name__ == "__main__":
    main()
