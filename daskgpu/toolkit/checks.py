"""Ready-made answer checks for :func:`daskgpu.array_pipeline`, and the bounds they use.

A check here is a ``verify(workload, raw, depth)`` for a pipeline that
:func:`~daskgpu.toolkit.array_pipeline.array_pipeline` built: it reads what the data is from
``workload.context["array"]`` (an :class:`~daskgpu.toolkit.array_pipeline.ArrayData`) and the
pipeline's own parameter values from ``workload.context["params"]``.

- :func:`rows_recomputed`: recompute a seeded sample of row blocks (every one at ``full``) with
  your own reference function, from the data drawn again from its seed or read again from the
  input file, never through the run's graph; compare row by row.
- :func:`count_bound`: the result's total, a count of random values each counted with a known
  probability, lies within Hoeffding's bound of its expectation.
- :func:`hoeffding_bound`: that bound, for any use (:func:`daskgpu.verification.hoeffding`).
- :func:`groups_recomputed`: for :func:`daskgpu.table_pipeline`, recompute a seeded sample of
  the result's groups (every one at ``full``) with your own reference function, from the table
  drawn again or read again; compare group by group.

Several checks given together (``check=(a, b)``) all run; see :func:`all_of`. They are built on
:mod:`daskgpu.verification` (its sampler, plans, replay and verdicts), as a check of your own
can be.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dask
import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import starts
from daskgpu.toolkit.table_checks import groups_recomputed
from daskgpu.toolkit.workload import Verification, Workload
from daskgpu.verification import CONFIDENCE, FALSE_ALARM, FRACTION, Plan, Sampler, Verdict, replay
from daskgpu.verification import hoeffding as hoeffding_bound

if TYPE_CHECKING:
    from daskgpu.toolkit.array_pipeline import ArrayData

__all__ = ["FALSE_ALARM", "all_of", "count_bound", "groups_recomputed", "hoeffding_bound",
           "rows_recomputed"]


def count_bound(probability: Callable[..., float], *,
                false_alarm: float = FALSE_ALARM) -> Callable[..., Verification]:
    """A check that the result's total is a plausible count of the random data's values.

    For random data whose ``n`` values are each counted independently with probability
    ``probability(**params)`` (the pipeline's own parameters as keywords), the sum of the
    result lies within ``n * p ± n * hoeffding_bound(n, false_alarm)``; a correct run fails it
    with probability at most ``false_alarm``. The same at ``fast`` and ``full`` (it only adds
    the result up). It catches gross faults (a wrong comparison, lost blocks), not an error of
    a few counts: pair it with :func:`rows_recomputed`. An ``--input``'s values are not random:
    there the check says so and passes.

    Parameters
    ----------
    probability : callable
        ``probability(**params) -> float`` in [0, 1]: for uniform [0, 1) data and values above
        a threshold, ``lambda threshold: min(1, max(0, 1 - threshold))``.
    false_alarm : float
        See :func:`hoeffding_bound`.

    Returns
    -------
    callable
        ``verify(workload, raw, depth)``.
    """
    hoeffding_bound(1, false_alarm)  # refuse a bad false_alarm when the pipeline is defined

    def verify(workload: Workload, raw: Any, depth: str = "fast") -> Verification:
        data: ArrayData = workload.context["array"]
        if data.source is not None:
            return Verification(True, "count bound: not applied to an input (not random data)")
        p = float(probability(**workload.context["params"]))
        n = math.prod(data.shape)
        total = float(np.sum(np.asarray(raw), dtype=np.float64))
        half = n * hoeffding_bound(n, false_alarm)
        ok = abs(total - n * p) <= half
        return Verification(ok, f"total count {total:.0f} {'within' if ok else 'outside'} "
                                f"{n * p:.0f} ± {half:.0f} (Hoeffding's bound for {n} random "
                                f"values, false alarm at most {false_alarm:g})")

    return verify


# --------------------------------------------------------------------------- recomputed rows


def rows_recomputed(reference: Callable[..., Any], *, rtol: float = 0.0, atol: float = 0.0,
                    fraction: float = FRACTION,
                    confidence: float = CONFIDENCE) -> Callable[..., Verification]:
    """A check that recomputes rows of the result with ``reference`` and compares them.

    For a result with one row per row of the data (``result[i]`` depends only on
    ``data[i]``), the check takes row blocks (the data's blocks along its first axis, every
    column block of them): at ``full`` every one, at ``fast`` a seeded sample of
    :func:`~daskgpu.verification.sampling.sample_size` of them (a
    :class:`~daskgpu.verification.plans.Plan`), so that a fault in at least
    ``fraction`` of the row blocks is caught with probability at least ``confidence`` (99.9 %
    for a tenth by default; the detail says what was established). For each, on the workers, it
    draws the block's values again from the run's seed (random data: the documented scheme of
    :mod:`daskgpu.data.synthetic`, one generator per block) or reads them again from the input
    file (``numpy.load`` with a memory map, or ``zarr``), never through the run's graph; calls
    ``reference(rows, **params)``; and compares the rows it returns with the result's, equal
    (``rtol=atol=0``, NaN equal to NaN) or within ``numpy.isclose``'s tolerance. The sample is
    drawn from the run's seed, or for an input from its shape: the same for the same run.

    Parameters
    ----------
    reference : callable
        ``reference(rows, **params) -> rows of the result``: an independent way to the same
        answer, plain NumPy, sharing nothing with your kernel. ``rows`` is a block of whole
        rows in the workers' array library (NumPy on CPU workers, CuPy on GPU workers: NumPy
        functions and array methods dispatch to CuPy).
    rtol, atol : float
        Tolerance of the comparison (0: exactly equal).
    fraction, confidence : float
        What the ``fast`` sample promises (see :mod:`daskgpu.verification.sampling`).

    Returns
    -------
    callable
        ``verify(workload, raw, depth)``.
    """

    def verify(workload: Workload, raw: Any, depth: str = "fast") -> Verification:
        data: ArrayData = workload.context["array"]
        result = np.asarray(raw)
        rows = data.shape[0]
        if result.ndim == 0 or result.shape[0] != rows:
            got = "a scalar" if result.ndim == 0 else f"{result.shape[0]} rows"
            return Verification(False, f"result rows: {got} for {rows} data rows; "
                                       "rows_recomputed needs one result row per data row")
        row_chunks = data.chunks[0]
        plan = Plan.at(depth, len(row_chunks), Sampler(data.sample_seed, "row blocks"),
                       unit="row blocks", fraction=fraction, confidence=confidence)
        chosen = plan.parts
        first = starts(row_chunks)
        # One copy of the data's description and the reference for every task, not one each.
        shared = dask.delayed((data, reference, dict(workload.context["params"])), pure=True)
        given = workload.context.get("input")
        tasks = [dask.delayed(_reference_rows, pure=False)(
                     shared, int(first[i]), int(first[i] + row_chunks[i]),
                     None if given is None else replay.region(
                         given, (slice(int(first[i]), int(first[i] + row_chunks[i])),),
                         data.dtype))
                 for i in chosen]
        references = dask.compute(*tasks)
        wrong: list[str] = []
        blocks_wrong = 0
        for i, expected in zip(chosen, references, strict=True):
            start = int(first[i])
            found = _disagreements(result[start:start + row_chunks[i]], expected, start,
                                   rtol, atol)
            blocks_wrong += bool(found)
            wrong.extend(found)
        name = getattr(reference, "__name__", "<lambda>")
        name = "the reference" if name == "<lambda>" else name
        tolerance = f" within rtol={rtol:g}, atol={atol:g}" if rtol or atol else ""
        verdict = Verdict(depth)
        if verdict.fail_each(wrong, f"{len(wrong)} rows differ{tolerance}, in {blocks_wrong} of "
                                    f"{len(chosen)} row blocks checked; {plan.promise}"):
            verdict.establish(f"every row equals {name}{tolerance} ({plan.promise})")
        return verdict.verification()

    return verify


def _disagreements(got: np.ndarray, expected: Any, start: int, rtol: float,
                   atol: float) -> list[str]:
    """One line per result row that differs from the reference's row (or a shape line)."""
    expected = np.asarray(expected)
    if expected.shape != got.shape:
        return [f"rows {start}-{start + len(got) - 1}: the reference gave shape "
                f"{expected.shape}, the result holds {got.shape}"]
    if np.issubdtype(got.dtype, np.number) and np.issubdtype(expected.dtype, np.number):
        close = np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = got == expected
    close = close.reshape(len(got), -1).all(axis=1)
    return [f"row {start + r}: {_shown(got[r])} computed, reference {_shown(expected[r])}"
            for r in np.flatnonzero(~close)]


def _shown(row: Any) -> str:
    """A result row for a message: a value, or its first few values."""
    if np.ndim(row) == 0:
        return f"{row:.10g}" if isinstance(row, (float, np.floating)) else str(row)
    values = np.ravel(row)
    text = np.array2string(values[:4], precision=8, separator=", ")
    return text if values.size <= 4 else text[:-1] + ", ...]"


def _reference_rows(shared: tuple[ArrayData, Callable, dict], start: int,
                    stop: int, read=None) -> np.ndarray:
    """On a worker: the data's rows ``start:stop`` again, through the reference, on the host.

    ``shared`` is ``(data, reference, params)``; ``read``: an input's rows read again
    (:func:`daskgpu.verification.replay.region`), None for random data (drawn again here).
    """
    data, reference, params = shared
    rows = _on_device(data, read) if read is not None else _drawn_again(data, start, stop)
    return np.asarray(to_host(reference(rows, **params)))


def _drawn_again(data: ArrayData, start: int, stop: int):
    """Rows ``start:stop`` (whole row blocks) of random data, drawn again block by block.

    The scheme of :mod:`daskgpu.data.synthetic`: block number ``b`` (row-major over the block
    grid) is drawn whole from ``generator(library, SeedSequence(seed, spawn_key=(b,)))``
    (:func:`daskgpu.toolkit.numeric.generator`: NumPy's ``default_rng`` on CPU workers, the
    counter-based device generator on GPU workers).
    """
    xp = importlib.import_module(data.library)
    row = int(np.searchsorted(starts(data.chunks[0]), start))
    grid = tuple(len(c) for c in data.chunks)
    out = xp.empty((stop - start, *data.shape[1:]), dtype=data.dtype)
    for rest in np.ndindex(*grid[1:]):
        location = (row, *rest)
        number = int(np.ravel_multi_index(location, grid))
        shape = tuple(c[i] for c, i in zip(data.chunks, location, strict=True))
        values = replay.redraw(data.seed, number, shape, data.dtype, data.library,
                               data.distribution)
        offsets = (0, *(int(starts(c)[i]) for c, i in zip(data.chunks[1:], rest, strict=True)))
        out[tuple(slice(o, o + n) for o, n in zip(offsets, shape, strict=True))] = values
    return out


def _on_device(data: ArrayData, rows: np.ndarray):
    """An input's rows, read again on the host, in the workers' array library."""
    if data.library != "numpy":
        xp = importlib.import_module(data.library)
        return xp.asarray(rows)
    return rows


# --------------------------------------------------------------------------- several checks


def all_of(checks: Sequence[Callable[..., Verification]]) -> Callable[..., Verification]:
    """One check of several: it passes where each does; its detail joins theirs with ``; ``.

    A check without a ``depth`` parameter runs the same at both depths.
    """
    checks = tuple(checks)
    if not checks:
        raise ValueError("give at least one check")

    def verify(workload: Workload, raw: Any, depth: str = "fast") -> Verification:
        verdicts = []
        for check in checks:
            takes_depth = "depth" in inspect.signature(check).parameters
            verdicts.append(check(workload, raw, depth=depth) if takes_depth
                            else check(workload, raw))
        return Verification(all(v.ok for v in verdicts), "; ".join(v.detail for v in verdicts))

    return verify
