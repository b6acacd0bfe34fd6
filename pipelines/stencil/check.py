"""Independent verification of stencil-pipeline's result (:func:`verify`) and its mutations.

At depth full, the check establishes: the run's grid is lambda^s u0 in every cell to within a
rounding bound (the largest deviation of each block, computed on the cluster after the timed
compute by evolving the run's graph again, and the run's seeded probes of u and u0, recomputed
here in float64 from the closed form, the probes also showing that the deviation covers them),
its l2 norm is lambda^s (n+1)/2, and a small random grid, evolved on the cluster by the run's
own halo exchange and kernels, matches float64 NumPy slicing written here.

At depth fast, it evolves nothing again and reads what the run certified beside its answer:
every block's weighted row and column sums against the closed form's (lambda^s u0 is separable,
so a block's expected sums cost one pass over its rows and columns here), the run's seeded rows
and columns of the grid, whole, cell by cell against lambda^s u0 within the same rounding bound
as full (the sample sized by :func:`daskgpu.toolkit.spot_checks.sample_size`), the probes and
the l2 norm as at full.

It shares no code with the computation it checks (:mod:`daskgpu.kernels.stencil`,
:mod:`pipelines.stencil.pipeline` and :mod:`pipelines.stencil.tasks`): it takes from
:mod:`pipelines.stencil.shared` only the closed form, the rounding bound and the probe cells,
and the random grid is evolved by the ``evolve`` the workload carries in its context, the thing
under test. ``MUTATIONS`` are the wrong results
it must reject.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from daskgpu.toolkit import backends
from daskgpu.toolkit.numeric import starts, unit_roundoff
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from daskgpu.toolkit.spot_checks import detection
from pipelines.stencil.shared import (
    CLOSED_FORM_ROUNDING,
    MAX_EXCHANGES,
    decay,
    decay_minus_one,
    decay_rate,
    line_weights,
    probe_cells,
    rounding_bound,
    sampled_lines,
    sine_peak,
    unverifiable,
    verifiable,
)

# The small random grid verify evolves on the cluster, its blocks and its steps at most.
CHECK_GRID = (41, 37)
CHECK_CHUNKS = (12, 10)
CHECK_STEPS = 12


def _centre_decay_note(u_centre, n, alpha, steps, bound) -> str:
    """What u at the centre says about the steps taken: none, or how many (of this alpha)."""
    ratio = u_centre / sine_peak(n)
    if abs(u_centre - sine_peak(n)) <= bound:
        return "u did not move from u0"
    rate = decay_rate(n, alpha)
    if 0.0 < ratio < 1.0 and 0.0 < rate < 1.0:
        taken = math.log(ratio) / math.log1p(-rate)
        return f"u decayed as after {taken:.3g} steps of alpha {alpha:g}, not {steps}"
    return f"u at the centre is {ratio:.3g} u0"


def _check_closed_form(raw, n, steps, alpha, dtype) -> tuple[bool, str]:
    bound = rounding_bound(steps, dtype) * sine_peak(n)
    change = abs(decay_minus_one(n, alpha, steps)) * sine_peak(n)
    error = float(raw["max_error"])
    ok = error <= bound
    verdict = "within" if ok else "above"
    return ok, (f"max_error {error:.2g} over all {n}x{n} cells, {verdict} the rounding bound "
                f"{bound:.2g} of lambda^s u0 (the {steps} steps move u by {change:.2g})")


def _check_probes(raw, n, steps, alpha, dtype, covered=True) -> tuple[bool, str]:
    """Probes of u and u0 against the closed form, computed here; max_error must cover them.

    ``covered=False`` (depth fast, which computes no max_error): the probes alone.
    """
    rows, cols = probe_cells(n)
    sine = np.sin(np.pi * (rows + 1) / (n + 1)) * np.sin(np.pi * (cols + 1) / (n + 1))
    u, u0 = np.asarray(raw["probes"], float), np.asarray(raw["probes_u0"], float)
    bound = rounding_bound(steps, dtype) * sine_peak(n)
    expected = decay(n, alpha, steps) * sine
    deviation = np.abs(u - expected)
    worst = int(np.argmax(deviation))
    cell = f"({rows[worst]}, {cols[worst]})"
    if deviation[worst] > bound:
        note = _centre_decay_note(u[0], n, alpha, steps, bound)
        return False, (f"probe u{cell} = {u[worst]:.6g} against the closed form "
                       f"{expected[worst]:.6g} +- {bound:.2g}: {note}")
    initial = np.abs(u0 - sine)
    if initial.max() > 2 * unit_roundoff(dtype) + CLOSED_FORM_ROUNDING * unit_roundoff(np.float64):
        k = int(np.argmax(initial))
        return False, (f"probe u0({rows[k]}, {cols[k]}) = {u0[k]:.6g}, not the sine mode "
                       f"{sine[k]:.6g}")
    # The grid's maximum and the probes' closed form here differ by float64 rounding only.
    if covered and deviation[worst] > float(raw["max_error"]) + 8 * unit_roundoff(np.float64):
        return False, (f"max_error {float(raw['max_error']):.2g} is below the deviation "
                       f"{deviation[worst]:.2g} at probe {cell}: it does not cover all cells")
    return True, f"{len(rows)} probes (centre and seeded) match lambda^s u0 and u0"


def _check_l2(raw, n, steps, alpha, dtype) -> tuple[bool, str]:
    """The l2 norm against lambda^s ||u0||_2 = lambda^s (n + 1) / 2.

    ||u - lambda^s u0||_2 <= n max|u - lambda^s u0|, so the rounding bound times n covers it;
    the float64 sum of n^2 squares adds a relative 1e-12 at most.
    """
    expected = decay(n, alpha, steps) * (n + 1) / 2
    tolerance = n * rounding_bound(steps, dtype) * sine_peak(n) + 1e-12 * expected
    got = float(raw["l2_norm"])
    if abs(got - expected) <= tolerance:
        return True, f"l2_norm {got:.7g} = lambda^s (n+1)/2 (within {tolerance:.2g})"
    return False, (f"l2_norm {got:.7g} against lambda^s (n+1)/2 = {expected:.7g} "
                   f"(off by {abs(got - expected):.2g}, tolerance {tolerance:.2g})")


def _slicing_reference(grid: np.ndarray, alpha: float, steps: int) -> np.ndarray:
    """``steps`` explicit updates in float64 by NumPy slicing, with a zero boundary."""
    u = np.pad(grid.astype(np.float64), 1)
    for _ in range(steps):
        centre = u[1:-1, 1:-1]
        laplacian = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * centre
        u[1:-1, 1:-1] = centre + alpha * laplacian
    return u[1:-1, 1:-1]


def _check_random_grid(backend, evolve, n, steps, alpha, steps_per_exchange,
                       dtype) -> tuple[bool, str]:
    """A small random grid through the run's halo exchange and kernels (``evolve``), on the cluster.

    Its blocks go to the backend's memory, evolve there (the CUDA kernel on GPU workers) and
    come back to the host on the worker; the float64 slicing reference is computed here. The
    bound is the kernel's worst case per step for any grid in [0, 1): four neighbours summed
    (9 roundings' worth), the difference with 4u (4), alpha's own rounding (4 alpha), the final
    sum (1), times alpha where it applies; doubled for the reference's own float64 rounding.
    """
    grid = np.random.default_rng(n).random(CHECK_GRID).astype(dtype)
    taken = min(steps, CHECK_STEPS)
    small = da.from_array(grid, chunks=CHECK_CHUNKS)
    move = backend.to_device()
    if move is not None:
        small = small.map_blocks(move, dtype=grid.dtype, meta=np.empty((0, 0), grid.dtype))
    evolved = evolve(small, taken, alpha, min(steps_per_exchange, min(CHECK_CHUNKS)))
    got = evolved.map_blocks(backends.to_host, dtype=grid.dtype,
                             meta=np.empty((0, 0), grid.dtype)).compute()
    error = float(np.abs(got - _slicing_reference(grid, alpha, taken)).max())
    per_step = 1.0 + alpha * (9.0 + 4.0 + 4.0 + 4.0)
    bound = (2.0 * per_step * taken + 2.0) * unit_roundoff(dtype) * float(grid.max())
    shape = "x".join(map(str, CHECK_GRID))
    verdict = "within" if error <= bound else "above"
    return error <= bound, (f"random {shape} grid, {taken} steps on the cluster: kernel against "
                            f"NumPy slicing {error:.2g}, {verdict} {bound:.2g}")


def _sine(n: int) -> np.ndarray:
    """sin(pi i / (n + 1)) for i = 1..n: one axis of u0, computed here."""
    return np.sin(np.pi * np.arange(1, n + 1, dtype=np.float64) / (n + 1))


def _line_sum_deviation(got, expected, weight_total, bound, cells) -> tuple[float, int]:
    """The worst ratio of |got - expected| to its bound among a block's sums, and where.

    Each cell may miss the closed form by ``bound``, so a sum by ``bound`` times the weights'
    total; the run's float64 sum of ``cells`` terms and the closed form's here each add a
    rounding of at most (cells + 8) u of the sum of magnitudes.
    """
    magnitude = np.abs(expected) + bound * weight_total
    tolerance = bound * weight_total + 2 * (cells + 8) * unit_roundoff(np.float64) * magnitude
    ratio = np.nan_to_num(np.abs(np.asarray(got) - expected) / tolerance, nan=np.inf)
    at = int(np.argmax(ratio)) if ratio.size else 0
    return (float(ratio[at]) if ratio.size else 0.0), at


def _check_line_sums(raw, ctx) -> tuple[bool, str]:
    """Every block's weighted row and column sums against lambda^s u0's, summed apart here."""
    n, heights, widths = ctx["size"], *ctx["chunks"]
    sums = np.asarray(raw["line_sums"], dtype=np.float64)
    tall, wide = max(heights), max(widths)
    if sums.shape != (len(heights), len(widths), tall + wide):
        return False, (f"line sums shaped {sums.shape}, not one vector per block of the "
                       f"{len(heights)} x {len(widths)} blocks: a block dropped or added")
    factor = decay(n, ctx["alpha"], ctx["steps"])
    bound = rounding_bound(ctx["steps"], ctx["dtype"]) * sine_peak(n)
    sine, (down, across) = _sine(n), line_weights(n)
    worst = (0.0, "")
    for i, (r0, h) in enumerate(zip(starts(heights).tolist(), heights, strict=True)):
        rows = slice(r0, r0 + h)
        for j, (c0, w) in enumerate(zip(starts(widths).tolist(), widths, strict=True)):
            cols = slice(c0, c0 + w)
            for got, line_sine, other, weights, lines, what, first in (
                    (sums[i, j, :h], sine[rows], sine[cols], across[cols], w, "row", r0),
                    (sums[i, j, tall:tall + w], sine[cols], sine[rows], down[rows], h,
                     "column", c0)):
                expected = factor * line_sine * float(other @ weights)
                ratio, at = _line_sum_deviation(got, expected, float(weights.sum()), bound,
                                                lines)
                if ratio > worst[0] or not worst[1]:
                    worst = (ratio, f"block ({i}, {j}), {what} {first + at}: weighted sum "
                             f"{float(got[at]):.15g} against the closed form's "
                             f"{float(expected[at]):.15g}")
    blocks = len(heights) * len(widths)
    if not worst[0] <= 1.0:
        return False, f"line sums: {worst[1]}, {worst[0]:.3g} times its rounding bound"
    return True, (f"the weighted row and column sums of all {blocks} blocks match lambda^s u0's "
                  f"(at most {worst[0]:.2g} of their rounding bounds)")


def _check_sampled_lines(raw, ctx) -> tuple[bool, str]:
    """The run's seeded rows and columns of u, cell by cell, against lambda^s u0 computed here."""
    n = ctx["size"]
    rows, cols = sampled_lines(n, ctx["sample_seed"])
    got = {"row": np.asarray(raw["rows"], dtype=np.float64),
           "column": np.asarray(raw["cols"], dtype=np.float64).T}
    for what, lines in (("row", rows), ("column", cols)):
        if got[what].shape != (len(lines), n):
            return False, (f"sampled {what}s shaped {got[what].shape}, not {len(lines)} whole "
                           f"{what}s of {n} cells")
    factor = decay(n, ctx["alpha"], ctx["steps"])
    bound = rounding_bound(ctx["steps"], ctx["dtype"]) * sine_peak(n)
    sine = _sine(n)
    largest = 0.0
    for what, lines in (("row", rows), ("column", cols)):
        deviation = np.abs(got[what] - factor * sine[lines][:, None] * sine[None, :])
        k, c = np.unravel_index(int(np.argmax(deviation)), deviation.shape)
        if not deviation[k, c] <= bound:
            return False, (f"sampled {what} {lines[k]}: u misses lambda^s u0 by "
                           f"{deviation[k, c]:.2g} at cell {c}, above the rounding bound "
                           f"{bound:.2g}")
        largest = max(largest, float(deviation[k, c]))
    return True, (f"seeded rows and columns match lambda^s u0 cell by cell (largest deviation "
                  f"{largest:.2g}, bound {bound:.2g}): {detection(len(rows), n, 'rows')}; "
                  f"{detection(len(cols), n, 'columns')}")


def _fast_checks(ctx, raw) -> list[tuple[bool, str]]:
    """Depth fast: the certified line sums, the seeded rows and columns, probes and l2 norm."""
    n, steps, alpha, dtype = ctx["size"], ctx["steps"], ctx["alpha"], ctx["dtype"]
    return [_check_line_sums(raw, ctx), _check_sampled_lines(raw, ctx),
            _check_probes(raw, n, steps, alpha, dtype, covered=False),
            _check_l2(raw, n, steps, alpha, dtype)]


def verify(workload: Workload, raw: dict, depth: str = "full") -> Verification:
    """The closed form at every cell, at seeded probes and for l2_norm; a random grid's kernel.

    Runs with the cluster as Dask's scheduler (the random grid evolves there). Parameters whose
    steps cannot be told from rounding were refused by ``settle``; should such a workload come
    here anyway, it says so and fails. ``depth="fast"`` checks the run's certificates instead
    of evolving the grid again (see the module).
    """
    ctx = workload.context
    n, steps, alpha, dtype = ctx["size"], ctx["steps"], ctx["alpha"], ctx["dtype"]
    if not verifiable(n, steps, alpha, dtype):
        return Verification(False, "cannot verify: " + unverifiable(
            n, steps, alpha, dtype, MAX_EXCHANGES * ctx["steps_per_exchange"]))
    if depth == "fast":
        checks = _fast_checks(ctx, raw)
        failed = [text for ok, text in checks if not ok]
        return Verification(not failed, "; ".join(failed or [text for _ok, text in checks]))
    backend = workload.resolved.backend if workload.resolved else backends.get("cpu")
    (max_error,) = dask.compute(ctx["max_error"])
    measured = dict(raw, max_error=float(max_error))
    checks = [check(measured, n, steps, alpha, dtype)
              for check in (_check_closed_form, _check_probes, _check_l2)]
    checks.append(_check_random_grid(backend, ctx["evolve"], n, steps, alpha,
                                     ctx["steps_per_exchange"], dtype))
    failed = [text for ok, text in checks if not ok]
    if failed:
        return Verification(False, "; ".join(failed))
    return Verification(True, "; ".join(text for _ok, text in checks))


def _scaled(raw: dict, factor: float) -> dict:
    """``raw`` as a run whose grid is ``factor`` times this one would report it."""
    return dict(raw, probes=np.asarray(raw["probes"]) * factor, l2_norm=raw["l2_norm"] * factor)


def _decay_seen(raw: dict) -> float:
    """lambda^s as the centre probe shows it: u over u0 there."""
    return float(raw["probes"][0] / raw["probes_u0"][0])


def _no_op(raw: dict) -> dict:
    return _scaled(raw, 1 / _decay_seen(raw))


def _twice_the_steps(raw: dict) -> dict:
    return _scaled(raw, _decay_seen(raw))


def _half_the_alpha(raw: dict) -> dict:
    # For small 1 - lambda, halving alpha halves the exponent: the decay becomes about sqrt(g).
    return _scaled(raw, 1 / math.sqrt(_decay_seen(raw)))


# What a failed check's detail names (a regular expression, see Mutation.names).
DECAYED = r"u decayed as after \d+ steps of alpha \S+, not \d+"
MUTATIONS = (
    Mutation("no-op (u = u0)", _no_op, r"u did not move from u0"),
    Mutation("wrong step count (twice the steps)", _twice_the_steps, DECAYED),
    Mutation("wrong alpha (half of it)", _half_the_alpha, DECAYED),
    Mutation("l2_norm set to 0", lambda raw: dict(raw, l2_norm=0.0), r"^l2_norm 0 against"),
    Mutation("l2_norm scaled by 1.001", lambda raw: dict(raw, l2_norm=raw["l2_norm"] * 1.001),
             r"^l2_norm \S+ against lambda\^s"),
)
