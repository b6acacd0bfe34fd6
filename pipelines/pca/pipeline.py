"""pca-pipeline: principal components of a tall-and-skinny array: Gram matrix, TSQR or randomised.

The array (``--samples`` x ``--features``) is cut in blocks of whole rows only. Generated data
are drawn on the workers from the run's seed with a known spectrum (:mod:`pipelines.pca.shared`);
``--input`` reads a ``.npy`` file or Zarr array, or (from Python) takes a NumPy, CuPy or Dask
array in hand (:mod:`daskgpu.data.memory_input`: a Dask array used as its graph, rechunked to
the pipeline's row blocks where its own differ, and said so in the run's data). The data are
centred: every block on its own column means, the blocks' summaries combined about the global
mean (:mod:`pipelines.pca.tasks`), so the mean costs no extra pass.

- ``--method exact``: a tall-skinny QR. Each block's centred rows are reduced to their R factor
  where they live (Householder QR with the block's library: LAPACK through NumPy, cuSOLVER
  through CuPy), the R's are stacked and factored again pairwise (a tree), and the SVD of the
  final ``features x features`` R gives the components and singular values. One pass.
- ``--method covariance``: one pass of blockwise centred Gram matrices summed in float64
  (cell by cell, joined by the same pairwise update), then ``eigh`` of the final ``features x
  features`` matrix. It squares the condition number: :func:`pipelines.pca.shared.
  covariance_shortfall` says whether it vouches for every reported variance.
- ``--method auto`` (the default): covariance, then exact where covariance falls short
  (:func:`driven`); the report says which was taken.
- ``--method randomized``: subspace iteration from a seeded basis of ``components + 10``
  columns: ``--power-iters`` passes of ``W <- orth(X_c^T X_c W)`` (each summed over the blocks),
  then a TSQR of ``X_c W`` and the SVD of its small R (a Rayleigh-Ritz step).

Explained variance is ``s**2 / (samples - 1)``; its ratio is to the total variance (the centred
sum of squares over ``samples - 1``). The projection ``(X - mean) V^T`` (samples x components)
is one more pass once the components are known, over the data's blocks held on the workers
since the first: ``--project`` writes it, and a run from Python keeps it on the workers
(``value["projection"]``, a Dask array on its blocks; made once where both are asked).
:mod:`pipelines.pca.check` verifies the result apart.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input, synthetic
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, chunking, data_parallel, registry
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import seed_word
from daskgpu.toolkit.params import (
    Param,
    choice,
    chunks,
    non_negative_int,
    output_path,
    path_or_array,
    positive_int,
    refuse_with_input,
)
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from daskgpu.verification import Grid
from pipelines.pca import SUMMARY, shared, tasks
from pipelines.pca import output as pca_output
from pipelines.pca.check import CHECK
from pipelines.pca.shared import PcaContext

CPU_DEFAULT_SAMPLES = 1_000_000
DTYPES = ("float64", "float32")
METHODS = ("auto", "covariance", "exact", "randomized")
OVERSAMPLE = 10
# The basis V (features x features) is drawn and factored in the client, and every block's
# summary is features x features: a tall-and-skinny array has at most this many columns.
MAX_FEATURES = 4096
# Every block is a task of each pass and a leaf of the tree that joins them.
MAX_BLOCKS = 100_000
# Leading explained variances shown as the run's value (all of them are in its data).
SHOWN = 5

PARAMS = (
    Param("samples", positive_int, None, "Rows of the array [default: 1000000 on CPU; on GPUs "
          "a share of their memory].", "N"),
    Param("features", positive_int, 256, "Columns of the array [default: 256].", "N"),
    Param("components", positive_int, 10, "Principal components to report [default: 10].",
          "K"),
    Param("method", choice(METHODS), "auto", "Algorithm: covariance (one pass of blockwise "
          "Gram matrices in float64, then eigh), exact (tall-skinny QR, then the SVD of R), "
          "randomized (subspace iteration), or auto: covariance, then exact where covariance "
          "cannot vouch for a reported variance [default: auto].",
          "auto|covariance|exact|randomized", METHODS),
    Param("power_iters", non_negative_int, 4, "Power iterations of --method randomized "
          "[default: 4].", "N"),
    Param("chunks", chunks, "auto", "Rows per block: auto (sized for the device) or N; a "
          "block holds whole rows.", "auto|N"),
    Param("dtype", choice(DTYPES), "float64", "Element type of generated data.",
          "float64|float32", DTYPES),
    Param("seed", non_negative_int, None, "Random seed of generated data, and of --method "
          "randomized's start (with an --input, that only) [default: fresh, reported; for an "
          "--input, one from its shape].", "INT"),
    Param("input", path_or_array, None, "Read the array from this .npy file or Zarr array "
          "(rows are samples; from Python also a NumPy, CuPy or Dask array).", "PATH"),
    Param("output", output_path((".npy", ".csv")), None, "Write the components to this .npy "
          "(components x features) or .csv file (one row per component).", "PATH"),
    Param("project", output_path((".zarr", ".npy")), None, "Write the centred data projected "
          "on the components (samples x components) to this Zarr directory or .npy file.",
          "PATH"),
)
GENERATED_ONLY = ("samples", "dtype")


# --------------------------------------------------------------------------- settle


def default_samples(backend, features: int, itemsize: int) -> int:
    """Rows of the default array: 1,000,000 on CPU; on GPUs a share of their memory."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return max(2, int(share * backend.device_memory / (features * itemsize)))
    return CPU_DEFAULT_SAMPLES


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the generated array; refuse what no cluster runs.

    Raises
    ------
    ParameterError
        Contradicting options, too many components or features, a layout too large.
    InputFileError
        A missing, non-numeric or not 2-D input.
    """
    values = dict(values)
    inputs: dict = {}
    if values["input"] is not None:
        refuse_with_input(PARAMS, values, GENERATED_ONLY)
        if values["seed"] is not None and values["method"] != "randomized":
            raise ParameterError(f"--seed: with an --input it seeds only --method randomized's "
                                 f"start, and --method is {values['method']}; drop it")
        source = array_input.open_matrix(values["input"], "--input", DTYPES[::-1],
                                         "samples x features")
        inputs["input"] = source
        values["input"] = source.path  # an array in memory: named, never held in the values
        values["samples"], values["features"] = source.shape
        values["dtype"] = source.dtype.name
        option = "--input"
    else:
        option = "--samples"
    samples, features = values["samples"], values["features"]
    if features > MAX_FEATURES:
        raise ParameterError(f"{'--input' if inputs else '--features'}: {features} features; "
                             f"at most {MAX_FEATURES} (a tall-and-skinny array)")
    if values["components"] > features:
        raise ParameterError(f"--components {values['components']}: more than the {features} "
                             f"features; give at most {features}")
    itemsize = np.dtype(values["dtype"]).itemsize
    if samples is None:
        values["samples"] = samples = default_samples(backend, features, itemsize)
    if samples < 2:
        raise ParameterError(f"{option}: {samples} sample; a variance needs at least 2")
    given_chunks = values["chunks"]
    if given_chunks != "auto" and (len(given_chunks) > 2 or (
            len(given_chunks) == 2 and given_chunks[1] < features)):
        raise ParameterError(f"--chunks {','.join(map(str, given_chunks))}: give rows per "
                             f"block (N); a block holds whole rows of all {features} features")
    block = given_chunks if given_chunks == "auto" else (given_chunks[0], features)
    chunking.check_blocks(block, (samples, features), itemsize, option)
    blocks = chunking.block_count(block, (samples, features), itemsize)
    if blocks > MAX_BLOCKS:
        raise ParameterError(f"--chunks {given_chunks[0]}: {blocks:.3g} blocks of {samples} rows; "
                             f"at most {MAX_BLOCKS} (a task each, and each pass joins them): "
                             "give more rows per block or auto")
    return values, inputs


# --------------------------------------------------------------------------- the data


def rows_per_block(resolved: Resolved, itemsize: int) -> int:
    """Rows of each block: ``--chunks N``, or device-sized blocks (a multiple of the slots)."""
    samples, features = resolved["samples"], resolved["features"]
    if resolved["chunks"] != "auto":
        return min(resolved["chunks"][0], samples)
    return chunking.auto_chunks((samples, features), itemsize, resolved.backend)[0]


def array(resolved: Resolved):
    """The lazy array of a run, and what describes it (source, seed, its blocks, their states).

    Generated data on CPU workers are drawn block by block by
    :func:`pipelines.pca.tasks.draw_block`, which notes the generator's state at every cell
    (``about["states"]``: a delayed array a block); elsewhere (CuPy, an input) a block is
    drawn or read whole and ``states`` is None.
    """
    backend = resolved.backend
    samples, features = resolved["samples"], resolved["features"]
    dtype = np.dtype(resolved["dtype"])
    rows = rows_per_block(resolved, dtype.itemsize)
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        x = array_input.to_dask(source, (rows, features), backend)
        return x, {"source": source.path, "format": source.kind, "input": source,
                   "blocks": list(x.to_delayed().ravel()), "states": None}
    seed = resolved["seed"]
    about = {"source": f"z diag(sigma) V^T, sigma_j = {shared.DECAY}^j", "seed": seed,
             "input": None}
    generate = {"sigma": shared.spectrum(features),
                "basis_t": np.ascontiguousarray(shared.basis(seed, features).T),
                "library": backend.array_library}
    if backend.is_gpu:
        z = synthetic.random_array((samples, features), (rows, features), dtype.name,
                                   shared.data_seed(seed), backend, "normal")
        x = z.map_blocks(tasks.generate_block, dtype=dtype, meta=np.empty((0, 0), dtype),
                         **generate)
        return x, {**about, "blocks": list(x.to_delayed().ravel()), "states": None}
    sizes = da.core.normalize_chunks((rows, features), (samples, features))[0]
    blocks, states = [], []
    for number, count in enumerate(sizes):
        z, noted = dask.delayed(tasks.draw_block, pure=True, nout=2)(
            shared.data_seed(seed), number, count, features, dtype.name,
            shared.cells(count))
        blocks.append(dask.delayed(tasks.generate_block, pure=True)(z, **generate))
        states.append(noted)
    x = da.concatenate([da.from_delayed(b, (count, features), dtype=dtype,
                                        meta=np.empty((0, 0), dtype))
                        for b, count in zip(blocks, sizes, strict=True)])
    return x, {**about, "blocks": blocks, "states": states}


def check_seed(resolved: Resolved) -> int:
    """The randomised method's seed: the run's, or for an input one from its shape."""
    if resolved["seed"] is not None:
        return int(resolved["seed"])
    words = np.random.SeedSequence((resolved["samples"], resolved["features"], 3))
    return seed_word(words)


def principal_components(x, about: dict, resolved: Resolved, method: str | None = None) -> tuple:
    """The delayed result of the ``method`` (default: the resolved one; auto: covariance).

    :func:`pipelines.pca.tasks.finish` or :func:`~pipelines.pca.tasks.finish_covariance`,
    and for the exact and covariance methods the delayed list of the blocks' cell
    certificates for the check's fast depth; else None.
    """
    method = method or resolved["method"]
    if method == "auto":
        method = "covariance"
    library = resolved.backend.array_library
    blocks = about["blocks"]
    k, features = resolved["components"], resolved["features"]
    if method in ("exact", "covariance"):
        slices = None if resolved.backend.is_gpu else tasks.CPU_SLICE_ROWS
        q = shared.probes(resolved["seed"], resolved["samples"], features)
        states = about["states"] or [None] * len(blocks)
        parts, cells = [], []
        for block, noted, count in zip(blocks, states, x.chunks[0], strict=True):
            cuts = shared.cells(count, resolved.backend.is_gpu)
            if method == "exact":
                summary, certificate = dask.delayed(tasks.block_summary, pure=True, nout=2)(
                    block, noted, cuts, q, library, slices)
            else:
                summary, certificate = dask.delayed(tasks.gram_summary, pure=True, nout=2)(
                    block, noted, cuts, q, library)
            parts.append(summary)
            cells.append(certificate)
        if method == "exact":
            result = dask.delayed(tasks.finish, pure=True)(tasks.tree(parts, tasks.combine_r), k)
        else:
            result = dask.delayed(tasks.finish_covariance, pure=True)(
                tasks.tree(parts, tasks.combine_gram), k, np.dtype(x.dtype).name)
        return result, dask.delayed(list, pure=True)(cells)
    width = min(features, k + OVERSAMPLE)
    basis = tasks.starting_basis(check_seed(resolved), features, width)
    for _ in range(resolved["power_iters"]):
        parts = [dask.delayed(tasks.power_summary, pure=True)(b, basis, library)
                 for b in blocks]
        total = tasks.tree(parts, tasks.combine_power, basis=basis)
        basis = dask.delayed(tasks.next_basis, pure=True)(total)
    parts = [dask.delayed(tasks.projected_r_summary, pure=True)(b, basis, library)
             for b in blocks]
    total = tasks.tree(parts, tasks.combine_r, basis=basis)
    return dask.delayed(tasks.finish, pure=True)(total, k, basis), None


# --------------------------------------------------------------------------- value, output


def value_of(result: dict) -> dict:
    """The reported value: components found, the leading explained variances, the total."""
    return {"components": len(result["explained_variance"]),
            "explained_variance": np.asarray(result["explained_variance"][:SHOWN]),
            "explained_variance_ratio": np.asarray(result["explained_variance_ratio"][:SHOWN]),
            "explained_total": float(np.sum(result["explained_variance_ratio"])),
            "total_variance": float(result["total_variance"])}


def present(workload: Workload, raw: dict) -> dict:
    """The value; the whole fit goes to the report's data.

    Every component's explained variance (and ratio) and singular value, and (shown in the
    table by their shape, in full in ``--json`` and in Python) the components and the column
    means: what :class:`daskgpu.ml.PCA` keeps of a fit.
    """
    result = raw["result"]
    for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
        workload.description[key] = np.asarray(result[key], dtype=np.float64)
    for key in ("components", "mean"):
        workload.description[key] = pca_output.by_shape(result[key])
    workload.context.found["components"] = np.asarray(result["components"])
    taken = result.get("method", workload.context.method)
    workload.description["method"] = taken
    if workload.context.method in ("auto", "covariance"):
        workload.description["accuracy"] = accuracy_note(result, taken)
    return value_of(result)


def accuracy_note(result: dict, taken: str) -> str:
    """What the covariance method's accuracy check said, and what the run did about it."""
    shortfall = result.get("shortfall")
    if shortfall is None and taken == "covariance":
        return (f"covariance: every reported variance within {shared.ACCURACY:.0e} (relative) "
                "or as close as the exact method's bound; the squared condition number allows it")
    i, ours, theirs = shortfall if shortfall is not None else result["fallback"]
    said = (f"covariance cannot vouch for variance {i}: its relative error bound {ours:.2g} "
            f"exceeds {shared.ACCURACY:.0e} and the exact method's {theirs:.2g} (the squared "
            "condition number)")
    if taken == "exact":
        return said + "; the exact method (TSQR) was taken"
    return said + "; give --method exact (or auto) for TSQR"


# --------------------------------------------------------------------------- baseline


# Rows of a slice the baseline widens to float64 for its sums (8 MiB of float64 at 256
# features on CPU; a GPU's slices are larger).
BASELINE_SLICE_ELEMENTS = 2**20
# The share of one device's memory that the array and ``svd``'s copy of it may fill.
DEVICE_SHARE = 0.9


def fill_whole(resolved: Resolved, xp):
    """The whole array in one preallocated array, filled block by block (each computed alone)."""
    x, about = array(resolved)
    whole = xp.empty(x.shape, dtype=x.dtype)
    first = 0
    with dask.config.set(scheduler="sync"):
        for block in about["blocks"]:
            part = xp.asarray(dask.compute(block)[0])
            whole[first:first + part.shape[0]] = part
            first += part.shape[0]
            del part
    return whole


def svd_fits(resolved: Resolved, nbytes: int) -> bool:
    """Whether ``svd`` may run beside the array: CuPy's copies its input (gesvd destroys it)."""
    devices = resolved.backend.devices
    if not resolved.backend.is_gpu or not devices:
        return True
    return 2 * nbytes <= DEVICE_SHARE * min(d.memory_total for d in devices)


def one_process_pca(whole, xp, use_svd: bool) -> tuple:
    """Centre ``whole`` in place; its singular values and float64 sum of squares.

    The column means are summed in float64. ``use_svd``: the singular values of the centred
    array by ``svd(compute_uv=False)``; else the square roots of the eigenvalues of its Gram
    matrix summed in float64 slices (where ``svd``'s copy of the array would not fit).
    """
    samples, features = whole.shape
    mean = whole.sum(axis=0, dtype=np.float64) / samples
    xp.subtract(whole, mean.astype(whole.dtype), out=whole)
    step = max(1, BASELINE_SLICE_ELEMENTS // features)
    squares, gram = 0.0, None if use_svd else xp.zeros((features, features))
    for first in range(0, samples, step):
        part = whole[first:first + step].astype(np.float64)
        squares += float((part * part).sum())
        if gram is not None:
            gram += part.T @ part
    if use_svd:
        return xp.linalg.svd(whole, compute_uv=False), squares
    lam = xp.linalg.eigh(gram)[0][::-1]
    return xp.sqrt(xp.maximum(lam, 0.0)), squares


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of a one-process PCA of the whole array: ``svd`` of it centred (CuPy on GPU).

    The array is made first, untimed, in one preallocated array filled block by block; the
    timed part centres it in place and takes its singular values (``compute_uv=False``), its
    reductions (the means, the sum of squares) in float64 as the run's. On a GPU whose memory
    would not hold CuPy's copy of the array beside it, the singular values come from the
    float64 Gram matrix of the centred array instead (a one-process covariance PCA). Its answer
    is in the form of the run's value.
    """
    import importlib

    xp = importlib.import_module(resolved.backend.array_library)
    whole = fill_whole(resolved, xp)
    use_svd = svd_fits(resolved, whole.nbytes)
    seconds, (s, squares) = timed(resolved.backend, lambda: one_process_pca(whole, xp, use_svd))
    s = np.asarray(s.get() if hasattr(s, "get") else s, dtype=np.float64)
    dof = resolved["samples"] - 1
    k = resolved["components"]
    found = np.zeros(k)
    found[:min(k, s.size)] = s[:k]
    variance = found**2 / dof
    return seconds, value_of({"explained_variance": variance,
                              "explained_variance_ratio": variance / (squares / dof),
                              "total_variance": squares / dof})


# --------------------------------------------------------------------------- the pipeline


def _computed(client, parts: dict) -> dict:
    """``parts`` (delayed) computed on the run's cluster, their results on the host."""
    futures = client.compute(list(parts.values()))
    futures = [client.submit(to_host, f, pure=False) for f in futures]
    try:
        return dict(zip(parts, client.results(futures), strict=True))
    finally:
        for future in futures:
            future.release()


def _projection_parts(projected, resolved: Resolved) -> tuple[dict, str]:
    """``--project``'s write of ``projected`` (a new temporary) and its columns' sums."""
    write, temporary = output_files.store_array(projected, resolved["project"])
    wide = projected.astype(np.float64)
    return {"written": write, "projected_sums": wide.sum(axis=0),
            "projected_squares": (wide * wide).sum(axis=0)}, temporary


def driven(x, about: dict, resolved: Resolved):
    """The run as its ``drive`` runs it: the components, then the projection.

    The components' pass (:func:`principal_components`); for ``--method auto`` the covariance
    pass first, and where its result cannot vouch for a reported variance (``shortfall``,
    :func:`pipelines.pca.shared.covariance_shortfall`) the exact method's pass, whose result
    notes the covariance method's ``fallback``. Then the projection on the components taken:
    kept on the workers where the run keeps it (``workload.keep``, persisted, as
    ``workload.on_workers["projection"]`` and the result's ``projection``, which the check
    reads), written (``--project``) into a fresh temporary, from the kept blocks where both.
    A run that makes the projection holds the data's blocks on the workers until it is made
    (:func:`held`): the data are read or drawn once.
    """
    auto = resolved["method"] == "auto"

    def drive(workload: Workload, client) -> dict:
        from distributed import futures_of

        projects = workload.keep or resolved["project"] is not None
        data = held(client, x, about) if projects else (x, about)
        raw = _components(client, *data, resolved, "covariance" if auto else None)
        shortfall = raw["result"].get("shortfall") if auto else None
        if shortfall is not None:
            raw = _components(client, *data, resolved, "exact")
            raw["result"]["fallback"] = shortfall
            workload.description["passes"] += 1
        projected = pca_output.projection(data[0], raw["result"], resolved)
        if workload.keep:  # computed here: compute_s counts it, and a failed task raises here
            projected = raw["projection"] = workload.on_workers["projection"] = (
                client.persist(projected))
            data_parallel.wait_kept(client, futures_of(projected))
            workload.description["projection"] = "kept on the workers"
        if resolved["project"] is not None:
            parts, temporary = _projection_parts(projected, resolved)
            for old, _final in workload.outputs:
                output_files.discard(old)
            workload.outputs[:] = [(temporary, resolved["project"])]
            raw.update(_computed(client, parts))
        return raw

    return drive


def held(client, x, about: dict) -> tuple:
    """``(x, about)`` on the data's blocks persisted (with their noted states), to read once."""
    blocks, states = about["blocks"], about["states"] or []
    kept = client.persist([*blocks, *states])
    blocks, states = kept[:len(blocks)], kept[len(blocks):]
    x = da.concatenate([da.from_delayed(b, (rows, x.shape[1]), dtype=x.dtype, meta=x._meta)
                        for b, rows in zip(blocks, x.chunks[0], strict=True)])
    return x, {**about, "blocks": blocks, "states": states or None}


def _components(client, x, about: dict, resolved: Resolved, method: str | None) -> dict:
    """The ``method``'s result (and its cells' certificates, where it has them), computed."""
    result, cells = principal_components(x, about, resolved, method)
    return _computed(client, {"result": result, **({} if cells is None else {"cells": cells})})


# The warm-up's arrays: blocks of WARM_UP_ROWS x WARM_UP_FEATURES, two to a run (so that the
# pairwise combines run too).
WARM_UP_ROWS, WARM_UP_FEATURES = 8, 4


def warm_up(backend_name: str) -> None:
    """On a worker as it starts: a GPU's libraries and kernels made once, so no run makes them.

    GPU workers compute a tiny run's own graph (:func:`prepare`'s, here) for each method
    (covariance: the blocks' float64 Gram matrices; exact: their QR and cell certificates;
    randomized: a power step and the projected QR) and each element type: the device's draw
    of the blocks, cuBLAS's products and cuSOLVER's QR loaded, and CuPy's elementwise and
    reduction kernels compiled for every type a run uses (``--method auto`` runs the first two).
    CPU workers have nothing to compile.
    """
    if backend_name != "gpu":
        return
    backend = backends.get(backend_name)
    spec = registry.get("pca-pipeline")
    for dtype in DTYPES:
        for method in ("covariance", "exact", "randomized"):
            resolved = spec.resolve(backend, samples=2 * WARM_UP_ROWS, features=WARM_UP_FEATURES,
                                    components=2, method=method, power_iters=1,
                                    chunks=WARM_UP_ROWS, dtype=dtype, seed=0)
            dask.compute(spec.workload(backend, resolved).collection, scheduler="sync")


@pipeline("pca-pipeline", SUMMARY, PARAMS, CHECK, settle=settle, baseline=baseline,
          warm_up=warm_up)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy components: block summaries, their tree, the small SVD or eigh.

    The run is driven (:func:`driven`): the components' pass first, then the projection where
    ``--project`` writes it or a run from Python keeps it. ``--method auto`` builds the
    covariance pass as the collection (its result says whether the exact method is needed),
    and its drive takes the exact method where the covariance method falls short.
    """
    x, about = array(resolved)
    samples, features = x.shape
    dtype = np.dtype(x.dtype)
    result, cells = principal_components(x, about, resolved)
    passes = 1 if resolved["method"] != "randomized" else resolved["power_iters"] + 1
    parts, outputs = {"result": result}, []
    if cells is not None:
        parts["cells"] = cells
    if resolved["project"] is not None:
        written, temporary = _projection_parts(pca_output.projection(x, result, resolved),
                                               resolved)
        parts.update(written)
        outputs.append((temporary, resolved["project"]))
        passes += 1
    described = {"source": about["source"]}
    if about["input"] is not None:
        described["format"] = about["format"]
        described.update(array_input.rechunking(
            about["input"], (rows_per_block(resolved, dtype.itemsize), features)))
    else:
        described["seed"] = about["seed"]
    return Workload(
        collection=parts,
        bytes_are="read" if about["input"] is not None else "generated",
        elements=samples * features,
        nbytes=samples * features * dtype.itemsize,
        description={
            **described,
            "shape": [samples, features],
            "chunks": [x.chunks[0][0], features],
            "blocks": x.numblocks[0],
            "dtype": dtype.name,
            "method": resolved["method"],
            "passes": passes,
            "centred": "yes: column means subtracted (sample covariance, samples - 1)",
        },
        context=PcaContext(Grid((x.chunks[0], (features,))), dtype.name, resolved["method"],
                           resolved["components"], library=resolved.backend.array_library,
                           seed=resolved["seed"], source=about["input"],
                           project=resolved["project"], output=resolved["output"]),
        outputs=outputs,
        present=present,
        save=pca_output.save if resolved["output"] is not None else None,
        drive=driven(x, about, resolved),
    )
