"""stencil-pipeline: explicit 2-D heat diffusion with halo exchange and temporal blocking.

Verification rests on a closed form: from the sine mode u0 = sin(pi i/(n+1)) sin(pi j/(n+1)),
s explicit steps give exactly lambda^s u0, lambda = 1 - 8 alpha sin^2(pi/(2(n+1))), at any size.
The timed graph is the evolution (:mod:`pipelines.stencil_exchange`: u0 generated inside the
first exchange's tasks, one task and two buffers a block per exchange) and one pass a block for
the result, the l2 norm, which also picks u at a few seeded probe cells (u0 there is generated
apart, a few cells). ``verify`` (:mod:`pipelines.stencil_check`) then compares every block of
the final grid, where it lives, with lambda^s u0 recomputed in float64 (:func:`max_error`, which
evolves the grid again: a check's cost stays out of the compute), holds it and the probes
against the closed form and a rounding bound, the l2 norm against lambda^s (n+1)/2, and runs a
small random grid through the same halo exchange and kernels on the cluster against NumPy
slicing of its own. The closed form, the bound and the probe cells both sides use are in
:mod:`pipelines.stencil_data`.
"""

from __future__ import annotations

import importlib
import math

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from daskgpu import chunking
from daskgpu import config as daskgpu_config
from daskgpu import output as output_files
from daskgpu.errors import ParameterError
from daskgpu.kernels.stencil import heat_step_numpy, heat_steps_in_place
from daskgpu.params import (
    Param,
    bounded_float,
    choice,
    chunks,
    non_negative_int,
    output_path,
    positive_int,
)
from daskgpu.registry import Resolved, Workload, pipeline
from daskgpu.timing import timed
from pipelines import stencil_exchange as exchange
from pipelines.stencil_check import MUTATIONS, verify
from pipelines.stencil_data import MAX_EXCHANGES, decay, probe_cells, unverifiable, verifiable
from pipelines.stencil_exchange import evolve_sine, sine_into

CPU_DEFAULT_SIZE = 4000
# Cells of float64 temporaries at once in the comparison with the closed form (32 MiB each).
SLAB_CELLS = 2**22


def default_size(backend, itemsize: int) -> int:
    """Side n of the grid: a share of the GPUs' memory (grid plus buffers), or 4000 on CPU."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return int(math.sqrt(share * backend.device_memory / (4 * itemsize)))
    return CPU_DEFAULT_SIZE


PARAMS = (
    Param("size", positive_int, None, "Side n of an n x n grid [default: 4000 on CPU; on GPUs "
          "a share of their memory].", "N"),
    Param("chunks", chunks, "auto", "Block size: auto (sized for the device), N, or one per "
          "axis (N,M).",
          "auto|N[,M]"),
    Param("steps", non_negative_int, 100, "Explicit time steps.", "N"),
    Param("alpha", bounded_float(0.0, 0.25, "above 0.25 the explicit scheme is unstable"), 0.2,
          "Diffusion coefficient alpha = D dt / dx^2, at most 0.25.", "A"),
    Param("steps_per_exchange", positive_int, 4, "Steps per halo exchange (halo depth): more "
          "steps, fewer exchanges, a little redundant work.", "K"),
    Param("dtype", choice(("float64", "float32")), "float64", "Element type of the grid.",
          "float64|float32", ("float64", "float32")),
    Param("output", output_path((".npy", ".zarr")), None, "Write the final grid to this .npy "
          "file or Zarr directory.", "PATH"),
)


def initial_grid(n: int, block: tuple[int, int], dtype, backend) -> da.Array:
    """u0 = sin(pi i/(n+1)) sin(pi j/(n+1)), i, j = 1..n, generated on the workers."""
    return evolve_sine(n, block, dtype, backend.array_library, 0, 0.0, 1)


def evolve(u: da.Array, steps: int, alpha: float, steps_per_exchange: int) -> da.Array:
    """The lazy grid after ``steps`` updates, exchanging halos every ``steps_per_exchange``."""
    # Dask merges blocks thinner than the halo into their neighbours; only the grid bounds it.
    if steps and steps_per_exchange > min(u.shape):
        raise ParameterError(
            f"--steps-per-exchange {steps_per_exchange}: the halo would be deeper than the "
            f"grid ({min(u.shape)} cells); use at most {min(u.shape)}"
        )
    return exchange.evolve(u, steps, alpha, steps_per_exchange)


def _picks(block, block_info=None, rows=(), cols=()):
    """The block's values at the probe cells it holds, 0 at the others (a host vector)."""
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    picked = np.zeros(len(rows))
    for k, (i, j) in enumerate(zip(rows, cols, strict=True)):
        if r0 <= i < r1 and c0 <= j < c1:
            picked[k] = float(block[i - r0, j - c0])  # one element, to the host
    return picked


def _squares_and_picks(block, block_info=None, rows=(), cols=()):
    """[sum of squares in float64, the probe values] as a host vector shaped (1, 1, width).

    ``einsum`` reads the (strided) block once without a temporary (float32 is accumulated in
    float64 through its buffered cast); the probes are a few single cells.
    """
    squares = float(np.einsum("ij,ij->", block, block, dtype=np.float64))
    values = np.concatenate([[squares], _picks(block, block_info, rows, cols)])
    return values.reshape(1, 1, -1)


def _deviation(block, r0, c0, n, factor, xp) -> float:
    """The largest |block - factor u0| in float64, u0 from its formula, a slab at a time."""
    step = math.pi / (n + 1)
    height, width = block.shape
    along_cols = xp.sin(step * xp.arange(c0 + 1, c0 + width + 1, dtype=np.float64))
    slab = max(1, SLAB_CELLS // max(1, width))
    worst = 0.0
    for top in range(0, height, slab):
        bottom = min(height, top + slab)
        along_rows = xp.sin(step * xp.arange(r0 + top + 1, r0 + bottom + 1, dtype=np.float64))
        expected = factor * along_rows[:, None] * along_cols[None, :]
        difference = block[top:bottom].astype(np.float64) - expected
        worst = max(worst, float(xp.abs(difference).max()))
    return worst


def _block_deviation(block, block_info=None, n=1, factor=1.0, library="numpy"):
    (r0, _r1), (c0, _c1) = block_info[0]["array-location"]
    deviation = _deviation(block, r0, c0, n, factor, importlib.import_module(library))
    return np.full((1, 1, 1), deviation)


def _per_block_vector(u: da.Array, func, width: int, **kwargs) -> da.Array:
    return u.map_blocks(
        func, chunks=((1,) * u.numblocks[0], (1,) * u.numblocks[1], (width,)),
        new_axis=[2], dtype=np.float64, meta=np.empty((0, 0, 0)), **kwargs,
    )


def result_parts(u: da.Array, n: int) -> dict:
    """The timed result: the l2 norm of u, and u at the probe cells, in one pass a block.

    The probes come back summed over the blocks: each is held by one block, zero elsewhere.
    """
    rows, cols = probe_cells(n)
    per_block = _per_block_vector(u, _squares_and_picks, 1 + len(rows), rows=rows, cols=cols)
    return {"l2_norm": da.sqrt(per_block[:, :, 0].sum()),
            "probes": per_block[:, :, 1:].sum(axis=(0, 1))}


def max_error(u: da.Array, n: int, factor: float, library: str) -> da.Array:
    """The lazy largest |u - factor u0| over every cell, block by block where each lives.

    A check, not the result: ``verify`` computes it, after the timed compute (it evolves u
    again, so the timed graph holds nothing of it).
    """
    per_block = _per_block_vector(u, _block_deviation, 1, n=n, factor=factor, library=library)
    return per_block.max()


def initial_probes(n: int, dtype) -> np.ndarray:
    """u0 at the probe cells, each generated as the first exchange generates its block."""
    rows, cols = probe_cells(n)
    values = []
    for i, j in zip(rows, cols, strict=True):
        cell = np.empty((1, 1), dtype=dtype)
        sine_into(cell, int(i), int(j), n)
        values.append(float(cell[0, 0]))
    return np.array(values)


def initial_probes_array(n: int, dtype: str) -> da.Array:
    """:func:`initial_probes` as a one-task Dask array, computed with the run's result."""
    name = "stencil-u0-probes-" + tokenize(n, dtype)
    graph = HighLevelGraph.from_collections(name, {(name, 0): (initial_probes, n, dtype)})
    return da.Array(graph, name, ((len(probe_cells(n)[0]),),), dtype=np.float64)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Size the grid for the backend and refuse what cannot run, before a cluster starts.

    Block sizes that do not fit a 2-D grid, a halo deeper than the grid, graphs too large to
    build (blocks times halo exchanges), and runs whose steps move the grid too little to tell
    from rounding (their result could not be verified).
    """
    values = dict(values)
    if values["size"] is None:
        values["size"] = default_size(backend, np.dtype(values["dtype"]).itemsize)
    _check(**values)
    return values, {}


def _check(*, size, chunks, steps, alpha, steps_per_exchange, dtype, output) -> None:
    exchanges = -(-steps // steps_per_exchange)
    if exchanges > MAX_EXCHANGES:
        raise ParameterError(
            f"--steps {steps}: {exchanges:.3g} halo exchanges of {steps_per_exchange} step(s); "
            f"at most {MAX_EXCHANGES} fit in one graph: fewer --steps or a larger "
            "--steps-per-exchange"
        )
    chunking.check_blocks(chunks, (size, size), np.dtype(dtype).itemsize, layers=exchanges)
    if steps and steps_per_exchange > size:
        raise ParameterError(
            f"--steps-per-exchange {steps_per_exchange}: the halo would be deeper than the "
            f"grid ({size} cells); use at most {size}"
        )
    if not verifiable(size, steps, alpha, dtype):
        raise ParameterError(unverifiable(size, steps, alpha, dtype,
                                           MAX_EXCHANGES * steps_per_exchange))


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of ``steps`` NumPy slicing steps (CuPy on a GPU worker) on the same initial grid.

    The grid u0 is made here, untimed, padded with the fixed zero boundary; each step is
    :func:`daskgpu.kernels.stencil.heat_step_numpy`. The answer, the l2 norm of the final grid
    summed in float64, is computed after the timing.
    """
    backend, n = resolved.backend, resolved["size"]
    steps, alpha = resolved["steps"], resolved["alpha"]
    xp = importlib.import_module(backend.array_library)
    dtype = np.dtype(resolved["dtype"])
    axis = xp.sin(math.pi * xp.arange(1, n + 1, dtype=np.float64) / (n + 1))
    u0 = xp.pad((axis[:, None] * axis[None, :]).astype(dtype), 1)

    def run():
        u = u0
        for _ in range(steps):
            u = heat_step_numpy(u, alpha)
        return u

    seconds, u = timed(backend, run)
    return seconds, {"l2_norm": float(xp.sqrt((u.astype(np.float64) ** 2).sum()))}



def warm_up(backend_name: str) -> None:
    """On a CPU worker as it starts: load the kernel's twin for both float dtypes."""
    if backend_name == "cpu":
        for dtype in (np.float64, np.float32):
            grid = np.zeros((8, 8), dtype)
            heat_steps_in_place(grid, np.empty_like(grid), 0.1, 2)


@pipeline(
    "stencil-pipeline",
    "2-D heat diffusion: explicit 5-point stencil kernel, halo exchange, temporal blocking",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
    mutations=MUTATIONS,
    warm_up=warm_up,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy evolution of u0, its l2 norm, and its check against the closed form."""
    backend, n, output = resolved.backend, resolved["size"], resolved["output"]
    steps, alpha = resolved["steps"], resolved["alpha"]
    steps_per_exchange = resolved["steps_per_exchange"]
    dtype = np.dtype(resolved["dtype"])
    block = chunking.resolve_chunks(resolved["chunks"], (n, n), dtype.itemsize, backend)
    u = evolve_sine(n, block, dtype, backend.array_library, steps, alpha, steps_per_exchange)
    parts = {**result_parts(u, n), "probes_u0": initial_probes_array(n, dtype.name)}
    outputs = []
    if output is not None:
        write, temporary = output_files.store_array(u, output)
        parts["written"] = write
        outputs.append((temporary, output))
    cells = n * n
    return Workload(
        collection=parts,
        bytes_are="moved",
        elements=cells * steps,
        nbytes=2 * cells * steps * dtype.itemsize,
        description={
            "shape": [n, n],
            "chunks": list(block),
            "blocks": u.npartitions,
            "dtype": dtype.name,
            "steps": steps,
            "alpha": alpha,
            "steps_per_exchange": steps_per_exchange,
            "exchanges": math.ceil(steps / steps_per_exchange) if steps else 0,
        },
        context={"size": n, "dtype": dtype.name, "steps": steps, "alpha": alpha,
                 "steps_per_exchange": steps_per_exchange, "evolve": evolve,
                 "max_error": max_error(u, n, decay(n, alpha, steps), backend.array_library)},
        outputs=outputs,
        present=lambda workload, raw: {"l2_norm": raw["l2_norm"]},
    )
