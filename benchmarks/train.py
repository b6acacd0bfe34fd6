"""train-pipeline against a single-process NumPy step loop, one BLAS thread and all cores.

    python -m benchmarks.train [--samples 1000000] [--steps 5] [--rounds 3]
        [--workers 2] [--hidden N] [--verify]

The same full-batch training (softmax regression, 784 -> 10, float32, ``--steps`` steps and
a final pass over the training and test rows) by three contenders, in alternating rounds:

- train-pipeline's training loop (:func:`pipelines.train.tasks.train`, what a run's
  ``compute_s`` times) on ``daskgpu.cluster(cpu=True)`` of ``--workers`` single-threaded workers, on
  its shards drawn once on the workers (one per worker, as ``--chunks auto`` makes them);
- the NumPy loop a user would write on one process holding all rows in one array (the same
  rows: the pipeline's shards, drawn in the process and stacked), with
  ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` 1, and with all cores.
  Each runs in its own process, kept alive between rounds (data drawn once, untimed).

With ``--hidden N`` the model is ``Dense(N, relu) -> Dense(10, softmax)`` from the run's
seeded Glorot-uniform weights, and the peer is the NumPy loop doing the same two-layer
forward and backward pass over all rows, with all cores only (the target's peer).

Every contender's first round is a warm-up. The final weights of all three must agree (to
float32 rounding of the gradient sums' different orders) before the ratios of the medians
are printed, with samples/s per step and the pipeline's split of a step into compute and
communication. ``--verify`` also runs the whole pipeline once (``daskgpu.run``) and checks
its verification.
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TARGET_ONE_THREAD = 1.6
TARGET_ALL_CORES = 0.9
TARGET_HIDDEN_ALL_CORES = 1.0
SEED = 20
RATE = 0.5
FEATURES, CLASSES = 784, 10
# Final weights of two contenders may differ by this much relative to the largest weight:
# float32 gradient sums over 1e6 rows in other orders (one product over all rows against two
# shards' added in float64) differ by about sqrt(n) * 6e-8 of the sum of the terms' sizes,
# which near the optimum is far more than the sum itself (measured: 6e-4 at 1e6 rows, 5
# steps); a wrong learning rate or a lost shard moves them by tens of percent.
WEIGHTS_RTOL = 3e-3
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def layout(samples: int, workers: int) -> dict:
    """The shards of a run with ``--chunks auto`` on ``workers`` single-threaded workers."""
    from daskgpu.toolkit import backends, data_parallel
    from daskgpu.toolkit.numeric import shard_sizes
    from pipelines.train.shared import held_out_rows, held_out_shards

    backend = backends.get("cpu", workers=workers, threads=workers)
    train = shard_sizes(samples, data_parallel.rows_per_shard("auto", samples, backend))
    return {"train": train, "test": held_out_shards(held_out_rows(samples), len(train))}


def shard_arguments(sizes: dict) -> list[tuple]:
    from pipelines.train.shared import TEST, TRAIN
    from pipelines.train.tasks import teacher_weights

    teacher = teacher_weights(SEED, FEATURES, CLASSES)
    common = (FEATURES, CLASSES, "float32", "numpy", teacher)
    return ([(SEED, TRAIN, i, rows, *common) for i, rows in enumerate(sizes["train"])]
            + [(SEED, TEST, i, rows, *common) for i, rows in enumerate(sizes["test"])])


# --------------------------------------------------------------------------- the NumPy peer


def initial(hidden: int | None) -> np.ndarray | None:
    """The run's initial weights: ``None`` (zero) for softmax regression, else its seeded ones."""
    if hidden is None:
        return None
    from pipelines.train.hidden import initial_weights

    return initial_weights(SEED, FEATURES, hidden, CLASSES, "float32")


def numpy_two_layer_loop(x, y, tx, ty, steps: int, hidden: int
                         ) -> tuple[np.ndarray, float, int]:
    """Full-batch descent of ``Dense(hidden, relu) -> Dense(10, softmax)`` on all rows at once.

    From the run's initial weights; returns the final flat weights (the run's layout), the
    final loss and the right answers on the test rows.
    """
    n = x.shape[0]
    flat = initial(hidden)
    first = (FEATURES + 1) * hidden
    w1 = flat[:first].reshape(FEATURES + 1, hidden).copy()
    w2 = flat[first:].reshape(hidden + 1, CLASSES).copy()
    rows = np.arange(n)
    for step in range(steps + 1):
        h = x @ w1[:-1] + w1[-1]
        a = np.maximum(h, 0)
        z = a @ w2[:-1] + w2[-1]
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        s = p.sum(axis=1)
        loss = float((np.log(s) - z[rows, y]).sum(dtype=np.float64)) / n
        if step == steps:
            break
        p /= s[:, None]
        p[rows, y] -= 1
        back = (p @ w2[:-1].T) * (h > 0)
        g2 = np.vstack([a.T @ p, p.sum(axis=0)[None]])
        g1 = np.vstack([x.T @ back, back.sum(axis=0)[None]])
        w1 = (w1 - RATE * g1.astype(np.float64) / n).astype(np.float32)
        w2 = (w2 - RATE * g2.astype(np.float64) / n).astype(np.float32)
    test = np.maximum(tx @ w1[:-1] + w1[-1], 0) @ w2[:-1] + w2[-1]
    return (np.concatenate([w1.ravel(), w2.ravel()]), loss,
            int((test.argmax(axis=1) == ty).sum()))


def numpy_loop(x, y, tx, ty, steps: int) -> tuple[np.ndarray, float, int]:
    """Full-batch descent from zero weights on all rows at once, then the final passes.

    Returns the final weights, the final loss and the right answers on the test rows.
    """
    n = x.shape[0]
    w = np.zeros((FEATURES + 1, CLASSES), np.float32)
    for step in range(steps + 1):
        z = x @ w[:-1] + w[-1]
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        s = p.sum(axis=1)
        loss = float((np.log(s) - z[np.arange(n), y]).sum(dtype=np.float64)) / n
        if step == steps:
            break
        p /= s[:, None]
        p[np.arange(n), y] -= 1
        gradient = np.vstack([x.T @ p, p.sum(axis=0)[None]])
        w = (w - RATE * gradient.astype(np.float64) / n).astype(np.float32)
    test = tx @ w[:-1] + w[-1]
    return w, loss, int((test.argmax(axis=1) == ty).sum())


def peer_process(samples: int, workers: int, steps: int, out: str,
                 hidden: int | None = None) -> None:
    """Run as ``--peer``: draw the rows, then one training per line read, its seconds out."""
    from pipelines.train.tasks import make_shard

    sizes = layout(samples, workers)
    arguments = shard_arguments(sizes)
    x = np.empty((samples, FEATURES), np.float32)
    y = np.empty(samples, np.int32)
    row = 0
    for args in arguments[:len(sizes["train"])]:
        shard = make_shard(*args)
        x[row:row + len(shard["y"])], y[row:row + len(shard["y"])] = shard["x"], shard["y"]
        row += len(shard["y"])
    tests = [make_shard(*args) for args in arguments[len(sizes["train"]):]]
    tx = np.concatenate([s["x"] for s in tests])
    ty = np.concatenate([s["y"] for s in tests])
    print("ready", flush=True)
    for _line in sys.stdin:
        began = time.perf_counter()
        w, _loss, _hits = (numpy_loop(x, y, tx, ty, steps) if hidden is None
                           else numpy_two_layer_loop(x, y, tx, ty, steps, hidden))
        seconds = time.perf_counter() - began
        np.save(out, w)
        print(json.dumps({"seconds": seconds}), flush=True)


class Peer:
    """A NumPy peer process with ``threads`` BLAS threads."""

    def __init__(self, threads: int, args, folder: str):
        env = {**os.environ, **{v: str(threads) for v in THREAD_VARIABLES}}
        self.weights_path = os.path.join(folder, f"peer{threads}.npy")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.train", "--peer", "--samples", str(args.samples),
             "--steps", str(args.steps), "--workers", str(args.workers), "--out",
             self.weights_path, *([] if args.hidden is None else ["--hidden", str(args.hidden)])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            cwd=ROOT)

    def ready(self) -> None:
        """Wait until the peer has drawn its rows."""
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"the NumPy peer did not start: {line!r}")

    def run(self) -> float:
        """One training in the peer: its seconds."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["seconds"]

    def weights(self) -> np.ndarray:
        """The final weights of the peer's last training."""
        return np.load(self.weights_path)

    def close(self) -> None:
        """End the peer process."""
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# --------------------------------------------------------------------------- the rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        peer_process(args.samples, args.workers, args.steps, args.out, args.hidden)
        return
    compare(args)


def compare(args) -> None:
    from distributed import wait

    import daskgpu
    from benchmarks.harness import machine
    from daskgpu.toolkit import data_parallel
    from pipelines.train.tasks import make_shard, train

    sizes = layout(args.samples, args.workers)
    model = ("softmax regression" if args.hidden is None
             else f"Dense({args.hidden}, relu) -> Dense({CLASSES}, softmax)")
    print(f"{args.samples} x {FEATURES} float32, {model}, {args.steps} steps + final "
          f"passes; {len(sizes['train'])} shards on {args.workers} worker(s) x 1 thread; "
          f"{machine()}")
    names = (["numpy, all cores"] if args.hidden is not None
             else ["numpy, 1 thread", "numpy, all cores"])
    times = {"pipeline": [], **{name: [] for name in names}}
    with tempfile.TemporaryDirectory() as folder, \
            daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                            dashboard=False) as session:
        client = session.client
        threads = {"numpy, 1 thread": 1, "numpy, all cores": os.cpu_count() or 1}
        peers = {name: Peer(threads[name], args, folder) for name in names}
        if args.verify:
            hidden = {} if args.hidden is None else {"hidden": args.hidden}
            result = daskgpu.run("train-pipeline", client=client, samples=args.samples,
                                 steps=args.steps, seed=SEED, **hidden)
            print(f"daskgpu.run: compute {result.timings['compute_s']:.3f} s, verified "
                  f"{result.verified}: {result.verification}")
            if not result.verified:
                raise SystemExit("train-pipeline failed its verification")
        shards = data_parallel.place(client, make_shard, shard_arguments(sizes))
        wait(shards)
        for peer in peers.values():
            peer.ready()
        split = []
        for round_ in range(args.rounds + 1):  # round 0: warm-up of all
            began = time.perf_counter()
            raw = train(client, shards, len(sizes["train"]), args.samples, FEATURES, CLASSES,
                        args.steps, RATE, "float32", "numpy", SEED, None, initial(args.hidden))
            took = time.perf_counter() - began
            seconds = {name: peer.run() for name, peer in peers.items()}
            if round_:
                times["pipeline"].append(took)
                split.append((np.median(raw["step_s"]), np.median(raw["step_compute_s"])))
                for name, s in seconds.items():
                    times[name].append(s)
        weights = {"pipeline": raw["weights"][-1],
                   **{name: peer.weights() for name, peer in peers.items()}}
        for peer in peers.values():
            peer.close()
    scale = float(np.abs(weights["pipeline"]).max())
    for name, w in weights.items():
        worst = float(np.abs(w - weights["pipeline"]).max())
        if not worst <= WEIGHTS_RTOL * scale:
            raise SystemExit(f"{name}: final weights differ from the pipeline's by {worst:.3g} "
                             f"(max |w| {scale:.3g})")
    print(f"final weights agree (within {WEIGHTS_RTOL:g} of max |w| = {scale:.4g})")
    median = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        per_step = args.samples * args.steps / median[name]
        print(f"  {name:18} median {median[name]:.3f} s  ({', '.join(f'{s:.3f}' for s in t)})"
              f"  {per_step:.3g} samples/s")
    wall, computing = (statistics.median(v) for v in zip(*split, strict=True))
    print(f"  pipeline step: {wall:.3f} s, {computing:.3f} s computing, "
          f"{wall - computing:.3f} s communicating ({(wall - computing) / wall:.0%})")
    targets = ({"numpy, all cores": TARGET_HIDDEN_ALL_CORES} if args.hidden is not None else
               {"numpy, 1 thread": TARGET_ONE_THREAD, "numpy, all cores": TARGET_ALL_CORES})
    for name, target in targets.items():
        print(f"train-pipeline vs {name}: {median[name] / median['pipeline']:.2f}x "
              f"(target >= {target}x)")


if __name__ == "__main__":
    main()
