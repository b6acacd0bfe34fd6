"""Freivalds-style random probes: a product or linear map checked along a few random directions.

To check a reported ``C = A B`` without recomputing it, multiply both sides by random vectors
``R`` (:meth:`~daskgpu.verification.sampling.Sampler.signs`): ``C R`` against ``A (B R)`` costs
a few matrix-vector products instead of a matrix product. For signs, a wrong ``C`` (in exact
arithmetic) agrees along one probe with probability at most 1/2, so along ``k`` independent
probes with probability at most ``2**-k`` (:func:`miss_probability`). In floating point both
sides carry rounding, bounded by :func:`~daskgpu.verification.bounds.tolerance` of the
magnitude ``|A| (|B| |R|)``: :func:`compare_probes` compares within it and names the worst
probe.
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification.bounds import FALSE_ALARM, rounding


def miss_probability(probes: int) -> float:
    """The most a wrong product can agree along ``probes`` sign probes, in exact arithmetic.

    >>> miss_probability(20) < 1e-6
    True
    """
    return 0.5 ** int(probes)


def compare_probes(reported, recomputed, magnitude, *, terms: int, dtype="float64",
                   check_terms: int | None = None) -> tuple[bool, int, float]:
    """Whether ``reported`` (``C R``) agrees with ``recomputed`` (``A (B R)``) along every probe.

    Parameters
    ----------
    reported, recomputed : array_like
        The two sides, the same shape (rows by probes).
    magnitude : array_like
        Bounds the terms' magnitude element by element (``|A| (|B| |R|)``).
    terms : int
        Terms of one of the run's entries (the inner dimension), in ``dtype``.
    check_terms : int, optional
        Terms of one entry of the check's products (float64); default ``terms``.

    Returns
    -------
    tuple of (bool, int, float)
        Whether all agree; the flat index of the worst element; its difference over its bound.
    """
    reported = np.asarray(reported)
    recomputed = np.asarray(recomputed)
    check_terms = terms if check_terms is None else check_terms
    # The run's entries are summed along a probe too: its rounding covers the probe's sum.
    factor = rounding(terms, dtype) + rounding(check_terms + 1, "float64")
    limit = factor * np.asarray(magnitude, dtype=np.float64) + np.finfo(np.float64).tiny
    excess = np.abs(reported - recomputed) / limit
    excess = np.where(np.isnan(excess), np.inf, excess)
    worst = int(np.argmax(excess)) if excess.size else 0
    ratio = float(excess.ravel()[worst]) if excess.size else 0.0
    return ratio <= 1.0, worst, ratio


def normal_reach(limit: float, probes: int, false_alarm: float = FALSE_ALARM) -> float:
    """How far (spectral norm) a symmetric matrix may be from another and agree on normal probes.

    For ``probes`` (even) standard normal probes ``q_j`` and a difference ``E`` of two symmetric
    matrices, ``sum_j |E q_j|^2 >= |E|_2^2 sum_j (u^T q_j)^2`` (``u``: ``E``'s top eigenvector),
    a chi-square of ``probes`` degrees of freedom; agreeing along every probe within ``limit``
    (the norm of :func:`compare_probes`' bounds, either side's rounding) bounds it by
    ``(2 limit)^2``. As ``P(chi^2 <= x) <= (x / 2)^m / m!`` (``m = probes / 2``), a matrix
    farther than the returned distance agrees with probability below ``false_alarm``.

    >>> normal_reach(1.0, 10) > 2.0
    True
    """
    m = probes // 2
    return 2 * limit / math.sqrt(2 * (math.factorial(m) * false_alarm) ** (1 / m))
