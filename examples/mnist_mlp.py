"""The seed's network, fitted by daskgpu and by scikit-learn on the same MNIST-shaped data.

``Dense(128, relu) -> Dense(10, softmax)`` on 784 features, trained by Adam for 5 epochs of
mini-batches of 128 rows: ``daskgpu.ml.MLPClassifier`` (train-pipeline on a cluster, every
fit verified) beside ``sklearn.neural_network.MLPClassifier`` with the same solver, batch size
and epochs, on the same training rows, scored on the same test rows. Both fits are timed in
this one run.

There is no network access here, so the data are MNIST's shape, not MNIST: 60,000 training
and 10,000 test rows of 784 float32 features in [0, 1] (each row an "image" of dark pixels
and a few bright ones) labelled 0..9 by a seeded teacher: the class of the largest of ten
random linear scores of the pixels, centred so that the classes come out about equally often.
The labels are a function of the pixels, so the network can learn them (scikit-learn's reaches
about 0.89 on the test rows in these 5 epochs).

    python examples/mnist_mlp.py                  # the seed's shape
    python examples/mnist_mlp.py --samples 3000   # a small twin, seconds
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

FEATURES, CLASSES = 784, 10


def mnist_shaped(samples: int, tests: int, seed: int = 0):
    """``(x_train, y_train, x_test, y_test)``: float32 pixels in [0, 1], int64 labels 0..9.

    Pixels are ``u ** 4`` of uniform ``u`` (most near 0, a few bright, as ink on paper); the
    teacher's label ``argmax(x W - centre)``, ``W`` standard normal, ``centre`` the mean
    score of each class over the rows.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    x = rng.random((samples + tests, FEATURES), dtype=np.float32) ** 4
    scores = x @ rng.standard_normal((FEATURES, CLASSES))
    y = np.argmax(scores - scores.mean(axis=0), axis=1).astype(np.int64)
    return x[:samples], y[:samples], x[samples:], y[samples:]


def main(argv=None) -> None:
    """Fit both, print their accuracies and fit times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60_000, help="training rows [60000]")
    parser.add_argument("--tests", type=int, default=None,
                        help="test rows [a sixth of --samples: 10000]")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of both fits [5]")
    parser.add_argument("--batch-size", type=int, default=128, help="rows a step [128]")
    parser.add_argument("--workers", type=int, default=None, help="CPU workers [one a core]")
    parser.add_argument("--seed", type=int, default=0, help="data and fits' seed [0]")
    args = parser.parse_args(argv)

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier as SklearnMLP

    import daskgpu
    from daskgpu.ml import MLPClassifier

    tests = args.tests if args.tests is not None else max(1, args.samples // 6)
    x, y, x_test, y_test = mnist_shaped(args.samples, tests, args.seed)
    print(f"data: {len(x)} training rows, {len(x_test)} test rows, {FEATURES} float32 "
          f"features in [0, 1], {CLASSES} classes (teacher seed {args.seed}; most common "
          f"class {np.bincount(y_test).max() / len(y_test):.3f} of the test rows)")
    model = {"hidden_layer_sizes": (128,), "solver": "adam", "batch_size": args.batch_size,
             "max_iter": args.epochs, "random_state": args.seed}
    print(f"model: Dense(128, relu) -> Dense(10, softmax), Adam, {args.epochs} epochs of "
          f"batches of {args.batch_size}")

    with daskgpu.cluster(workers=args.workers, dashboard=False) as session:
        began = time.perf_counter()
        ours = MLPClassifier(**model).fit(x, y, session=session)
        ours_s = time.perf_counter() - began
        timings = ours.result_.timings
        print(f"daskgpu MLPClassifier: accuracy {ours.score(x_test, y_test):.4f}, fit "
              f"{ours_s:.2f} s (train {timings['compute_s']:.2f} s, verify "
              f"{timings['verify_s']:.2f} s), verified: {ours.verified_} "
              f"({ours.result_.verify}) on {len(ours.result_.workers)} "
              f"{ours.result_.backend.upper()} workers")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter epochs, as asked
        began = time.perf_counter()
        theirs = SklearnMLP(**model).fit(x, y)
        theirs_s = time.perf_counter() - began
    print(f"scikit-learn MLPClassifier: accuracy {theirs.score(x_test, y_test):.4f}, fit "
          f"{theirs_s:.2f} s")
    print(f"fit time, scikit-learn / daskgpu: {theirs_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
