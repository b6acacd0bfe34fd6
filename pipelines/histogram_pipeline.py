"""histogram-pipeline: numpy.histogram of a large array, with a custom kernel per chunk."""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu import array_input, chunking, reductions, synthetic
from daskgpu import config as daskgpu_config
from daskgpu import output as output_files
from daskgpu.backends import to_host
from daskgpu.errors import ParameterError
from daskgpu.kernels.histogram import histogram
from daskgpu.params import (
    Param,
    choice,
    chunks,
    non_negative_int,
    optional_path,
    output_path,
    positive_int,
    value_range,
)
from daskgpu.registry import Resolved, Verification, Workload, pipeline
from daskgpu.timing import time_call

CPU_DEFAULT_VALUES = 100_000_000
# The exact comparison with numpy.histogram runs on this many leading values (all, if fewer).
SAMPLE_SIZE = 1_000_000
MAX_BINS = 10_000_000
# The histogram kernel reads these element types; other inputs are refused up front.
INPUT_DTYPES = ("float32", "float64")


def default_values(backend, itemsize: int) -> int:
    """Number of values: a quarter of the GPUs' memory, or 10^8 on CPU."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        return int(share * backend.device_memory / itemsize)
    return CPU_DEFAULT_VALUES


def _bins(value) -> int:
    bins = positive_int(value)
    if bins > MAX_BINS:
        raise ValueError(f"at most {MAX_BINS} bins")
    return bins


PARAMS = (
    Param("values", positive_int, None, "Number of random values [default: 10^8 on CPU; a "
          "quarter of the GPUs' memory].", "N"),
    Param("chunks", chunks, "auto", "Block size: auto (sized for the device) or N values.",
          "auto|N"),
    Param("dtype", choice(("float64", "float32")), "float64", "Element type of random data.",
          "float64|float32", ("float64", "float32")),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("distribution", choice(synthetic.DISTRIBUTIONS), "uniform",
          "Random values: uniform [0,1) or standard normal.", "uniform|normal",
          synthetic.DISTRIBUTIONS),
    Param("bins", _bins, 256, "Number of equal-width bins.", "N"),
    Param("range", value_range, None, "Bin range LO HI [default: the data's finite min and max, "
          "found in a first pass].", "LO HI", nargs=2),
    Param("input", optional_path, None, "Histogram of this .npy file or Zarr array instead of "
          "random data.", "PATH"),
    Param("output", output_path((".npy", ".csv")), None, "Write bin edges and counts to this "
          ".npy or .csv file.", "PATH"),
)


def _block_histogram(block, lo, hi, bins):
    return histogram(block, lo, hi, bins)


def _block_in_range(block, lo, hi):
    # Counted without the kernel: an independent check of the counts' total.
    return [int(((block >= lo) & (block <= hi)).sum())]


def _block_finite_extent(block):
    finite = block[np.isfinite(block)]
    if finite.size == 0:
        return [np.inf, -np.inf]
    return [float(finite.min()), float(finite.max())]


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the random data for the backend; check the blocks."""
    values = dict(values)
    if values["input"] is not None:
        source = array_input.open_array(values["input"], dtypes=INPUT_DTYPES)
        chunking.check_blocks(values["chunks"], source.shape, source.dtype.itemsize, "--input")
        return values, {"input": source}
    itemsize = np.dtype(values["dtype"]).itemsize
    if values["values"] is None:
        values["values"] = default_values(backend, itemsize)
    chunking.check_blocks(values["chunks"], (values["values"],), itemsize)
    return values, {}


def _data(resolved: Resolved):
    backend, chunks = resolved.backend, resolved["chunks"]
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        block = chunking.resolve_chunks(chunks, source.shape, source.dtype.itemsize, backend)
        return array_input.to_dask(source, block, backend), {"source": resolved["input"]}
    dtype = np.dtype(resolved["dtype"])
    shape = (resolved["values"],)
    block = chunking.resolve_chunks(chunks, shape, dtype.itemsize, backend)
    seed, distribution = resolved["seed"], resolved["distribution"]
    data = synthetic.random_array(shape, block, dtype, seed, backend, distribution)
    return data, {"source": f"random {distribution}", "seed": seed}


def _finite_range(data) -> tuple[float, float]:
    extent = reductions.per_block(data, _block_finite_extent, 2)
    axes = reductions.grid_axes(extent)
    lo, hi = dask.compute(extent[..., 0].min(axis=axes), extent[..., 1].max(axis=axes))
    lo, hi = float(lo), float(hi)
    if not math.isfinite(lo):
        raise ParameterError("the data holds no finite value to take a range from; give --range")
    if lo == hi:  # numpy.histogram's rule for a single value
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


def _sample(data):
    rows = max(1, SAMPLE_SIZE // max(1, math.prod(data.shape[1:])))
    return data[:rows].rechunk(-1)


def verify(workload: Workload, raw: dict) -> Verification:
    """Counts add up to the in-range values; on a sample they equal numpy.histogram's."""
    ctx = workload.context
    bins, lo, hi = ctx["bins"], ctx["lo"], ctx["hi"]
    counts = raw["counts"]
    total, in_range = int(counts[:bins].sum()), int(raw["in_range"])
    sample = np.asarray(raw["sample"]).ravel()
    expected, _ = np.histogram(sample, bins=bins, range=(lo, hi))
    sample_nan = int(np.isnan(sample).sum())
    same = np.array_equal(expected, raw["sample_counts"][:bins])
    same_nan = sample_nan == int(raw["sample_counts"][bins])
    ok = bool(total == in_range and same and same_nan)
    return Verification(
        ok,
        f"counts sum to {total} of {in_range} in-range values; on {sample.size} values the "
        f"counts {'equal' if same and same_nan else 'DIFFER from'} numpy.histogram's",
    )


def baseline(resolved: Resolved) -> float:
    """Seconds of ``numpy.histogram`` (``cupy.histogram`` on a GPU worker) of the same values.

    The values are generated (or read) here first, untimed, as are the default range's min and
    max, which the pipeline also finds before its timed compute.
    """
    backend, bins, range = resolved.backend, resolved["bins"], resolved["range"]
    data, _ = _data(resolved)
    values = data.compute(scheduler="sync").ravel()
    xp = importlib.import_module(backend.array_library)
    if range is not None:
        lo, hi = range
    else:
        finite = values[xp.isfinite(values)]
        if finite.size == 0:
            raise ParameterError("the data holds no finite value to take a range from")
        lo, hi = float(finite.min()), float(finite.max())
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
    return time_call(backend, lambda: xp.histogram(values, bins=bins, range=(lo, hi)))


@pipeline(
    "histogram-pipeline",
    "Histogram of a large array (numpy.histogram semantics) with a custom kernel per chunk",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy histogram; the default range is found by a first pass over the data."""
    bins, range, output = resolved["bins"], resolved["range"], resolved["output"]
    data, described = _data(resolved)
    lo, hi = range if range is not None else _finite_range(data)
    kwargs = {"lo": lo, "hi": hi, "bins": bins}
    per_block = reductions.per_block(data, _block_histogram, bins + 1, "int64", **kwargs)
    in_range = reductions.per_block(data, _block_in_range, 1, "int64", lo=lo, hi=hi)
    sample = _sample(data)
    sample_counts = reductions.per_block(sample, _block_histogram, bins + 1, "int64", **kwargs)
    collection = dict(
        counts=per_block.sum(axis=reductions.grid_axes(per_block)),
        in_range=in_range.sum(),
        sample=sample.map_blocks(to_host),
        sample_counts=sample_counts.sum(axis=reductions.grid_axes(sample_counts)),
    )
    edges = np.linspace(lo, hi, bins + 1)
    elements = math.prod(data.shape)
    return Workload(
        collection=collection,
        elements=elements,
        nbytes=elements * data.dtype.itemsize,
        description={
            **described,
            "shape": list(data.shape),
            "chunks": list(data.chunksize),
            "blocks": data.npartitions,
            "dtype": str(data.dtype),
            "bins": bins,
            "range": [lo, hi],
        },
        context={"bins": bins, "lo": lo, "hi": hi, "edges": edges, "output": output},
        present=_present,
        save=_save if output is not None else None,
    )


def _present(workload: Workload, raw: dict) -> dict:
    bins = workload.context["bins"]
    counts = raw["counts"]
    return {"counts": counts[:bins], "edges": workload.context["edges"],
            "nan": int(counts[bins]), "in_range": int(counts[:bins].sum())}


def _save(workload: Workload, value: dict) -> None:
    edges = value["edges"]
    output_files.save_table(
        workload.context["output"],
        {"left": edges[:-1], "right": edges[1:], "count": value["counts"]},
    )
