"""What a check found, said the same way everywhere: :class:`Verdict` and :func:`differences`.

A check's steps note the problems they find and the facts they establish on one
:class:`Verdict`. A failed check's detail lists its problems, at most :data:`LISTED` of them
and how many more there were; a passed one's the facts established, in order; both on one line,
joined by "; ". :func:`differences` compares reported values with recomputed ones and says
where they first disagree, in one phrase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from daskgpu.toolkit.workload import Verification

#: A failed check's detail lists at most this many problems.
LISTED = 3


class Verdict:
    """The problems a check found and the facts it established, at one depth.

    Parameters
    ----------
    depth : {"fast", "full"}
        The depth the check runs at (steps shared by both depths read it).

    >>> verdict = Verdict("fast")
    >>> verdict.establish("12 sums add up")
    >>> verdict.require(1 + 1 == 2, "arithmetic fails")
    True
    >>> verdict.verification()
    Verification(ok=True, detail='12 sums add up', depth='fast')
    """

    def __init__(self, depth: str = "fast"):
        self.depth = depth
        self.problems: list[str] = []
        self.facts: list[str] = []

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def fail(self, problem: str) -> None:
        """Note a problem: what disagreed, with the numbers (one phrase)."""
        self.problems.append(_one_line(problem))

    def fail_all(self, problems: Iterable[str | None]) -> bool:
        """Note every problem of ``problems`` that is not None; whether there was none."""
        found = [p for p in problems if p]
        for problem in found:
            self.fail(problem)
        return not found

    def note(self, problem: str | None) -> bool:
        """Note ``problem`` if there is one (a phrase, or None); whether there was none."""
        if problem:
            self.fail(problem)
        return not problem

    def fail_each(self, problems: list[str], summary: str = "") -> bool:
        """Note like problems (a row each) as one: the first :data:`LISTED`, then ``summary``.

        ``summary`` says how many there were and where (``"4 rows differ, in 2 of 6 blocks"``).
        Whether there was none.
        """
        if problems:
            shown = "; ".join(problems[:LISTED])
            self.fail(f"{shown} ({summary})" if summary else shown)
        return not problems

    def require(self, condition: bool, problem: str | Callable[[], str]) -> bool:
        """Note ``problem`` (a phrase, or a function that makes it) unless ``condition``."""
        if not condition:
            self.fail(problem() if callable(problem) else problem)
        return bool(condition)

    def establish(self, fact: str) -> None:
        """Note what the check established (the passed detail lists these, in order)."""
        self.facts.append(_one_line(fact))

    def detail(self) -> str:
        """The one-line detail: the problems (at most :data:`LISTED`), or the facts."""
        if self.problems:
            shown = "; ".join(self.problems[:LISTED])
            more = len(self.problems) - LISTED
            return f"{shown}; and {more} more problem{'s' * (more > 1)}" if more > 0 else shown
        return "; ".join(self.facts) or "nothing to check"

    def verification(self) -> Verification:
        """The :class:`~daskgpu.toolkit.workload.Verification` of what was found."""
        return Verification(self.ok, self.detail(), self.depth)


def differences(reported, expected, *, what: str, reported_as: str = "reported",
                expected_as: str = "recomputed", tolerance=0.0,
                label: Callable[[int], str] | None = None, unit: str | None = None,
                form: str = "") -> str | None:
    """Where ``reported`` first differs from ``expected``, in one phrase; None if nowhere.

    Values equal within ``tolerance`` (a number or an array, absolute) agree, and NaN agrees
    with NaN.

    Parameters
    ----------
    reported, expected : array_like
        The values, compared element by element (flattened, in C order).
    what : str
        What one element is ("bin", "block").
    reported_as, expected_as : str
        How each side is named: "counted" and "numpy.histogram" give "bin 3: 5 counted,
        numpy.histogram 4"; a ``{}`` places the value ("sum {} reported").
    tolerance : float or array_like
        The largest difference that still agrees.
    label : callable, optional
        ``label(i)`` names element ``i`` (default: ``f"{what} {i}"``).
    unit : str, optional
        What the elements are called, plural, in the count of differences (default:
        ``what + "s"``).
    form : str
        A format specification for the values (default: integers as they are, other numbers
        to 10 significant digits).

    >>> differences([1, 5, 2], [1, 4, 3], what="bin", reported_as="counted",
    ...             expected_as="numpy.histogram")
    'bin 1: 5 counted, numpy.histogram 4 (2 of 3 bins differ)'
    >>> differences([1.0, float("nan")], [1.0 + 1e-12, float("nan")], what="x",
    ...             tolerance=1e-9) is None
    True
    """
    got = np.ravel(np.asarray(reported))
    want = np.ravel(np.asarray(expected))
    if got.shape != want.shape:
        return f"{what}s: {got.size} {reported_as}, {want.size} {expected_as}"
    wrong = np.flatnonzero(_disagree(got, want, tolerance))
    if not wrong.size:
        return None
    i = int(wrong[0])
    name = label(i) if label else f"{what} {i}"
    plural = unit or f"{what}s"
    counted = f" ({wrong.size} of {got.size} {plural} differ)" if got.size > 1 else ""
    shown = apart(got[i], want[i], (10, 17)) if not form else (format(got[i], form),
                                                                format(want[i], form))
    return (f"{name}: {_named(shown[0], reported_as, first=False)}, "
            f"{_named(shown[1], expected_as, first=True)}{counted}")


def apart(got, want, digits=(6, 10, 17)) -> tuple[str, str]:
    """Two numbers written with as few significant ``digits`` as show them apart.

    Integers as they are. A difference found is never hidden by rounding the values shown.

    >>> apart(1.0000001, 1.0)
    ('1.0000001', '1')
    >>> apart(0.1 + 0.2, 0.3)
    ('0.30000000000000004', '0.29999999999999999')
    """
    if isinstance(got, np.integer | int) and isinstance(want, np.integer | int):
        return str(int(got)), str(int(want))
    for count in digits:
        a, b = f"{got:.{count}g}", f"{want:.{count}g}"
        if a != b:
            break
    return a, b


def _named(value: str, name: str, first: bool) -> str:
    """``value`` in its side's name: a ``{}`` in the name, or beside it."""
    if "{}" in name:
        return name.replace("{}", value)
    return f"{name} {value}" if first else f"{value} {name}"


def _disagree(got: np.ndarray, want: np.ndarray, tolerance) -> np.ndarray:
    if got.dtype.kind in "biu" and want.dtype.kind in "biu" and not np.any(tolerance):
        return got != want
    kind = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(want) else np.float64
    got, want = got.astype(kind), want.astype(kind)
    limit = np.ravel(np.asarray(tolerance, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        agree = (got == want) | (np.abs(got - want) <= limit) | (np.isnan(got) & np.isnan(want))
    return ~agree


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
