"""mean-pipeline: the mean of a large array, random or read from a ``.npy``/Zarr input.

This module holds the parameters, ``settle``, the one-process baseline, ``prepare`` and the
registration. The run reduces every block to its float64 sum and its cells' sums where the
block lives; the small host sums come together in one task that divides their total by the
element count (both built in :mod:`pipelines.mean.tasks`). Its result is the mean, carrying the
per-block and per-cell sums (:class:`~pipelines.mean.shared.CellMean`), so that ``verify`` (in
:mod:`pipelines.mean.check`) can check the sums against the block grid and each other, and
recompute a seeded sample of cells (fast) or blocks (full) by another path.
"""

from __future__ import annotations

import math

import dask.array as da
import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input
from daskgpu.toolkit import chunking
from daskgpu.toolkit.params import (
    Param,
    choice,
    chunks,
    non_negative_int,
    path_or_array,
    positive_int,
    refuse_with_input,
)
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from daskgpu.verification import Grid, replay
from pipelines.mean import SUMMARY
from pipelines.mean.check import CHECK
from pipelines.mean.shared import MeanContext
from pipelines.mean.tasks import input_mean, random_mean

CPU_DEFAULT_SIZE = 10_000


def default_size(backend, itemsize: int) -> int:
    """Side n of the default n x n array: a share of the GPUs' memory, or 10000 on CPU."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return int(math.sqrt(share * backend.device_memory / itemsize))
    return CPU_DEFAULT_SIZE


# --------------------------------------------------------------------------- parameters


PARAMS = (
    Param("size", positive_int, None, "Side n of an n x n random array "
          "[default: a quarter of the GPUs' memory; 10000 on CPU].", "N"),
    Param("chunks", chunks, "auto", "Block size: auto (sized for the device), N, or one "
          "per axis (N,M).", "auto|N[,M]"),
    Param("dtype", choice(("float64", "float32")), "float64", "Element type of random data.",
          "float64|float32", ("float64", "float32")),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("input", path_or_array, None, "Mean of this .npy file or Zarr array instead of "
          "random data (from Python also a NumPy, CuPy or Dask array).", "PATH"),
)
# What only generated data uses: refused, where set, with an --input.
GENERATED_ONLY = ("size", "seed", "dtype")


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the random array for the backend; check the blocks.

    Raises
    ------
    ParameterError
        For options of generated data given with an ``--input``.
    """
    values = dict(values)
    if values["input"] is not None:
        refuse_with_input(PARAMS, values, GENERATED_ONLY)
        source = array_input.open_array(values["input"])
        chunking.check_blocks(values["chunks"], source.shape, source.dtype.itemsize, "--input")
        values["input"] = source.path  # an array in memory: named, never held in the values
        values["dtype"] = None  # the input's own element type is used (reported in data)
        return values, {"input": source}
    itemsize = np.dtype(values["dtype"]).itemsize
    if values["size"] is None:
        values["size"] = default_size(backend, itemsize)
    chunking.check_blocks(values["chunks"], (values["size"],) * 2, itemsize)
    return values, {}


# --------------------------------------------------------------------------- baseline


def baseline(resolved: Resolved) -> tuple[float, float]:
    """Seconds and answer of the same mean in one process, on the same data.

    Random data: every block drawn whole from its own seed with the library's generator
    (NumPy's ``default_rng``, one thread; on a GPU worker the device's, see
    :mod:`daskgpu.toolkit.numeric`) and summed, as the pipeline draws it inside the timed
    compute. An ``input``: the file read block by block with NumPy.
    """
    backend = resolved.backend
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        seconds, (total, _, count) = timed(backend, lambda: array_input.blockwise_sums(source))
        return seconds, total / count
    shape = (resolved["size"],) * 2
    dtype = np.dtype(resolved["dtype"])
    block = chunking.resolve_chunks(resolved["chunks"], shape, dtype.itemsize, backend)
    grid = Grid(da.core.normalize_chunks(block, shape))

    def mean() -> float:
        sums = [float(replay.redraw(resolved["seed"], number, grid.block_shape(number), dtype,
                                    backend.array_library).sum(dtype=np.float64))
                for number in range(grid.blocks)]
        return math.fsum(sums) / math.prod(shape)

    return timed(backend, mean)


# --------------------------------------------------------------------------- the pipeline


@pipeline(
    "mean-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy mean of a random array, or of the input."""
    backend, chunks = resolved.backend, resolved["chunks"]
    if resolved["input"] is not None:
        return _input_workload(backend, resolved["input"], resolved.inputs["input"], chunks)
    return _random_workload(backend, resolved["size"], chunks, resolved["dtype"],
                            resolved["seed"])


def _input_workload(backend, path, source, chunks) -> Workload:
    block = chunking.resolve_chunks(chunks, source.shape, source.dtype.itemsize, backend)
    described = {"source": path, "format": source.kind,
                 **array_input.rechunking(source, block)}
    context = {"source": source}
    return _workload(input_mean(source, block, backend), backend, source.shape, block,
                     source.dtype, described, context)


def _random_workload(backend, size, chunks, dtype, seed) -> Workload:
    # Random data is reduced as it is drawn: see tasks.random_mean.
    dtype = np.dtype(dtype)
    shape = (size, size)
    block = chunking.resolve_chunks(chunks, shape, dtype.itemsize, backend)
    described = {"source": "random uniform [0,1)", "seed": seed}
    context = {"seed": seed, "dtype": dtype.name}
    return _workload(random_mean(shape, block, dtype, seed, backend), backend, shape, block,
                     dtype, described, context)


def _workload(mean, backend, shape, block, dtype, described, context) -> Workload:
    elements = math.prod(shape)
    grid = Grid(da.core.normalize_chunks(block, shape))
    return Workload(
        collection=mean,
        bytes_are="read" if "source" in context else "generated",
        elements=elements,
        nbytes=elements * dtype.itemsize,
        description={
            **described,
            "shape": list(shape),
            "chunks": list(block),
            "blocks": grid.blocks,
            "dtype": str(dtype),
        },
        context=MeanContext(grid, backend.array_library, **context),
        present=lambda workload, raw: float(raw),
    )
