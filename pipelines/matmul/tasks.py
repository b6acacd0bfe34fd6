"""matmul-pipeline's work on the cluster: the operands, and each block of C reduced where made.

A and B are drawn on the workers from the run's seed (uniform [0, 1), one generator a block, see
:mod:`daskgpu.data.synthetic`; the operands' seeds: :func:`pipelines.matmul.shared.operand_seeds`)
or read from ``.npy``/Zarr inputs or arrays in memory (:func:`operands`).
``dask.array.matmul`` multiplies their blocks with the backend's BLAS; each block of C then
goes, in the same task, to :func:`_block_summary`, which packs its sum of squares, its sum, C's
values at the sampled cells it holds and its products ``C_ij R_j`` with the check's probes R
(both defined in :mod:`pipelines.matmul.shared`) into one small host vector
(:func:`summaries`). :func:`assemble`
turns the packed vectors into the run's result. :mod:`pipelines.matmul.pipeline` assembles the
:class:`~daskgpu.toolkit.registry.Workload` around what is built here.
"""

from __future__ import annotations

import importlib
import math

import dask
import dask.array as da
import numpy as np

from daskgpu.data import array_input, synthetic
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.registry import Resolved
from pipelines.matmul import layout as matmul_layout
from pipelines.matmul import shared

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
                 "sources": (a_src, b_src), "seeds": None,
                 "rechunked": [array_input.rechunking(a_src, (bn, bk)).get("rechunked"),
                               array_input.rechunking(b_src, (bk, bm)).get("rechunked")]}
    else:
        shape = resolved["shape"] or (resolved["size"],) * 3
        dtype = np.dtype(resolved["dtype"])
        bn, bk, bm = matmul_layout.blocks_for(resolved["chunks"], shape, dtype.itemsize,
                                                  backend)
        seed_a, seed_b = shared.operand_seeds(resolved["seed"])
        n, k, m = shape
        a = synthetic.uniform((n, k), (bn, bk), dtype.name, seed_a, backend)
        b = synthetic.uniform((k, m), (bk, bm), dtype.name, seed_b, backend)
        about = {"source": "random uniform [0,1)", "seed": resolved["seed"],
                 "sources": None, "seeds": (seed_a, seed_b)}
    return a, b, {**about, "shape": shape, "dtype": np.dtype(dtype), "blocks": (bn, bk, bm)}


# --------------------------------------------------------------------------- per block of C


def _block_summary(block, block_info=None, m=1, check_seed=0, n=1, width=1, library="numpy",
                   probes=None):
    """[sum of squares, sum, values at the sampled cells it holds, C_ij R_j] of one block of C.

    A host vector shaped (1, 1, width), zero-padded; all in float64. ``probes``: R, (m,
    VECTORS), as :func:`pipelines.matmul.shared.vectors` makes it (made here where not given).
    """
    xp = importlib.import_module(library)
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    wide = block.astype(np.float64, copy=False)
    if probes is None:
        probes = shared.vectors(m, check_seed)
    r = xp.asarray(probes[c0:c1])
    partial = to_host(wide @ r)
    flat = wide.ravel()
    squares = float(to_host(xp.dot(flat, flat)))
    total = float(to_host(wide.sum()))
    rows, cols = shared.sampled_cells(n, m, check_seed)
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
    width = 2 + shared.SAMPLED_CELLS + max(c.chunks[0]) * shared.VECTORS
    # R made once, in a task every summary reads. Its second input also keeps each block of C
    # a task of its own where Dask optimizes the graph (a block with one reader is fused into
    # it, under another key): a run from Python that keeps C on the workers shares C's blocks
    # with this graph, and C is computed once.
    probes = dask.delayed(shared.vectors, pure=True)(m, check_seed)
    return c.map_blocks(
        _block_summary, chunks=((1,) * c.numblocks[0], (1,) * c.numblocks[1], (width,)),
        new_axis=[2], dtype=np.float64, meta=np.empty((0, 0, 0)), m=m, check_seed=check_seed,
        n=n, width=width, library=library, probes=probes,
    )


def result(c: da.Array, check_seed: int, library: str):
    """The run's result, lazily: C's blocks summarised (:func:`summaries`), then assembled.

    The summaries go to :func:`assemble` as their blocks' Delayed values: an array given to
    ``dask.delayed`` would have every key of its graph renamed, C's blocks among them, and a run
    from Python that keeps C would compute it twice.
    """
    blocks = summaries(c, check_seed, library).to_delayed()
    return dask.delayed(_assembled, pure=True)(blocks.tolist(), c.chunks[0])


def _assembled(blocks: list, row_sizes: tuple[int, ...]) -> dict:
    return assemble(np.block(blocks), row_sizes)


def assemble(packed: np.ndarray, row_sizes: tuple[int, ...]) -> dict:
    """The run's result from the packed block summaries: C's norm and sum, and the blocks'.

    ``partials`` is (n, gj, vectors): row p, column block j, vector v of C_ij R_j.
    """
    nv = shared.VECTORS
    cells = shared.SAMPLED_CELLS
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
