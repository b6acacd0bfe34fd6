"""How far a correct answer may stray: rounding bounds from the dtype and size, and statistics.

Rounding: one rule
------------------
A quantity the run computes in floating point differs from the same quantity computed in
exact arithmetic by rounding alone. For a reduction of ``n`` terms (a sum, a dot product, a
matrix product's entry: ``n`` is how many roundings one term's contribution can pass through,
the number of terms for any order of summation) in a type of unit roundoff ``u``, the computed
value lies within ``c(n) * magnitude`` of the exact one, where ``magnitude`` is the sum of the
terms' absolute values and

    c(n) = min(gamma(n), gamma_tilde(n))
    gamma(n) = n u / (1 - n u)                      (Higham's worst case; inf once n u >= 1)
    gamma_tilde(n) = exp(lambda(n) sqrt(n) u + n u^2 / (1 - u)) - 1
    lambda(n) = sqrt(2 ln(2 n / FALSE_ALARM))

``gamma_tilde`` is Higham and Mary's probabilistic bound (SIAM J. Sci. Comput. 41(5), 2019):
with rounding errors independent and of mean zero it holds but with probability at most
``2 n exp(-lambda^2 (1 - u)^2 / 2)``, which ``lambda(n)`` keeps below :data:`FALSE_ALARM`.
:func:`rounding` is ``c(n)``; :func:`tolerance` adds the run's and the check's bounds, the
check computing in float64 unless told otherwise. Every check compares floating-point values
through these two functions, not through constants of its own.

Statistics
----------
A check of random data compares a statistic with its distribution, failing a correct run with
probability at most :data:`FALSE_ALARM`: :func:`hoeffding` (means of bounded values),
:func:`sigmas` (a normal tail), :func:`chi_square_log_tail` (Pearson's statistic).
"""

from __future__ import annotations

import math

import numpy as np

#: The probability, at most, that one statistical or probabilistic bound fails a correct run.
FALSE_ALARM = 1e-9


def unit_roundoff(dtype) -> float:
    """Unit roundoff ``u = eps / 2`` of a floating-point type (of float64 for other types).

    >>> unit_roundoff("float32") == 2.0**-24, unit_roundoff("int64") == 2.0**-53
    (True, True)
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        dtype = np.dtype(dtype.char.lower())  # complex64 -> float32, complex128 -> float64
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)
    return float(np.finfo(dtype).eps) / 2


def rounding(terms, dtype="float64", false_alarm: float = FALSE_ALARM):
    """``c(n)``: the relative rounding bound of a reduction of ``terms`` terms in ``dtype``.

    See the module's rule. Relative to the terms' magnitude (the sum of their absolute values).
    An array of term counts gives an array of bounds.

    >>> rounding(1) == 2.0**-53 / (1 - 2.0**-53)
    True
    >>> rounding(10**6, "float32") < 1e-3
    True
    """
    n = np.maximum(1.0, np.asarray(terms, dtype=np.float64))
    u = unit_roundoff(dtype)
    with np.errstate(divide="ignore"):
        worst = np.where(n * u < 1, n * u / (1 - n * u), np.inf)
    lam = np.sqrt(2 * np.log(2 * n / false_alarm))
    probable = np.expm1(lam * np.sqrt(n) * u + n * u * u / (1 - u))
    bound = np.minimum(worst, probable)
    return float(bound) if bound.ndim == 0 else bound


def tolerance(magnitude, terms, dtype="float64", check_terms=None, check_dtype="float64"):
    """How far a run's reduction may lie from a check's recomputation of it, both correct.

    Parameters
    ----------
    magnitude : float or array_like
        The sum of the absolute values of the terms (or a bound on it).
    terms : int or array_like
        Terms of the run's reduction, in ``dtype``.
    check_terms : int or array_like, optional
        Terms of the check's recomputation, in ``check_dtype`` (default: ``terms``).

    Returns
    -------
    float or numpy.ndarray
        ``(rounding(terms, dtype) + rounding(check_terms, check_dtype)) * magnitude``, of the
        magnitude's and the terms' shape (arrays give an array of tolerances).
    """
    check_terms = terms if check_terms is None else check_terms
    factor = rounding(terms, dtype) + rounding(check_terms, check_dtype)
    if np.ndim(magnitude) or np.ndim(factor):
        return factor * np.asarray(magnitude, dtype=np.float64)
    return factor * float(magnitude)


def hoeffding(n: int, false_alarm: float = FALSE_ALARM) -> float:
    """Half-width of the interval in which the mean of ``n`` independent values in [0, 1] lies.

    Hoeffding's inequality: ``P(|mean - p| >= t) <= 2 exp(-2 n t^2)``; the returned ``t`` makes
    that at most ``false_alarm``.

    >>> round(hoeffding(10_000, 1e-9), 4)
    0.0327
    """
    if n <= 0:
        raise ValueError(f"n={n}: the bound needs at least one value")
    if not 0 < false_alarm < 1:
        raise ValueError(f"false_alarm={false_alarm}: give a probability between 0 and 1")
    return math.sqrt(math.log(2 / false_alarm) / (2 * n))


def sigmas(false_alarm: float = FALSE_ALARM) -> float:
    """How many standard deviations a normal value strays with probability ``false_alarm``.

    Two-sided: ``P(|Z| >= z) = false_alarm``.

    >>> round(sigmas(1e-9), 2)
    6.11
    """
    low, high = 0.0, 40.0
    for _ in range(200):
        middle = (low + high) / 2
        if math.erfc(middle / math.sqrt(2)) > false_alarm:
            low = middle
        else:
            high = middle
    return high


def chi_square_log_tail(statistic: float, dof: int) -> float:
    """Natural log of a Chernoff bound on ``P(X >= statistic)`` for chi-square ``X``, ``dof``.

    ``P(X >= x) <= (x / k)^(k / 2) exp((k - x) / 2)`` for ``x > k``; 0 (a probability of 1)
    at or below the mean.

    >>> chi_square_log_tail(5.0, 10)
    0.0
    >>> chi_square_log_tail(100.0, 10) < math.log(1e-9)
    True
    """
    if statistic <= dof:
        return 0.0
    return dof / 2 * math.log(statistic / dof) - (statistic - dof) / 2


def share(false_alarm: float, tests: int) -> float:
    """Each of ``tests`` bounds' share of ``false_alarm`` (the union bound)."""
    return false_alarm / max(1, int(tests))
