"""The pieces of pca-pipeline's computation: per block of rows, pairwise combines, the small SVD.

Every block is centred on its own column means and reduced where it lives to a small summary
``(rows, mean, F, squares)`` (host NumPy, float64): ``F`` is the R factor of the centred block
(exact method) or ``X_c^T X_c W`` for the current basis ``W`` (a randomised power step), and
``squares`` the centred block's sum of squares. Two summaries combine into the summary of their
union about its own mean (Chan, Golub and LeVeque's pairwise update): with ``d = mean_b -
mean_a`` and ``c = n_a n_b / n``, the scatter matrices add up to ``S_a + S_b + c d d^T``, so
the R factors stack with the row ``sqrt(c) d`` and are factored again (a TSQR tree), and the
power steps add ``c d (d^T W)``. The mean is never subtracted from the whole array and the data
are read once per pass. Only ``features x features`` matrices leave a worker.

The exact method's task for a block (:func:`block_summary`) also certifies each cell of the block
(:func:`pipelines.pca.shared.cells`) for the check's fast depth (:func:`cell_certificates`);
generated blocks on CPU workers are drawn cell by cell, noting the generator's state at each
(:func:`draw_block`).
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu.toolkit import pcg64
from daskgpu.toolkit.backends import to_host
from pipelines.pca import shared

# On a CPU, Householder QR of a tall block is bound by memory (its panels do not stay in cache);
# a block is factored in slices of this many rows, each stacked under the R so far.
CPU_SLICE_ROWS = 2048


def generate_block(z, sigma=None, basis_t=None, library="numpy"):
    """Rows ``z diag(sigma) V^T`` of one block, in ``z``'s dtype, with the block's library."""
    xp = importlib.import_module(library)
    scaled = z * xp.asarray(sigma, dtype=z.dtype)
    return scaled @ xp.asarray(basis_t, dtype=z.dtype)


def _centred_parts(block, xp, slice_rows):
    """The block's rows, its column means (float64), and its centred slices, one by one."""
    rows = block.shape[0]
    mean = block.sum(axis=0, dtype=np.float64) / rows
    shift = mean.astype(block.dtype)
    step = slice_rows or rows
    return rows, mean, (block[i:i + step] - shift for i in range(0, rows, step))


def _squares(part, xp) -> float:
    flat = part.ravel()
    return float(to_host(xp.dot(flat, flat)))


def r_summary(block, library="numpy", slice_rows=None):
    """``(rows, mean, R, squares)`` of one block: R of the block centred on its own means.

    ``slice_rows``: factor in slices of this many rows (CPU), or the whole block at once.
    """
    xp = importlib.import_module(library)
    rows, mean, parts = _centred_parts(block, xp, slice_rows)
    r, squares = None, 0.0
    for part in parts:
        squares += _squares(part, xp)
        stacked = part if r is None else xp.concatenate([r, part])
        r = xp.linalg.qr(stacked, mode="r")
    return rows, to_host(mean), np.asarray(to_host(r), dtype=np.float64), squares


def power_summary(block, basis=None, library="numpy"):
    """``(rows, mean, X_c^T (X_c W), squares)`` of one block centred on its own means."""
    xp = importlib.import_module(library)
    rows, mean, parts = _centred_parts(block, xp, None)
    centred = next(parts)
    w = xp.asarray(basis, dtype=block.dtype)
    z = centred.T @ (centred @ w)
    squares = _squares(centred, xp)
    return rows, to_host(mean), np.asarray(to_host(z), dtype=np.float64), squares


def projected_r_summary(block, basis=None, library="numpy"):
    """``(rows, mean, R, squares)`` of the block centred and projected: R of ``X_c W``."""
    xp = importlib.import_module(library)
    rows, mean, parts = _centred_parts(block, xp, None)
    centred = next(parts)
    projected = centred @ xp.asarray(basis, dtype=block.dtype)
    r = xp.linalg.qr(projected, mode="r")
    squares = _squares(centred, xp)
    return rows, to_host(mean), np.asarray(to_host(r), dtype=np.float64), squares


def draw_block(seed: int, number: int, rows: int, features: int, dtype: str, cuts) -> tuple:
    """Standard normal ``z`` of block ``number`` drawn cell by cell, and the states at the cells.

    The values of :func:`daskgpu.data.synthetic.random_array` (``default_rng`` of
    ``SeedSequence(seed, spawn_key=(number,))``): consecutive draws continue the stream. The
    generator's state as each cell (``cuts``: ``(first, stop)`` rows) begins is noted as six
    words (:func:`daskgpu.toolkit.pcg64.state_words`), so that a check can draw a cell alone.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(number,)))
    z = np.empty((rows, features), dtype=dtype)
    states = np.zeros((len(cuts), pcg64.WORDS), dtype=np.uint64)
    for j, (first, stop) in enumerate(cuts):
        states[j] = pcg64.state_words(rng.bit_generator.state)
        rng.standard_normal(out=z[first:stop], dtype=dtype)
    return z, states


def cell_certificates(block, cuts, probes, library="numpy") -> dict:
    """Each cell's ``counts``, ``means``, ``squares`` and ``g = X_c^T (X_c Q)``, float64, host.

    ``X_c``: the cell's rows centred on the cell's own column means, in float64 (one reused
    buffer); ``squares`` its sum of squares; ``probes``: ``Q`` (features x PROBES).
    """
    xp = importlib.import_module(library)
    q = xp.asarray(probes, dtype=np.float64)
    counts = np.array([stop - first for first, stop in cuts], dtype=np.int64)
    features, width = block.shape[1], q.shape[1]
    means = np.empty((len(cuts), features))
    squares = np.empty(len(cuts))
    g = np.empty((len(cuts), features, width))
    scratch = xp.empty((int(counts.max(initial=0)), features), dtype=np.float64)
    for j, (first, stop) in enumerate(cuts):
        mean = block[first:stop].sum(axis=0, dtype=np.float64) / counts[j]
        centred = xp.subtract(block[first:stop], mean, out=scratch[:counts[j]])
        squares[j] = _squares(centred, xp)
        g[j] = to_host(centred.T @ (centred @ q))
        means[j] = to_host(mean)
    return {"counts": counts, "means": means, "squares": squares, "g": g}


def block_summary(block, states, cuts, probes, library="numpy", slice_rows=None) -> tuple:
    """The exact method's task for one block: :func:`r_summary` and the cells' certificates.

    ``states``: the generator's noted states at the cells (:func:`draw_block`), or None where
    the block was read or drawn whole on a device (then zeros).
    """
    certificate = cell_certificates(block, cuts, probes, library)
    certificate["states"] = (np.zeros((len(cuts), pcg64.WORDS), dtype=np.uint64)
                             if states is None else states)
    return r_summary(block, library, slice_rows), certificate


def _joined(a, b):
    (na, ma, _, sa), (nb, mb, _, sb) = a, b
    n = na + nb
    d = mb - ma
    c = na * nb / n
    return n, ma + d * (nb / n), d, c, sa + sb + c * float(d @ d)


def combine_r(a, b, basis=None):
    """Two R summaries as one: the R's stacked with ``sqrt(c) d`` (projected on ``basis``)."""
    n, mean, d, c, squares = _joined(a, b)
    row = d if basis is None else d @ basis
    stacked = np.concatenate([a[2], b[2], math.sqrt(c) * row[None, :]])
    return n, mean, np.linalg.qr(stacked, mode="r"), squares


def combine_power(a, b, basis=None):
    """Two power-step summaries as one: ``Z_a + Z_b + c d (d^T W)``."""
    n, mean, d, c, squares = _joined(a, b)
    return n, mean, a[2] + b[2] + c * np.outer(d, d @ basis), squares


def tree(parts: list, combine, **kwargs):
    """Combine ``parts`` (delayed summaries) pairwise, neighbours first; the delayed total."""
    import dask

    level = list(parts)
    while len(level) > 1:
        paired = [dask.delayed(combine, pure=True)(level[i], level[i + 1], **kwargs)
                  for i in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def next_basis(total) -> np.ndarray:
    """The orthonormal basis of a power step's ``X_c^T X_c W``."""
    return np.linalg.qr(total[2])[0]


def starting_basis(seed: int, features: int, width: int) -> np.ndarray:
    """A seeded orthonormal ``features x width`` basis: the randomised range finder's start."""
    rng = np.random.default_rng(np.random.SeedSequence((seed, 5)))
    return np.linalg.qr(rng.standard_normal((features, width)))[0]


def finish(total, components: int, basis=None) -> dict:
    """The principal components from the combined R (of ``X_c``, or of ``X_c W``).

    The SVD ``R = U S T^T`` gives ``X_c``'s right singular vectors ``T`` (``W T`` when
    projected); signs are fixed so that each component's largest entry is positive. The exact
    method's result also holds ``r``, the ``features x features`` R of ``X_c`` itself, which
    :mod:`pipelines.pca.check` tests against the data (``R^T R = X_c^T X_c``) to learn all of
    the Gram matrix's eigenvalues in one thin pass.
    """
    rows, mean, r, squares = total
    _, s, t = np.linalg.svd(r, full_matrices=True)
    vectors = t if basis is None else t @ basis.T
    found = np.zeros(components)
    k = min(components, s.size)
    found[:k] = s[:k]
    picked = vectors[:components].copy()
    biggest = np.argmax(np.abs(picked), axis=1)
    picked *= np.where(picked[np.arange(len(picked)), biggest] < 0, -1.0, 1.0)[:, None]
    dof = max(rows - 1, 1)
    variance = found**2 / dof
    total_variance = squares / dof
    out = {"components": picked, "singular_values": found, "explained_variance": variance,
           "explained_variance_ratio": variance / total_variance if total_variance else
           np.zeros(components), "total_variance": total_variance, "mean": mean,
           "samples": int(rows), "method": "exact" if basis is None else "randomized"}
    if basis is None:
        out["r"] = r  # the check's certificate: R^T R is the centred Gram matrix
    return out


# --------------------------------------------------------------------------- the covariance
# method: every cell's centred Gram matrix in float64, joined into the block's, then eigh.


def gram_summary(block, states, cuts, probes, library="numpy") -> tuple:
    """The covariance method's task for one block: ``(rows, mean, S, squares)`` and certificates.

    Each cell (``cuts``) is centred on its own column means into one float64 buffer and its
    scatter ``S_c = X_c^T X_c`` taken there (float64 products and sums, whatever the data's
    dtype); the cells' scatters are joined about the block's mean (pairwise update). Each cell
    is certified as :func:`cell_certificates` does, from the same ``S_c``: ``g = S_c Q``.
    ``states``: as :func:`block_summary`.
    """
    xp = importlib.import_module(library)
    q = np.asarray(probes, dtype=np.float64)
    counts = np.array([stop - first for first, stop in cuts], dtype=np.int64)
    features, width = block.shape[1], q.shape[1]
    means = np.empty((len(cuts), features))
    squares = np.empty(len(cuts))
    g = np.empty((len(cuts), features, width))
    scratch = xp.empty((int(counts.max(initial=0)), features), dtype=np.float64)
    total = None
    for j, (first, stop) in enumerate(cuts):
        mean = block[first:stop].sum(axis=0, dtype=np.float64) / counts[j]
        centred = xp.subtract(block[first:stop], mean, out=scratch[:counts[j]])
        scatter = np.asarray(to_host(centred.T @ centred), dtype=np.float64)
        means[j] = to_host(mean)
        squares[j] = float(np.trace(scatter))
        g[j] = scatter @ q
        total = _joined_scatter(total, (int(counts[j]), means[j], scatter, squares[j]))
    certificate = {"counts": counts, "means": means, "squares": squares, "g": g,
                   "states": (np.zeros((len(cuts), pcg64.WORDS), dtype=np.uint64)
                              if states is None else states)}
    return total, certificate


def _joined_scatter(a, b):
    if a is None:
        return b
    n, mean, d, c, squares = _joined(a, b)
    return n, mean, a[2] + b[2] + c * np.outer(d, d), squares


def combine_gram(a, b):
    """Two covariance summaries as one: ``S_a + S_b + c d d^T`` about the union's mean."""
    return _joined_scatter(a, b)


def finish_covariance(total, components: int, dtype: str) -> dict:
    """The principal components from the combined centred Gram matrix ``C``: ``eigh``.

    As :func:`finish`, with ``gram`` (``C``, the check's certificate: it is tested against the
    data on the probes) instead of ``r``, ``method`` and ``shortfall``: None when the
    covariance method vouches for every reported variance
    (:func:`pipelines.pca.shared.covariance_shortfall`), else ``(i, bound, exact's bound)``.
    """
    rows, mean, gram, squares = total
    gram = (gram + gram.T) / 2  # the pairwise updates keep it symmetric up to rounding
    lam, vectors = np.linalg.eigh(gram)
    order = np.argsort(lam)[::-1][:components]
    found = np.zeros(components)
    found[:order.size] = np.maximum(lam[order], 0.0)
    picked = vectors[:, order].T.copy()
    biggest = np.argmax(np.abs(picked), axis=1)
    picked *= np.where(picked[np.arange(len(picked)), biggest] < 0, -1.0, 1.0)[:, None]
    dof = max(rows - 1, 1)
    variance = found / dof
    total_variance = squares / dof
    features = gram.shape[0]
    shortfall = shared.covariance_shortfall(found, int(rows), features, float(squares), dtype)
    return {"components": picked, "singular_values": np.sqrt(found),
            "explained_variance": variance,
            "explained_variance_ratio": variance / total_variance if total_variance else
            np.zeros(components), "total_variance": total_variance, "mean": mean,
            "samples": int(rows), "gram": gram, "method": "covariance",
            "shortfall": shortfall}
