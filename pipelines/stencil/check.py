"""stencil-pipeline's check, declared on :mod:`daskgpu.verification`.

Both depths: the run's probes of u (the centre and seeded cells) match lambda^s u0 and of u0 the
sine mode, both computed here in float64 from the closed form; the l2 norm is lambda^s (n+1)/2.
``fast`` evolves nothing again: every block's certified weighted row and column sums against the
closed form's (lambda^s u0 is separable), and the run's seeded whole rows and columns cell by
cell. ``full`` computes every cell's deviation from lambda^s u0 on the cluster (the run's graph
evolved again), and runs a small random grid through the run's own halo exchange and kernels
against NumPy slicing written here. It takes from :mod:`pipelines.stencil.shared` only the
closed form, the rounding model, the probe cells and the line weights.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from daskgpu.toolkit import backends
from daskgpu.verification import Check, Sampler, Unreadable, rounding, tolerance, unit_roundoff
from pipelines.stencil.check_mutations import MUTATIONS
from pipelines.stencil.shared import (
    CLOSED_FORM_ROUNDING,
    MAX_EXCHANGES,
    StencilContext,
    decay_minus_one,
    decay_rate,
    line_plans,
    line_weights,
    probe_cells,
    sine_peak,
    unverifiable,
    verifiable,
)

# The small random grid the full check evolves on the cluster, its blocks and its steps at most.
CHECK_GRID = (41, 37)
CHECK_CHUNKS = (12, 10)
CHECK_STEPS = 12


def _sine(n: int) -> np.ndarray:
    """sin(pi i / (n + 1)) for i = 1..n: one axis of u0, computed here."""
    return np.sin(np.pi * np.arange(1, n + 1, dtype=np.float64) / (n + 1))


def _centre_decay_note(ctx: StencilContext, u_centre: float) -> str:
    """What u at the centre says about the steps taken: none, or how many (of this alpha)."""
    n, ratio = ctx.size, u_centre / sine_peak(ctx.size)
    if abs(u_centre - sine_peak(n)) <= ctx.bound:
        return "u did not move from u0"
    rate = decay_rate(n, ctx.alpha)
    if 0.0 < ratio < 1.0 and 0.0 < rate < 1.0:
        taken = math.log(ratio) / math.log1p(-rate)
        return f"u decayed as after {taken:.3g} steps of alpha {ctx.alpha:g}, not {ctx.steps}"
    return f"u at the centre is {ratio:.3g} u0"


def probes(ctx: StencilContext, raw, verdict) -> None:
    """Probes of u and u0 against the closed form; at full, max_error must cover them too."""
    rows, cols = probe_cells(ctx.size)
    sine = _sine(ctx.size)[rows] * _sine(ctx.size)[cols]
    u, u0 = np.asarray(raw["probes"], float), np.asarray(raw["probes_u0"], float)
    deviation = np.abs(u - ctx.factor * sine)
    k = int(np.argmax(deviation))
    if not verdict.require(deviation[k] <= ctx.bound, lambda: (
            f"probe u({rows[k]}, {cols[k]}) = {u[k]:.6g} against the closed form "
            f"{ctx.factor * sine[k]:.6g} +- {ctx.bound:.2g}: {_centre_decay_note(ctx, u[0])}")):
        return
    initial = np.abs(u0 - sine)
    j = int(np.argmax(initial))
    limit = rounding(2, ctx.dtype) + CLOSED_FORM_ROUNDING * unit_roundoff(np.float64)
    if not verdict.require(initial[j] <= limit, f"probe u0({rows[j]}, {cols[j]}) = {u0[j]:.6g}, "
                                                f"not the sine mode {sine[j]:.6g}"):
        return
    if verdict.depth == "full":  # the grid's maximum and the closed form differ by rounding
        covered = raw["max_error"] + tolerance(sine_peak(ctx.size), 4)
        if not verdict.require(deviation[k] <= covered, (
                f"max_error {raw['max_error']:.2g} is below the deviation {deviation[k]:.2g} "
                f"at probe ({rows[k]}, {cols[k]}): it does not cover all cells")):
            return
    verdict.establish(f"{len(rows)} probes (centre and seeded) match lambda^s u0 and u0")


def l2_norm(ctx: StencilContext, raw, verdict) -> None:
    """The l2 norm against lambda^s (n + 1) / 2, within n rounding bounds and its sum's own."""
    n, got = ctx.size, float(raw["l2_norm"])
    expected = ctx.factor * (n + 1) / 2
    limit = n * ctx.bound + tolerance(expected, n * n + 2)
    if verdict.require(abs(got - expected) <= limit, (
            f"l2_norm {got:.7g} against lambda^s (n+1)/2 = {expected:.7g} (off by "
            f"{abs(got - expected):.2g}, tolerance {limit:.2g})")):
        verdict.establish(f"l2_norm {got:.7g} = lambda^s (n+1)/2 (within {limit:.2g})")


# --------------------------------------------------------------------------- fast


def line_sums(ctx: StencilContext, raw, verdict) -> None:
    """Every block's weighted row and column sums against lambda^s u0's, summed apart here."""
    (heights, widths), grid = ctx.grid.chunks, ctx.grid
    sums = np.asarray(raw["line_sums"], dtype=np.float64)
    tall, wide = max(heights), max(widths)
    if not verdict.require(sums.shape == (*grid.shape, tall + wide), (
            f"line sums shaped {sums.shape}, not one vector per block of the "
            f"{len(heights)} x {len(widths)} blocks: a block dropped or added")):
        return
    sine, (down, across) = _sine(ctx.size), line_weights(ctx.size)
    worst = (0.0, "")
    for i, j in grid.locations():
        rows, cols = grid.region((i, j))
        h, w = rows.stop - rows.start, cols.stop - cols.start
        for got, line_sine, other, weights, what, first in (
                (sums[i, j, :h], sine[rows], sine[cols], across[cols], "row", rows.start),
                (sums[i, j, tall:tall + w], sine[cols], sine[rows], down[rows], "column",
                 cols.start)):
            expected = ctx.factor * line_sine * float(other @ weights)
            cells = float(weights.sum())
            limit = ctx.bound * cells + tolerance(np.abs(expected) + ctx.bound * cells,
                                                  len(weights) + 8)
            ratio = np.nan_to_num(np.abs(got - expected) / limit, nan=np.inf)
            at = int(np.argmax(ratio))
            if ratio[at] > worst[0] or not worst[1]:
                worst = (float(ratio[at]), f"block ({i}, {j}), {what} {first + at}: weighted "
                         f"sum {got[at]:.15g} against the closed form's {expected[at]:.15g}")
    if verdict.require(worst[0] <= 1.0, f"line sums: {worst[1]}, {worst[0]:.3g} times its "
                                        "rounding bound"):
        verdict.establish(f"the weighted row and column sums of all {grid.blocks} blocks match "
                          f"lambda^s u0's (at most {worst[0]:.2g} of their rounding bounds)")


def sampled_lines(ctx: StencilContext, raw, verdict) -> None:
    """The run's seeded rows and columns of u, cell by cell, against lambda^s u0 here."""
    n, sine = ctx.size, _sine(ctx.size)
    plans = dict(zip(("row", "column"), line_plans(n, ctx.sample_seed), strict=True))
    got = {"row": np.asarray(raw["rows"], dtype=np.float64),
           "column": np.asarray(raw["cols"], dtype=np.float64).T}
    largest = 0.0
    for what, plan in plans.items():
        lines = list(plan)
        if not verdict.require(got[what].shape == (len(lines), n), (
                f"sampled {what}s shaped {got[what].shape}, not {len(lines)} whole {what}s of "
                f"{n} cells")):
            return
        deviation = np.abs(got[what] - ctx.factor * sine[lines][:, None] * sine[None, :])
        k, c = np.unravel_index(int(np.argmax(deviation)), deviation.shape)
        if not verdict.require(deviation[k, c] <= ctx.bound, (
                f"sampled {what} {lines[k]}: u misses lambda^s u0 by {deviation[k, c]:.2g} at "
                f"cell {c}, above the rounding bound {ctx.bound:.2g}")):
            return
        largest = max(largest, float(deviation[k, c]))
    verdict.establish(f"seeded rows and columns match lambda^s u0 cell by cell (largest "
                      f"deviation {largest:.2g}, bound {ctx.bound:.2g}): "
                      f"{plans['row'].promise}; {plans['column'].promise}")


# --------------------------------------------------------------------------- full


def read(workload, raw) -> dict:
    """A copy of the result (the full check adds the largest deviation it computes to it).

    Raises Unreadable where the steps move u too little to tell from rounding (``settle``
    refuses such runs; a workload built past it still fails, saying so).
    """
    ctx: StencilContext = workload.context
    if not verifiable(ctx.size, ctx.steps, ctx.alpha, ctx.dtype):
        raise Unreadable("cannot verify: " + unverifiable(
            ctx.size, ctx.steps, ctx.alpha, ctx.dtype, MAX_EXCHANGES * ctx.steps_per_exchange))
    return dict(raw)


def every_cell(ctx: StencilContext, raw, verdict) -> None:
    """The largest deviation of every cell from lambda^s u0, on the cluster, within the bound."""
    (error,) = dask.compute(ctx.max_error)
    raw["max_error"] = float(error)
    change = abs(decay_minus_one(ctx.size, ctx.alpha, ctx.steps)) * sine_peak(ctx.size)
    within = "within" if error <= ctx.bound else "above"
    text = (f"max_error {error:.2g} over all {ctx.size}x{ctx.size} cells, {within} the rounding "
            f"bound {ctx.bound:.2g} of lambda^s u0 (the {ctx.steps} steps move u by "
            f"{change:.2g})")
    if verdict.require(error <= ctx.bound, text):
        verdict.establish(text)


def _slicing_reference(grid: np.ndarray, alpha: float, steps: int) -> np.ndarray:
    """``steps`` explicit updates in float64 by NumPy slicing, with a zero boundary."""
    u = np.pad(grid.astype(np.float64), 1)
    for _ in range(steps):
        centre = u[1:-1, 1:-1]
        laplacian = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * centre
        u[1:-1, 1:-1] = centre + alpha * laplacian
    return u[1:-1, 1:-1]


def random_grid(ctx: StencilContext, raw, verdict) -> None:
    """A small random grid through the run's halo exchange and kernels, on the cluster.

    Evolved in the workers' memory (the CUDA kernel on GPU workers). The rounding rule's terms a
    step: four neighbours summed (9), the difference with 4u (4), alpha's rounding (4 alpha),
    the final sum (1), times alpha where it applies.
    """
    backend = ctx.backend or backends.get("cpu")
    grid = Sampler(ctx.size, "random grid").generator().random(CHECK_GRID).astype(ctx.dtype)
    taken = min(ctx.steps, CHECK_STEPS)
    small = da.from_array(grid, chunks=CHECK_CHUNKS)
    move = backend.to_device()
    if move is not None:
        small = small.map_blocks(move, dtype=grid.dtype, meta=np.empty((0, 0), grid.dtype))
    evolved = ctx.evolve(small, taken, ctx.alpha, min(ctx.steps_per_exchange,
                                                      min(CHECK_CHUNKS)))
    got = evolved.map_blocks(backends.to_host, dtype=grid.dtype,
                             meta=np.empty((0, 0), grid.dtype)).compute()
    error = float(np.abs(got - _slicing_reference(grid, ctx.alpha, taken)).max())
    terms = math.ceil((1.0 + ctx.alpha * 21.0) * taken) + 1
    limit = tolerance(float(grid.max()), terms, ctx.dtype)
    text = (f"random {'x'.join(map(str, CHECK_GRID))} grid, {taken} steps on the cluster: "
            f"kernel against NumPy slicing {error:.2g}, "
            f"{'within' if error <= limit else 'above'} {limit:.2g}")
    if verdict.require(error <= limit, text):
        verdict.establish(text)


# Each step recomputes its own quantity: every problem is listed, not only the first.
CHECK = Check(fast=(line_sums, sampled_lines, probes, l2_norm),
              full=(every_cell, probes, l2_norm, random_grid),
              read=read, mutations=MUTATIONS, every_problem=True)
