"""fft-pipeline: the 2-D FFT of an n x q array held in blocks, which ``dask.array.fft`` cannot do.

``dask.array.fft.fft2`` needs each transformed axis in one chunk. Here the array is held in
slabs: row blocks of whole rows, transformed along axis 1 (``numpy.fft`` or ``cupy.fft`` per
block, see :mod:`pipelines.fft.tasks`); the transpose, an all-to-all exchange of blocks
(every column slab gathers one piece from every row slab); then the transform along axis 0.
``--inverse`` gives ``ifft2``, ``--real`` ``rfft2`` (the half spectrum, n x (n/2 + 1)), both
``irfft2`` of an ``--input`` half spectrum (held transposed: its column blocks first, the
column transforms, the transpose, then the rows' real inverses; see
:func:`pipelines.fft.layout.layout`).

The input is drawn on the workers from the seed (planted sinusoids plus noise, see
:mod:`pipelines.fft.shared`) or read from a ``.npy``/Zarr array or an array in memory (NumPy,
CuPy, Dask; a Dask array rechunked to the run's slabs where its blocks differ). The spectrum
is never gathered: each of its blocks is reduced where it is made to its columns' sums of
squares, its part of a seeded projection X s, its largest cells and its values at sampled
cells, and each block of the input to its rows' certificates (x b, b = W s in closed form;
products with the sampled cells' exponentials; sums of squares), which
:mod:`pipelines.fft.check` verifies against the input (Parseval, DFT sums, the planted peaks,
X s = W x b). ``--output`` writes the spectrum, atomically.

A run computes in stages, each kept on the workers before the next (see
:func:`pipelines.fft.stages.drive`; the slabs: :mod:`pipelines.fft.layout`),
so that its time splits into the input, the row transforms, the transpose, the column
transforms and the reductions; the transpose's bytes and bandwidth are reported.
"""

from __future__ import annotations

import importlib
import math
import os
import tempfile

import dask
import numpy as np

from daskgpu.data import array_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit import backends, registry
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
    switch,
)
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from pipelines.fft import SUMMARY, shared
from pipelines.fft import layout as fft_layout
from pipelines.fft import stages as fft_stages
from pipelines.fft import tasks as fft_tasks
from pipelines.fft.check import CHECK
from pipelines.fft.shared import FFTContext

DTYPES = ("complex128", "complex64")
INPUT_DTYPES = ("complex64", "complex128", "float32", "float64")


def side(value) -> int:
    """A positive size n of an n x n array, its bytes within reach (``n * n`` elements)."""
    n = positive_int(value)
    if n * n * 16 > fft_layout.MAX_BYTES:
        raise ValueError(f"an array of {n} x {n} is over {fft_layout.MAX_BYTES / 2**50:g} PiB; "
                         "give a smaller size")
    return n


def shape_pair(value) -> tuple[int, int]:
    """Two positive sides ``N,M`` of an array, its bytes within reach."""
    parts = (list(value) if isinstance(value, (tuple, list))
             else str(value).replace("x", ",").split(","))
    if len(parts) != 2:
        raise ValueError("give two sides, N,M")
    n, m = (positive_int(part) for part in parts)
    if n * m * 16 > fft_layout.MAX_BYTES:
        raise ValueError(f"an array of {n} x {m} is over {fft_layout.MAX_BYTES / 2**50:g} PiB; "
                         "give a smaller shape")
    return n, m


PARAMS = (
    Param("size", side, None, "Side n of the n x n array [default: 4096 on CPU; on GPUs a "
          "share of their memory].", "N"),
    Param("shape", shape_pair, None, "Shape N,M of the generated array (any sides); with "
          "--inverse --real, irfft2's result shape, as numpy.fft.irfft2(X, s=(N, M)) takes it.",
          "N,M"),
    Param("chunks", chunks, "auto", "Slab width: rows per row block, columns per column block "
          "(auto: sized for the device).", "auto|N"),
    Param("dtype", choice(DTYPES), None, "Complex type of the transform [default: complex128, "
          "or the input's precision].", "complex128|complex64", DTYPES),
    Param("inverse", switch, None, "Inverse transform (numpy.fft.ifft2; with --real, irfft2 "
          "of an --input half spectrum).", "", nargs=0),
    Param("real", switch, None, "Transform of real data (numpy.fft.rfft2: n x (n/2+1) "
          "half spectrum).", "", nargs=0),
    Param("layout", choice(fft_layout.LAYOUTS), "auto", "Where the array is held: whole (in "
          "one worker, transformed on all its host's threads, nothing moved between workers) or "
          "slabs (over every worker, an all-to-all transpose between them); auto: whole where "
          "all workers share one host and the array fits one worker.",
          "auto|whole|slabs", fft_layout.LAYOUTS),
    Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
    Param("input", path_or_array, None, "Read a 2-D float32/float64 (complex64/complex128 "
          "without --real) array from this .npy file or Zarr array (from Python also a NumPy, "
          "CuPy or Dask array).", "PATH"),
    Param("output", output_path((".npy", ".zarr")), None, "Write the spectrum to this .npy "
          "file or Zarr directory.", "PATH"),
)


# --------------------------------------------------------------------------- settle


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input, or size the generated array; refuse layouts no cluster runs.

    Raises
    ------
    ParameterError
        Contradicting options, or a layout with too many or too large blocks.
    InputFileError
        A missing, non-numeric or not 2-D input; a complex one with ``--real``; an irfft2
        input that is no half spectrum of the ``--shape`` asked for.
    """
    values = dict(values)
    values["inverse"], values["real"] = bool(values["inverse"]), bool(values["real"])
    half_inverse = values["real"] and values["inverse"]
    if half_inverse and values["input"] is None:
        raise ParameterError("--inverse --real (irfft2) transforms a half spectrum: give it "
                             "with --input (an n x (m/2+1) complex array, as --real --output "
                             "writes)")
    if values["size"] is not None and values["shape"] is not None:
        raise ParameterError("--size with --shape: give one (--size N is --shape N,N)")
    inputs: dict = {}
    if values["input"] is not None:
        inputs["input"] = source = _opened(values, half_inverse)
        values["input"] = source.path  # an array in memory: named, never held in the values
        if values["dtype"] is None:
            values["dtype"] = shared.COMPLEX_OF[source.dtype.name]
        if half_inverse:  # held transposed: the half spectrum's columns, rows of its rows
            rows, length = source.shape[1], source.shape[0]
        else:
            rows, length = source.shape
    else:
        if values["dtype"] is None:
            values["dtype"] = "complex128"
        if values["size"] is None and values["shape"] is None:
            values["size"] = fft_layout.default_size(backend, itemsize(values))
        rows, length = values["shape"] or (values["size"],) * 2
    option = "--input" if inputs else "--size" if values["shape"] is None else "--shape"
    fft_layout.check_layout(values["chunks"], rows, itemsize(values), backend, option, length)
    return values, inputs


def _opened(values: dict, half_inverse: bool):
    """The ``--input`` array, checked against the transform asked for."""
    if values["size"] is not None:
        raise ParameterError("--size with --input: the input's shape is the size; drop "
                             "--size")
    if values["shape"] is not None and not half_inverse:
        raise ParameterError("--shape with --input: the input's shape is the shape; drop "
                             "--shape (it gives irfft2's result shape, with --inverse --real)")
    source = array_input.open_array(values["input"], "--input", INPUT_DTYPES)
    shown = " x ".join(map(str, source.shape))
    if len(source.shape) != 2:
        raise InputFileError(f"--input {source.path}: holds an array of shape {shown}; a 2-D "
                             "array (2 axes) is needed")
    if half_inverse:
        _check_half_spectrum(source, values["shape"])
    elif values["real"] and source.dtype.kind == "c":
        raise InputFileError(f"--input {source.path}: holds {source.dtype} values; --real "
                             "transforms real data (rfft2): drop --real for a complex input")
    return source


def _check_half_spectrum(source, shape) -> None:
    """Refuse an irfft2 input that is not the half spectrum of the result ``shape`` asks for.

    As ``numpy.fft.irfft2(X, s=shape)``: an r x k half spectrum gives an r x m result with
    m // 2 + 1 = k (m = 2 (k - 1) where ``--shape`` is not given).
    """
    rows, half = source.shape
    shown = f"{rows} x {half}"
    if shape is None:
        if half >= 2:
            return
        raise InputFileError(f"--input {source.path}: holds an array of shape {shown}; "
                             "--inverse --real needs the r x (m/2+1) half spectrum of an r x m "
                             "array: give the result's shape with --shape R,M")
    if shape[0] == rows and shared.spectrum_columns(shape[1], True) == half:
        return
    raise InputFileError(f"--input {source.path}: holds an array of shape {shown}; --shape "
                         f"{shape[0]},{shape[1]} (irfft2's result) needs the {shape[0]} x "
                         f"{shared.spectrum_columns(shape[1], True)} half spectrum")


def itemsize(values: dict) -> int:
    """Bytes of one element of the transform's type."""
    return np.dtype(values["dtype"]).itemsize


# --------------------------------------------------------------------------- the pipeline


def present(workload: Workload, raw: dict) -> dict:
    """The reported value: the spectrum's sum of squares and its largest cell."""
    result = raw["result"]
    rows, cols = result["peak_rows"], result["peak_cols"]
    if workload.context.half_inverse:  # irfft2's cells are reported transposed
        rows, cols = cols, rows
    return answer(result["sum_of_squares"], rows, cols, result["peak_values"])


def answer(squares: float, rows, cols, values) -> dict:
    """``sum_of_squares``, ``max_magnitude`` and ``max_at`` from candidate cells.

    The largest magnitude wins; among equal ones, the first in row-major order.
    """
    magnitudes = np.abs(np.asarray(values))
    order = np.lexsort((np.asarray(cols), np.asarray(rows), -magnitudes))
    best = int(order[0])
    return {"sum_of_squares": float(squares), "max_magnitude": float(magnitudes[best]),
            "max_at": [int(rows[best]), int(cols[best])]}


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of one ``scipy.fft.fft2(x, workers=-1)`` on every core (``cupy.fft`` on a GPU).

    ``ifft2``, ``rfft2`` or ``irfft2`` as the run transforms. The input is made whole first,
    untimed: drawn block by block as the run draws it, or read.
    """
    backend, sizes = resolved.backend, fft_layout.layout(resolved)
    xp = importlib.import_module(backend.array_library)
    if backend.array_library == "numpy":  # the strongest peer on CPU: pocketfft, all cores
        import functools
        import types

        import scipy.fft

        library_fft = types.SimpleNamespace(**{
            name: functools.partial(getattr(scipy.fft, name), workers=-1)
            for name in ("fft2", "ifft2", "rfft2", "irfft2")})
    else:
        library_fft = xp.fft
    with dask.config.set(scheduler="sync"):
        whole = xp.asarray(fft_stages.input_array(resolved, sizes).compute())
    if sizes["half_inverse"]:  # held transposed: the half spectrum as the file holds it
        whole = xp.ascontiguousarray(whole.T)
        result_shape = (sizes["m"], sizes["n"])  # its result is the spectrum seen transposed

        def transform(half):
            return library_fft.irfft2(half, s=result_shape)
    else:
        transform = (library_fft.rfft2 if sizes["real"] else library_fft.ifft2
                     if resolved["inverse"] else library_fft.fft2)
    seconds, spectrum = timed(backend, lambda: transform(whole))
    power = xp.abs(spectrum.astype(np.complex128, copy=False)) ** 2
    flat = int(to_host(xp.argmax(power)))
    m = spectrum.shape[1]
    return seconds, {"sum_of_squares": float(to_host(power.sum())),
                     "max_magnitude": math.sqrt(float(to_host(power.ravel()[flat]))),
                     "max_at": [flat // m, flat % m]}


def _graph(resolved: Resolved, sizes: dict, certify: dict) -> tuple[dict, object]:
    """The run as one graph (``{result, lines}``) and the array ``--output`` writes.

    ``--layout whole``: one task on the whole array, its transforms on all the cluster's
    threads; otherwise the slabs (``auto`` is decided on the cluster by the staged run,
    :func:`pipelines.fft.stages.drive`).
    """
    if resolved["layout"] == "whole":
        return fft_stages.whole_parts(resolved, sizes, certify, resolved.backend.threads)
    x = fft_stages.input_array(resolved, sizes)
    y = fft_stages.rows_transformed(x, resolved, sizes)
    z = fft_stages.transposed(y, sizes, resolved.backend.array_library)
    spectrum_t = fft_stages.columns_transformed(z, resolved, sizes)
    parts = {**fft_stages.reduced(spectrum_t, resolved, certify),
             "lines": fft_stages.input_lines(x, y, resolved, sizes, certify)}
    return parts, fft_stages.written(spectrum_t, sizes)


# The warm-up's arrays: WARM_UP_SIDE x WARM_UP_SIDE, in two slabs (each task of the slab path).
WARM_UP_SIDE = 8


def warm_up(backend_name: str) -> None:
    """On a worker as it starts: a GPU's transforms and kernels made once, so no run makes them.

    GPU workers run a tiny run's own tasks (:func:`prepare`'s graph, computed here) for each
    transform (fft2, ifft2, rfft2, irfft2 of a half spectrum read from a file), each complex
    type and both layouts (slabs: the input's draw, row and column transforms, the transpose's
    pieces, the certificates and summaries; whole: :func:`pipelines.fft.tasks.whole`). That
    loads cuFFT and cuBLAS and compiles CuPy's elementwise and reduction kernels for every
    element type a run uses; the tasks let go of the tiny cuFFT plans they made, as a run's do.
    CPU workers have nothing to compile (``scipy.fft`` is compiled ahead).
    """
    if backend_name != "gpu":
        return
    backend = backends.get(backend_name)
    spec = registry.get("fft-pipeline")
    side = WARM_UP_SIDE
    with tempfile.TemporaryDirectory(prefix="daskgpu-fft-warm-up-") as folder:
        for dtype in DTYPES:
            half = os.path.join(folder, f"half-{dtype}.npy")
            np.save(half, np.ones((side, side // 2 + 1), dtype))
            for transform in ({}, {"inverse": True}, {"real": True},
                              {"inverse": True, "real": True, "input": half}):
                shape = None if "input" in transform else (side, side)
                for layout in ("slabs", "whole"):
                    resolved = spec.resolve(backend, shape=shape, chunks=side // 2, seed=0,
                                            dtype=dtype, layout=layout, **transform)
                    workload = spec.workload(backend, resolved)
                    dask.compute(workload.collection, scheduler="sync")
    fft_tasks.release_plans(backend.array_library)


@pipeline(
    "fft-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
    warm_up=warm_up,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy transform, reduced block by block to its summaries (and written)."""
    sizes = fft_layout.layout(resolved)
    n, q, m, dtype = sizes["n"], sizes["q"], sizes["m"], sizes["dtype"]
    certify = fft_stages.certificates(resolved, sizes)
    parts, written = _graph(resolved, sizes, certify)
    outputs = []
    if resolved["output"] is not None:
        write, temporary = output_files.store_array(written, resolved["output"])
        parts["written"] = write
        outputs.append((temporary, resolved["output"]))
    source = resolved.inputs.get("input")
    described = ({"source": source.path, "format": source.kind,
                  **array_input.rechunking(source, fft_stages.input_chunks(sizes))}
                 if source is not None else
                 {"source": f"{len(shared.signal(resolved['seed'], n, sizes['real'], q)['u'])} "
                  "planted sinusoids + noise", "seed": resolved["seed"]})
    half_inverse = sizes["half_inverse"]
    transform = ("irfft2" if half_inverse else "rfft2" if sizes["real"] else "ifft2"
                 if resolved["inverse"] else "fft2")
    shape = [m, sum(sizes["row_chunks"][0])] if half_inverse else [n, q]  # the input's
    return Workload(
        collection=parts,
        drive=fft_stages.drive,
        bytes_are="read" if source is not None else "generated",
        elements=shape[0] * shape[1],
        nbytes=shape[0] * shape[1] * np.dtype(
            shared.REAL_OF[dtype.name] if sizes["real_input"] else dtype).itemsize,
        description={
            **described,
            "transform": transform,
            "shape": shape,
            "spectrum": f"{m} x {n}" if half_inverse else f"{n} x {m}",
            "chunks": [sizes["row_chunks"][0][0], sizes["col_chunks"][1][0]],
            "slabs": len(sizes["row_chunks"][0]),
            "dtype": dtype.name,
            "flop": fft_layout.flop(n, sizes["real"], q),
            "layout": resolved["layout"],
        },
        # The check sees irfft2 as the inverse of a complex input with a real result, seen
        # transposed (n x m: the result's columns, its rows).
        context=FFTContext(n, q, m, sizes["real_input"], half_inverse, bool(resolved["inverse"]),
                           dtype.name, resolved["seed"], tuple(sizes["row_chunks"][0]),
                           tuple(sizes["col_chunks"][1]), resolved.backend.array_library,
                           source),
        outputs=outputs,
        present=present,
    )
