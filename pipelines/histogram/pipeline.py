"""histogram-pipeline: numpy.histogram of a large array, with a custom kernel per chunk.

This module holds the parameters, ``settle``, the one-process baseline, ``prepare`` (the
workload, its edges and its presented value) and the registration. What runs on the workers,
the data, the kernel on every block and the rows of the result, is built in
:mod:`pipelines.histogram.tasks`; the layout of those rows, which the check reads too, is in
:mod:`pipelines.histogram.shared`. The independent verification and its mutations live in
:mod:`pipelines.histogram.check`.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input, synthetic
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, chunking
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
    value_range,
)
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from daskgpu.verification import Grid, fingerprint_weights
from pipelines.histogram import SUMMARY, shared
from pipelines.histogram.check import CHECK
from pipelines.histogram.shared import HistogramContext
from pipelines.histogram.tasks import (
    finite_range,
    histograms,
    make_data,
    sampled_blocks,
    widened,
)

CPU_DEFAULT_VALUES = 100_000_000
MAX_BINS = 10_000_000
# The histogram kernel reads these element types; other inputs are refused up front.
INPUT_DTYPES = ("float32", "float64")
# Options that only shape generated data: an --input refuses them (unless left at the default).
GENERATED_ONLY = ("values", "dtype", "seed", "distribution")
#: What ``--output`` writes: NumPy's pair of arrays, or a table of one row per bin.
OUTPUT_SUFFIXES = (".npz", ".csv")


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


def _output(value) -> str | None:
    """A ``.npz`` or ``.csv`` file to write; a ``.npy`` is refused with what to name instead."""
    text = str(value).strip()
    if text.lower().endswith(".npy"):
        raise ValueError("a histogram is two arrays, counts and edges: name a .npz file "
                         "(np.load gives both) or a .csv table")
    return _npz_or_csv(value)


_npz_or_csv = output_path(OUTPUT_SUFFIXES)
_output.writes_output = True

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
    Param("input", path_or_array, None, "Histogram of this .npy file or Zarr array instead of "
          "random data (from Python also a NumPy, CuPy or Dask array).", "PATH"),
    Param("output", _output, None, "Write the counts and edges to this .npz file "
          "(np.load gives counts and edges) or .csv table (left, right, count).", "PATH"),
)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the random data for the backend; check the blocks."""
    values = dict(values)
    if values["input"] is not None:
        refuse_with_input(PARAMS, values, GENERATED_ONLY)
        source = array_input.open_array(values["input"], dtypes=INPUT_DTYPES)
        chunking.check_blocks(values["chunks"], source.shape, source.dtype.itemsize, "--input")
        values["input"] = source.path  # an array in memory: named, never held in the values
        # Not used for an input (its own dtype is reported with the data).
        values["dtype"] = values["distribution"] = None
        return values, {"input": source}
    itemsize = np.dtype(values["dtype"]).itemsize
    if values["values"] is None:
        values["values"] = default_values(backend, itemsize)
    chunking.check_blocks(values["chunks"], (values["values"],), itemsize)
    return values, {}


def _edges(dtype, lo: float, hi: float, bins: int) -> np.ndarray:
    """The edges numpy.histogram bins data of ``dtype`` with (float32 data: float32 edges)."""
    return np.histogram_bin_edges(np.empty(0, dtype), bins, range=(lo, hi)).astype(np.float64)


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of ``numpy.histogram`` (``cupy.histogram`` on a GPU worker), and its answer.

    The values are generated (or read) here first, untimed, as are the default range's min and
    max, which the pipeline also finds before its timed compute, and the NaN count.
    """
    backend, bins, range = resolved.backend, resolved["bins"], resolved["range"]
    data, _ = make_data(resolved)
    values = data.compute(scheduler="sync").ravel()
    xp = importlib.import_module(backend.array_library)
    if range is not None:
        lo, hi = range
    else:
        finite = values[xp.isfinite(values)]
        if finite.size == 0:
            raise ParameterError("the data holds no finite value to take a range from")
        lo, hi = widened(float(finite.min()), float(finite.max()))
    seconds, (counts, edges) = timed(backend,
                                     lambda: xp.histogram(values, bins=bins, range=(lo, hi)))
    counts = np.asarray(to_host(counts), dtype=np.int64)
    answer = {"counts": counts, "edges": np.asarray(to_host(edges), dtype=np.float64),
              "nan": int(xp.isnan(values).sum()), "in_range": int(counts.sum())}
    return seconds, answer


def warm_up(backend_name: str) -> None:
    """On a worker as it starts: the kernel for both float dtypes, so no run compiles it.

    CPU workers load the twin from Numba's cache; GPU workers compile the CUDA kernel (or load
    it from the cache) by running it on a small CuPy array, as a run's blocks call it.
    """
    from daskgpu.kernels.histogram import histogram

    xp = backends.array_module(backend_name)
    for dtype in (np.float64, np.float32):
        histogram(xp.linspace(0, 1, 64, dtype=dtype), 0.0, 1.0, 4)


@pipeline(
    "histogram-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
    warm_up=warm_up,
    worker_modules=("daskgpu.kernels.histogram",),
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy histogram; the default range is found by a first pass over the data."""
    bins, range, output = resolved["bins"], resolved["range"], resolved["output"]
    data, described = make_data(resolved)
    lo, hi, extremes = (*range, None) if range is not None else finite_range(data)
    random = resolved["input"] is None
    grid = Grid(data.chunks)
    # Input data has no seed: its sampled blocks and cells follow from its size.
    context = HistogramContext(
        grid, bins, lo, hi, _edges(data.dtype, lo, hi, bins), data.dtype.name,
        resolved.backend.array_library,
        sampled_blocks(grid.blocks, resolved["seed"] if random else math.prod(data.shape)),
        seed=resolved["seed"], distribution=resolved["distribution"],
        source=None if random else resolved.inputs["input"], range_given=range,
        extremes=extremes, output=output)
    drawn = ({"seed": context.seed, "dtype": context.dtype, "distribution": context.distribution}
             if random and context.library == "numpy" else None)
    # The rows (the counts, then the sampled blocks'), and the certificates beside them
    # (pipelines.histogram.shared).
    collection = histograms(data, lo, hi, bins, context.sampled, context.cuts(),
                            fingerprint_weights(bins + 1, context.sample_seed), drawn)
    elements = math.prod(data.shape)
    return Workload(
        collection=collection,
        bytes_are="generated" if resolved["input"] is None else "read",
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
        context=context,
        present=_present,
        save=_save if output is not None else None,
    )


def _present(workload: Workload, raw: dict) -> dict:
    bins = workload.context.bins
    counts = shared.summed(raw["histograms"])
    in_bins = shared.bin_counts(counts, bins)
    return {"counts": in_bins, "edges": workload.context.edges,
            "nan": int(shared.nan_count(counts, bins)), "in_range": int(in_bins.sum())}


def _save(workload: Workload, value: dict, path: str) -> None:
    """``.npz``: ``counts`` and ``edges`` as ``numpy.histogram`` returns them; ``.csv``: a table.

    The edges take the data's float type, as ``numpy.histogram``'s do (float32 for float32
    data); the counts are int64.
    """
    edges = value["edges"]
    if workload.context.output.lower().endswith(".csv"):
        output_files.save_table(
            path, {"left": edges[:-1], "right": edges[1:], "count": value["counts"]},
            like=workload.context.output)
        return
    with output_files.atomic(path) as temporary, open(temporary, "wb") as f:
        np.savez(f, counts=np.asarray(value["counts"], dtype=np.int64),
                 edges=edges.astype(workload.context.dtype))
