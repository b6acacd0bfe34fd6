"""Whether two answers to the same question agree: a run's reported value and a baseline's.

Integers (counts) must be equal; floating-point numbers equal within a relative tolerance;
dicts, lists and arrays element by element. The first difference is named, for one line.

The tolerance (:func:`tolerance`) follows from the data's dtype and the length of the
reductions behind the numbers: ``max(RTOL, u sqrt(length))``, ``u`` the dtype's unit roundoff.
A sum of ``length`` terms rounded in that dtype is typically off by ``u sqrt(length)`` relative
(Higham and Mary, 2019); float64 data keep the floor ``RTOL``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

RTOL = 1e-6


def tolerance(dtype=None, length: int | None = None) -> float:
    """The relative tolerance for answers computed from ``dtype`` data in reductions of ``length``.

    ``max(RTOL, u sqrt(length))`` with ``u`` the unit roundoff of a floating-point ``dtype``;
    ``RTOL`` where either is unknown or the dtype is not floating-point.

    >>> tolerance("float64", 10**8) == RTOL
    True
    >>> round(tolerance("float32", 10**8), 6)
    0.000596
    """
    if dtype is None or not length:
        return RTOL
    try:
        kind = np.dtype(dtype)
    except TypeError:
        return RTOL
    if kind.kind not in "fc":
        return RTOL
    return max(RTOL, float(np.finfo(kind).eps) / 2 * math.sqrt(length))


def difference(got, expected, rtol: float = RTOL, where: str = "value") -> str | None:
    """None when ``got`` agrees with ``expected``; else where and how they differ.

    >>> difference({"n": 3, "x": [1.0, 2.0]}, {"n": 3, "x": [1.0, 2.0000001]}) is None
    True
    >>> difference({"n": 3}, {"n": 4})
    'n: 3 against 4'
    >>> difference({"n": 3, "kept": [0.5]}, {"n": 3}) is None  # what the baseline answers
    True
    >>> difference({"n": 3}, {"n": 3, "m": 1})
    "value: keys ['n'] against ['m', 'n']"
    """
    if isinstance(expected, Mapping):
        if isinstance(got, Mapping) and where == "value":
            # A run's value may give more than a baseline answers (a grid kept on the workers,
            # a fit's components): what the baseline answers is compared.
            got = {k: v for k, v in got.items() if k in expected}
        if not isinstance(got, Mapping) or set(got) != set(expected):
            return f"{where}: keys {sorted(map(str, got))} against {sorted(map(str, expected))}"
        for key in expected:
            inner = key if where == "value" else f"{where}.{key}"
            found = difference(got[key], expected[key], rtol, str(inner))
            if found:
                return found
        return None
    if _is_sequence(expected) or _is_sequence(got):
        a, b = np.asarray(got), np.asarray(expected)
        if a.shape != b.shape:
            return f"{where}: shape {a.shape} against {b.shape}"
        if a.dtype.kind in "iub" and b.dtype.kind in "iub":
            wrong = np.flatnonzero(a.ravel() != b.ravel())
        elif a.dtype.kind in "fiub" and b.dtype.kind in "fiub":
            close = np.isclose(a.astype(float), b.astype(float), rtol=rtol, atol=0, equal_nan=True)
            wrong = np.flatnonzero(~close.ravel())
        else:
            wrong = [i for i, (x, y) in enumerate(zip(a.ravel(), b.ravel(), strict=True))
                     if difference(x, y, rtol) is not None]
        if len(wrong):
            i = int(wrong[0])
            return f"{where}[{i}]: {a.ravel()[i]} against {b.ravel()[i]}"
        return None
    if _is_integer(got) and _is_integer(expected):
        return None if int(got) == int(expected) else f"{where}: {got} against {expected}"
    if _is_number(got) and _is_number(expected):
        x, y = float(got), float(expected)
        if (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rtol, abs_tol=0):
            return None
        return f"{where}: {x!r} against {y!r}"
    return None if got == expected else f"{where}: {got!r} against {expected!r}"


def _is_sequence(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not isinstance(value, str)


def _is_integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
