"""kmeans-pipeline: Lloyd's k-means, data-parallel, with daskgpu's fused kernel.

Points from ``--clusters`` well-separated Gaussian blobs with known centres are drawn on the
workers from the run's seed, as shards that stay where they were made (the build,
``build_s``). Each iteration then broadcasts the ``k`` centroids, runs one pass of
:func:`daskgpu.kernels.kmeans.kmeans_pass` on every shard where it lives (per shard: the
``k x d`` sums and ``k`` counts of the points nearest each centroid, and their inertia; never a
label per point), tree-reduces them, and takes ``sums / counts`` as the new centroids, in the
driver (:mod:`daskgpu.toolkit.data_parallel`); the initialisation and the iterations are the compute
(``compute_s``). A centroid that no point is nearest keeps its place (the empty-cluster rule).
It stops when no centroid moves more than ``--tol`` or after ``--max-iter`` iterations.
With ``--input`` the points are read from a ``.npy`` file or Zarr array instead, each shard a
range of its rows read on its worker, or (from Python) taken from a NumPy, CuPy or Dask array,
each shard one block of the object's own graph (:mod:`pipelines.kmeans.inputs`); the run's
seeded choices (the initialisation) then draw from ``--seed``, or a fresh seed, reported. The
result reports what the initialisation chose (``init``: k-means||'s candidates as global rows,
their points, weights, sampling rounds and costs), small, so that it can be checked. With
``--labels``, or from Python, one more pass after the last iteration labels every point with its
nearest final centroid where its shard lives (:mod:`pipelines.kmeans.labels`): written to the
file, and from Python kept there, ``value["labels"]`` a Dask array on those blocks.
:mod:`pipelines.kmeans.check` verifies every iteration, on the points the run kept (``fast``) or
on data it draws or reads again its own way (``full``).
"""

from __future__ import annotations

import importlib
import time

import dask
import numpy as np

from daskgpu.data import array_input
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, data_parallel, sizing
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.numeric import shard_sizes
from daskgpu.toolkit.params import (
    Param,
    choice,
    chunks,
    finite_float,
    non_negative_int,
    output_path,
    path_or_array,
    positive_int,
)
from daskgpu.toolkit.registry import Resolved, Workload, fresh_seed, pipeline
from daskgpu.toolkit.timing import timed
from pipelines.kmeans import SUMMARY
from pipelines.kmeans.baseline import InProcess, one_process_lloyd
from pipelines.kmeans.check import CHECK
from pipelines.kmeans.init import initial_centroids
from pipelines.kmeans.inputs import (
    make_input_shard,
    make_memory_shard,
    memory_blocks,
    memory_chunks,
    open_input,
    place_blocks,
    reader_of,
)
from pipelines.kmeans.labels import create as create_labels
from pipelines.kmeans.labels import label_pass
from pipelines.kmeans.shared import Kept, KMeansContext
from pipelines.kmeans.tasks import blob_centres, lloyd, make_shard

CPU_DEFAULT_SAMPLES = 1_000_000
GPU_DEFAULT_SAMPLES = 100_000_000
# Each iteration runs one task per shard: more than this many would make it all scheduling.
# The centroids go to every worker each iteration; all of them are kept for the check.
MAX_CENTROIDS = 2**22
MAX_TRAJECTORY = 2**26
# The blobs' centres are drawn apart one by one (quadratic in their count).
MAX_CLUSTERS = 10_000
INITS = ("k-means||", "random")


def tolerance(value) -> float:
    """A finite shift of 0 or more."""
    number = finite_float(value)
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


PARAMS = (
    Param("samples", positive_int, None, "Points [default: 1000000 on CPU, 100000000 on "
          "GPUs].", "N"),
    Param("features", positive_int, None, "Features per point [default: 32].", "N"),
    Param("clusters", positive_int, None, "Gaussian blobs the points are drawn from "
          "[default: 16].", "N"),
    Param("k", positive_int, None, "Centroids to find [default: --clusters; 16 with "
          "--input].", "N"),
    Param("max_iter", positive_int, 100, "Most Lloyd iterations [default: 100].", "N"),
    Param("tol", tolerance, 1e-4, "Stop once no centroid moves further than this "
          "[default: 1e-4].", "FLOAT"),
    Param("init", choice(INITS), "k-means||", "Initial centroids: k-means|| (seeded, "
          "simplified) or k seeded points of the data [default: k-means||].",
          "random|k-means||", INITS),
    Param("chunks", chunks, "auto", "Points per shard: auto (one shard per CPU thread or per "
          "GPU), or N.", "auto|N"),
    Param("dtype", choice(("float32", "float64")), "float32", "Element type of the points.",
          "float32|float64", ("float32", "float64")),
    Param("seed", non_negative_int, None, "Random seed of the points and the initialisation "
          "[default: fresh, reported].", "INT"),
    Param("output", output_path((".npy", ".zarr", ".csv")), None, "Write the final centroids "
          "to this .npy file or Zarr array (k x features float64) or .csv table (one row per "
          "centroid).", "PATH"),
    Param("labels", output_path((".npy", ".zarr")), None, "Write each point's nearest final "
          "centroid to this .npy file or Zarr array (int32, one per point; -1 for a point with "
          "a NaN or infinite coordinate).", "PATH"),
    Param("input", path_or_array, None, "Cluster the points of this samples x features .npy "
          "file or Zarr array (float32 or float64; from Python also a NumPy, CuPy or Dask "
          "array).", "PATH"),
)
DEFAULT_FEATURES, DEFAULT_CLUSTERS = 32, 16


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Size the data for the backend and refuse what no cluster can cluster.

    Raises
    ------
    ParameterError
        More centroids than points, too many shards, a shard or the centroids too large;
        options for generated points with ``--input``.
    InputFileError
        An input that cannot be clustered (see :func:`pipelines.kmeans.inputs.open_input`).
    """
    values = dict(values)
    inputs: dict = {}
    if values["input"] is not None:
        inputs = {"input": open_input(values, _default("dtype"), PARAMS, backend)}
        if values["k"] is None:
            values["k"] = DEFAULT_CLUSTERS
        if values["seed"] is None:  # the initialisation draws: a fresh seed, reported
            values["seed"] = fresh_seed()
    else:
        for name, default in (("features", DEFAULT_FEATURES), ("clusters", DEFAULT_CLUSTERS)):
            if values[name] is None:
                values[name] = default
        if values["samples"] is None:
            row = values["features"] * np.dtype(values["dtype"]).itemsize
            values["samples"] = sizing.default_rows(backend, row, CPU_DEFAULT_SAMPLES,
                                                    GPU_DEFAULT_SAMPLES)
        if values["k"] is None:
            values["k"] = values["clusters"]
        if values["clusters"] > MAX_CLUSTERS:
            raise ParameterError(f"--clusters {values['clusters']}: at most {MAX_CLUSTERS} "
                                 "blobs")
    samples, features = shape_of(values, inputs)
    _refuse_beyond_device_memory(backend, values, inputs, samples, features)
    k = values["k"]
    if k > samples:
        raise ParameterError(f"--k {k}: more centroids than the {samples} points; give --k "
                             f"at most {samples}")
    for name in ("k", "clusters"):
        if values[name] is not None and values[name] * features > MAX_CENTROIDS:
            raise ParameterError(
                f"--{name} {values[name]} x --features {features}: at most {MAX_CENTROIDS:.3g} "
                "centroid entries (they go to every worker at each iteration)")
    if (values["max_iter"] + 1) * k * features > MAX_TRAJECTORY:
        raise ParameterError(
            f"--max-iter {values['max_iter']} x --k {k} x --features {features}: at most "
            f"{MAX_TRAJECTORY:.3g} centroid entries over all iterations (each is checked)")
    data_parallel.checked_rows_per_shard(values["chunks"], samples, features, values["dtype"],
                                         backend, rows="points", each="iteration")
    return values, inputs


def _refuse_beyond_device_memory(backend, values, inputs, samples: int, features: int) -> None:
    """The points stay on the GPUs for every iteration: refuse more than they hold."""
    dtype = np.dtype(inputs["input"].dtype if inputs else values["dtype"])
    option = f"--input {inputs['input'].path}:" if inputs else "--samples"
    remedy = ("cluster a subset of at most {most} points, or use more GPUs" if inputs else None)
    sizing.refuse_held_beyond_memory(backend, option, samples, features * dtype.itemsize,
                                     f"{dtype.name} points", remedy)


def shape_of(values, inputs) -> tuple[int, int]:
    """Points and features: the input's, or those given."""
    if inputs:
        return inputs["input"].shape
    return values["samples"], values["features"]


def _default(name: str):
    return next(p.default for p in PARAMS if p.name == name)


# --------------------------------------------------------------------------- the pipeline



def warm_up(backend_name: str) -> None:
    """On a worker as it starts: the kernels for both float dtypes, so no run compiles them.

    CPU workers load the twin from Numba's cache. GPU workers compile the CUDA kernels (or load
    them from the cache) by running them on small CuPy arrays: the Lloyd pass for the default
    features and k, and k-means||'s counts-and-cost kernel for the default features (the
    device kernels are specialised by those; other sizes compile in their first run).
    """
    from daskgpu.kernels.kmeans import kmeans_counts_cost, kmeans_pass

    if backend_name == "cpu":
        for dtype in (np.float32, np.float64):
            kmeans_pass(np.zeros((4, 2), dtype), np.ones((2, 2)))
        return
    xp = backends.array_module(backend_name)
    centroids = np.ones((DEFAULT_CLUSTERS, DEFAULT_FEATURES))
    for dtype in (np.float32, np.float64):
        points = xp.zeros((64, DEFAULT_FEATURES), dtype)
        kmeans_pass(points, centroids)
        kmeans_counts_cost(points, centroids)


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds and answer of Lloyd's iterations in one process with NumPy, same init and stop.

    The shards are drawn as the run draws them and the initial centroids found on them as the
    run finds them (untimed); then :func:`pipelines.kmeans.baseline.one_process_lloyd` is timed:
    every shard's distances to the centroids by broadcasting in the data's dtype, the nearest
    (lowest index on ties), the means.
    """
    sizes = _sizes(resolved)
    xp = importlib.import_module(resolved.backend.array_library)
    make, arguments = _shard_calls(resolved, sizes)
    if _in_memory(resolved):  # the blocks of the object's graph, computed here
        arguments = [(block, *rest) for block, (_, *rest) in zip(
            dask.compute(*(args[0] for args in arguments)), arguments, strict=True)]
    shards = [make(*args) for args in arguments]
    start, _ = initial_centroids(InProcess(), shards, sizes, resolved["seed"], resolved["k"],
                                 resolved["init"])
    seconds, answer = timed(resolved.backend, lambda: one_process_lloyd(
        shards, start, resolved["max_iter"], resolved["tol"], xp))
    return seconds, _value(answer)


@pipeline("kmeans-pipeline", SUMMARY, PARAMS, CHECK, settle=settle, baseline=baseline,
          warm_up=warm_up, worker_modules=("daskgpu.kernels.kmeans",))
def prepare(resolved: Resolved) -> Workload:
    """Make the shards on the workers (kept there), and build the task that clusters them."""
    client = data_parallel.run_client("kmeans-pipeline")
    sizes = _sizes(resolved)
    futures = _placed(client, resolved, sizes)
    shards = data_parallel.ShardKeys.holding(futures)
    (samples, features), k = shape_of(resolved.values, resolved.inputs), resolved["k"]
    source = resolved.inputs.get("input")
    dtype = np.dtype(resolved["dtype"])
    outputs, labels = [], None
    if resolved["labels"] is not None:
        temporary = output_files.temporary_name(resolved["labels"])
        outputs.append((temporary, resolved["labels"]))
        labels = create_labels(resolved["labels"], temporary, samples, sizes[0])
    clustering = (sizes, resolved["seed"], k, resolved["init"], resolved["max_iter"],
                  resolved["tol"], labels)
    # One task drives the iterations from a worker (the runner computes one collection).
    collection = dask.delayed(data_parallel.drive_on_cluster, pure=False)(run, shards,
                                                                         *clustering)
    elements = samples * features  # one pass; ``present`` counts the passes made
    return Workload(
        collection=collection,
        drive=drive,
        bytes_are="read",
        elements=elements,
        nbytes=elements * dtype.itemsize,
        description={
            "source": (f"{resolved['clusters']} Gaussian blobs, seed {resolved['seed']}"
                       if source is None else source.path),
            **({} if source is None else {"format": source.kind, **array_input.rechunking(
                source, memory_chunks(source, sizes))}),
            "shape": [samples, features],
            "k": k,
            "shards": f"{len(sizes)} of up to {sizes[0]} points",
            "dtype": dtype.name,
        },
        context=KMeansContext(
            Kept(shards), clustering, resolved["seed"], samples, features, resolved["clusters"],
            k, resolved["init"], resolved["max_iter"], resolved["tol"], dtype.name,
            resolved.backend.array_library, tuple(sizes), resolved["output"],
            resolved["labels"], source),
        outputs=outputs,
        present=present,
        save=_save if resolved["output"] is not None else None,
    )


def drive(workload: Workload, client) -> dict:
    """The clustering driven from ``client`` (the run's own) on the workload's shards.

    The same result as computing ``workload.collection``, without a task driving the
    iterations from a worker. Where the run keeps its results (``workload.keep``: a run from
    Python), the labels pass keeps every point's label on the workers, as
    ``workload.on_workers["labels"]`` (and the result's ``labels["kept"]``, which the check
    reads).
    """
    raw = run(client, workload.context.kept.shards.futures, *workload.context.clustering,
              keep=bool(workload.keep))
    if workload.keep:
        workload.on_workers["labels"] = raw["labels"]["kept"]
    return raw


def _sizes(resolved: Resolved) -> tuple[int, ...]:
    samples = shape_of(resolved.values, resolved.inputs)[0]
    per_shard = data_parallel.rows_per_shard(resolved["chunks"], samples, resolved.backend)
    return shard_sizes(samples, per_shard)


def _in_memory(resolved: Resolved) -> bool:
    source = resolved.inputs.get("input")
    return source is not None and source.in_memory


def _placed(client, resolved: Resolved, sizes) -> list:
    """The shards made on the workers and kept there: their futures, once all are made.

    An array in memory's blocks are computed first (the object's own graph, on the cluster);
    each shard is then its block copied where the block is, the shards kept balanced
    (:func:`pipelines.kmeans.inputs.place_blocks`).
    """
    make, arguments = _shard_calls(resolved, sizes)
    if not _in_memory(resolved):
        futures = data_parallel.place(client, make, arguments)
        data_parallel.wait_kept(client, futures)
        return futures
    blocks = client.compute([args[0] for args in arguments])
    data_parallel.wait_kept(client, blocks)
    futures = place_blocks(client, blocks, *arguments[0][1:])
    data_parallel.wait_kept(client, futures)
    for block in blocks:  # the shards hold copies; a lost shard is made again from the graph
        block.release()
    return futures


def _shard_calls(resolved: Resolved, sizes) -> tuple:
    """The function making a shard, and its arguments for each shard.

    An array in memory's first argument is its lazy block (:func:`memory_blocks`).
    """
    dtype, library = resolved["dtype"], resolved.backend.array_library
    if _in_memory(resolved):
        blocks = memory_blocks(resolved.inputs["input"], sizes, resolved.backend)
        return make_memory_shard, [(block, dtype, library) for block in blocks]
    if "input" in resolved.inputs:
        reader, starts = reader_of(resolved.inputs["input"]), np.cumsum((0, *sizes))
        return make_input_shard, [(reader, int(starts[i]), int(starts[i + 1]), dtype, library)
                                  for i in range(len(sizes))]
    centres = blob_centres(resolved["seed"], resolved["clusters"], resolved["features"])
    return make_shard, [(resolved["seed"], i, rows, resolved["features"], dtype, library,
                         centres) for i, rows in enumerate(sizes)]


def present(workload: Workload, raw: dict) -> dict:
    """The run's value (iterations, inertias, final centroids); times go to the report's data.

    The shards stay on the workers for ``verify`` (the fast check reads them), which lets
    them go.
    """
    workload.context.kept.presented = True
    # every Lloyd pass reads all points (the initialisation's reads are not counted)
    passes = int(raw["iterations"]) + 1
    workload.elements *= passes
    workload.nbytes *= passes
    wall = float(np.median(raw["step_s"]))
    computing = float(np.median(raw["step_compute_s"]))
    inertias = [float(v) for v in raw["inertias"]]
    converged = bool(raw["shifts"][-1] <= workload.context.tol)
    workload.description.update({
        "iterations": f"{raw['iterations']} ({'converged' if converged else 'max-iter hit'}; "
                      f"last shift {raw['shifts'][-1]:.3g})",
        "inertia per iteration": _sparkline(inertias),
        "iteration time": f"{wall:.4g} s median of {len(raw['step_s'])}: {computing:.4g} s "
                          f"computing, {max(0.0, wall - computing):.4g} s communicating",
        "initialisation": _chosen(workload.context.init, raw["init"]),
        "init_s": float(raw["init_s"]),
        "iteration_s": wall,
        "iteration_compute_s": computing,
        "converged": converged,
        "cluster sizes": np.asarray(raw["counts"]),
    })
    if raw.get("labels") is not None:
        kept = raw["labels"].get("kept") is not None and "kept on the workers"
        workload.description.update({
            "labels": f"{' and '.join(filter(None, (workload.context.labels, kept)))}, one "
                      f"more pass of {raw['labels']['labels_s']:.4g} s",
            "labels_s": float(raw["labels"]["labels_s"]),
        })
    return _value(raw)


def _chosen(method: str, chosen: dict) -> str:
    if method == "random":
        return f"random: {len(chosen['rows'])} seeded points"
    return (f"k-means||: {len(chosen['rows'])} candidates sampled in {len(chosen['costs'])} "
            "rounds, reduced to k by weighted k-means")


def _value(raw: dict) -> dict:
    inertias = [float(v) for v in raw["inertias"]]
    return {"iterations": int(raw["iterations"]), "inertia": inertias[-1],
            "inertias": inertias, "centroids": np.asarray(raw["centroids"][-1])}


def _save(workload: Workload, value: dict, path: str) -> None:
    """The final centroids: a plain ``(k, d)`` float64 array (``.npy``, Zarr) or a table.

    As scikit-learn's ``cluster_centers_``: row ``j`` is centroid ``j``, the one ``--labels``
    calls ``j``. A ``.csv`` table has the columns ``x0 .. x{d-1}``, one row per centroid.
    """
    centroids = np.asarray(value["centroids"], dtype=np.float64)
    target = workload.context.output.lower()
    if target.endswith(".csv"):
        output_files.save_table(path, {f"x{f}": centroids[:, f]
                                       for f in range(centroids.shape[1])}, like=target)
        return
    with output_files.atomic(path) as temporary:
        if target.endswith(".zarr"):
            import zarr

            zarr.open_array(temporary, mode="w", shape=centroids.shape, chunks=centroids.shape,
                            dtype="float64")[...] = centroids
        else:
            with open(temporary, "wb") as f:
                np.save(f, centroids)


def _sparkline(values) -> str:
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    line = "".join(bars[round((v - low) / span * (len(bars) - 1))] for v in values)
    return f"{line} {values[0]:.6g} to {values[-1]:.6g}"


def run(client, shards, sizes, seed: int, k: int, init: str, max_iter: int, tol: float,
        labels: dict | None = None, keep: bool = False) -> dict:
    """The initial centroids, then :func:`lloyd` (the loop a run's compute times).

    :func:`lloyd`'s result, with ``init_s`` and ``init`` (the candidates the initialisation
    chose from, see :func:`pipelines.kmeans.init.initial_centroids`); with ``labels`` (where
    to write them, see :func:`pipelines.kmeans.labels.create`) or ``keep``, one more pass
    labels every point, writes the labels there or keeps them on the workers (both, in one
    pass), and ``labels`` says what it did (:func:`pipelines.kmeans.labels.label_pass`).
    """
    began = time.perf_counter()
    start, chosen = initial_centroids(client, shards, sizes, seed, k, init)
    out = lloyd(client, shards, start, max_iter, tol, samples=int(sum(sizes)))
    out["init_s"] = (time.perf_counter() - began - sum(out["step_s"])
                     - out.get("cells_s", 0.0))
    out["init"] = chosen
    if labels is not None or keep:
        out["labels"] = label_pass(client, shards, sizes, out["centroids"][-1], labels, keep)
    return out
