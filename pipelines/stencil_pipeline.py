"""stencil-pipeline: explicit 2-D heat diffusion with halo exchange and temporal blocking."""

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
from daskgpu.registry import Resolved, Verification, Workload, pipeline
from daskgpu.timing import time_call

CPU_DEFAULT_SIZE = 4000
# The closed form must hold to this many units of the dtype's epsilon per step taken.
EPS_PER_STEP = {"float64": 8.0, "float32": 8.0}
CHECK_GRID = (41, 37)
CHECK_CHUNKS = (12, 10)
# Halo exchanges in one graph at most: each adds a map_overlap layer, and building the graph
# grows faster than linearly with them (about 2 s for 1000 here, 50 s for 5000).
MAX_EXCHANGES = 2_000


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


def eigenvalue(n: int, alpha: float) -> float:
    """The factor u0 is multiplied by in one step: 1 - 8 alpha sin^2(pi / (2 (n + 1)))."""
    return 1.0 - 8.0 * alpha * math.sin(math.pi / (2 * (n + 1))) ** 2


def _max_abs(block):
    return [float(abs(block).max())]


def _sum_squares(block):
    return [float((block.astype(np.float64) ** 2).sum())]


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Size the grid for the backend and refuse what cannot run, before a cluster starts.

    Block sizes that do not fit a 2-D grid, a halo deeper than the grid, and graphs too large
    to build (blocks times halo exchanges).
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


def _slicing_matches(steps, alpha, steps_per_exchange, dtype) -> tuple[bool, float]:
    """The same Dask machinery on a small random grid against NumPy slicing, here."""
    rng = np.random.default_rng(0)
    grid = rng.random(CHECK_GRID).astype(dtype)
    padded = np.pad(grid, 1)
    expected = padded
    for _ in range(steps):
        expected = heat_step_numpy(expected, alpha)
    k = min(steps_per_exchange, min(CHECK_CHUNKS))
    result = evolve(da.from_array(grid, chunks=CHECK_CHUNKS), steps, alpha, k)
    got = result.compute(scheduler="sync")
    error = float(np.abs(got - expected[1:-1, 1:-1]).max())
    return bool(error <= 64 * np.finfo(dtype).eps * max(1, steps)), error


def verify(workload: Workload, raw: dict) -> Verification:
    """The closed form lambda^s u0 at any size, and NumPy slicing on a small random grid."""
    ctx = workload.context
    dtype = np.dtype(ctx["dtype"])
    limit = EPS_PER_STEP[dtype.name] * np.finfo(dtype).eps * max(1, ctx["steps"])
    closed = raw["max_error"] <= limit
    small_ok, small_error = _slicing_matches(
        min(ctx["steps"], 12), ctx["alpha"], ctx["steps_per_exchange"], dtype
    )
    return Verification(
        bool(closed and small_ok),
        f"max |u - lambda^s u0| = {raw['max_error']:.3g} (limit {limit:.3g}); small random "
        f"grid vs NumPy slicing: max error {small_error:.3g}",
    )


def baseline(resolved: Resolved) -> float:
    """Seconds of ``steps`` NumPy slicing steps (CuPy on a GPU worker) on the same initial grid.

    The grid u0 is made here, untimed, padded with the fixed zero boundary; each step is
    :func:`daskgpu.kernels.stencil.heat_step_numpy`.
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

    return time_call(backend, run)


@pipeline(
    "stencil-pipeline",
    "2-D heat diffusion: explicit 5-point stencil kernel, halo exchange, temporal blocking",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy evolution of u0 and its check against the closed form."""
    backend, n, output = resolved.backend, resolved["size"], resolved["output"]
    steps, alpha = resolved["steps"], resolved["alpha"]
    steps_per_exchange = resolved["steps_per_exchange"]
    dtype = np.dtype(resolved["dtype"])
    block = chunking.resolve_chunks(resolved["chunks"], (n, n), dtype.itemsize, backend)
    u0 = initial_grid(n, block, dtype, backend)
    u = evolve(u0, steps, alpha, steps_per_exchange)
    factor = eigenvalue(n, alpha) ** steps
    error = reductions.per_block(u - factor * u0, _max_abs, 1)
    squares = reductions.per_block(u, _sum_squares, 1)
    parts = {
        "max_error": error.max(),
        "l2_norm": da.sqrt(squares.sum()),
    }
    outputs = []
    if output is not None:
        write, temporary = output_files.store_array(u, output)
        parts["written"] = write
        outputs.append((temporary, output))
    cells = n * n
    return Workload(
        collection=parts,
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
        context={"dtype": dtype.name, "steps": steps, "alpha": alpha,
                 "steps_per_exchange": steps_per_exchange},
        outputs=outputs,
        present=lambda workload, raw: {k: raw[k] for k in ("l2_norm", "max_error")},
    )
