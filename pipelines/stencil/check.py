"""Independent verification of stencil-pipeline's result (:func:`verify`) and its mutations.

What the check establishes: the run's grid is lambda^s u0 in every cell to within a rounding
bound (the largest deviation of each block, computed on the cluster after the timed compute by
evolving the run's graph again, and the run's seeded probes of u and u0, recomputed here in
float64 from the closed form, the probes also showing that the deviation covers them), its l2
norm is lambda^s (n+1)/2, and a small random grid, evolved on the cluster by the run's own halo
exchange and kernels, matches float64 NumPy slicing written here.

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
from daskgpu.toolkit.numeric import unit_roundoff
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.stencil.shared import (
    CLOSED_FORM_ROUNDING,
    MAX_EXCHANGES,
    decay,
    decay_minus_one,
    decay_rate,
    probe_cells,
    rounding_bound,
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


def _check_probes(raw, n, steps, alpha, dtype) -> tuple[bool, str]:
    """Probes of u and u0 against the closed form, computed here; max_error must cover them."""
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
    if deviation[worst] > float(raw["max_error"]) + 8 * unit_roundoff(np.float64):
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


def verify(workload: Workload, raw: dict) -> Verification:
    """The closed form at every cell, at seeded probes and for l2_norm; a random grid's kernel.

    Runs with the cluster as Dask's scheduler (the random grid evolves there). Parameters whose
    steps cannot be told from rounding were refused by ``settle``; should such a workload come
    here anyway, it says so and fails.
    """
    ctx = workload.context
    n, steps, alpha, dtype = ctx["size"], ctx["steps"], ctx["alpha"], ctx["dtype"]
    if not verifiable(n, steps, alpha, dtype):
        return Verification(False, "cannot verify: " + unverifiable(
            n, steps, alpha, dtype, MAX_EXCHANGES * ctx["steps_per_exchange"]))
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


MUTATIONS = (
    Mutation("no-op (u = u0)", _no_op, "did not move"),
    Mutation("wrong step count (twice the steps)", _twice_the_steps, "probe u("),
    Mutation("wrong alpha (half of it)", _half_the_alpha, "steps of alpha"),
    Mutation("l2_norm set to 0", lambda raw: dict(raw, l2_norm=0.0), "l2_norm"),
    Mutation("l2_norm scaled by 1.001", lambda raw: dict(raw, l2_norm=raw["l2_norm"] * 1.001),
             "l2_norm"),
)
