"""train-pipeline: softmax regression trained data-parallel, full-batch gradient descent.

A linear layer ``features -> classes`` with softmax and cross-entropy (784 -> 10, MNIST's
shape, by default), trained the way multi-GPU frameworks do it, with Dask: the data are
generated on the workers from the run's seed, as shards that stay where they were made; each
step broadcasts the weights (tiny) to the workers, computes every shard's gradient where it
lives (one matrix product each way: CuPy on GPU workers, NumPy on CPU ones), sums the
gradients with a tree reduction and applies the step once, in the driver
(:mod:`daskgpu.data_parallel`).

The data come from a teacher: softmax regression with random weights, whose labels are drawn
from its own class probabilities (the Gumbel-max trick), so the best accuracy any model can
reach is known. Shards are made in the build (``build_s``); the training steps are the
compute (``compute_s``). :mod:`pipelines.train_check` verifies every step's loss and
accuracy and a seeded sample of the steps themselves, on data it draws again its own way.
"""

from __future__ import annotations

import dask
import numpy as np

from daskgpu import data_parallel
from daskgpu.errors import DaskGPUError, ParameterError
from daskgpu.params import Param, choice, chunks, finite_float, non_negative_int, positive_int
from daskgpu.registry import Resolved, Workload, pipeline
from daskgpu.timing import timed
from pipelines.train_check import MUTATIONS, verify
from pipelines.train_data import TEST, TRAIN, held_out_rows, held_out_shards, shard_sizes
from pipelines.train_steps import make_shard, shard_pass, teacher_weights, train

CPU_DEFAULT_SAMPLES = 1_000_000
GPU_DEFAULT_SAMPLES = 20_000_000
# Each step runs one task per shard: more than this many would make a step all scheduling.
# The weights go to every worker each step, and come back summed: keep them small.
MAX_WEIGHTS = 2**24


# --------------------------------------------------------------------------- parameters


def class_count(value) -> int:
    """Two or more classes."""
    number = positive_int(value)
    if number < 2:
        raise ValueError("must be 2 or more (one class leaves nothing to learn)")
    return number


def learning_rate(value) -> float:
    """A finite step size above 0."""
    number = finite_float(value)
    if number <= 0:
        raise ValueError("must be a positive number")
    return number


PARAMS = (
    Param("samples", positive_int, None, "Training rows [default: 1000000 on CPU, 20000000 "
          "on GPUs].", "N"),
    Param("features", positive_int, 784, "Features per row [default: 784].", "N"),
    Param("classes", class_count, 10, "Classes (softmax outputs) [default: 10].", "N"),
    Param("steps", positive_int, 20, "Full-batch gradient steps [default: 20].", "N"),
    Param("learning_rate", learning_rate, 0.5, "Step size of gradient descent "
          "[default: 0.5].", "FLOAT"),
    Param("chunks", chunks, "auto", "Rows per shard: auto (one shard per CPU thread or per "
          "GPU), or N.", "auto|N"),
    Param("dtype", choice(("float32", "float64")), "float32", "Element type of the features "
          "and the weights.", "float32|float64", ("float32", "float64")),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Size the data for the backend and refuse layouts no cluster can train.

    Raises
    ------
    ParameterError
        Features split across shards, too many shards, a shard or a model too large.
    """
    values = dict(values)
    if values["samples"] is None:
        values["samples"] = GPU_DEFAULT_SAMPLES if backend.is_gpu else CPU_DEFAULT_SAMPLES
    samples, features = values["samples"], values["features"]
    weights = (features + 1) * values["classes"]
    if weights > MAX_WEIGHTS:
        raise ParameterError(
            f"--features {features} x --classes {values['classes']}: {weights:.3g} weights; at "
            f"most {MAX_WEIGHTS:.3g} (the weights go to every worker at each step)")
    data_parallel.checked_rows_per_shard(values["chunks"], samples, features, values["dtype"],
                                         backend, rows="rows", each="step")
    return values, {}


# --------------------------------------------------------------------------- the pipeline

SUMMARY = ("Softmax regression trained data-parallel: per-shard gradients, tree-reduced, "
           "weights broadcast")


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds and answer of the same training in one process, on the same shards.

    The shards are drawn as the run draws them (untimed, as the run draws them in its build),
    then the steps are timed: every shard's gradient in turn with NumPy (CuPy on a GPU worker),
    summed in the run's pairwise order, the step applied.
    """
    sizes = _layout(resolved)
    library, dtype = resolved.backend.array_library, resolved["dtype"]
    shards = [make_shard(*args) for args in _shard_arguments(resolved, sizes)]
    training, testing = shards[:len(sizes["train"])], shards[len(sizes["train"]):]
    samples, steps, rate = resolved["samples"], resolved["steps"], resolved["learning_rate"]

    def passes(w, group, gradient):
        parts = [shard_pass(s, w, gradient, library) for s in group]
        while len(parts) > 1:
            parts = [data_parallel.add_pairs(parts[i], parts[i + 1])
                     for i in range(0, len(parts) - 1, 2)] + parts[len(parts) - len(parts) % 2:]
        return parts[0][0]

    def training_run() -> dict:
        w = np.zeros((resolved["features"] + 1, resolved["classes"]), dtype=dtype)
        losses = []
        for _ in range(steps):
            gradient, loss, _hits = passes(w, training, True)
            w = (w - rate * (gradient / samples)).astype(dtype)
            losses.append(loss / samples)
        _, loss, _hits = passes(w, training, False)
        _, test_loss, _hits = passes(w, testing, False)
        return {"losses": [*losses, loss / samples], "test_loss": test_loss}

    seconds, answer = timed(resolved.backend, training_run)
    return seconds, _value(answer, samples, sum(sizes["test"]))


@pipeline("train-pipeline", SUMMARY, PARAMS, verify, settle=settle, baseline=baseline,
          mutations=MUTATIONS)
def prepare(resolved: Resolved) -> Workload:
    """Draw the shards on the workers (kept there), and build the task that trains on them."""
    client = _client()
    sizes = _layout(resolved)
    futures = data_parallel.place(client, make_shard, _shard_arguments(resolved, sizes))
    _wait_made(client, futures)
    shards = data_parallel.ShardKeys.holding(futures)
    samples, features = resolved["samples"], resolved["features"]
    dtype = np.dtype(resolved["dtype"])
    training = (len(sizes["train"]), samples, features, resolved["classes"], resolved["steps"],
                resolved["learning_rate"], dtype.name, resolved.backend.array_library)
    # One task drives the steps from a worker (the runner computes one collection); see drive.
    collection = dask.delayed(data_parallel.drive_on_cluster, pure=False)(train, shards,
                                                                         *training)
    # Every step reads all training rows once; one more pass after the last step.
    elements = samples * features * (resolved["steps"] + 1)
    return Workload(
        collection=collection,
        drive=drive,
        bytes_are="read",
        elements=elements,
        nbytes=elements * dtype.itemsize,
        description={
            "source": f"teacher softmax regression, seed {resolved['seed']}",
            "shape": [samples, features],
            "classes": resolved["classes"],
            "test rows": sum(sizes["test"]),
            "shards": f"{len(sizes['train'])} of up to {sizes['train'][0]} rows "
                      f"(+ {len(sizes['test'])} test)",
            "dtype": dtype.name,
        },
        context={"shards": shards, "training": training, "seed": resolved["seed"],
                 "samples": samples, "features": features, "classes": resolved["classes"],
                 "steps": resolved["steps"], "learning_rate": resolved["learning_rate"],
                 "dtype": dtype.name, "library": resolved.backend.array_library,
                 "train_sizes": sizes["train"], "test_sizes": sizes["test"]},
        present=present,
    )


def drive(workload: Workload, client) -> dict:
    """The training driven from ``client`` (the run's own) on the workload's shards.

    The same result as computing ``workload.collection``, without a task that drives the
    steps from a worker: for a runner that times an iterative computation driven from the
    client as the compute.
    """
    return train(client, workload.context["shards"].futures, *workload.context["training"])


def _layout(resolved: Resolved) -> dict:
    samples = resolved["samples"]
    per_shard = data_parallel.rows_per_shard(resolved["chunks"], samples, resolved.backend)
    train_sizes = shard_sizes(samples, per_shard)
    return {"train": train_sizes,
            "test": held_out_shards(held_out_rows(samples), len(train_sizes))}


def _shard_arguments(resolved: Resolved, sizes: dict) -> list[tuple]:
    teacher = teacher_weights(resolved["seed"], resolved["features"], resolved["classes"])
    common = (resolved["features"], resolved["classes"], resolved["dtype"],
              resolved.backend.array_library, teacher)
    return ([(resolved["seed"], TRAIN, i, rows, *common)
             for i, rows in enumerate(sizes["train"])]
            + [(resolved["seed"], TEST, i, rows, *common) for i, rows in enumerate(sizes["test"])])


def _client():
    """The run's client: Dask's configured scheduler (the runner sets it), or the default."""
    scheduler = dask.config.get("scheduler", None)
    if hasattr(scheduler, "submit"):
        return scheduler
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        raise DaskGPUError("train-pipeline keeps its data on a cluster's workers: start one "
                           "first (daskgpu.cluster())") from None


def _wait_made(client, futures) -> None:
    """Wait until every shard is drawn; a shard that failed raises its worker's error."""
    from distributed import wait

    wait(futures)
    for future in futures:
        if future.status == "error":
            future.result()


def present(workload: Workload, raw: dict) -> dict:
    """The run's value (its losses); accuracies and step times go to the report's data.

    Accuracies count rows, and a row within rounding of a tie between two classes may go
    either way in another correct computation (the bench's baseline): they are checked by
    ``verify``, which allows for such rows, not compared as the value. The shards are let go:
    trained, and ``verify`` draws its own data.
    """
    ctx = workload.context
    ctx["shards"].release()
    samples, tested = ctx["samples"], sum(ctx["test_sizes"])
    accuracies = np.asarray(raw["right"]) / samples
    test, best = int(raw["test_right"]) / tested, float(raw["test_best"]) / tested
    wall = float(np.median(raw["step_s"]))
    computing = float(np.median(raw["step_compute_s"]))
    communicating = max(0.0, wall - computing)
    workload.description.update({
        "loss per step": sparkline(raw["losses"]),
        "accuracy per step": sparkline(accuracies),
        "step time": f"{wall:.4g} s median of {len(raw['step_s'])}: {computing:.4g} s "
                     f"computing, {communicating:.4g} s communicating",
        "samples/s": round(samples / wall),
        "train_accuracy": float(accuracies[-1]),
        "test_accuracy": test,
        "best_accuracy": best,
        "accuracies": accuracies,  # an array: the table shows it whole, JSON as a list
        "step_s": wall,
        "step_compute_s": computing,
        "step_communication_s": communicating,
    })
    return _value(raw, samples, tested)


def _value(raw: dict, samples: int, tested: int) -> dict:
    losses = [float(v) for v in raw["losses"]]
    return {"loss": losses[-1], "test_loss": float(raw["test_loss"]) / tested,
            "losses": losses}


def sparkline(values) -> str:
    """A one-line picture of ``values``, with the first and last.

    >>> sparkline([2.0, 1.0, 0.5])
    '█▃▁ 2 to 0.5'
    """
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    line = "".join(bars[round((v - low) / span * (len(bars) - 1))] for v in values)
    return f"{line} {values[0]:.4g} to {values[-1]:.4g}"
