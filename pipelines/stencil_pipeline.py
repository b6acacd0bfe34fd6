"""stencil-pipeline: explicit 2-D heat diffusion with halo exchange and temporal blocking.

Verification rests on a closed form: from the sine mode u0 = sin(pi i/(n+1)) sin(pi j/(n+1)),
s explicit steps give exactly lambda^s u0, lambda = 1 - 8 alpha sin^2(pi/(2(n+1))), at any size.
Next to the reported l2 norm, each block of the final grid is compared where it lives with
lambda^s u0 recomputed in float64 (its largest deviation comes back, with u and u0 at a few
seeded probe cells): that comparison needs the final grid, so it is the one check left in the
timed graph. ``verify`` (:mod:`pipelines.stencil_check`) holds these against the closed form
and a rounding bound, the l2 norm against lambda^s (n+1)/2, and runs a small random grid through
the same kernels on the cluster against NumPy slicing of its own. The closed form, the bound
and the probe cells both sides use are in :mod:`pipelines.stencil_data`.
"""

from __future__ import annotations

import importlib
import math

import dask.array as da
import numpy as np

from daskgpu import chunking, reductions
from daskgpu import config as daskgpu_config
from daskgpu import output as output_files
from daskgpu.errors import ParameterError
from daskgpu.kernels.stencil import heat_step_numpy, heat_steps
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
from pipelines.stencil_check import MUTATIONS, verify
from pipelines.stencil_data import MAX_EXCHANGES, decay, probe_cells, unverifiable, verifiable

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


def _initial_block(block_info=None, n=1, value_dtype="float64", library="numpy"):
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    xp = importlib.import_module(library)
    rows = xp.sin(math.pi * xp.arange(r0 + 1, r1 + 1, dtype=np.float64) / (n + 1))
    cols = xp.sin(math.pi * xp.arange(c0 + 1, c1 + 1, dtype=np.float64) / (n + 1))
    return (rows[:, None] * cols[None, :]).astype(value_dtype)


def initial_grid(n: int, block: tuple[int, int], dtype, backend) -> da.Array:
    """u0 = sin(pi i/(n+1)) sin(pi j/(n+1)), i, j = 1..n, generated on the workers."""
    dtype = np.dtype(dtype)
    return da.map_blocks(
        _initial_block,
        chunks=da.core.normalize_chunks(block, (n, n)),
        dtype=dtype,
        meta=np.empty((0, 0), dtype=dtype),
        n=n,
        value_dtype=dtype.name,
        library=backend.array_library,
    )


def _advance(block, block_info=None, alpha=0.2, steps=1, halo=1):
    """``steps`` updates of one block that carries a ``halo`` from its neighbours.

    At the grid's own edges there is no neighbour: the block is padded there with ``halo``
    zeros (the fixed zero boundary), which are never updated and are cut off again. Padding
    here, in the block's own library, keeps Dask from mixing NumPy padding into CuPy blocks.
    """
    (row, col), (rows, cols) = block_info[0]["chunk-location"], block_info[0]["num-chunks"]
    pad = (
        (halo if row == 0 else 0, halo if row == rows - 1 else 0),
        (halo if col == 0 else 0, halo if col == cols - 1 else 0),
    )
    padded = np.pad(block, pad)  # dispatches to cupy.pad for CuPy blocks
    height, width = padded.shape
    window = (max(1, pad[0][0]), height - max(1, pad[0][1]),
              max(1, pad[1][0]), width - max(1, pad[1][1]))
    result = heat_steps(padded, alpha, steps, window)
    return result[pad[0][0] : height - pad[0][1], pad[1][0] : width - pad[1][1]]


def evolve(u: da.Array, steps: int, alpha: float, steps_per_exchange: int) -> da.Array:
    """The lazy grid after ``steps`` updates, exchanging halos every ``steps_per_exchange``."""
    # Dask merges blocks thinner than the halo into their neighbours; only the grid bounds it.
    if steps and steps_per_exchange > min(u.shape):
        raise ParameterError(
            f"--steps-per-exchange {steps_per_exchange}: the halo would be deeper than the "
            f"grid ({min(u.shape)} cells); use at most {min(u.shape)}"
        )
    remaining = steps
    while remaining:
        k = min(steps_per_exchange, remaining)
        u = u.map_overlap(
            _advance, depth=k, boundary="none", trim=True, dtype=u.dtype,
            meta=np.empty((0, 0), dtype=u.dtype), alpha=alpha, steps=k, halo=k,
        )
        remaining -= k
    return u



def _picks(block, block_info=None, rows=(), cols=()):
    """The block's values at the probe cells it holds, 0 at the others (a host vector)."""
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    picked = np.zeros(len(rows))
    for k, (i, j) in enumerate(zip(rows, cols, strict=True)):
        if r0 <= i < r1 and c0 <= j < c1:
            picked[k] = float(block[i - r0, j - c0])  # one element, to the host
    return picked


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


def _deviation_and_picks(block, block_info=None, n=1, factor=1.0, rows=(), cols=(),
                         library="numpy"):
    """[max |block - factor u0|, the probe values] as a host vector shaped (1, 1, width)."""
    (r0, _r1), (c0, _c1) = block_info[0]["array-location"]
    deviation = _deviation(block, r0, c0, n, factor, importlib.import_module(library))
    values = np.concatenate([[deviation], _picks(block, block_info, rows, cols)])
    return values.reshape(1, 1, -1)


def _picks_block(block, block_info=None, rows=(), cols=()):
    return _picks(block, block_info, rows, cols).reshape(1, 1, -1)


def _per_block_vector(u: da.Array, func, width: int, **kwargs) -> da.Array:
    return u.map_blocks(
        func, chunks=((1,) * u.numblocks[0], (1,) * u.numblocks[1], (width,)),
        new_axis=[2], dtype=np.float64, meta=np.empty((0, 0, 0)), **kwargs,
    )


def closed_form_parts(u: da.Array, u0: da.Array, n: int, factor: float, library: str) -> dict:
    """The lazy check of u against ``factor`` u0 in every block, and the probes of u and u0.

    The probes come back summed over the blocks: each is held by one block, zero elsewhere.
    """
    rows, cols = probe_cells(n)
    per_block = _per_block_vector(u, _deviation_and_picks, 1 + len(rows), n=n, factor=factor,
                                  rows=rows, cols=cols, library=library)
    initial = _per_block_vector(u0, _picks_block, len(rows), rows=rows, cols=cols)
    return {
        "max_error": per_block[:, :, 0].max(),
        "probes": per_block[:, :, 1:].sum(axis=(0, 1)),
        "probes_u0": initial.sum(axis=(0, 1)),
    }


def _sum_squares(block):
    return [float((block.astype(np.float64) ** 2).sum())]


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



@pipeline(
    "stencil-pipeline",
    "2-D heat diffusion: explicit 5-point stencil kernel, halo exchange, temporal blocking",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
    mutations=MUTATIONS,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy evolution of u0, its l2 norm, and its check against the closed form."""
    backend, n, output = resolved.backend, resolved["size"], resolved["output"]
    steps, alpha = resolved["steps"], resolved["alpha"]
    steps_per_exchange = resolved["steps_per_exchange"]
    dtype = np.dtype(resolved["dtype"])
    block = chunking.resolve_chunks(resolved["chunks"], (n, n), dtype.itemsize, backend)
    u0 = initial_grid(n, block, dtype, backend)
    u = evolve(u0, steps, alpha, steps_per_exchange)
    squares = reductions.per_block(u, _sum_squares, 1)
    parts = {
        "l2_norm": da.sqrt(squares.sum()),
        **closed_form_parts(u, u0, n, decay(n, alpha, steps), backend.array_library),
    }
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
            "blocks": u0.npartitions,
            "dtype": dtype.name,
            "steps": steps,
            "alpha": alpha,
            "steps_per_exchange": steps_per_exchange,
            "exchanges": math.ceil(steps / steps_per_exchange) if steps else 0,
        },
        context={"size": n, "dtype": dtype.name, "steps": steps, "alpha": alpha,
                 "steps_per_exchange": steps_per_exchange, "evolve": evolve},
        outputs=outputs,
        present=lambda workload, raw: {"l2_norm": raw["l2_norm"]},
    )
