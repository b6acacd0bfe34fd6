"""train-pipeline: softmax regression trained data-parallel, full-batch gradient descent.

A linear layer ``features -> classes`` with softmax and cross-entropy (784 -> 10, MNIST's
shape, by default), trained the way multi-GPU frameworks do it, with Dask: the data are
generated on the workers from the run's seed, as shards that stay where they were made; each
step broadcasts the weights (tiny) to the workers, computes every shard's gradient where it
lives (one matrix product each way: CuPy on GPU workers, NumPy on CPU ones), sums the
gradients with a tree reduction and applies the step once, in the driver
(:mod:`daskgpu.toolkit.data_parallel`).

The data come from a teacher: softmax regression with random weights, whose labels are drawn
from its own class probabilities (the Gumbel-max trick), so the best accuracy any model can
reach is known; or from a feature array (``--input``) and its labels (``--labels``), files
or (from Python) arrays in hand, whose held-out rows are a seeded share of its rows (none
with ``--validation-fraction 0``; :mod:`pipelines.train.inputs`). With
``--batch-size`` each step reads a seeded mini-batch of the rows instead of all of them;
with ``--epochs`` too, each epoch's mini-batches partition the rows (a seeded permutation).
``--optimizer adam`` applies Adam's update instead of plain gradient descent
(:class:`pipelines.train.tasks.Descent`).
Shards are made in the build (``build_s``); the training steps are the compute
(``compute_s``). :mod:`pipelines.train.check` verifies the steps, losses and accuracies
(a seeded step and sample of cells at ``fast``, every step at ``full``) its own way.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import tempfile

import dask
import dask.array as da
import numpy as np

from daskgpu.data import array_input
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, data_parallel, sizing
from daskgpu.toolkit.numeric import shard_sizes
from daskgpu.toolkit.params import (
    Param,
    choice,
    chunks,
    finite_float,
    non_negative_int,
    optional_path,
    output_path,
    path_or_array,
    positive_int,
)
from daskgpu.toolkit.registry import Resolved, Workload, fresh_seed, pipeline
from daskgpu.toolkit.timing import timed
from pipelines.train import SUMMARY
from pipelines.train.check import CHECK
from pipelines.train.check_fast import reported_cells
from pipelines.train.hidden import gradient_probes as flat_gradient_probes
from pipelines.train.hidden import initial_weights, layers, split_probes
from pipelines.train.inputs import (
    check_label_range,
    file_block,
    file_ranges,
    held_out,
    held_out_part,
    label_range,
    load_initial,
    make_input_shard,
    make_memory_shard,
    memory_blocks,
    memory_chunks,
    open_inputs,
    reader_of,
)
from pipelines.train.present import present, value_of
from pipelines.train.shared import (
    ADAM_BETA_1,
    ADAM_BETA_2,
    ADAM_EPSILON,
    DEFAULT_RATES,
    TEST,
    TRAIN,
    InputFiles,
    TrainContext,
    batch_rows,
    epoch_steps,
    held_out_rows,
    held_out_shards,
    input_held_out,
    parameter_count,
    unpacked,
)
from pipelines.train.tasks import (
    Descent,
    Step,
    epoch_batches,
    gradient_probes,
    make_shard,
    pass_at,
    shard_pass,
    step_batches,
    teacher_weights,
    train,
)

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


def fraction(value) -> float:
    """A share from 0 (no rows held out) up to, not including, 1."""
    number = finite_float(value)
    if not 0 <= number < 1:
        raise ValueError("must lie from 0 up to, not including, 1 (a share of the rows held "
                         "out; 0: none)")
    return number


OPTIMIZERS = ("sgd", "adam")
PARAMS = (
    Param("samples", positive_int, None, "Training rows [default: 1000000 on CPU, 20000000 "
          "on GPUs].", "N"),
    Param("features", positive_int, None, "Features per row [default: 784].", "N"),
    Param("classes", class_count, 10, "Classes (softmax outputs) [default: 10].", "N"),
    Param("steps", positive_int, None, "Gradient steps, a fixed count (not with --epochs) "
          "[default: 20].", "N"),
    Param("epochs", positive_int, None, "Passes over the training rows (not with --steps): "
          "with --batch-size, ceil(rows / N) steps each, whose seeded mini-batches use every "
          "row once; without, one full-batch step each.", "N"),
    Param("batch_size", positive_int, None, "Rows of each step's seeded mini-batch: a "
          "sample drawn afresh each step, or with --epochs the next of the epoch's batches, "
          "which partition the rows [default: all rows, full-batch steps].", "N"),
    Param("optimizer", choice(OPTIMIZERS), "sgd", "The update: sgd (w -= lr g) or adam "
          "(as scikit-learn's, with its defaults beta_1 0.9, beta_2 0.999, epsilon 1e-8) "
          "[default: sgd].", "sgd|adam", OPTIMIZERS),
    Param("learning_rate", learning_rate, None, "Step size [default: 0.5 with sgd, 0.001 "
          "with adam].", "FLOAT"),
    Param("chunks", chunks, "auto", "Rows per shard: auto (one shard per CPU thread or per "
          "GPU; one in all with a --batch-size of at most 1024 rows, up to 2 GiB), or N.",
          "auto|N"),
    Param("dtype", choice(("float32", "float64")), "float32", "Element type of the features "
          "and the weights.", "float32|float64", ("float32", "float64")),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("input", path_or_array, None, "Train on this samples x features .npy file or Zarr "
          "array (with --labels; from Python also a NumPy, CuPy or Dask array); a seeded "
          "tenth of its rows is held out.", "PATH"),
    Param("labels", path_or_array, None, "Class labels (integers 0..classes-1, one per row "
          "of --input) in a .npy file or Zarr array (from Python also an array).", "PATH"),
    Param("hidden", positive_int, None, "A hidden layer of N ReLU units: Dense(N, relu) -> "
          "Dense(classes, softmax), Glorot-uniform weights seeded [default: none, softmax "
          "regression from zero].", "N"),
    Param("validation_fraction", fraction, None, "Share of the rows held out, seeded; "
          "their loss and accuracy are reported; 0: none held out [default: a tenth, 1000 to "
          "200000 rows].", "F"),
    Param("init_weights", optional_path, None, "Start from these weights: an .npz as "
          "--output writes it (W, b; or W1, b1, W2, b2 with --hidden).", "PATH"),
    Param("output", output_path((".npz",)), None, "Write the final weights to this .npz "
          "(W, b; or W1, b1, W2, b2), once the run has verified.", "PATH"),
)
DEFAULT_FEATURES = 784
DEFAULT_STEPS = 20
# Every step's weights come back for the check (and Adam's gradients): at most this.
MAX_TRAJECTORY_BYTES = 2**31
# --chunks auto with mini-batches of at most ONE_SHARD_BATCH rows: every training row in one
# shard where they fit ONE_SHARD_BYTES. Such a step computes in less time than a reduction of
# its gradient across workers takes, so the steps run where the rows are, many to a task.
ONE_SHARD_BATCH, ONE_SHARD_BYTES = 1024, 2**31


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Size the data for the backend and refuse layouts no cluster can train.

    Raises
    ------
    ParameterError
        Features split across shards, too many shards, a shard or a model too large, a
        mini-batch over the training rows, ``--epochs`` with ``--steps``, more steps than
        their weights fit; inconsistent input options.
    InputFileError
        An input that cannot be trained on (see :func:`pipelines.train.inputs.open_inputs`).
    """
    values = dict(values)
    if values["epochs"] is not None and values["steps"] is not None:
        raise ParameterError(
            f"--epochs {values['epochs']} with --steps {values['steps']}: give one of them "
            "(--epochs N: N passes over the training rows; --steps N: N steps)")
    if values["epochs"] is None and values["steps"] is None:
        values["steps"] = DEFAULT_STEPS
    if values["learning_rate"] is None:
        values["learning_rate"] = DEFAULT_RATES[values["optimizer"]]
    inputs: dict = {}
    if values["input"] is not None or values["labels"] is not None:
        inputs = open_inputs(values, _default("dtype"), PARAMS, backend)
        if values["seed"] is None:  # the held-out rows and batches draw: fresh, reported
            values["seed"] = fresh_seed()
    else:
        if values["features"] is None:
            values["features"] = DEFAULT_FEATURES
        if values["samples"] is None:
            values["samples"] = sizing.default_rows(
                backend, _row_bytes(values["features"], values["dtype"]), CPU_DEFAULT_SAMPLES,
                GPU_DEFAULT_SAMPLES)
    samples, features, rows = shape_of(values, inputs)
    _refuse_beyond_device_memory(backend, values, inputs, rows or samples, features)
    if values["batch_size"] is not None and values["batch_size"] > samples:
        raise ParameterError(f"--batch-size {values['batch_size']}: over the {samples} training "
                             f"rows; give at most {samples} (or leave it out: full batches)")
    weights = parameter_count(features, values["hidden"], values["classes"])
    if weights > MAX_WEIGHTS:
        layer = "" if values["hidden"] is None else f" (--hidden {values['hidden']})"
        raise ParameterError(
            f"--features {features} x --classes {values['classes']}{layer}: {weights:.3g} "
            f"weights; at most {MAX_WEIGHTS:.3g} (the weights go to every worker at each step)")
    _refuse_long_trajectory(values, samples, weights)
    if values["init_weights"] is not None:
        inputs["initial"] = load_initial(values["init_weights"], features, values["hidden"],
                                         values["classes"], values["dtype"])
    data_parallel.checked_rows_per_shard(values["chunks"], samples, features, values["dtype"],
                                         backend, rows="rows", each="step")
    return values, inputs


def step_count(values, samples: int) -> int:
    """Steps of the run: ``--steps``, or ``--epochs`` of :func:`epoch_steps` each."""
    if values["epochs"] is None:
        return values["steps"]
    return values["epochs"] * epoch_steps(samples, values["batch_size"])


def _refuse_long_trajectory(values, samples: int, weights: int) -> None:
    """Every step's weights come back: refuse more steps than fit in MAX_TRAJECTORY_BYTES."""
    steps = step_count(values, samples)
    each = weights * np.dtype(values["dtype"]).itemsize * (1 + (values["optimizer"] == "adam"))
    if (steps + 1) * each > MAX_TRAJECTORY_BYTES:
        given, fewer = ((f"--steps {steps}", "") if values["epochs"] is None else
                        (f"--epochs {values['epochs']} of {steps // values['epochs']} steps",
                         " (fewer --epochs or a larger --batch-size)"))
        raise ParameterError(
            f"{given}: every step's {weights} weights come back for the check, "
            f"{(steps + 1) * each / 2**30:.3g} GiB; at most {MAX_TRAJECTORY_BYTES / 2**30:g} "
            f"GiB: give at most {MAX_TRAJECTORY_BYTES // each - 1} steps{fewer}")


def _row_bytes(features: int, dtype) -> int:
    """Bytes one row keeps on a worker for the whole run: its features and its label."""
    return features * np.dtype(dtype).itemsize + np.dtype(np.int64).itemsize


def _refuse_beyond_device_memory(backend, values, inputs, rows: int, features: int) -> None:
    """The shards stay on the GPUs for every step: refuse more rows than they hold."""
    dtype = np.dtype(inputs["input"].dtype if "input" in inputs else values["dtype"])
    option = f"--input {inputs['input'].path}:" if "input" in inputs else "--samples"
    remedy = "train on a subset of at most {most} rows, or use more GPUs" if inputs else None
    sizing.refuse_held_beyond_memory(backend, option, rows, _row_bytes(features, dtype),
                                     f"{dtype.name} rows and their labels", remedy)


def shape_of(values, inputs) -> tuple[int, int, int | None]:
    """Training rows, features, and the input's rows (``None`` for generated data)."""
    if "input" in inputs:
        rows, features = inputs["input"].shape
        return rows - input_held_out(rows, values["validation_fraction"]), features, rows
    return values["samples"], values["features"], None


def _default(name: str):
    return next(p.default for p in PARAMS if p.name == name)


# --------------------------------------------------------------------------- the pipeline



def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds and answer of the same training in one process, on the same shards.

    The shards are made as the run makes them (untimed, as the run makes them in its build),
    then the steps are timed: every shard's gradient in turn with NumPy (CuPy on a GPU worker),
    on the same mini-batches, summed in the run's pairwise order, the step (SGD's or Adam's)
    applied.
    """
    layout = _layout(resolved)
    library = resolved.backend.array_library
    make, arguments = _train_calls(resolved, layout)
    if _in_memory(resolved):  # the blocks of the objects' graphs, computed here
        arguments = [(*dask.compute(*args[:2]), *args[2:]) for args in arguments]
    training = [make(*args) for args in arguments]
    testing = ([held_out_part(s) for s in training] if layout["rows"] is not None
               else [make_shard(*args) for args in _test_arguments(resolved, layout)])
    testing = testing if sum(layout["test"]) else []
    samples, steps, rate = layout["samples"], layout["steps"], resolved["learning_rate"]
    batch, epochs, sizes = resolved["batch_size"], resolved["epochs"], tuple(layout["train"])

    features, classes = layout["features"], resolved["classes"]
    shipped = ((lambda w: layers(w, features, classes)) if resolved["hidden"] is not None
               else (lambda w: w))

    def passes(w, group, gradient, drawn=None):
        parts = [shard_pass(s, shipped(w), gradient, library, drawn) for s in group]
        while len(parts) > 1:
            parts = [data_parallel.add_pairs(parts[i], parts[i + 1])
                     for i in range(0, len(parts) - 1, 2)] + parts[len(parts) - len(parts) % 2:]
        return parts[0][0]

    def training_run() -> dict:
        w = _initial(resolved, layout["features"])
        losses, descent = [], Descent(resolved["optimizer"], rate)
        for drawn in step_batches(resolved["seed"], steps, batch, samples, sizes, epochs):
            gradient, loss, _hits, _rows, _cells = passes(w, training, True, drawn)
            w = descent.step(w, gradient / samples)
            losses.append(loss / samples)
        _, loss, _hits, _rows, _cells = passes(w, training, False)
        test_loss = passes(w, testing, False)[1] if testing else 0.0
        return {"losses": [*losses, loss / samples], "test_loss": test_loss}

    seconds, answer = timed(resolved.backend, training_run)
    return seconds, value_of(answer, samples, sum(layout["test"]))


# The warm-up's shards: WARM_UP_ROWS rows of WARM_UP_FEATURES features; its hidden layer's width.
WARM_UP_ROWS, WARM_UP_FEATURES, WARM_UP_HIDDEN = 16, 4, 3
FIRST_CELL = np.zeros((1, 2), dtype=np.int64)  # shard 0's first cell: its gradient reported


def warm_up(backend_name: str) -> None:
    """On a worker as it starts: a GPU's libraries and kernels made once, so no run makes them.

    GPU workers run the run's own tasks on tiny shards for each element type: a shard drawn
    (:func:`pipelines.train.tasks.make_shard`), one read from ``.npy`` files
    (:func:`make_input_shard`) and its held-out part, one split from device arrays
    (:func:`make_memory_shard`), and on each the steps' passes
    (:func:`pipelines.train.tasks.pass_at`: with the gradient, its probes and a cell's
    gradient reported whole, on all rows, a mini-batch and an epoch's step, then without) of
    both models, softmax regression and the hidden layer. That loads cuBLAS and compiles CuPy's
    elementwise and reduction kernels for every type a run uses. CPU workers have nothing to
    compile.
    """
    if backend_name != "gpu":
        return
    library = backends.get(backend_name).array_library
    rows, features, hidden, classes = WARM_UP_ROWS, WARM_UP_FEATURES, WARM_UP_HIDDEN, 2
    teacher = teacher_weights(0, features, classes)
    dtypes = next(p.choices for p in PARAMS if p.name == "dtype")
    for dtype in dtypes:
        drawn = make_shard(0, TRAIN, 0, rows, features, classes, dtype, library, teacher)
        with tempfile.TemporaryDirectory(prefix="daskgpu-train-warm-up-") as folder:
            files = []
            for name, values in (("x", np.ones((rows, features), dtype)),
                                 ("y", np.arange(rows) % classes)):
                files.append(os.path.join(folder, f"{name}.npy"))
                np.save(files[-1], values)
            x, y = (reader_of(array_input.open_array(path)) for path in files)
            read = make_input_shard(x, y, 0, rows, np.array([0]), 0, dtype, library)
        xp = importlib.import_module(library)
        held = make_memory_shard(xp.asarray(drawn["x"]), xp.asarray(drawn["y"]),
                                 np.array([0]), 0, dtype, library)
        flat = initial_weights(0, features, hidden, classes, dtype)
        models = ((np.zeros((features + 1, classes), dtype), None,
                   gradient_probes(0, features, classes)),
                  (flat, (features, classes),
                   split_probes(flat_gradient_probes(0, flat.size), features, classes)))
        for shard in (drawn, read, held_out_part(read), held):
            n = int(shard["y"].shape[0])  # an epoch's first step: half the shard's rows
            for weights, layout, probes in models:
                state = Step(weights, Descent("sgd", 1.0), 0.0)
                for batch in (None, (0, 0, rows // 2, rows),
                              epoch_batches(0, 0, n, -(-n // 2), (n,))[0]):
                    pass_at(shard, state, layout, True, library, batch, probes, FIRST_CELL)
                pass_at(shard, state, layout, False, library)


@pipeline("train-pipeline", SUMMARY, PARAMS, CHECK, settle=settle, baseline=baseline,
          warm_up=warm_up)
def prepare(resolved: Resolved) -> Workload:
    """Make the shards on the workers (kept there), and build the task that trains on them."""
    client = data_parallel.run_client("train-pipeline")
    layout = _layout(resolved)
    shards = data_parallel.ShardKeys.holding(_placed(client, resolved, layout))
    samples, features, steps = layout["samples"], layout["features"], layout["steps"]
    batch, epochs, optimizer = resolved["batch_size"], resolved["epochs"], resolved["optimizer"]
    dtype = np.dtype(resolved["dtype"])
    context = TrainContext(
        samples, features, resolved["classes"], steps, resolved["learning_rate"],
        resolved["seed"], batch, resolved["hidden"], dtype.name,
        resolved.backend.array_library, tuple(layout["train"]), tuple(layout["test"]),
        _input_context(resolved, layout), resolved["validation_fraction"],
        resolved["init_weights"], shards, optimizer=optimizer, epochs=epochs)
    # The cells of the fast check's seeded sample report their gradient whole: a fault the
    # run's own probes agree with still shows against the check's recomputation.
    training = (len(layout["train"]), samples, features, resolved["classes"], steps,
                resolved["learning_rate"], dtype.name, resolved.backend.array_library,
                resolved["seed"], batch, _initial(resolved, features), reported_cells(context),
                optimizer, epochs, tuple(layout["train"]))
    # One task drives the steps from a worker (the runner computes one collection); see drive.
    collection = dask.delayed(data_parallel.drive_on_cluster, pure=False)(train, shards,
                                                                         *training)
    # Every step reads its rows once (all, or its mini-batch); one more pass after the last.
    per_step = samples if batch is None else sum(batch_rows(batch, n, samples)
                                                 for n in layout["train"])
    read = samples * epochs if context.in_epochs else per_step * steps
    elements = (read + samples) * features
    source = (f"teacher softmax regression, seed {resolved['seed']}" if layout["rows"] is None
              else f"{resolved['input']} (labels {resolved['labels']}), held-out rows "
                   f"seed {resolved['seed']}")
    read_from = {} if layout["rows"] is None else _formats(resolved, layout)
    return Workload(
        collection=collection,
        drive=drive,
        bytes_are="read",
        elements=elements,
        nbytes=elements * dtype.itemsize,
        description={
            "source": source,
            **read_from,
            "shape": [samples, features],
            "classes": resolved["classes"],
            "test rows": sum(layout["test"]),
            "shards": f"{len(layout['train'])} of up to {layout['train'][0]} rows "
                      f"(+ {len(layout['test'])} test)",
            "steps": steps,
            **({} if epochs is None else {"epochs": epochs}),
            "batches": ("full batch" if batch is None else
                        f"{epoch_steps(samples, batch)} mini-batches an epoch, of {batch} rows "
                        "(the last the rest), a seeded permutation of the rows each epoch"
                        if epochs is not None else f"mini-batches of {per_step} rows, seeded "
                        "samples"),
            "optimizer": optimizer if optimizer == "sgd" else (
                f"adam (beta_1 {ADAM_BETA_1}, beta_2 {ADAM_BETA_2}, epsilon {ADAM_EPSILON}, "
                "bias-corrected)"),
            "learning_rate": resolved["learning_rate"],
            "dtype": dtype.name,
            "model": (f"softmax regression {features} -> {resolved['classes']}"
                      if resolved["hidden"] is None else
                      f"Dense({resolved['hidden']}, relu) -> Dense({resolved['classes']}, "
                      f"softmax) on {features} features"),
            "initial weights": _init_words(resolved),
        },
        context=dataclasses.replace(context, training=training),
        present=present,
        save=_save if resolved["output"] is not None else None,
    )


def _initial(resolved: Resolved, features: int) -> np.ndarray:
    """The weights before the first step: the file's, seeded Glorot's, or zero."""
    if "initial" in resolved.inputs:
        return resolved.inputs["initial"]
    if resolved["hidden"] is not None:
        return initial_weights(resolved["seed"], features, resolved["hidden"],
                               resolved["classes"], resolved["dtype"])
    return np.zeros((features + 1, resolved["classes"]), dtype=resolved["dtype"])


def _init_words(resolved: Resolved) -> str:
    if resolved["init_weights"] is not None:
        return f"from {resolved['init_weights']}"
    if resolved["hidden"] is not None:
        return f"Glorot uniform, biases zero, seed {resolved['seed']}"
    return "zero"


def _save(workload: Workload, value: dict, path: str) -> None:
    """The final weights as an ``.npz`` (``path``: a temporary, renamed once verified)."""
    ctx = workload.context
    final = np.asarray(ctx.kept.final_weights)
    if ctx.hidden is None:
        arrays = {"W": final[:-1], "b": final[-1]}
    else:
        first, second = unpacked(final, ctx.features, ctx.classes)
        arrays = {"W1": first[:-1], "b1": first[-1], "W2": second[:-1], "b2": second[-1]}
    with open(path, "wb") as f:
        np.savez(f, **{name: np.ascontiguousarray(a) for name, a in arrays.items()})


def drive(workload: Workload, client) -> dict:
    """The training driven from ``client`` (the run's own) on the workload's shards.

    The same result as computing ``workload.collection``, without a task that drives the
    steps from a worker: for a runner that times an iterative computation driven from the
    client as the compute.
    """
    return train(client, workload.context.shards.futures, *workload.context.training)


def one_shard(values, samples: int, features: int) -> bool:
    """Whether ``--chunks auto`` keeps every training row in one shard (see ONE_SHARD_BATCH)."""
    return (values["chunks"] == "auto" and values["batch_size"] is not None
            and values["batch_size"] <= ONE_SHARD_BATCH
            and samples * features * np.dtype(values["dtype"]).itemsize <= ONE_SHARD_BYTES)


def _layout(resolved: Resolved) -> dict:
    samples, features, rows = shape_of(resolved.values, resolved.inputs)
    per_shard = (samples if one_shard(resolved.values, samples, features) else
                 data_parallel.rows_per_shard(resolved["chunks"], samples, resolved.backend))
    train_sizes = shard_sizes(samples, per_shard)
    layout = {"samples": samples, "features": features, "rows": rows, "train": train_sizes,
              "steps": step_count(resolved.values, samples)}
    if rows is None:
        layout["test"] = held_out_shards(held_out_rows(samples, resolved["validation_fraction"]),
                                         len(train_sizes))
    else:
        layout["ranges"] = file_ranges(
            rows, held_out(resolved["seed"], rows, resolved["validation_fraction"]), train_sizes)
        layout["test"] = tuple(len(test) for _, _, test in layout["ranges"])
    if not sum(layout["test"]):  # --validation-fraction 0: no test shards at all
        layout["test"] = ()
    return layout


def _in_memory(resolved: Resolved) -> bool:
    return any(s.in_memory for s in resolved.inputs.values() if hasattr(s, "in_memory"))


def _placed(client, resolved: Resolved, layout: dict) -> list:
    """The shards made on the workers and kept there (training, then test): their futures.

    Generated: the test shards drawn after the training ones. An input: each shard keeps its
    range's held-out rows apart (none with ``--validation-fraction 0``). Arrays in memory:
    their blocks computed first, on the cluster (the objects' own graphs), each shard then
    its blocks split on the worker it is placed on; a Dask array's labels are checked there.
    """
    make, arguments = _train_calls(resolved, layout)
    if layout["rows"] is None:
        arguments += _test_arguments(resolved, layout)
    blocks = []
    if _in_memory(resolved):
        blocks = client.compute([block for args in arguments for block in args[:2]])
        arguments = [(blocks[2 * i], blocks[2 * i + 1], *args[2:])
                     for i, args in enumerate(arguments)]
    futures = data_parallel.place(client, make, arguments)
    if layout["rows"] is not None and sum(layout["test"]):
        futures += [client.submit(held_out_part, f, pure=False) for f in futures]
    data_parallel.wait_kept(client, futures)
    for block in blocks:  # the shards hold their rows; a lost one is made again from the graph
        block.release()
    labels = resolved.inputs.get("labels")
    if labels is not None and isinstance(labels.reader, da.Array):
        ranges = data_parallel.fetch(client, [client.submit(label_range, f, pure=False)
                                              for f in futures[:len(layout["train"])]])
        check_label_range(labels.path, min(r[0] for r in ranges), max(r[1] for r in ranges),
                          resolved["classes"])
    return futures


def _formats(resolved: Resolved, layout: dict) -> dict:
    """How an input's features and labels are held, and what was rechunked."""
    sources = [resolved.inputs[name] for name in ("input", "labels")]
    notes = [array_input.rechunking(s, memory_chunks(s, layout["ranges"])).get("rechunked")
             for s in sources]
    return {"format": [s.kind for s in sources],
            **({"rechunked": notes} if any(notes) else {})}


def _train_calls(resolved: Resolved, layout: dict) -> tuple:
    """The function making a training shard, and its arguments for each shard.

    An array in memory's first two arguments are its lazy blocks (:func:`memory_blocks`); a
    file's, in a mixed pair, its range's rows read lazily as a block too.
    """
    library, dtype = resolved.backend.array_library, resolved["dtype"]
    if _in_memory(resolved):
        x, y = (_blocks(resolved.inputs[name], layout["ranges"], resolved.backend)
                for name in ("input", "labels"))
        return make_memory_shard, [(x[i], y[i], test, i, dtype, library)
                                   for i, (_, _, test) in enumerate(layout["ranges"])]
    if layout["rows"] is not None:
        x, y = (reader_of(resolved.inputs[name]) for name in ("input", "labels"))
        return make_input_shard, [(x, y, a, b, test, i, dtype, library)
                                  for i, (a, b, test) in enumerate(layout["ranges"])]
    return make_shard, [(resolved["seed"], TRAIN, i, rows, *_common(resolved))
                        for i, rows in enumerate(layout["train"])]


def _test_arguments(resolved: Resolved, layout: dict) -> list[tuple]:
    return [(resolved["seed"], TEST, i, rows, *_common(resolved))
            for i, rows in enumerate(layout["test"])]


def _common(resolved: Resolved) -> tuple:
    teacher = teacher_weights(resolved["seed"], resolved["features"], resolved["classes"])
    return (resolved["features"], resolved["classes"], resolved["dtype"],
            resolved.backend.array_library, teacher)


def _blocks(source, ranges, backend) -> list:
    """One lazy block per shard's range of rows: an array in memory's, or a file's read."""
    if source.in_memory:
        return memory_blocks(source, ranges, backend)
    return [file_block(source, a, b) for a, b, _ in ranges]


def _input_context(resolved: Resolved, layout: dict) -> InputFiles | None:
    """Where the check reads an input: sources, kinds, rows (``None`` for generated data)."""
    if layout["rows"] is None:
        return None
    x, y = resolved.inputs["input"], resolved.inputs["labels"]
    return InputFiles(x, x.kind, y, y.kind, layout["rows"])
