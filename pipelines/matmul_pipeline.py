"""matmul-pipeline: C = A B for an n x k and a k x m matrix, block by block with the backend's BLAS.

A and B are drawn on the workers from the run's seed (uniform [0, 1), one generator a block, see
:mod:`daskgpu.synthetic`) or read from ``.npy``/Zarr inputs; ``dask.array.matmul`` multiplies
their blocks with NumPy (OpenBLAS/MKL) or CuPy (cuBLAS). C is never gathered: each block of C is
reduced where it is made, in the same task, to a few numbers (its sum of squares, its sum, C's
values at seeded sample cells it holds, and its products ``C_ij R_j`` with the verification
vectors R), which come together as the run's result: the Frobenius norm and the sum of C plus
the per-block material :mod:`pipelines.matmul_check` verifies (Freivalds' check per block against
A (B R) recomputed apart, sampled cells as dot products). ``--output`` writes C itself (Zarr or
``.npy``), atomically.

Blocks: :mod:`pipelines.matmul_layout`; the single-device peak measured at the start of a run:
:mod:`pipelines.matmul_peak`.
"""

from __future__ import annotations

import importlib
import math

import dask
import dask.array as da
import numpy as np

from daskgpu import array_input, synthetic
from daskgpu import config as daskgpu_config
from daskgpu import output as output_files
from daskgpu.backends import to_host
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.params import (
    Param,
    choice,
    chunks,
    non_negative_int,
    optional_path,
    output_path,
    positive_int,
    refuse_with_input,
)
from daskgpu.registry import Resolved, Workload, pipeline
from daskgpu.timing import timed
from pipelines import matmul_data, matmul_layout, matmul_peak
from pipelines.matmul_check import MUTATIONS, verify

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
    Param("input_a", optional_path, None, "Read A from this .npy file or Zarr array "
          "(with --input-b).", "PATH"),
    Param("input_b", optional_path, None, "Read B from this .npy file or Zarr array "
          "(with --input-a).", "PATH"),
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
    return {"input_a": a, "input_b": b}


# --------------------------------------------------------------------------- operands


def operands(resolved: Resolved) -> tuple[da.Array, da.Array, dict]:
    """The lazy A and B of a run, and what describes them (source, seeds, blocks)."""
    backend = resolved.backend
    if resolved["input_a"] is not None:
        a_src, b_src = resolved.inputs["input_a"], resolved.inputs["input_b"]
        shape = (a_src.shape[0], a_src.shape[1], b_src.shape[1])
        dtype = np.result_type(a_src.dtype, b_src.dtype)
        bn, bk, bm = matmul_layout.blocks_for(resolved["chunks"], shape, dtype.itemsize,
                                                  backend)
        a = array_input.to_dask(a_src, (bn, bk), backend)
        b = array_input.to_dask(b_src, (bk, bm), backend)
        about = {"source": [a_src.path, b_src.path], "format": [a_src.kind, b_src.kind],
                 "sources": (a_src, b_src), "seeds": None}
    else:
        shape = resolved["shape"] or (resolved["size"],) * 3
        dtype = np.dtype(resolved["dtype"])
        bn, bk, bm = matmul_layout.blocks_for(resolved["chunks"], shape, dtype.itemsize,
                                                  backend)
        seed_a, seed_b = matmul_data.operand_seeds(resolved["seed"])
        n, k, m = shape
        a = synthetic.uniform((n, k), (bn, bk), dtype.name, seed_a, backend)
        b = synthetic.uniform((k, m), (bk, bm), dtype.name, seed_b, backend)
        about = {"source": "random uniform [0,1)", "seed": resolved["seed"],
                 "sources": None, "seeds": (seed_a, seed_b)}
    return a, b, {**about, "shape": shape, "dtype": np.dtype(dtype), "blocks": (bn, bk, bm)}


# --------------------------------------------------------------------------- per block of C


def _block_summary(block, block_info=None, m=1, check_seed=0, n=1, width=1, library="numpy"):
    """[sum of squares, sum, values at the sampled cells it holds, C_ij R_j] of one block of C.

    A host vector shaped (1, 1, width), zero-padded; all in float64.
    """
    xp = importlib.import_module(library)
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    wide = block.astype(np.float64, copy=False)
    r = xp.asarray(matmul_data.vectors(m, check_seed)[c0:c1])
    partial = to_host(wide @ r)
    flat = wide.ravel()
    squares = float(to_host(xp.dot(flat, flat)))
    total = float(to_host(wide.sum()))
    rows, cols = matmul_data.sampled_cells(n, m, check_seed)
    held = np.flatnonzero((rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1))
    picks = np.zeros(len(rows))
    if held.size:
        picks[held] = to_host(wide[xp.asarray(rows[held] - r0), xp.asarray(cols[held] - c0)])
    out = np.zeros(width)
    out[0], out[1] = squares, total
    out[2:2 + len(rows)] = picks
    out[2 + len(rows):2 + len(rows) + partial.size] = partial.ravel()
    return out.reshape(1, 1, width)


def summaries(c: da.Array, check_seed: int, library: str) -> da.Array:
    """One packed host vector per block of C (see :func:`_block_summary`), shaped (gi, gj, W)."""
    n, m = c.shape
    width = 2 + matmul_data.SAMPLED_CELLS + max(c.chunks[0]) * (1 + matmul_data.NORMAL_VECTORS)
    return c.map_blocks(
        _block_summary, chunks=((1,) * c.numblocks[0], (1,) * c.numblocks[1], (width,)),
        new_axis=[2], dtype=np.float64, meta=np.empty((0, 0, 0)), m=m, check_seed=check_seed,
        n=n, width=width, library=library,
    )


def assemble(packed: np.ndarray, row_sizes: tuple[int, ...]) -> dict:
    """The run's result from the packed block summaries: C's norm and sum, and the blocks'.

    ``partials`` is (n, gj, vectors): row p, column block j, vector v of C_ij R_j.
    """
    nv = 1 + matmul_data.NORMAL_VECTORS
    cells = matmul_data.SAMPLED_CELLS
    squares, sums = packed[:, :, 0], packed[:, :, 1]
    gj = packed.shape[1]
    parts = [packed[i, :, 2 + cells:2 + cells + rows * nv].reshape(gj, rows, nv).transpose(1, 0, 2)
             for i, rows in enumerate(row_sizes)]
    return {
        "frobenius_norm": math.sqrt(math.fsum(squares.ravel().tolist())),
        "sum": math.fsum(sums.ravel().tolist()),
        "block_squares": squares.copy(),
        "block_sums": sums.copy(),
        "samples": packed[:, :, 2:2 + cells].sum(axis=(0, 1)),
        "block_rows": np.array(row_sizes),
        "partials": np.concatenate(parts, axis=0),
    }


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
    "Matrix product C = A B of two large matrices with the backend's BLAS per block, "
    "verified by Freivalds' check",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
    mutations=MUTATIONS,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy product, reduced block by block to its summaries (and C written)."""
    backend, output = resolved.backend, resolved["output"]
    a, b, about = operands(resolved)
    n, k, m = about["shape"]
    dtype = np.result_type(a.dtype, b.dtype)
    check_seed = matmul_data.check_seed(resolved["seed"], (n, k, m))
    c = da.matmul(a, b)
    packed = summaries(c, check_seed, backend.array_library)
    parts = {"result": dask.delayed(assemble, pure=True)(packed, c.chunks[0])}
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
        context={"shape": (n, k, m), "dtype": dtype.name, "check_seed": check_seed,
                 "a_chunks": a.chunks, "b_chunks": b.chunks,
                 "seeds": about["seeds"], "sources": about["sources"],
                 "library": backend.array_library},
        outputs=outputs,
        present=lambda workload, raw: {"frobenius_norm": raw["result"]["frobenius_norm"],
                                       "sum": raw["result"]["sum"]},
    )
