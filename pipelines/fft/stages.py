"""fft-pipeline's graph, stage by stage, and the staged run that times each stage.

The input (drawn or read) in row slabs, each also reduced to its rows' certificates; the row
transforms; the transpose, an all-to-all exchange of blocks (every column slab gathers one
piece from every row slab); the column transforms; each slab of the spectrum reduced
to its summaries (:mod:`pipelines.fft.tasks` holds the tasks). Computed as one graph, or by
:func:`drive` one stage after another, each kept on the workers, so that a run's time splits
into the stages.
"""

from __future__ import annotations

import functools
import time

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from daskgpu.data import array_input
from daskgpu.toolkit import data_parallel
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.numeric import starts
from daskgpu.toolkit.registry import Resolved, Workload
from pipelines.fft import shared, tasks
from pipelines.fft.layout import transpose_bytes


def input_array(resolved: Resolved, sizes: dict) -> da.Array:
    """The input, lazily, in row blocks: drawn on the workers or read."""
    backend, real = resolved.backend, sizes["real_input"]
    value_type = shared.REAL_OF[sizes["dtype"].name] if real else sizes["dtype"].name
    source = resolved.inputs.get("input")
    if sizes["half_inverse"]:  # held transposed: the input's column blocks, as rows
        rows, cols = sizes["row_chunks"]
        return array_input.to_dask(source, (cols, rows), backend).T.astype(value_type)
    if source is not None:
        x = array_input.to_dask(source, sizes["row_chunks"], backend)
        return x.astype(value_type)
    return da.map_blocks(
        tasks.generated, chunks=sizes["row_chunks"], dtype=value_type,
        meta=np.empty((0, 0), dtype=value_type),  # NumPy meta: see daskgpu.data.synthetic
        n=sizes["n"], seed=resolved["seed"], value_type=value_type, real=real,
        library=backend.array_library)


def certificates(resolved: Resolved, sizes: dict) -> dict:
    """What the run certifies its transform with: the sampled cells and the projection.

    ``cells``: the spectrum's sampled cells (rows, columns); ``weights``: s, of the spectrum's
    columns; ``transform``: b = W s in closed form, of the input's columns (see
    :mod:`pipelines.fft.shared`).
    """
    n, m = sizes["n"], sizes["m"]
    seed = shared.check_seed(resolved["seed"], n)
    return {"cells": shared.sampled_cells(n, sizes["col_chunks"][1], seed),
            "weights": shared.projection_weights(n, m, seed),
            "transform": shared.projection_transform(n, m, seed, bool(resolved["inverse"]))}


def input_lines(x: da.Array, y: da.Array, resolved: Resolved, sizes: dict,
                certify: dict) -> da.Array:
    """Every row of the input reduced to its certificates (:func:`pipelines.fft.tasks.line_terms`).

    A (rows, 2 k + 1) float64 array, k = 1 + the sampled cells, one task a row block reading
    the block of the input ``x`` and of its row transforms ``y``: in the stage of the row
    transforms, while both are kept.
    """
    cols = certify["cells"][1]
    width = 2 * (1 + len(cols)) + 1
    terms = functools.partial(tasks.line_terms, n=sizes["n"], transform=certify["transform"],
                              cols=cols, inverse=bool(resolved["inverse"]),
                              library=resolved.backend.array_library)
    name = "fft-lines-" + tokenize(x.name, y.name, width)
    graph = {(name, i, 0): (terms, (x.name, i, 0), (y.name, i, 0))
             for i in range(len(x.chunks[0]))}
    layers = HighLevelGraph.from_collections(name, graph, dependencies=[x, y])
    return da.Array(layers, name, chunks=(x.chunks[0], (width,)), meta=np.empty((0, 0)))


def rows_transformed(x: da.Array, resolved: Resolved, sizes: dict) -> da.Array:
    """Stage 1: every row block transformed along its rows."""
    dtype = sizes["dtype"]
    return x.map_blocks(tasks.along_rows, chunks=(sizes["row_chunks"][0], (sizes["m"],)),
                        dtype=dtype, meta=np.empty((0, 0), dtype=dtype),
                        library=resolved.backend.array_library,
                        real=sizes["real_input"],
                        inverse=resolved["inverse"], value_type=dtype.name)


def transposed(y: da.Array, sizes: dict, library: str = "numpy") -> da.Array:
    """Stage 2, the transpose: an all-to-all exchange of blocks, each held as its transpose.

    Every column slab gathers one piece from every row slab: a task per piece cuts its columns
    out of the row slab, transposed and contiguous (:func:`pipelines.fft.tasks.piece`), and a
    task per column slab joins its pieces side by side into whole rows (of ``Y.T``). A graph
    of its own, not ``dask.array.rechunk``: each byte is copied once where it is cut and once
    where it is joined, and the column transforms run along contiguous rows.
    """
    widths = sizes["col_chunks"][1]
    token = tokenize(y.name, widths, library)
    cut, name = f"fft-piece-{token}", f"fft-transpose-{token}"
    row_blocks = len(y.chunks[0])
    graph = {}
    for j, (c0, w) in enumerate(zip(starts(widths).tolist(), widths, strict=True)):
        for i in range(row_blocks):
            graph[(cut, i, j)] = (tasks.piece, (y.name, i, 0), c0, c0 + w, library)
        graph[(name, j, 0)] = (tasks.joined, [(cut, i, j) for i in range(row_blocks)],
                               library)
    layers = HighLevelGraph.from_collections(name, graph, dependencies=[y])
    return da.Array(layers, name, chunks=(widths, (y.shape[0],)), meta=y._meta)


def columns_transformed(zt: da.Array, resolved: Resolved, sizes: dict) -> da.Array:
    """Stage 3: every column transformed: the spectrum, transposed (``X.T``, m x n).

    irfft2: the rows of the half spectra inverted to real rows: the result itself, in row
    blocks (n x n), which the reductions treat as the transpose of the result.
    """
    library, n = resolved.backend.array_library, sizes["n"]
    if sizes["half_inverse"]:
        real = np.dtype(shared.REAL_OF[sizes["dtype"].name])
        return zt.map_blocks(tasks.along_columns, chunks=(zt.chunks[0], (n,)), dtype=real,
                             meta=np.empty((0, 0), dtype=real), library=library,
                             value_type=real.name, real_length=n)
    dtype = sizes["dtype"]
    return zt.map_blocks(tasks.along_columns, dtype=dtype,
                         meta=np.empty((0, 0), dtype=dtype), library=library,
                         inverse=resolved["inverse"], value_type=dtype.name)


def written(spectrum_t: da.Array, sizes: dict) -> da.Array:
    """The array a run writes: the spectrum (held transposed), or irfft2's result as it is."""
    return spectrum_t if sizes["half_inverse"] else spectrum_t.T


def reduced(spectrum_t: da.Array, resolved: Resolved, certify: dict) -> dict:
    """Stage 4: the spectrum's blocks reduced to their summaries, assembled in one task."""
    col_chunks = spectrum_t.chunks[0]
    rows, cols = certify["cells"]
    n = spectrum_t.shape[1]
    width = tasks.summary_width(col_chunks, len(rows), n)
    packed = spectrum_t.map_blocks(
        tasks.summary, chunks=((1,) * len(col_chunks), (width,)), dtype=np.float64,
        meta=np.empty((0, 0)), library=resolved.backend.array_library, rows=rows, cols=cols,
        width=width, weights=certify["weights"])
    return {"result": dask.delayed(tasks.assemble, pure=True)(packed, col_chunks,
                                                                  len(rows), n)}


def _persisted(client, collection):
    """``collection`` computed and kept on the workers; a task's error raises here."""
    from distributed import futures_of

    kept = client.persist(collection)
    data_parallel.wait_kept(client, futures_of(kept))
    return kept


def drive(workload: Workload, client) -> dict:
    """The run in stages, each kept on the workers before the next, timed apart.

    The same result as computing ``workload.collection``; the stages' seconds, the
    transpose's bytes and bandwidth go into the workload's description.
    """
    resolved, sizes, certify = workload.context["stages"]
    marks = [time.perf_counter()]
    x = _persisted(client, input_array(resolved, sizes))
    marks.append(time.perf_counter())
    y = rows_transformed(x, resolved, sizes)
    y, lines = _persisted(client, [y, input_lines(x, y, resolved, sizes, certify)])
    del x
    marks.append(time.perf_counter())
    z = _persisted(client, transposed(y, sizes, resolved.backend.array_library))
    del y
    marks.append(time.perf_counter())
    spectrum_t = _persisted(client, columns_transformed(z, resolved, sizes))
    del z
    marks.append(time.perf_counter())
    parts = {**reduced(spectrum_t, resolved, certify), "lines": lines}
    if workload.outputs:
        # The write of the kept spectrum goes to a new temporary, which replaces the build's.
        (old, final), = workload.outputs
        parts["written"], temporary = output_files.store_array(written(spectrum_t, sizes),
                                                              final)
        workload.outputs[:] = [(temporary, final)]
        output_files.discard(old)
    futures = client.compute(list(parts.values()))
    try:
        raw = dict(zip(parts, data_parallel.fetch(client, futures), strict=True))
    finally:
        for future in futures:
            future.release()
    marks.append(time.perf_counter())
    data_s, rows_s, transpose_s, columns_s, reduce_s = np.diff(marks).tolist()
    moved = transpose_bytes(sizes)
    workload.description.update({
        "input_s": round(data_s, 4),
        "local_fft_s": round(rows_s + columns_s, 4),
        "row_fft_s": round(rows_s, 4),
        "column_fft_s": round(columns_s, 4),
        "transpose_s": round(transpose_s, 4),
        "transpose_bytes": moved,
        "transpose_gb_per_s": float(f"{moved / transpose_s / 1e9:.4g}") if transpose_s > 0
        else None,
        "reduce_s": round(reduce_s, 4),
    })
    return raw
