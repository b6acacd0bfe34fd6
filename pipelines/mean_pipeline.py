"""mean-pipeline: the mean of a large array, random or read from a ``.npy``/Zarr input."""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu import array_input, chunking, reductions, synthetic
from daskgpu import config as daskgpu_config
from daskgpu.params import Param, choice, chunks, non_negative_int, optional_path, positive_int
from daskgpu.registry import Resolved, Verification, Workload, pipeline
from daskgpu.timing import time_call

CPU_DEFAULT_SIZE = 10_000
# A random mean may sit this many standard errors from 0.5 before the run is called wrong;
# a correct run fails it with probability about 2e-9.
TOLERANCE_SE = 6.0
# An input's mean, recomputed in float64, may differ by this much relative to mean(|x|).
INPUT_RTOL = 1e-9


def default_size(backend, itemsize: int) -> int:
    """Side n of the default n x n array: a share of the GPUs' memory, or 10000 on CPU."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return int(math.sqrt(share * backend.device_memory / itemsize))
    return CPU_DEFAULT_SIZE


def verify(workload: Workload, value) -> Verification:
    """Random data: |mean - 0.5| within 6 standard errors; input data: recomputed with NumPy."""
    ctx = workload.context
    value = float(value)
    source = ctx.get("source")
    if source is None:
        n = workload.elements
        se = 1.0 / math.sqrt(12.0 * n)
        off = abs(value - 0.5) / se
        ok = off <= TOLERANCE_SE
        return Verification(
            ok,
            f"uniform [0,1) mean {value:.8f} is {off:.2f} standard errors from 0.5 "
            f"(limit {TOLERANCE_SE:g}, n={n})",
        )
    total, absolute, count = array_input.blockwise_sums(source)
    expected = total / count
    if math.isnan(expected) or math.isnan(value):
        ok = math.isnan(expected) and math.isnan(value)
        return Verification(ok, f"input holds NaN; independent NumPy mean is {expected}")
    tolerance = INPUT_RTOL * max(absolute / count, np.finfo(np.float64).tiny)
    ok = abs(value - expected) <= tolerance
    return Verification(
        ok,
        f"independent NumPy recomputation {expected:.12g} vs {value:.12g} "
        f"(tolerance {tolerance:.2g})",
    )


PARAMS = (
    Param("size", positive_int, None, "Side n of an n x n random array "
          "[default: a quarter of the GPUs' memory; 10000 on CPU].", "N"),
    Param("chunks", chunks, "auto", "Block size: auto (sized for the device), N, or one "
          "per axis (N,M).", "auto|N[,M]"),
    Param("dtype", choice(("float64", "float32")), "float64", "Element type of random data.",
          "float64|float32", ("float64", "float32")),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("input", optional_path, None, "Mean of this .npy file or Zarr array instead of "
          "random data.", "PATH"),
)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the random array for the backend; check the blocks."""
    values = dict(values)
    if values["input"] is not None:
        source = array_input.open_array(values["input"])
        chunking.check_blocks(values["chunks"], source.shape, source.dtype.itemsize, "--input")
        return values, {"input": source}
    itemsize = np.dtype(values["dtype"]).itemsize
    if values["size"] is None:
        values["size"] = default_size(backend, itemsize)
    chunking.check_blocks(values["chunks"], (values["size"],) * 2, itemsize)
    return values, {}


def baseline(resolved: Resolved) -> float:
    """Seconds of the same mean in one process: ``default_rng().random((n, n)).mean()``.

    The pipeline draws its random values inside the timed compute, so this does too (NumPy, one
    thread; CuPy on a GPU worker). For an ``input``, the mean of the file read block by block.
    """
    backend = resolved.backend
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        return time_call(backend, lambda: array_input.blockwise_sums(source))
    xp = importlib.import_module(backend.array_library)
    n, dtype = resolved["size"], resolved["dtype"]
    rng = xp.random.default_rng(resolved["seed"])
    return time_call(backend, lambda: float(rng.random((n, n), dtype=dtype).mean()))


@pipeline(
    "mean-pipeline",
    "Mean of a large n x n random array (or of a .npy/Zarr input), verified",
    PARAMS,
    verify,
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
    mean = reductions.mean(array_input.to_dask(source, block, backend))
    described = {"source": path, "format": source.kind}
    return _workload(mean, source.shape, block, source.dtype, described, {"source": source})


def _random_workload(backend, size, chunks, dtype, seed) -> Workload:
    # Random data is reduced as it is drawn: see synthetic.uniform_block_sums.
    dtype = np.dtype(dtype)
    shape = (size, size)
    block = chunking.resolve_chunks(chunks, shape, dtype.itemsize, backend)
    stream = int(daskgpu_config.get(f"{backend.name}.stream-elements"))
    sums = synthetic.uniform_block_sums(shape, block, dtype, seed, backend, stream)
    mean = reductions.mean_from_sums(sums, math.prod(shape))
    described = {"source": "random uniform [0,1)", "seed": seed}
    return _workload(mean, shape, block, dtype, described, {})


def _workload(mean, shape, block, dtype, described, context) -> Workload:
    elements = math.prod(shape)
    blocks = math.prod(math.ceil(n / b) for n, b in zip(shape, block, strict=True))
    return Workload(
        collection=mean,
        elements=elements,
        nbytes=elements * dtype.itemsize,
        description={
            **described,
            "shape": list(shape),
            "chunks": list(block),
            "blocks": blocks,
            "dtype": str(dtype),
        },
        context=context,
    )
