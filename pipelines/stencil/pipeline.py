"""stencil-pipeline: explicit 2-D heat diffusion with halo exchange and temporal blocking.

Verification rests on a closed form: from the sine mode u0 = sin(pi i/(n+1)) sin(pi j/(n+1)),
s explicit steps give exactly lambda^s u0, lambda = 1 - 8 alpha sin^2(pi/(2(n+1))), at any size.
The timed graph is the evolution (:mod:`pipelines.stencil.tasks`: u0 generated inside the
first exchange's tasks, one task and two buffers a block per exchange) and one pass a block for
the result, the l2 norm, which also picks u at a few seeded probe cells (u0 there is generated
apart, a few cells) and certifies the grid: every block's weighted row and column sums, and
seeded whole rows and columns. ``verify`` (:mod:`pipelines.stencil.check`) at depth full then
compares every block of the final grid, where it lives, with lambda^s u0 recomputed in float64
(:func:`pipelines.stencil.tasks.max_error`, which evolves the grid again: a check's cost stays
out of the compute), holds it and the probes against the closed form and a rounding bound, the
l2 norm against lambda^s (n+1)/2, and runs a small random grid through the same halo exchange
and kernels on the cluster against NumPy slicing of its own; at depth fast it holds the
certificates, probes and l2 norm against the closed form instead. The closed form, the bound,
the probe cells and the certificates' weights both sides use are in
:mod:`pipelines.stencil.shared`.

This module holds the parameters, ``settle`` (and its checks), the one-process baseline, the
workers' warm-up and ``prepare``, which assembles the workload from what
:mod:`pipelines.stencil.tasks` builds.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, chunking
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.params import (
    Param,
    bounded_float,
    choice,
    chunks,
    non_negative_int,
    output_path,
    positive_int,
)
from daskgpu.toolkit.registry import Resolved, Workload, fresh_seed, pipeline
from daskgpu.toolkit.timing import timed
from daskgpu.verification import Grid
from pipelines.stencil import SUMMARY
from pipelines.stencil.check import CHECK
from pipelines.stencil.shared import (
    MAX_EXCHANGES,
    StencilContext,
    decay,
    unverifiable,
    verifiable,
)
from pipelines.stencil.tasks import (
    evolve,
    evolve_sine,
    initial_probes_array,
    max_error,
    result_parts,
)

CPU_DEFAULT_SIZE = 4000


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

    from daskgpu.kernels.stencil import heat_step_numpy

    def run():
        u = u0
        for _ in range(steps):
            u = heat_step_numpy(u, alpha)
        return u

    seconds, u = timed(backend, run)
    return seconds, {"l2_norm": float(xp.sqrt((u.astype(np.float64) ** 2).sum()))}



def warm_up(backend_name: str) -> None:
    """On a worker as it starts: the kernel for both float dtypes, so no run compiles it.

    CPU workers load the twin from Numba's cache; GPU workers compile the CUDA kernel (or load
    it from the cache) by running it on a small CuPy grid, as a run's blocks call it.
    """
    from daskgpu.kernels.stencil import heat_steps_in_place

    xp = backends.array_module(backend_name)
    for dtype in (np.float64, np.float32):
        grid = xp.zeros((8, 8), dtype)
        heat_steps_in_place(grid, xp.empty_like(grid), 0.1, 2)


@pipeline(
    "stencil-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
    warm_up=warm_up,
    worker_modules=("daskgpu.kernels.stencil",),
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy evolution of u0, its l2 norm, and its check against the closed form."""
    backend, n, output = resolved.backend, resolved["size"], resolved["output"]
    steps, alpha = resolved["steps"], resolved["alpha"]
    steps_per_exchange = resolved["steps_per_exchange"]
    dtype = np.dtype(resolved["dtype"])
    block = chunking.resolve_chunks(resolved["chunks"], (n, n), dtype.itemsize, backend)
    u = evolve_sine(n, block, dtype, backend.array_library, steps, alpha, steps_per_exchange)
    sample_seed = fresh_seed()  # the rows and columns handed back whole differ run to run
    parts = {**result_parts(u, n, sample_seed, backend.array_library),
             "probes_u0": initial_probes_array(n, dtype.name)}
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
        context=StencilContext(
            size=n, steps=steps, alpha=alpha, dtype=dtype.name,
            steps_per_exchange=steps_per_exchange, grid=Grid(u.chunks), sample_seed=sample_seed,
            max_error=max_error(u, n, decay(n, alpha, steps), backend.array_library),
            evolve=evolve, backend=backend),
        outputs=outputs,
        present=lambda workload, raw: {"l2_norm": raw["l2_norm"]},
        on_workers={"grid": u},
    )
