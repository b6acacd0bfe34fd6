"""matmul-pipeline: C = A B for an n x k and a k x m matrix, block by block with the backend's BLAS.

This module holds the parameters, ``settle``, the one-process baseline, ``prepare`` and the
registration. A and B are drawn on the workers from the run's seed (uniform [0, 1), one
generator a block, see :mod:`daskgpu.data.synthetic`) or read from ``.npy``/Zarr inputs or
arrays in memory (NumPy, CuPy, Dask; one of each may be a file and the other an array);
``dask.array.matmul`` multiplies their blocks with NumPy (OpenBLAS/MKL) or CuPy (cuBLAS). C is
never gathered: each block of C is reduced where it is made, in the same task, to a few numbers
(its sum of squares, its sum, C's values at seeded sample cells it holds, and its products
``C_ij R_j`` with the check's probes R), which come together as the run's result: the
Frobenius norm and the sum of C plus the per-block material :mod:`pipelines.matmul.check`
verifies (Freivalds' check per block against A (B R) recomputed apart, sampled cells as dot
products). The operands, the per-block reduction and the result's assembly are built in
:mod:`pipelines.matmul.tasks`. ``--output`` writes C itself (Zarr or ``.npy``), atomically; a run
from Python keeps C's blocks on the workers and gives it as ``value["product"]``, a Dask array.

Blocks: :mod:`pipelines.matmul.layout`; the single-device peak measured at the start of a run:
:mod:`pipelines.matmul.peak`.
"""

from __future__ import annotations

import importlib
import math

import dask
import dask.array as da
import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.backends import to_host
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
from pipelines.matmul import SUMMARY, shared
from pipelines.matmul import layout as matmul_layout
from pipelines.matmul import peak as matmul_peak
from pipelines.matmul.check import CHECK
from pipelines.matmul.tasks import operands, result

CPU_DEFAULT_SIZE = 4000
DTYPES = ("float64", "float32")


def sizes3(value) -> tuple[int, int, int]:
    """Three positive sizes ``n,k,m`` (text ``"100,50,80"`` or a sequence).

    >>> sizes3("100, 50, 80")
    (100, 50, 80)
    """
    if isinstance(value, (tuple, list)):
        parts = list(value)
    else:
        parts = [p.strip() for p in str(value).split(",")]
    if len(parts) != 3:
        raise ValueError("give three sizes n,k,m (A is n x k, B is k x m)")
    return tuple(positive_int(p) for p in parts)


def default_size(backend, itemsize: int) -> int:
    """Side n of the default square product: A, B and C in a share of the GPUs' memory."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return int(math.sqrt(share * backend.device_memory / (3 * itemsize)))
    return CPU_DEFAULT_SIZE


PARAMS = (
    Param("size", positive_int, None, "Side n of square n x n matrices A and B [default: 4000 "
          "on CPU; on GPUs a share of their memory].", "N"),
    Param("shape", sizes3, None, "A is n x k, B is k x m (instead of --size).", "N,K,M"),
    Param("chunks", chunks, "auto", "Block size: auto (sized for the device's memory), N, "
          "BN,BM (C's blocks, k whole) or BN,BK,BM.", "auto|N[,K],M"),
    Param("dtype", choice(DTYPES), "float64", "Element type of random data.",
          "float64|float32", DTYPES),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("input_a", path_or_array, None, "Read A from this .npy file or Zarr array "
          "(with --input-b; from Python also a NumPy, CuPy or Dask array).", "PATH"),
    Param("input_b", path_or_array, None, "Read B from this .npy file or Zarr array "
          "(with --input-a; from Python also a NumPy, CuPy or Dask array).", "PATH"),
    Param("output", output_path((".npy", ".zarr")), None, "Write C to this .npy file or Zarr "
          "directory.", "PATH"),
)
GENERATED_ONLY = ("size", "shape", "seed", "dtype")


# --------------------------------------------------------------------------- settle


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the inputs, or size the random operands; refuse layouts no cluster runs.

    Raises
    ------
    ParameterError
        Options that contradict each other, or a layout with too many or too large blocks.
    InputFileError
        A missing, non-numeric or mismatched input.
    """
    values = dict(values)
    inputs: dict = {}
    if values["input_a"] is not None or values["input_b"] is not None:
        inputs = _open_inputs(values)
        (n, k), (_, m) = inputs["input_a"].shape, inputs["input_b"].shape
        itemsize = np.result_type(inputs["input_a"].dtype, inputs["input_b"].dtype).itemsize
        values["dtype"] = None  # the inputs' own element type is used (reported in data)
    else:
        itemsize = np.dtype(values["dtype"]).itemsize
        n, k, m = _generated_shape(backend, values, itemsize)
    option = ("--input-a/--input-b" if inputs else
              "--shape" if values["shape"] is not None else "--size")
    matmul_layout.check_layout(values["chunks"], (n, k, m), itemsize, option)
    if values["chunks"] == "auto":
        blocks = matmul_layout.auto_blocks((n, k, m), itemsize, backend)
        matmul_layout.check_tasks(blocks, (n, k, m), option)
    return values, inputs


def _generated_shape(backend, values: dict, itemsize: int) -> tuple[int, int, int]:
    size, shape = values["size"], values["shape"]
    if shape is not None:
        if size is not None and shape != (size,) * 3:
            raise ParameterError(f"--size {size} and --shape {','.join(map(str, shape))}: "
                                 "give one of them")
        return shape
    if size is None:
        values["size"] = size = default_size(backend, itemsize)
    return (size,) * 3


def _open_inputs(values: dict) -> dict:
    missing = [o for o, key in (("--input-a", "input_a"), ("--input-b", "input_b"))
               if values[key] is None]
    if missing:
        raise ParameterError(f"{missing[0]}: missing; C = A B needs both --input-a and "
                             "--input-b")
    refuse_with_input(PARAMS, values, GENERATED_ONLY, source="--input-a/-b")
    a = array_input.open_matrix(values["input_a"], "--input-a", DTYPES[::-1])
    b = array_input.open_matrix(values["input_b"], "--input-b", DTYPES[::-1])
    if a.shape[1] != b.shape[0]:
        raise InputFileError(
            f"--input-a {a.path} is {a.shape[0]} x {a.shape[1]} and --input-b {b.path} is "
            f"{b.shape[0]} x {b.shape[1]}: shape mismatch, A's columns must equal B's rows"
        )
    # An array in memory: named, never held in the values (its source holds it).
    values["input_a"], values["input_b"] = a.path, b.path
    return {"input_a": a, "input_b": b}


# --------------------------------------------------------------------------- baseline


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of one ``A @ B`` (NumPy in this process; CuPy on a GPU worker) on the same data.

    A and B are made whole first, untimed: drawn block by block as the run draws them, or read
    from the inputs. The answer, C's Frobenius norm and sum in float64, is computed after.
    """
    backend = resolved.backend
    a, b, about = operands(resolved)
    xp = importlib.import_module(backend.array_library)
    with dask.config.set(scheduler="sync"):
        a_whole, b_whole = xp.asarray(a.compute()), xp.asarray(b.compute())
    seconds, c = timed(backend, lambda: a_whole @ b_whole)
    wide = c.astype(np.float64, copy=False).ravel()
    return seconds, {"frobenius_norm": math.sqrt(float(to_host(xp.dot(wide, wide)))),
                     "sum": float(to_host(wide.sum()))}


# --------------------------------------------------------------------------- the pipeline


@pipeline(
    "matmul-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy product, reduced block by block to its summaries (and C written)."""
    backend, output = resolved.backend, resolved["output"]
    a, b, about = operands(resolved)
    n, k, m = about["shape"]
    dtype = np.result_type(a.dtype, b.dtype)
    check_seed = shared.check_seed(resolved["seed"], (n, k, m))
    c = da.matmul(a, b)
    parts = {"result": result(c, check_seed, backend.array_library)}
    outputs = []
    if output is not None:
        write, temporary = output_files.store_array(c, output)
        parts["written"] = write
        outputs.append((temporary, output))
    bn, bk, bm = about["blocks"]
    elements = n * k + k * m
    described = {"source": about["source"]}
    if "format" in about:
        described["format"] = about["format"]
        if any(about["rechunked"]):  # A's and B's, None where its blocks are kept
            described["rechunked"] = about["rechunked"]
    else:
        described["seed"] = about["seed"]
    return Workload(
        collection=parts,
        bytes_are="read" if about["sources"] else "generated",
        elements=elements,
        nbytes=n * k * a.dtype.itemsize + k * m * b.dtype.itemsize,
        description={
            **described,
            "shape": [n, k, m],
            "chunks": [bn, bk, bm],
            "blocks": c.npartitions,
            "dtype": dtype.name,
            "flop": 2 * n * k * m,
            **matmul_peak.measure_peak(backend, dtype, (bn, bk, bm)),
        },
        context=shared.MatmulContext(
            Grid(a.chunks), Grid(b.chunks), dtype.name, backend.array_library, check_seed,
            seeds=about["seeds"],
            inputs=about["sources"] and tuple((s.path, s.kind) for s in about["sources"]),
            sources=about["sources"]),
        outputs=outputs,
        present=lambda workload, raw: {"frobenius_norm": raw["result"]["frobenius_norm"],
                                       "sum": raw["result"]["sum"]},
        on_workers={"product": c},
    )
