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
import operator
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
from pipelines.fft.layout import layout, pick, transpose_bytes


def input_chunks(sizes: dict) -> tuple:
    """The blocks of an input as it is given: row blocks; irfft2's half spectrum, column blocks.

    The same in both layouts: a Dask array given in other blocks is rechunked to these.
    """
    if sizes["half_inverse"]:  # held transposed: the input's column blocks, as rows
        rows, cols = sizes["row_chunks"]
        return cols, rows
    return sizes["row_chunks"]


def input_array(resolved: Resolved, sizes: dict) -> da.Array:
    """The input, lazily, in row blocks: drawn on the workers or read (a file, an array)."""
    backend, real = resolved.backend, sizes["real_input"]
    value_type = shared.REAL_OF[sizes["dtype"].name] if real else sizes["dtype"].name
    source = resolved.inputs.get("input")
    if sizes["half_inverse"]:
        return array_input.to_dask(source, input_chunks(sizes), backend).T.astype(value_type)
    if source is not None:
        x = array_input.to_dask(source, input_chunks(sizes), backend).astype(value_type)
        # on a device, the stage is done once its copies are
        # meta given: inferred, the device wait would run in the client (a CUDA context there)
        return x if not backend.is_gpu else x.map_blocks(tasks.settled, dtype=x.dtype,
                                                         meta=x._meta,
                                                         library=backend.array_library)
    return da.map_blocks(
        tasks.generated, chunks=sizes["row_chunks"], dtype=value_type,
        meta=np.empty((0, 0), dtype=value_type),  # NumPy meta: see daskgpu.data.synthetic
        n=sizes["n"], seed=resolved["seed"], value_type=value_type, real=real,
        library=backend.array_library, q=sizes["q"])


def certificates(resolved: Resolved, sizes: dict) -> dict:
    """What the run certifies its transform with: the sampled cells and the projection.

    ``cells``: the spectrum's sampled cells (rows, columns); ``weights``: s, of the spectrum's
    columns; ``transform``: b = W s in closed form, of the input's columns (see
    :mod:`pipelines.fft.shared`).
    """
    n, q, m = sizes["n"], sizes["q"], sizes["m"]
    seed = shared.check_seed(resolved["seed"], n)
    return {"cells": shared.sampled_cells(n, sizes["col_chunks"][1], seed),
            "weights": shared.projection_weights(q, m, seed),
            "transform": shared.projection_transform(q, m, seed, bool(resolved["inverse"]))}


def input_lines(x: da.Array, y: da.Array, resolved: Resolved, sizes: dict,
                certify: dict) -> da.Array:
    """Every row of the input reduced to its certificates (:func:`pipelines.fft.tasks.line_terms`).

    A (rows, 2 k + 1) float64 array, k = 1 + the sampled cells, one task a row block reading
    the block of the input ``x`` and of its row transforms ``y``: in the stage of the row
    transforms, while both are kept.
    """
    cols = certify["cells"][1]
    width = 2 * (1 + len(cols)) + 1
    terms = functools.partial(tasks.line_terms, n=sizes["q"], transform=certify["transform"],
                              cols=cols, inverse=bool(resolved["inverse"]),
                              library=resolved.backend.array_library)
    name = "fft-lines-" + tokenize(x.name, y.name, width)
    graph = {(name, i, 0): (terms, (x.name, i, 0), (y.name, i, 0))
             for i in range(len(x.chunks[0]))}
    layers = HighLevelGraph.from_collections(name, graph, dependencies=[x, y])
    return da.Array(layers, name, chunks=(x.chunks[0], (width,)), meta=np.empty((0, 0)))


def task_threads(backend, sizes: dict) -> int:
    """Threads each slab's transform takes: the workers' threads shared among the slabs.

    1 where there are as many slabs as threads (they run at once).
    """
    slabs = len(sizes["row_chunks"][0])
    return max(1, backend.threads // max(slabs, backend.workers))


def rows_transformed(x: da.Array, resolved: Resolved, sizes: dict) -> da.Array:
    """Stage 1: every row block transformed along its rows."""
    dtype = sizes["dtype"]
    return x.map_blocks(tasks.along_rows, chunks=(sizes["row_chunks"][0], (sizes["m"],)),
                        dtype=dtype, meta=np.empty((0, 0), dtype=dtype),
                        library=resolved.backend.array_library,
                        real=sizes["real_input"],
                        inverse=resolved["inverse"], value_type=dtype.name,
                        threads=task_threads(resolved.backend, sizes))


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
    threads = task_threads(resolved.backend, sizes)
    if sizes["half_inverse"]:
        real = np.dtype(shared.REAL_OF[sizes["dtype"].name])
        return zt.map_blocks(tasks.along_columns, chunks=(zt.chunks[0], (n,)), dtype=real,
                             meta=np.empty((0, 0), dtype=real), library=library,
                             value_type=real.name, real_length=n, threads=threads)
    dtype = sizes["dtype"]
    return zt.map_blocks(tasks.along_columns, dtype=dtype,
                         meta=np.empty((0, 0), dtype=dtype), library=library,
                         inverse=resolved["inverse"], value_type=dtype.name, threads=threads)


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


def in_memory_blocks(resolved: Resolved, sizes: dict) -> tuple | None:
    """An array in memory as the whole path takes it: its blocks, lazily, and where each lies.

    ``(spans, blocks)``: ``((r0, r1), (c0, c1))`` of each block of the input as it is given
    (:func:`input_chunks`), and the blocks as delayed values (a NumPy array's sent once, a Dask
    array's its own graph); None for a file or generated data, which the task reads or draws.
    """
    source = resolved.inputs.get("input")
    if source is None or not source.in_memory:
        return None
    given = array_input.to_dask(source, input_chunks(sizes), resolved.backend)
    bounds = [starts(chunks).tolist() for chunks in given.chunks]
    spans = [tuple((bounds[axis][i], bounds[axis][i] + given.chunks[axis][i])
                   for axis, i in enumerate(at)) for at in np.ndindex(*given.numblocks)]
    return spans, given.to_delayed().ravel().tolist()


def whole_plan(resolved: Resolved, sizes: dict, certify: dict, threads: int,
               keep: bool) -> dict:
    """What :func:`pipelines.fft.tasks.whole` needs: sizes, input, certificates, threads.

    An input in memory goes as its blocks (``blocks``: :func:`in_memory_blocks`), a file as
    its :class:`~daskgpu.data.array_input.ArraySource` (``source``), which the task reads.
    """
    real = sizes["real_input"]
    rows, _ = certify["cells"]
    blocks = in_memory_blocks(resolved, sizes)
    source = resolved.inputs.get("input")
    return {
        "n": sizes["n"], "q": sizes["q"], "dtype": sizes["dtype"].name,
        "value_type": shared.REAL_OF[sizes["dtype"].name] if real else sizes["dtype"].name,
        "real_input": real, "half_inverse": sizes["half_inverse"],
        "inverse": bool(resolved["inverse"]), "seed": resolved["seed"],
        "source": source if blocks is None else None, "blocks": blocks,
        "shape": source.shape if source is not None else (sizes["n"], sizes["q"]),
        "row_chunks": sizes["row_chunks"][0],
        "col_chunks": sizes["col_chunks"][1], "threads": max(1, int(threads)),
        "library": resolved.backend.array_library, "cells": certify["cells"],
        "weights": certify["weights"], "transform": certify["transform"],
        "width": tasks.summary_width(sizes["col_chunks"][1], len(rows), sizes["n"]),
        "keep": keep,
    }


def _light(done: dict) -> dict:
    """The whole-array task's result less its array (which stays on its worker)."""
    return {key: value for key, value in done.items() if key != "array"}


def whole_array(done, sizes: dict) -> da.Array:
    """The whole path's written array (the spectrum, or irfft2's result) as row blocks."""
    n, m = sizes["n"], sizes["m"]
    real = sizes["half_inverse"]
    dtype = np.dtype(shared.REAL_OF[sizes["dtype"].name]) if real else sizes["dtype"]
    shape = (m, n) if real else (n, m)  # irfft2's result is the spectrum seen transposed
    array = da.from_delayed(dask.delayed(operator.getitem)(done, "array"), shape, dtype=dtype,
                            meta=np.empty((0, 0), dtype=dtype))
    return array.rechunk((sizes["row_chunks"][0][0], shape[1]))


def whole_parts(resolved: Resolved, sizes: dict, certify: dict, threads: int) -> tuple:
    """The whole-array path as one graph: ``{result, lines}`` and its written array."""
    keep = resolved["output"] is not None
    done = dask.delayed(tasks.whole, pure=True)(whole_plan(resolved, sizes, certify, threads,
                                                           keep))
    light = dask.delayed(_light, pure=True)(done)
    parts = {"result": dask.delayed(_assembled, pure=True)(light, sizes,
                                                          len(certify["cells"][0])),
             "lines": dask.delayed(operator.getitem)(light, "lines")}
    return parts, (whole_array(done, sizes) if keep else None)


def _assembled(light: dict, sizes: dict, cells: int) -> dict:
    return tasks.assemble(light["packed"], sizes["col_chunks"][1], cells, sizes["n"])


def _persisted(client, collection, library: str = "numpy"):
    """``collection`` computed and kept on the workers; a task's error raises here.

    The tasks of a device wait for their stream before they return (see
    :func:`pipelines.fft.tasks.settled`): kept means done.
    """
    from distributed import futures_of

    kept = client.persist(collection)
    data_parallel.wait_kept(client, futures_of(kept))
    return kept


def _write(workload: Workload, parts: dict, array: da.Array) -> None:
    """The write of ``array`` to a new temporary, which replaces the build's."""
    (old, final), = workload.outputs
    parts["written"], temporary = output_files.store_array(array, final)
    workload.outputs[:] = [(temporary, final)]
    output_files.discard(old)


def _fetched(client, parts: dict) -> dict:
    futures = client.compute(list(parts.values()))
    try:
        return dict(zip(parts, data_parallel.fetch(client, futures), strict=True))
    finally:
        for future in futures:
            future.release()


def _built(workload: Workload) -> tuple:
    """The run's parameters, sizes and certificates, as ``prepare`` built its graph from them."""
    resolved = workload.resolved
    sizes = layout(resolved)
    return resolved, sizes, certificates(resolved, sizes)


def keeps(workload: Workload) -> bool:
    """Whether the run keeps its spectrum on the workers (a run from Python asks it).

    Read from ``workload.keep``, which the runner is to set before it calls :func:`drive`;
    the drive then puts the spectrum, in natural order and already persisted, in
    ``workload.on_workers`` (see :func:`_drive_slabs`, :func:`_drive_whole`).
    """
    return bool(getattr(workload, "keep", False))


def drive(workload: Workload, client) -> dict:
    """The run, the whole array in one worker or in slabs, its stages timed apart.

    The layout (``--layout``, or for ``auto`` :func:`pipelines.fft.layout.pick` on the
    cluster's workers) goes into the workload's description with the stages' seconds, the
    transpose's bytes and bandwidth. Where the run :func:`keeps` its spectrum, the spectrum the
    transforms made (not another) stays on the workers as ``workload.on_workers["spectrum"]``.
    """
    from daskgpu.toolkit.backends import scheduler_workers

    built = resolved, sizes, _ = _built(workload)
    devices = resolved.backend.devices
    chosen = pick(resolved["layout"], scheduler_workers(client), sizes,
                  devices[0].memory_total if devices else 0)
    workload.description.update({"layout": chosen["layout"], "layout_why": chosen["why"]})
    if chosen["layout"] == "whole":
        return _drive_whole(workload, client, chosen, built)
    return _drive_slabs(workload, client, built)


def _drive_whole(workload: Workload, client, chosen: dict, built: tuple) -> dict:
    """The whole array in the chosen worker: one task, its stages timed inside it."""
    resolved, sizes, certify = built
    began = time.perf_counter()
    plan = whole_plan(resolved, sizes, certify, chosen["threads"],
                      bool(workload.outputs) or keeps(workload))
    where = {"workers": [chosen["worker"]], "allow_other_workers": False, "pure": False}
    kept = []
    if plan["blocks"] is not None:  # an array in memory: its blocks on the chosen worker first
        spans, blocks = plan["blocks"]
        kept = client.compute(blocks, workers=where["workers"], allow_other_workers=False)
        plan["blocks"] = spans, kept
        data_parallel.wait_kept(client, kept)
    moved_s = time.perf_counter() - began
    done = client.submit(tasks.whole, plan, **where)
    try:
        (light,) = data_parallel.fetch(client, [client.submit(_light, done, **where)])
        if keeps(workload):  # its row blocks, slices of the array kept on its worker
            workload.on_workers["spectrum"] = client.persist(whole_array(done, sizes))
        parts = {}
        if workload.outputs:
            _write(workload, parts, whole_array(done, sizes))
            _fetched(client, parts)
    finally:
        for future in (done, *kept):
            future.release()
    input_s, rows_s, columns_s, summaries_s = light["seconds"]
    input_s += moved_s
    raw = {"result": _assembled(light, sizes, len(certify["cells"][0])),
           "lines": light["lines"]}
    reduce_s = time.perf_counter() - began - input_s - rows_s - columns_s
    _describe(workload, [input_s, rows_s, 0.0, columns_s, max(reduce_s, summaries_s)], 0,
              threads=chosen["threads"])
    return raw


def _drive_slabs(workload: Workload, client, built: tuple) -> dict:
    """The run in slabs, each stage kept on the workers before the next, timed apart."""
    resolved, sizes, certify = built
    library = resolved.backend.array_library
    marks = [time.perf_counter()]
    x = _persisted(client, input_array(resolved, sizes), library)
    marks.append(time.perf_counter())
    y = rows_transformed(x, resolved, sizes)
    y, lines = _persisted(client, [y, input_lines(x, y, resolved, sizes, certify)], library)
    del x
    marks.append(time.perf_counter())
    z = _persisted(client, transposed(y, sizes, library), library)
    del y
    marks.append(time.perf_counter())
    spectrum_t = _persisted(client, columns_transformed(z, resolved, sizes), library)
    del z
    marks.append(time.perf_counter())
    parts = {**reduced(spectrum_t, resolved, certify), "lines": lines}
    if keeps(workload):  # in natural order: each column slab's transpose, a view of the slab
        workload.on_workers["spectrum"] = client.persist(written(spectrum_t, sizes))
    if workload.outputs:
        _write(workload, parts, written(spectrum_t, sizes))
    raw = _fetched(client, parts)
    raw.pop("written", None)
    marks.append(time.perf_counter())
    _describe(workload, np.diff(marks).tolist(), transpose_bytes(sizes),
              threads=task_threads(resolved.backend, sizes))
    return raw


def _describe(workload: Workload, seconds: list, moved: int, threads: int) -> None:
    """The stages' seconds, the transpose's bytes and bandwidth, in the description."""
    data_s, rows_s, transpose_s, columns_s, reduce_s = seconds
    workload.description.update({
        "threads_per_transform": threads,
        "input_s": round(data_s, 6),
        "local_fft_s": round(rows_s + columns_s, 6),
        "row_fft_s": round(rows_s, 6),
        "column_fft_s": round(columns_s, 6),
        "transpose_s": round(transpose_s, 6),
        "transpose_bytes": moved,
        "transpose_gb_per_s": float(f"{moved / transpose_s / 1e9:.4g}") if transpose_s > 0
        else None,
        "reduce_s": round(reduce_s, 6),
    })
