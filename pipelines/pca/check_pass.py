"""The fast depth's pass over the data for pca-pipeline's randomised method: ``X_c^T (X_c M)``.

One pass over every block of rows, on the workers, gives ``C M`` for a ``features x m`` matrix
``M`` (the reported components and a few seeded vectors), with ``C = X_c^T X_c`` the centred Gram
matrix, and ``C``'s trace and the column means: ``4 n d m`` flops instead of the Gram matrix's
``n d^2``, and no QR, no SVD. Only ``d x m`` matrices leave a worker.

Generated data are taken in the coordinates they are specified in (:mod:`pipelines.pca.shared`):
``X = Z F`` with ``Z`` the standard normal draws and ``F = diag(sigma) V^T`` the known frame, so
``X M = Z (F M)`` and ``C M = F^T Z_c^T Z_c (F M)``: the blocks' ``Z`` are drawn again and the
``n x d`` product ``Z F`` (as costly as the Gram matrix) is never formed. ``trace(C)`` is
``sum_j sigma_j^2 (Z_c^T Z_c)_jj``, ``F F^T`` being ``diag(sigma^2)``. Inputs are read again and
taken as they are (``F = I``).

Every slab of rows is centred on its own column means and the slabs' summaries joined about the
mean of their union (Chan, Golub and LeVeque's pairwise update), as are the blocks'. On CPU
workers a block is drawn (or read) a slab at a time into one reused buffer; on GPU workers
(CuPy) a block is drawn and reduced on the device, whole.
"""

from __future__ import annotations

import importlib

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator, starts
from pipelines.pca import shared

# Elements of a slab of rows drawn or read at a time on a CPU worker: 8 MiB of float64.
SLAB_ELEMENTS = 2**20


def _host(value) -> np.ndarray:
    """A device array (CuPy's ``.get()``) or a NumPy one, as a NumPy array."""
    return value.get() if hasattr(value, "get") else np.asarray(value)


def frame(ctx: dict) -> np.ndarray | None:
    """``F = diag(sigma) V^T`` of generated data (rows ``x = z F``), or None for an input."""
    if ctx["input"] is not None:
        return None
    d = ctx["shape"][1]
    return shared.spectrum(d)[:, None] * shared.basis(ctx["seed"], d).T


def _stored(ctx: dict):
    source = ctx["input"]
    if source.kind == "zarr":
        import zarr

        return zarr.open_array(source.path, mode="r")
    return np.load(source.path, mmap_mode="r")


def _slabs_read(ctx: dict, i: int, step: int):
    """An input's block ``i``: on the device whole, or slabs copied into one host buffer.

    A Zarr block is read whole (each chunk decompressed once); a ``.npy`` file is mapped.
    """
    r0, rows = int(starts(ctx["row_chunks"])[i]), ctx["row_chunks"][i]
    stored = _stored(ctx)
    if ctx["library"] != "numpy":
        xp = importlib.import_module(ctx["library"])
        yield xp.asarray(np.asarray(stored[r0:r0 + rows]), dtype=np.float64)
        return
    block = stored[r0:r0 + rows] if ctx["input"].kind == "zarr" else None
    scratch = np.empty((min(step, rows), ctx["shape"][1]))
    for first in range(0, rows, step):
        count = min(step, rows - first)
        part = (block[first:first + count] if block is not None
                else stored[r0 + first:r0 + first + count])
        np.copyto(scratch[:count], part)
        yield scratch[:count]


def slabs(ctx: dict, i: int):
    """Yield the rows of block ``i`` in float64, a slab at a time (``z`` rows if generated).

    Generated: ``SeedSequence(data_seed, spawn_key=(i,))`` and the library's ``default_rng``
    (:func:`daskgpu.toolkit.numeric.generator`), ``standard_normal`` in the data's dtype;
    consecutive draws continue the block's stream, so NumPy's slabs are the block's rows. On
    a device (CuPy) the block is one slab. The slabs are scratch (a reused buffer): each is
    to be used, and may be changed, before the next is asked for.
    """
    d, rows = ctx["shape"][1], ctx["row_chunks"][i]
    step = max(1, SLAB_ELEMENTS // d)
    if ctx["input"] is not None:
        yield from _slabs_read(ctx, i, step)
        return
    sequence = np.random.SeedSequence(shared.data_seed(ctx["seed"]), spawn_key=(i,))
    rng = generator(ctx["library"], sequence)
    if ctx["library"] != "numpy":
        yield rng.standard_normal((rows, d), dtype=ctx["dtype"]).astype(np.float64)
        return
    drawn = np.empty((min(step, rows), d), dtype=ctx["dtype"])
    wide = drawn if drawn.dtype == np.float64 else np.empty(drawn.shape)
    for first in range(0, rows, step):
        count = min(step, rows - first)
        rng.standard_normal(out=drawn[:count], dtype=ctx["dtype"])
        if wide is not drawn:
            np.copyto(wide[:count], drawn[:count])
        yield wide[:count]


def _summary(rows, multiplier, xp, scratch) -> tuple:
    """``(count, mean, R_c^T (R_c M), column sums of R_c^2)`` of rows ``R``, centred in place.

    ``scratch``: at least ``count x m``, for ``R_c M`` (no fresh pages per slab on a worker,
    which hands freed memory back to the system at once).
    """
    count = rows.shape[0]
    mean = rows.sum(axis=0) / count
    rows -= mean
    projected = xp.matmul(rows, multiplier, out=scratch[:count])
    return count, mean, rows.T @ projected, xp.einsum("ij,ij->j", rows, rows)


def join(a: tuple, b: tuple, multiplier) -> tuple:
    """The summary of two sets of rows' union, about its own mean (pairwise update).

    ``S M = S_a M + S_b M + c e (e^T M)`` and the squares ``+ c e^2``, with ``e`` the difference
    of the means and ``c = n_a n_b / n``.
    """
    if a is None:
        return b
    count = a[0] + b[0]
    e = b[1] - a[1]
    c = a[0] * b[0] / count
    return (count, a[1] + e * (b[0] / count), a[2] + b[2] + c * (e[:, None] * (e @ multiplier)),
            a[3] + b[3] + c * e * e)


def block_products(ctx: dict, i: int, multiplier: np.ndarray) -> tuple:
    """``(rows, mean, Z_c^T (Z_c F M), column squares)`` of block ``i``, on the host, float64.

    ``multiplier``: ``F M`` (:func:`framed`).
    """
    xp = importlib.import_module(ctx["library"])
    on_device = xp.asarray(multiplier)
    total, scratch = None, None
    for rows in slabs(ctx, i):
        if scratch is None:
            scratch = xp.empty((rows.shape[0], multiplier.shape[1]))
        total = join(total, _summary(rows, on_device, xp, scratch), on_device)
    return total[0], _host(total[1]), _host(total[2]), _host(total[3])


def framed(ctx: dict, m: np.ndarray) -> tuple:
    """``(F, F M)`` of generated data, ``(None, M)`` of an input (on a worker: see products)."""
    f = frame(ctx)
    return f, (m if f is None else f @ m)


def products(ctx: dict, m: np.ndarray) -> dict:
    """``C M``, ``trace(C)``, the column means and the rows counted, in one pass on the workers.

    The frame ``F`` (a QR of ``d x d``) and ``F M`` are made on a worker too: BLAS in this
    process would leave its thread pool spinning beside the workers while they draw.

    Parameters
    ----------
    ctx : dict
        The run's context (shape, row blocks, seed or input, dtype, library).
    m : ndarray
        ``features x m``, float64.

    Returns
    -------
    dict
        ``rows``, ``mean`` (features), ``cm`` (``C M``), ``trace``.
    """
    f, multiplier = dask.delayed(framed, pure=True, nout=2)(ctx, m)
    parts = [dask.delayed(block_products, pure=True)(ctx, i, multiplier)
             for i in range(len(ctx["row_chunks"]))]
    parts, f, multiplier = dask.compute(parts, f, multiplier)
    total = None
    for part in parts:
        total = join(total, part, multiplier)
    rows, mean, product, squares = total
    if f is None:
        return {"rows": rows, "mean": mean, "cm": product, "trace": float(squares.sum())}
    return {"rows": rows, "mean": f.T @ mean, "cm": f.T @ product,
            "trace": float(squares @ shared.spectrum(ctx["shape"][1]) ** 2)}
