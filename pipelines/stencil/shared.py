"""What stencil-pipeline and its check (:mod:`pipelines.stencil.check`) both use.

The closed form of the sine mode u0 = sin(pi i/(n+1)) sin(pi j/(n+1)): after s explicit steps
it is lambda^s u0, lambda = 1 - 8 alpha sin^2(pi/(2(n+1))). Here are lambda and lambda^s, u0's
peak, the rounding bound a run may miss the closed form by, whether a run's steps move u
clearly more than that (``settle`` refuses runs that do not; ``verify`` fails them), the
refusal's wording, the seeded probe cells, and what the run certifies for the fast check: the
weights of every block's row and column sums and the seeded rows and columns it hands back
whole. Nothing here evolves a grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.verification import Grid, Plan, Sampler, unit_roundoff

# Rounding of the evolution of the sine mode, in units of the dtype's unit roundoff times
# max|u0|: ROUNDING_PER_STEP per step plus ROUNDING_FIXED (u0 cast to the dtype, the float64
# comparison). Measured with the CPU kernel, float32 and float64, n from 61 to 8000, alpha from
# 0.02 to 0.25, up to 800 steps: at most 0.6 per step (the worst at n = 4000, alpha 0.2).
ROUNDING_PER_STEP = 1.0
ROUNDING_FIXED = 4.0
# The closed form's own rounding, in units of float64's: the generator and the check compute
# the sines from differently rounded arguments (near pi an argument's rounding is 4 units); the
# product of two differs by 6 units for n up to 4000, by up to 16 at n = 100000.
CLOSED_FORM_ROUNDING = 32.0
# Runs are refused unless their steps move u by this many rounding bounds: a grid that did not
# move then misses the closed form by three times the tolerance.
MIN_CHANGE_OVER_ROUNDING = 3.0
# Cells where u and u0 come back for verify: the centre (u0's peak) and this many seeded others.
PROBES = 8
# Halo exchanges in one graph at most: each adds a layer of one task a block (and its strips);
# 2000 of 16 blocks take about 2 s to build and 13 s for Dask to optimise here.
MAX_EXCHANGES = 2_000


def decay_rate(n: int, alpha: float) -> float:
    """1 - lambda = 8 alpha sin^2(pi / (2 (n + 1))), without the cancellation of 1 - lambda."""
    return 8.0 * alpha * math.sin(math.pi / (2 * (n + 1))) ** 2


def eigenvalue(n: int, alpha: float) -> float:
    """The factor u0 is multiplied by in one step: 1 - 8 alpha sin^2(pi / (2 (n + 1)))."""
    return 1.0 - decay_rate(n, alpha)


def decay(n: int, alpha: float, steps: int) -> float:
    """lambda^steps to a few float64 roundings at any step count.

    A power of the rounded lambda would carry ``steps`` times lambda's own rounding, as much as
    the float64 evolution's error.
    """
    return 1.0 + decay_minus_one(n, alpha, steps)


def decay_minus_one(n: int, alpha: float, steps: int) -> float:
    """lambda^steps - 1, without the cancellation of a power less one."""
    rate = decay_rate(n, alpha)
    if steps == 0:
        return 0.0
    if rate >= 1.0:  # lambda = 0 (n = 1, alpha = 0.25)
        return -1.0
    return math.expm1(steps * math.log1p(-rate))


def sine_peak(n: int) -> float:
    """The largest value of u0: at the centre cell, index (n + 1) // 2 - 1 on each axis."""
    return math.sin(math.pi * ((n + 1) // 2) / (n + 1)) ** 2


def rounding_bound(steps: int, dtype) -> float:
    """How far rounding may take the run from lambda^s u0, relative to max|u0|."""
    return ((ROUNDING_PER_STEP * steps + ROUNDING_FIXED) * unit_roundoff(dtype)
            + CLOSED_FORM_ROUNDING * unit_roundoff(np.float64))


def verifiable(n: int, steps: int, alpha: float, dtype) -> bool:
    """Whether the steps move u clearly more than rounding may (no steps: nothing to tell)."""
    change = -decay_minus_one(n, alpha, steps)
    return steps == 0 or change >= MIN_CHANGE_OVER_ROUNDING * rounding_bound(steps, dtype)


def probe_cells(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the probes: the centre, then ``PROBES`` cells seeded by ``n``."""
    centre = (n + 1) // 2 - 1
    rng = Sampler(n, "probes").generator()
    rows = np.concatenate([[centre], rng.integers(0, n, PROBES)])
    cols = np.concatenate([[centre], rng.integers(0, n, PROBES)])
    return rows, cols


def line_weights(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights of the certified line sums: along the rows, along the columns, each in [0.5, 1.5).

    Block (i, j) reports ``u_block @ col_weights[c0:c1]`` (one sum per row) and
    ``row_weights[r0:r1] @ u_block`` (one per column). Unequal weights make a sum tell where
    its values lie, not only how much they add up to; drawn from ``Sampler(n, "line weights")``.
    """
    rng = Sampler(n, "line weights").generator()
    return rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)


def line_plans(n: int, seed: int) -> tuple[Plan, Plan]:
    """The rows and the columns the run hands back whole for the fast check, as plans.

    Each a seeded sample of the ``n`` lines (:meth:`daskgpu.verification.Plan.at`), drawn from
    ``seed`` apart from each other.
    """
    return (Plan.at("fast", n, Sampler(seed, "rows"), unit="rows"),
            Plan.at("fast", n, Sampler(seed, "columns"), unit="columns"))


def sampled_lines(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns the run hands back whole (:func:`line_plans`), as index arrays."""
    rows, cols = line_plans(n, seed)
    return np.array(rows.parts, dtype=np.int64), np.array(cols.parts, dtype=np.int64)


@dataclass(frozen=True)
class StencilContext:
    """What stencil-pipeline's check knows of a run.

    Attributes
    ----------
    size, steps, alpha, dtype, steps_per_exchange
        The run's parameters.
    grid : Grid
        The blocks of u.
    sample_seed : int
        Draws the rows and columns the run hands back whole (fresh each run).
    max_error : dask value
        The lazy largest deviation of u from the closed form over every cell (the full check
        computes it, after the timed compute).
    evolve : callable
        The run's own evolution (halo exchange and kernels), which the full check runs on a
        small random grid.
    backend : Backend, optional
        What the workers compute with (the small grid is moved to their memory).
    """

    size: int
    steps: int
    alpha: float
    dtype: str
    steps_per_exchange: int
    grid: Grid
    sample_seed: int
    max_error: Any = None
    evolve: Any = None
    backend: Any = None

    @property
    def bound(self) -> float:
        """How far rounding may take a cell of the run from lambda^s u0 (absolute)."""
        return rounding_bound(self.steps, self.dtype) * sine_peak(self.size)

    @property
    def factor(self) -> float:
        """lambda^s."""
        return decay(self.size, self.alpha, self.steps)


def unverifiable(size, steps, alpha, dtype, max_steps) -> str:
    """Why a run cannot be verified, and the changes of one option that would make it so."""
    change = abs(decay_minus_one(size, alpha, steps)) * sine_peak(size)
    bound = rounding_bound(steps, dtype) * sine_peak(size)
    return (
        f"--size {size}, --steps {steps}, --alpha {alpha:g}, --dtype {dtype}: the steps move u "
        f"by {change:.2g}, too little to tell from {dtype} rounding (up to "
        f"{bound:.2g}), so the result could not be verified; use "
        + _ways_to_verify(size, steps, alpha, dtype, max_steps)
    )


def _ways_to_verify(size, steps, alpha, dtype, max_steps) -> str:
    """Changes of one option each that make the run verifiable, as options."""
    ways = []
    if dtype == "float32" and verifiable(size, steps, alpha, "float64"):
        ways.append("--dtype float64")
    largest = _last_true(lambda n: verifiable(n, steps, alpha, dtype), 1, size - 1)
    if largest is not None:
        ways.append(f"--size {largest} or less")
    if verifiable(size, steps, 0.25, dtype):
        least = _first_true(lambda a: verifiable(size, steps, a / 1000, dtype),
                            math.floor(alpha * 1000), 250)
        ways.append(f"--alpha {least / 1000:g} or more")
    more = _more_steps(size, steps, alpha, dtype, max_steps)
    if more is not None:
        ways.append(f"--steps {more} or more")
    if not ways:  # no one option is enough
        also = " and --dtype float64" if dtype == "float32" else ""
        return f"a larger --alpha with a smaller --size{also}"
    if len(ways) == 1:
        return ways[0]
    return ", ".join(ways[:-1]) + (", or " if len(ways) > 2 else " or ") + ways[-1]


def _more_steps(size, steps, alpha, dtype, max_steps) -> int | None:
    """The fewest steps above ``steps`` that are verifiable, if some up to ``max_steps`` are.

    The change grows faster than the rounding bound until it nears max|u0|: doubling finds a
    verifiable count, halving the interval the first one.
    """
    high = max(1, steps) * 2
    while high <= max_steps and not verifiable(size, high, alpha, dtype):
        high *= 2
    if high > max_steps:
        return None
    return _first_true(lambda s: verifiable(size, s, alpha, dtype), high // 2, high)


def _first_true(test, low, high) -> int | None:
    """The least k in (low, high] with test(k), for a test false up to some k and true after."""
    if not test(high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if test(middle) else (middle, high)
    return high


def _last_true(test, low, high) -> int | None:
    """The largest k in [low, high] with test(k), for a test true up to some k and false after."""
    if high < low or not test(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if test(middle) else (low, middle - 1)
    return low
