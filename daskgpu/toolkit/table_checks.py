"""A ready-made answer check for :func:`daskgpu.table_pipeline`: groups recomputed by key.

:func:`groups_recomputed` (also ``daskgpu.checks.groups_recomputed``) checks a per-group result
(one or more result rows per value of a key column) by drawing the table's rows again from its
seed, or reading the input's files again with pandas, on the workers and never through the
run's graph, and recomputing the groups with your own reference function. A DataFrame in memory
is read again from the object itself: a pandas or cuDF frame in this process, where it is
(cuDF's rows copied to the host: the chosen keys' at ``fast``, slice by slice at ``full``), a
Dask DataFrame as its own graph's partitions on the
workers (never the run's repartitioned ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import pandas as pd

from daskgpu.toolkit.workload import Verification, Workload
from daskgpu.verification import CONFIDENCE, FRACTION, Plan, Sampler, Verdict, replay

if TYPE_CHECKING:
    from daskgpu.toolkit.table_pipeline import TableData

__all__ = ["groups_recomputed"]

#: At ``full``, the rows brought back to the client at once are at most about this many bytes:
#: the keys are checked in batches (by a hash of the key), a pass over the table each.
BATCH_BYTES = 256 * 2**20
#: Keys of a random integer column are sampled from its whole range up to this size.
DOMAIN_LIMIT = 10_000_000
#: A pandas or cuDF frame in hand is read again in slices of this many rows.
SLICE_ROWS = 1 << 20


def groups_recomputed(reference: Callable[..., Any], *, by: str, rtol: float = 0.0,
                      atol: float = 0.0, fraction: float = FRACTION,
                      confidence: float = CONFIDENCE) -> Callable[..., Verification]:
    """A check that recomputes the result's groups with ``reference`` and compares them.

    For a result table with a column ``by`` (or an index of that name) whose rows for each key
    depend only on the table's rows with that key, the check takes keys (at ``full`` every key
    of the table and of the result, in batches; at ``fast`` a seeded sample of
    :func:`~daskgpu.verification.sampling.sample_size` of them, from the result's keys and, for
    a random integer key column, its whole range, so that a fault in at least ``fraction`` of
    the groups is caught with probability at least ``confidence``). For those keys it draws
    the table's rows again from the run's seed (the documented scheme of
    :mod:`daskgpu.toolkit.table_pipeline`) or reads the input's files again with pandas, on
    the workers, or reads a DataFrame in memory again from the object (a pandas or cuDF frame
    in this process, a Dask DataFrame's own partitions on the workers), keeps the rows of the
    chosen keys, calls ``reference(rows, **params)`` for
    each key, and compares the returned rows with the result's rows of that key, in order,
    column by column: equal (``rtol=atol=0``, NaN equal to NaN) or within
    ``numpy.isclose``'s tolerance. A key with no rows in the table must have none in the
    result; a key of the table must have the rows the reference gives.

    Parameters
    ----------
    reference : callable
        ``reference(rows, **params) -> DataFrame or Series``: the result's rows for one key
        (without the ``by`` column), from ``rows``, a pandas DataFrame of that key's rows of
        the table (every declared column). Plain pandas or NumPy, sharing nothing with your
        pipeline's code.
    by : str
        The key column.
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
        from daskgpu.toolkit.table_pipeline import host_table

        data: TableData = workload.context["table"]
        result = host_table(raw)
        if result is None or by not in result.columns:
            return Verification(False, f"result: no column {by!r} (groups_recomputed needs "
                                       "one, or an index of that name)")
        params = dict(workload.context["params"])
        compare = _Comparison(reference, by, params, rtol, atol)
        if depth == "full":
            return _every_key(data, result, compare)
        population = _key_population(data, result, by)
        plan = Plan.at(depth, len(population), Sampler(data.sample_seed, "keys"), unit="keys",
                       fraction=fraction, confidence=confidence)
        chosen = population[list(plan.parts)]
        rows = _rows_again(data, by, keys=chosen)
        wrong = compare.keys(chosen, rows, result)
        return compare.verdict(wrong, plan.promise, depth)

    return verify


class _Comparison:
    """The reference applied to keys' rows, compared with the result's rows of those keys."""

    def __init__(self, reference, by, params, rtol, atol):
        self.reference, self.by, self.params = reference, by, params
        self.rtol, self.atol = rtol, atol

    def keys(self, keys, rows: pd.DataFrame, result: pd.DataFrame) -> list[str]:
        """One line per key whose result rows differ from the reference's."""
        table_groups = dict(iter(rows.groupby(self.by, sort=False))) if len(rows) else {}
        result_groups = dict(iter(result.groupby(self.by, sort=False)))
        wrong = []
        for key in keys:
            got = result_groups.get(key)
            got = None if got is None else got.drop(columns=[self.by]).reset_index(drop=True)
            group = table_groups.get(key)
            expected = None if group is None else _as_table(
                self.reference(group.reset_index(drop=True), **self.params))
            line = self._differs(key, got, expected)
            if line:
                wrong.append(line)
        return wrong

    def _differs(self, key, got, expected) -> str | None:
        label = f"{self.by} {key}:"
        if expected is None or len(expected) == 0:
            return None if got is None or len(got) == 0 else (
                f"{label} {len(got)} rows in the result, none in the table")
        if got is None or len(got) != len(expected):
            return (f"{label} {0 if got is None else len(got)} rows in the result, the "
                    f"reference gives {len(expected)}")
        for name in expected.columns:
            if name not in got.columns:
                return f"{label} the result has no column {name!r}"
            ours, theirs = got[name].to_numpy(), expected[name].to_numpy()
            if not _close(ours, theirs, self.rtol, self.atol):
                return f"{label} {name} {_shown(ours)} in the result, reference {_shown(theirs)}"
        return None

    def verdict(self, wrong: list[str], promise: str, depth: str) -> Verification:
        tolerance = (f" within rtol={self.rtol:g}, atol={self.atol:g}"
                     if self.rtol or self.atol else "")
        name = getattr(self.reference, "__name__", "<lambda>")
        name = "the reference" if name == "<lambda>" else name
        verdict = Verdict(depth)
        if verdict.fail_each(wrong, f"{len(wrong)} groups differ{tolerance}; {promise}"):
            verdict.establish(f"every group equals {name}{tolerance} ({promise})")
        return verdict.verification()


def _every_key(data: TableData, result: pd.DataFrame, compare: _Comparison) -> Verification:
    """``full``: every key of the table and of the result, a batch of keys per pass."""
    batches = max(1, math.ceil(data.rows * len(data.columns) * 8 / BATCH_BYTES))
    result_batch = _batch_of(result[compare.by], batches)
    wrong: list[str] = []
    seen = 0
    for batch in range(batches):
        rows = _rows_again(data, compare.by, batch=(batch, batches))
        keys = pd.unique(np.concatenate([rows[compare.by].to_numpy(),
                                         result[compare.by].to_numpy()[result_batch == batch]]))
        seen += len(keys)
        wrong.extend(compare.keys(keys, rows, result))
    return compare.verdict(wrong, f"all {seen} keys checked again", "full")


def _key_population(data: TableData, result: pd.DataFrame, by: str) -> np.ndarray:
    """The keys ``fast`` samples from: the result's, and a random key column's whole range."""
    keys = pd.unique(result[by].to_numpy())
    column = data.columns[by]
    if (data.source is None and column.distribution == "integers"
            and column.high - column.low <= DOMAIN_LIMIT):
        keys = np.union1d(keys, np.arange(int(column.low), int(column.high)))
    return np.sort(np.asarray(keys))


def _batch_of(keys: pd.Series, batches: int) -> np.ndarray:
    return (pd.util.hash_pandas_object(keys, index=False).to_numpy() % batches).astype(np.int64)


def _rows_again(data: TableData, by: str, keys=None, batch=None) -> pd.DataFrame:
    """The table's rows whose key is in ``keys`` (or in hash ``batch`` = (j, of)), again."""
    frame = data.frame
    if frame is not None and not hasattr(frame, "to_delayed"):  # pandas or cuDF, in hand
        found = [_part_rows((data, by, keys, batch), ("frame", frame.iloc[a:a + SLICE_ROWS]))
                 for a in range(0, len(frame), SLICE_ROWS)]
        return pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if frame is not None:  # a Dask DataFrame: its own partitions, computed where they live
        parts = [("frame", part) for part in frame[list(data.columns)].to_delayed()]
    elif data.source is None:
        parts = [("random", p, a, b) for p, (a, b) in enumerate(_bounds(data))]
    else:
        parts = [(data.source_kind, file) for file in data.files]
    shared = dask.delayed((data.described(), by, keys, batch), pure=True)
    found = dask.compute(*[dask.delayed(_part_rows, pure=False)(shared, part) for part in parts])
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def _bounds(data: TableData) -> list[tuple[int, int]]:
    return [(p * data.rows // data.partitions, (p + 1) * data.rows // data.partitions)
            for p in range(data.partitions)]


def _part_rows(shared: tuple, part: tuple) -> pd.DataFrame:
    """On a worker: one part of the table again, only the rows of the chosen keys."""
    data, by, keys, batch = shared
    names = list(data.columns)
    if part[0] == "random":
        frame = _drawn_again(data, part[1], part[3] - part[2])
    elif part[0] == "frame":  # a frame's rows, read again by the caller: pandas from here on
        frame = part[1][names]
        if keys is not None:  # chosen first in the frame's own library (cuDF: on its GPU)
            frame = frame[frame[by].isin(keys)]
        frame = frame if isinstance(frame, pd.DataFrame) else frame.to_pandas()
    elif part[0] == "parquet":
        frame = pd.read_parquet(part[1], columns=names)
    else:
        frame = pd.read_csv(part[1], usecols=names)[names]
    if keys is not None:
        return frame[frame[by].isin(keys)]
    j, of = batch
    return frame[_batch_of(frame[by], of) == j]


def _drawn_again(data: TableData, part: int, n: int) -> pd.DataFrame:
    """Part ``part`` of a random table, drawn by the scheme the table module documents."""
    rng = replay.stream(data.seed, part)
    values = {}
    for name, column in data.columns.items():
        if column.distribution == "integers":
            values[name] = rng.integers(int(column.low), int(column.high), n, dtype=np.int64)
        elif column.distribution == "uniform":
            values[name] = rng.uniform(column.low, column.high, n)
        else:
            values[name] = rng.normal(column.low, column.high, n)
    return pd.DataFrame(values)


def _as_table(value: Any) -> pd.DataFrame:
    if isinstance(value, pd.Series):
        value = value.to_frame()
    if not isinstance(value, pd.DataFrame):
        value = pd.DataFrame(np.atleast_1d(np.asarray(value)))
    return value.reset_index(drop=True)


def _close(ours: np.ndarray, theirs: np.ndarray, rtol: float, atol: float) -> bool:
    if ours.dtype.kind in "iufcb" and theirs.dtype.kind in "iufcb":
        return bool(np.isclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True).all())
    return bool((ours == theirs).all())


def _shown(values: np.ndarray) -> str:
    text = np.array2string(values[:4], precision=8, separator=", ")
    return text if values.size <= 4 else text[:-1] + ", ...]"
