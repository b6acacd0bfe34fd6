"""Independent verification of matmul-pipeline's result (:func:`verify`) and its mutations.

What the check establishes, for every block C_ij of C = A B (rows i, columns j):

- Freivalds' check: the run's C_ij R_j (R: a column of ones and three standard normal columns,
  seeded) equals A_i (B_j R_j), recomputed here as matrix-vector products of A and B blocks
  drawn again (or re-read) on the workers, in float64, to within the rounding bound below. A
  wrong C_ij passes a normal column with probability 0, so one wrong block fails the run.
- C's block sums agree with A_i (B_j 1); the reported sum is their total.
- Each block's sum of squares lies between ||A_i (B_j r)||^2 / ||r_j||^2 for every r (Cauchy-
  Schwarz) and ||A_i||_F^2 ||B_j||_F^2 (submultiplicativity); the reported Frobenius norm is the
  root of their total.
- The run's values at seeded sample cells equal dot products of a row of A and a column of B.

The rounding bound (Higham, Thm 3.5): each entry of the run's C is within gamma_k(dtype)
(|A| |B|) of the exact product, and the float64 products here and in the run add
gamma_k + gamma_k + gamma_mj in float64, so the check allows twice
(gamma_k(dtype) + 2 gamma_k(f64) + gamma_mj(f64)) times |A| (|B| |r|), computed here as well.
It is a worst-case bound for any summation order: a correct run never fails it (unless the
backend trades accuracy for speed, as TF32 on a GPU would, which CuPy does not by default).

It shares no code with the computation (:mod:`daskgpu.data.synthetic`,
:mod:`daskgpu.data.array_input`, ``dask.array.matmul``, :mod:`pipelines.matmul.tasks`,
:mod:`pipelines.matmul.pipeline`): it draws and reads the blocks its own way, following the
documented schemes of :mod:`daskgpu.toolkit.numeric` (the seeded generator, blocks' first
indices, the unit roundoff), and takes from :mod:`pipelines.matmul.shared` only the seeds, the
vectors and the cells.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator, starts, unit_roundoff
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from daskgpu.toolkit.spot_checks import detection
from pipelines.matmul import check_streamed, shared

# The rounding bound is a worst case; this factor covers the second-order terms it drops.
SAFETY = 2.0
EPS64 = float(np.finfo(np.float64).eps)
TINY = float(np.finfo(np.float64).tiny)


def gamma(count: int, dtype) -> float:
    """gamma_k = k u / (1 - k u): the relative rounding bound of a k-term dot product.

    Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Thm 3.5 / eq. (3.12):
    |fl(A B) - A B| <= gamma_k |A| |B| for any order of summation (FMA only tightens it).
    """
    ku = count * unit_roundoff(dtype)
    return ku / (1 - ku) if ku < 0.5 else float("inf")


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Freivalds' check per block of C, its sums, squares and sampled cells (see the module).

    Parameters
    ----------
    workload : Workload
        The run's workload (its context: shape, blocks, seeds or inputs, dtype, library).
    raw : dict
        The computed result (``raw["result"]``: the per-block material and C's norm and sum).
    depth : {"full", "fast"}
        The same checks at both depths, of every block: ``full`` recomputes A (B R) from whole
        blocks (on the host); ``fast`` streams A and B on the workers a slab of rows at a time
        (on the device with CuPy), which gives the same numbers at a fraction of the cost
        (:mod:`pipelines.matmul.check_streamed`).

    Returns
    -------
    Verification
        Passed, or failed naming the block, row or cell that disagreed.
    """
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or "partials" not in result:
        return Verification(False, f"result {type(raw).__name__} carries no per-block material")
    ctx = workload.context
    failure = _check_shapes(ctx, result) or _check_totals(result)
    if failure:
        return Verification(False, failure)
    recomputed = recompute(ctx) if depth == "full" else check_streamed.recompute(ctx)
    for check in (_check_freivalds, _check_block_sums, _check_squares, _check_samples):
        failure = check(ctx, result, recomputed)
        if failure:
            return Verification(False, failure)
    n, k, m = ctx["shape"]
    blocks = result["block_sums"].size
    if depth == "full":
        return Verification(True, (
            f"Freivalds' check of all {blocks} blocks of C ({n} x {m}) with "
            f"{1 + shared.NORMAL_VECTORS} vectors against A (B r) recomputed apart, within "
            f"the rounding bound of k={k} in {ctx['dtype']}; block sums and squares agree with "
            f"bounds from A and B; {shared.SAMPLED_CELLS} sampled cells recomputed as dot "
            "products agree"))
    return Verification(True, (
        f"Freivalds' check of every row of C ({n} x {m}; {detection(blocks, blocks)}) with "
        f"{1 + shared.NORMAL_VECTORS} vectors against A (B r), A and B streamed apart on the "
        f"workers, within the rounding bound of k={k} in {ctx['dtype']} (a row of C off by "
        "ten times the bound passes the normal vectors with probability below 1e-3); block "
        "sums and squares agree with bounds from A and B; "
        f"{shared.SAMPLED_CELLS} sampled cells recomputed as dot products agree"))


def _grid(ctx: dict) -> tuple[int, int]:
    return len(ctx["a_chunks"][0]), len(ctx["b_chunks"][1])


def _check_shapes(ctx: dict, result: dict) -> str | None:
    n, _k, m = ctx["shape"]
    grid = _grid(ctx)
    nv = 1 + shared.NORMAL_VECTORS
    expected = {"block_squares": grid, "block_sums": grid, "partials": (n, grid[1], nv),
                "samples": (shared.SAMPLED_CELLS,), "block_rows": (grid[0],)}
    for key, shape in expected.items():
        got = np.shape(result.get(key))
        if got != shape:
            return (f"{key}: shape {got} for C of {n} x {m} in {grid[0]} x {grid[1]} blocks, "
                    f"{shape} expected (a block dropped or counted twice)")
    if tuple(result["block_rows"]) != tuple(ctx["a_chunks"][0]):
        return f"block_rows {tuple(result['block_rows'])}: not the rows of A's blocks"
    return None


def _check_totals(result: dict) -> str | None:
    squares = result["block_squares"].ravel().tolist()
    norm = math.sqrt(math.fsum(squares)) if min(squares) >= 0 else math.nan
    count = len(squares) + 2
    if not abs(result["frobenius_norm"] - norm) <= count * EPS64 * norm + TINY:
        return (f"Frobenius norm {result['frobenius_norm']!r} is not the root of its blocks' "
                f"squares, {norm!r}")
    sums = result["block_sums"].ravel().tolist()
    total = math.fsum(sums)
    scale = math.fsum(abs(s) for s in sums)
    if not abs(result["sum"] - total) <= count * EPS64 * scale + TINY:
        return f"sum {result['sum']!r} is not the total of its blocks' sums, {total!r}"
    return None


def _bound_factor(ctx: dict, block_cols: int) -> float:
    k = ctx["shape"][1]
    return SAFETY * (gamma(k, ctx["dtype"]) + 2 * gamma(k, np.float64)
                     + gamma(block_cols, np.float64))


def _check_freivalds(ctx: dict, result: dict, again: dict) -> str | None:
    partials, q, qabs = result["partials"], again["q"], again["qabs"]
    cols = ctx["b_chunks"][1]
    row_starts = starts(ctx["a_chunks"][0])
    for j, width in enumerate(cols):
        tolerance = _bound_factor(ctx, width) * qabs[:, j, :] + TINY
        off = np.abs(partials[:, j, :] - q[:, j, :])
        bad = ~(off <= tolerance)  # NaN fails too
        if bad.any():
            p, v = (int(x) for x in np.argwhere(bad)[0])
            i = int(np.searchsorted(row_starts, p, side="right") - 1)
            return (f"Freivalds' check: block ({i}, {j}) of C, row {p}, vector {v}: "
                    f"C r = {partials[p, j, v]:.12g}, A (B r) = {q[p, j, v]:.12g}, off by "
                    f"{off[p, v]:.3g} (bound {tolerance[p, v]:.3g})")
    return None


def _check_block_sums(ctx: dict, result: dict, again: dict) -> str | None:
    rows, cols = ctx["a_chunks"][0], ctx["b_chunks"][1]
    row_starts = starts(rows)
    for i, (r0, height) in enumerate(zip(row_starts, rows, strict=True)):
        for j, width in enumerate(cols):
            q = again["q"][r0:r0 + height, j, 0]
            scale = float(again["qabs"][r0:r0 + height, j, 0].sum())
            expected = math.fsum(q.tolist())
            tolerance = (_bound_factor(ctx, width) + SAFETY * gamma(height * width + height,
                                                                     np.float64)) * scale
            got = float(result["block_sums"][i, j])
            if not abs(got - expected) <= tolerance + TINY:
                return (f"block ({i}, {j}) of C: sum {got:.12g}, A (B 1) gives "
                        f"{expected:.12g} (bound {tolerance:.3g})")
    return None


def _check_squares(ctx: dict, result: dict, again: dict) -> str | None:
    rows, cols = ctx["a_chunks"][0], ctx["b_chunks"][1]
    row_starts, col_starts = starts(rows), starts(cols)
    r = shared.vectors(ctx["shape"][2], ctx["check_seed"])
    for i, (r0, height) in enumerate(zip(row_starts, rows, strict=True)):
        for j, (c0, width) in enumerate(zip(col_starts, cols, strict=True)):
            q = again["q"][r0:r0 + height, j, :]
            slack = _bound_factor(ctx, width) * again["qabs"][r0:r0 + height, j, :]
            smallest = np.maximum(np.abs(q) - slack, 0.0)  # |C r| at least this, row by row
            norms = (r[c0:c0 + width] ** 2).sum(axis=0)
            lower = float(((smallest**2).sum(axis=0) / norms).max())
            upper = float(again["a_squares"][i] * again["b_squares"][j])
            got = float(result["block_squares"][i, j])
            margin = SAFETY * gamma(height * width, np.float64)
            if not lower * (1 - margin) <= got <= upper * (1 + margin) + TINY:
                return (f"block ({i}, {j}) of C: sum of squares {got:.12g} outside "
                        f"[{lower:.12g}, {upper:.12g}] (|C r|^2 / |r|^2 to "
                        "|A_i|^2 |B_j|^2)")
    return None


def _check_samples(ctx: dict, result: dict, again: dict) -> str | None:
    k = ctx["shape"][1]
    factor = SAFETY * (gamma(k, ctx["dtype"]) + gamma(k, np.float64))
    rows, cols = shared.sampled_cells(ctx["shape"][0], ctx["shape"][2], ctx["check_seed"])
    for s, (got, expected, scale) in enumerate(zip(result["samples"], again["samples"],
                                                   again["samples_abs"], strict=True)):
        if not abs(got - expected) <= factor * scale + TINY:
            return (f"sampled cell C[{rows[s]}, {cols[s]}]: {got:.12g} reported, "
                    f"{expected:.12g} as a dot product of A's row and B's column")
    return None


# --------------------------------------------------------------------------- recomputation


def block_of(ctx: dict, which: int, location: tuple[int, int]) -> np.ndarray:
    """Block ``location`` of A (``which`` 0) or B (1) in float64, drawn again or re-read.

    Drawn: ``SeedSequence(operand_seed, spawn_key=(block_number,))``, blocks numbered row-major;
    NumPy's ``default_rng``, or the device's counter-based generator keyed by the sequence's
    first two 64-bit words (:func:`daskgpu.toolkit.numeric.generator`).
    """
    chunks = ctx["a_chunks"] if which == 0 else ctx["b_chunks"]
    (r0, c0) = (int(starts(chunks[0])[location[0]]), int(starts(chunks[1])[location[1]]))
    shape = (chunks[0][location[0]], chunks[1][location[1]])
    if ctx["sources"] is not None:
        source = ctx["sources"][which]
        if source.kind == "zarr":
            import zarr

            stored = zarr.open_array(source.path, mode="r")
        else:
            stored = np.load(source.path, mmap_mode="r")
        return np.asarray(stored[r0:r0 + shape[0], c0:c0 + shape[1]], dtype=np.float64)
    number = location[0] * len(chunks[1]) + location[1]
    sequence = np.random.SeedSequence(ctx["seeds"][which], spawn_key=(number,))
    values = generator(ctx["library"], sequence).random(shape, dtype=ctx["dtype"])
    if ctx["library"] != "numpy":
        values = values.get()  # a device array (CuPy's) to the host
    return np.asarray(values, dtype=np.float64)


def b_products(ctx: dict, kb: int, j: int) -> dict:
    """B_lj R_j and |B_lj| |R_j|, its squares, and its columns at the sampled cells."""
    b = block_of(ctx, 1, (kb, j))
    c0 = int(starts(ctx["b_chunks"][1])[j])
    r = shared.vectors(ctx["shape"][2], ctx["check_seed"])[c0:c0 + b.shape[1]]
    _, cols = shared.sampled_cells(ctx["shape"][0], ctx["shape"][2], ctx["check_seed"])
    held = (cols >= c0) & (cols < c0 + b.shape[1])
    picked = np.zeros((b.shape[0], len(cols)))
    picked[:, held] = b[:, cols[held] - c0]
    return {"y": b @ r, "yabs": np.abs(b) @ np.abs(r), "squares": float((b * b).sum()),
            "columns": picked}


def a_products(ctx: dict, i: int, kb: int, from_b: list[dict]) -> dict:
    """A_il times every B_lj R_j (and in absolute values), its squares, the cells' terms."""
    a = block_of(ctx, 0, (i, kb))
    y = np.stack([part["y"] for part in from_b], axis=1)  # (bk, gj, vectors)
    yabs = np.stack([part["yabs"] for part in from_b], axis=1)
    height, (bk, gj, nv) = a.shape[0], y.shape
    columns = sum(part["columns"] for part in from_b)  # (bk, cells): each from one block
    rows, _ = shared.sampled_cells(ctx["shape"][0], ctx["shape"][2], ctx["check_seed"])
    r0 = int(starts(ctx["a_chunks"][0])[i])
    held = np.flatnonzero((rows >= r0) & (rows < r0 + height))
    samples, samples_abs = np.zeros(len(rows)), np.zeros(len(rows))
    for s in held:
        row = a[rows[s] - r0]
        samples[s] = math.fsum((row * columns[:, s]).tolist())
        samples_abs[s] = float(np.abs(row) @ np.abs(columns[:, s]))
    return {"q": (a @ y.reshape(bk, gj * nv)).reshape(height, gj, nv),
            "qabs": (np.abs(a) @ yabs.reshape(bk, gj * nv)).reshape(height, gj, nv),
            "a_squares": float((a * a).sum()), "samples": samples, "samples_abs": samples_abs}


def _add(*parts: dict) -> dict:
    return {key: sum(p[key] for p in parts) for key in parts[0]}


def recompute(ctx: dict) -> dict:
    """A (B R), |A| (|B| |R|), the blocks' squares and the sampled cells, on the workers."""
    gi, gk = len(ctx["a_chunks"][0]), len(ctx["a_chunks"][1])
    gj = len(ctx["b_chunks"][1])
    from_b = [[dask.delayed(b_products, pure=True)(ctx, kb, j) for j in range(gj)]
              for kb in range(gk)]
    rows = [dask.delayed(_add, pure=True)(*[
        dask.delayed(a_products, pure=True)(ctx, i, kb, from_b[kb]) for kb in range(gk)])
        for i in range(gi)]
    b_squares = [dask.delayed(sum, pure=True)([from_b[kb][j]["squares"] for kb in range(gk)])
                 for j in range(gj)]
    rows, b_squares = dask.compute(rows, b_squares)
    return {"q": np.concatenate([r["q"] for r in rows]),
            "qabs": np.concatenate([r["qabs"] for r in rows]),
            "a_squares": np.array([r["a_squares"] for r in rows]),
            "b_squares": np.array(b_squares),
            "samples": sum(r["samples"] for r in rows),
            "samples_abs": sum(r["samples_abs"] for r in rows)}


# --------------------------------------------------------------------------- mutations


def _altered(raw: dict, change) -> dict:
    result = dict(raw["result"])
    for key in ("block_squares", "block_sums", "partials", "samples", "block_rows"):
        result[key] = np.array(result[key], copy=True)
    change(result)
    result["frobenius_norm"] = math.sqrt(math.fsum(result["block_squares"].ravel().tolist()))
    result["sum"] = math.fsum(result["block_sums"].ravel().tolist())
    return {**raw, "result": result}


def _scale_block(result: dict) -> None:
    height = int(result["block_rows"][-1])  # the last block of C: last rows, last columns
    result["partials"][-height:, -1, :] *= 1.001
    result["block_sums"][-1, -1] *= 1.001
    result["block_squares"][-1, -1] *= 1.001**2


def _zero_block(result: dict) -> None:
    result["partials"][:, -1, :] = 0.0  # every block of the last column block computed as zero
    result["block_sums"][:, -1] = 0.0
    result["block_squares"][:, -1] = 0.0


def _misplaced_blocks(result: dict) -> None:
    if result["partials"].shape[1] > 1:
        result["partials"] = np.roll(result["partials"], 1, axis=1)
        result["block_sums"] = np.roll(result["block_sums"], 1, axis=1)
        result["block_squares"] = np.roll(result["block_squares"], 1, axis=1)
    else:
        result["partials"] = np.roll(result["partials"], 1, axis=0)


def _changed_sample(result: dict) -> None:
    result["samples"][0] *= 1.001


def _lost_squares(result: dict) -> None:
    result["block_squares"][0, 0] = 0.0


def _norm_altered(raw: dict) -> dict:
    result = dict(raw["result"])
    result["frobenius_norm"] *= 1.01
    return {**raw, "result": result}


def _sum_altered(raw: dict) -> dict:
    result = dict(raw["result"])
    result["sum"] += 1.0 + abs(result["sum"]) * 1e-6
    return {**raw, "result": result}


# What a failed check's detail names (a regular expression, see Mutation.names).
FREIVALDS = r"Freivalds' check: block \(\d+, \d+\) of C"
MUTATIONS = (
    Mutation("one block of C scaled by 1.001", lambda raw: _altered(raw, _scale_block),
             FREIVALDS),
    Mutation("a column block of C zero", lambda raw: _altered(raw, _zero_block),
             FREIVALDS + r", row \d+, vector \d+: C r = 0,"),
    Mutation("blocks of C in the wrong places", lambda raw: _altered(raw, _misplaced_blocks),
             FREIVALDS),
    Mutation("a sampled entry changed by 0.1 %", lambda raw: _altered(raw, _changed_sample),
             r"sampled cell C\[\d+, \d+\]: \S+ reported"),
    Mutation("a block's squares lost", lambda raw: _altered(raw, _lost_squares),
             r"block \(0, 0\) of C: sum of squares 0 outside"),
    Mutation("Frobenius norm altered", _norm_altered,
             r"^Frobenius norm \S+ is not the root of its blocks' squares"),
    Mutation("sum altered", _sum_altered, r"^sum \S+ is not the total of its blocks' sums"),
)
