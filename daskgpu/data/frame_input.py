"""Tables in hand as inputs: pandas, cuDF and Dask DataFrames, checked as files are, moved once.

A DataFrame in memory is a table input as a Parquet or CSV path is
(:func:`daskgpu.data.table_input.open_table` opens either): its columns, their types and its rows
are checked in the client before anything runs, with one line naming the object by its type,
rows and columns, never its values. The run then reads it as partitions:

- a pandas or cuDF DataFrame is cut into row ranges in the client (views, no copy) and each range
  travels to the workers once: scattered by the run's ``distributed`` client, or, with no
  cluster, as a task of the collection's own graph (:func:`row_ranges`, :func:`to_dask`); cuDF
  data goes from the client's GPU to the GPU workers', never through the host of a worker;
- a Dask DataFrame (pandas- or cuDF-backed) is used as the graph it is, never computed in the
  client: its partitions' rows are counted on the cluster (:func:`counted`, a small first pass
  that brings back one number a partition), and its own partitions are the run's where they suit
  the pipeline, else its rows are repartitioned, which the run's reported data says
  (:func:`suits`, :func:`repartitioned`).

A check reads the table again from the object itself, not through the run's partitions: a
pandas or cuDF frame where it is, in the client; a Dask DataFrame's own partitions, on the
workers.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from daskgpu.errors import InputFileError, InputTypeError

ACCEPTED = ("a path (Parquet or CSV: a file, a directory of them, or a glob), or a pandas, cuDF "
            "or Dask DataFrame")
#: Columns a label names, at most (then how many more).
NAMED_COLUMNS = 4
#: A Dask DataFrame's partitions suit a pipeline unless there are more than this many times the
#: pipeline's own count of them, or one holds more than this many times its partitions' rows.
SUIT_FACTOR = 4


@dataclass(frozen=True, eq=False)
class FrameSource:
    """A validated table in memory (``kind`` ``"memory"``; compare files' ``TableSource``).

    Attributes
    ----------
    frame : DataFrame
        The user's object, as given (never copied; not shown in a repr).
    form : {"pandas", "cudf", "dask"}
        What it is.
    library : {"pandas", "cudf"}
        Where its rows are: a Dask DataFrame's partitions' type.
    label : str
        How reports and messages name it: type, rows, columns (:func:`label`).
    rows : int or None
        Its rows; None for a Dask DataFrame until :func:`counted`.
    lengths : tuple of int
        A Dask DataFrame's partitions' rows, once counted (a pandas or cuDF frame: its rows).
    """

    frame: Any = field(repr=False)
    form: str
    library: str
    label: str
    rows: int | None = None
    lengths: tuple[int, ...] = ()

    kind = "memory"

    @property
    def path(self) -> str:
        """What stands for a path in a report: the label."""
        return self.label

    @property
    def in_memory(self) -> bool:
        """Always True: the table is an object in memory, not a file."""
        return True


# --------------------------------------------------------------------------- what a value is


def form(value) -> str | None:
    """``"pandas"``, ``"cudf"`` or ``"dask"`` for a DataFrame of that library; else None.

    Only libraries already imported are asked (a cuDF object implies cuDF is): nothing is
    imported to find out.
    """
    for module, name in (("cudf", "cudf"), ("dask.dataframe", "dask"), ("pandas", "pandas")):
        library = sys.modules.get(module)
        frame_type = getattr(library, "DataFrame", None)
        if isinstance(frame_type, type) and isinstance(value, frame_type):
            return name
    return None


def library(value) -> str:
    """Where a frame's rows are: ``"cudf"`` or ``"pandas"`` (a Dask DataFrame: its partitions')."""
    held = value._meta if form(value) == "dask" else value
    return "cudf" if form(held) == "cudf" else "pandas"


def _is_series(value) -> bool:
    for module in ("pandas", "cudf", "dask.dataframe"):
        series_type = getattr(sys.modules.get(module), "Series", None)
        if isinstance(series_type, type) and isinstance(value, series_type):
            return True
    return False


def type_name(value) -> str:
    """A value's type as a user spells it: ``pandas.DataFrame``, ``dask.dataframe.DataFrame``."""
    kind = form(value)
    if kind == "dask":
        return "dask.dataframe.DataFrame"
    if kind is not None:
        return f"{kind}.DataFrame"
    cls = type(value)
    module = cls.__module__.split(".")[0]
    return cls.__name__ if module == "builtins" else f"{module}.{cls.__name__}"


def label(frame, dtypes: bool = False) -> str:
    """How a report or a message names a frame: type, rows, columns; never its values.

    ``dtypes``: each named column with its type (for error lines).

    >>> import pandas as pd
    >>> label(pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]}))
    'pandas.DataFrame (2 rows; columns a, b)'
    """
    names = list(frame.columns)
    types = frame.dtypes
    shown = [f"{_short(n)} {types.iloc[i]}" if dtypes else _short(n)
             for i, n in enumerate(names[:NAMED_COLUMNS])]
    if len(names) > NAMED_COLUMNS:
        shown.append(f"... {len(names) - NAMED_COLUMNS} more")
    columns = f"columns {', '.join(shown)}" if names else "no columns"
    if form(frame) == "dask":
        n = frame.npartitions
        size = f"{n} partition{'s' * (n != 1)} of {library(frame)}"
    else:
        size = f"{len(frame)} rows"
    return f"{type_name(frame)} ({size}; {columns})"


def _short(name, limit: int = 30) -> str:
    text = str(name)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def column_kind(dtype) -> str:
    """A column's kind, as a table input's are checked: ``datetime``, ``integer``, ``number``.

    Any other dtype is named as it is (booleans, text, categories, ...).
    """
    import pandas as pd

    api = pd.api.types
    try:
        if api.is_datetime64_any_dtype(dtype):
            return "datetime"
        if api.is_bool_dtype(dtype):
            return str(dtype)
        if api.is_integer_dtype(dtype):
            return "integer"
        if api.is_float_dtype(dtype):
            return "number"
    except TypeError:  # a dtype pandas does not know (one of cuDF's own)
        pass
    return str(dtype)


# --------------------------------------------------------------------------- checked up front


def open_frame(value, columns: dict[str, str], what: str = "--input",
               backend=None) -> FrameSource:
    """Check a DataFrame in memory against the columns a pipeline needs, as a file is checked.

    Parameters
    ----------
    value : object
        A pandas, cuDF or Dask DataFrame (anything else is refused).
    columns : dict
        Column name -> ``"number"``, ``"integer"`` or ``"datetime"`` (a number column takes
        integers too).
    what : str
        How the error line names the input (its option; the Python API says ``input=``).
    backend : Backend, optional
        Where the run computes: cuDF data is refused for CPU workers.

    Returns
    -------
    FrameSource

    Raises
    ------
    InputTypeError
        Neither a path nor a table nor an array (a list, a dict, ...).
    InputFileError
        One line naming the object by type, rows and columns with their types: a Series or an
        array instead of a table, a missing or repeated column, a column of the wrong type, no
        rows (a pandas or cuDF frame; a Dask DataFrame's rows are counted as the run starts),
        cuDF data for CPU workers.
    """
    kind = form(value)
    if kind is None:
        _refuse_other(value, what)
    name = label(value, dtypes=True)
    _check_columns(value, columns, f"{what} {name}")
    rows = None if kind == "dask" else len(value)
    if rows == 0:
        raise InputFileError(f"{what} {name}: the table is empty (no rows)")
    source = FrameSource(value, kind, library(value), label(value), rows,
                         () if rows is None else (rows,))
    if backend is not None:
        check_backend(source, backend, what)
    return source


def _refuse_other(value, what: str) -> None:
    if _is_series(value):
        raise InputFileError(f"{what} {type_name(value)} {value.dtype}: a Series, not a table; "
                             "give a DataFrame (series.to_frame(name))")
    if not isinstance(value, (str, bytes)) and all(
            hasattr(value, a) for a in ("shape", "dtype", "ndim")):
        shape = ", ".join(map(str, value.shape))
        raise InputFileError(f"{what} {type_name(value)} {value.dtype} ({shape}): an array, not a "
                             "table; give a DataFrame with named columns")
    name = type_name(value)
    article = "an" if name[:1].lower() in "aeiou" else "a"
    raise InputTypeError(f"{what}: {article} {name} is not an input daskgpu reads; give "
                         f"{ACCEPTED}")


def _check_columns(frame, needed: dict[str, str], where: str) -> None:
    present = [str(c) for c in frame.columns]
    missing = [name for name in needed if name not in present]
    if missing:
        raise InputFileError(f"{where}: missing column(s) {', '.join(missing)}")
    repeated = [name for name in needed if present.count(name) > 1]
    if repeated:
        raise InputFileError(f"{where}: column(s) {', '.join(repeated)} appear more than once")
    types = dict(zip(present, frame.dtypes, strict=True))
    wrong = []
    for name, kind in needed.items():
        have = column_kind(types[name])
        if not (have == kind or (kind == "number" and have == "integer")):
            wrong.append(f"{name} is {have}, needs {kind}")
    if wrong:
        raise InputFileError(f"{where}: wrong column type(s): {'; '.join(wrong)}")


def check_backend(source: FrameSource, backend, what: str = "--input") -> None:
    """Refuse cuDF data for CPU workers, in one line (it stays on GPUs).

    Raises
    ------
    InputFileError
        Naming the object and the conversion that would do.
    """
    if source.library == "cudf" and not backend.is_gpu:
        how = "frame.to_backend('pandas')" if source.form == "dask" else "frame.to_pandas()"
        raise InputFileError(f"{what} {source.label}: cuDF data, and the workers are CPU "
                             f"workers; run on GPU workers, or give {how}")


def counted(source: FrameSource, what: str = "--input") -> FrameSource:
    """``source`` with its rows and its partitions' rows known.

    A Dask DataFrame's partitions are counted on the scheduler in use (a run's: its cluster),
    one column each, so that a reader of files reads little; only the counts come back. A
    pandas or cuDF frame is returned as it is.

    Raises
    ------
    InputFileError
        A Dask DataFrame without rows.
    """
    if source.form != "dask" or source.rows is not None:
        return source
    import dask

    frame = source.frame
    one = frame[[frame.columns[0]]] if len(frame.columns) else frame
    lengths = tuple(int(n) for n in dask.compute(
        *[dask.delayed(len, pure=True)(part) for part in one.to_delayed()]))
    if sum(lengths) == 0:
        raise InputFileError(f"{what} {source.label}: the table is empty (no rows)")
    return FrameSource(source.frame, source.form, source.library, source.label, sum(lengths),
                       lengths)


# --------------------------------------------------------------------------- partitions


def bounds_of(lengths) -> list[tuple[int, int]]:
    """``(start, stop)`` rows of consecutive partitions of ``lengths`` rows.

    >>> bounds_of([3, 0, 2])
    [(0, 3), (3, 3), (3, 5)]
    """
    out, start = [], 0
    for n in lengths:
        out.append((start, start + int(n)))
        start += int(n)
    return out


def even_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    """``rows`` cut into ``parts`` consecutive ranges, the first ``rows % parts`` one longer.

    >>> even_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    return bounds_of(rows // parts + (1 if i < rows % parts else 0) for i in range(parts))


def suits(lengths, parts: int, part_rows: int) -> bool:
    """Whether a Dask DataFrame's own partitions of ``lengths`` rows suit a pipeline.

    The pipeline would cut the rows into ``parts`` partitions of at most ``part_rows``. They
    suit unless there are more than ``SUIT_FACTOR`` times as many (tasks too small to pay for
    themselves), or one holds more than ``SUIT_FACTOR`` times ``part_rows`` (more than a worker
    is meant to hold at once).
    """
    return len(lengths) <= SUIT_FACTOR * parts and max(lengths) <= SUIT_FACTOR * part_rows


def repartitioned(lengths, parts: int) -> str:
    """What the run does to a Dask DataFrame's own partitions, in words, for its data.

    >>> repartitioned([5, 5, 5, 5, 5, 5, 5, 5, 5, 5], 2)
    "repartitioned from 10 partitions (at most 5 rows) to 2, the pipeline's"
    """
    return (f"repartitioned from {len(lengths)} partitions (at most {max(lengths)} rows) to "
            f"{parts}, the pipeline's")


def row_ranges(source: FrameSource, bounds, columns) -> list:
    """The frame's ``columns`` in row ranges ``bounds``: one lazy piece a range, for tasks.

    A pandas or cuDF frame's ranges are cut here (views) and sent to the workers once:
    scattered by the ``distributed`` client that Dask's configuration names as the scheduler
    (a run's), else each a task of the graph. A Dask DataFrame's are its own partitions where
    ``bounds`` are theirs (:func:`counted` first), else each range is joined on a worker from
    the partitions it overlaps (:func:`rows_between`). Each piece is a ``Future`` or a
    ``Delayed``: pass it to a task as an argument.
    """
    names = list(columns)
    if source.form != "dask":
        frame = source.frame[names]
        return _sent([frame.iloc[a:b] for a, b in bounds])
    import dask

    parts = source.frame[names].to_delayed()
    own = bounds_of(source.lengths)
    if [tuple(b) for b in bounds] == own:
        return list(parts)
    pieces = []
    for a, b in bounds:
        overlapping = [j for j, (s, e) in enumerate(own) if s < b and e > a] or [0]
        first = own[overlapping[0]][0]
        pieces.append(dask.delayed(rows_between, pure=True)(
            a - first, b - a, *[parts[j] for j in overlapping]))
    return pieces


def _sent(pieces: list) -> list:
    import dask

    scheduler = dask.config.get("scheduler", None)
    if hasattr(scheduler, "scatter"):
        return scheduler.scatter(pieces, hash=False)
    # No cluster: each range a task of its own (named, so its data is never hashed).
    token = uuid.uuid4().hex
    return [dask.delayed(piece, name=f"frame-rows-{token}-{i}") for i, piece in enumerate(pieces)]


def rows_between(skip: int, count: int, *parts):
    """On a worker: ``count`` rows after the first ``skip`` of ``parts`` joined in order.

    Joined with Dask's backend dispatch (pandas' or cuDF's own ``concat``).
    """
    from dask.dataframe.dispatch import concat

    joined = parts[0] if len(parts) == 1 else concat(list(parts), ignore_index=True)
    return joined.iloc[skip:skip + count]


def to_dask(source: FrameSource, columns, parts: int, part_rows: int, backend):
    """The frame's ``columns`` as a Dask DataFrame for ``backend``, and what was done to it.

    A pandas or cuDF frame: ``parts`` partitions of its own graph
    (``dask.dataframe.from_pandas``; ``dask_cudf.from_cudf``), each partition's rows a task
    of it, sent once. A Dask DataFrame: as it is where its partitions :func:`suits`, else
    ``repartition(npartitions=parts)`` (:func:`counted` first). pandas partitions become cuDF
    ones on GPU workers (``to_backend("cudf")``). Returns ``(frame, {"repartitioned": ...})``
    or ``(frame, {})``.
    """
    import dask.dataframe as dd

    names = list(columns)
    note: dict = {}
    if source.form == "pandas":
        frame = dd.from_pandas(source.frame[names], npartitions=parts, sort=False)
    elif source.form == "cudf":
        import dask_cudf

        frame = dask_cudf.from_cudf(source.frame[names], npartitions=parts, sort=False)
    else:
        frame = source.frame[names]
        if not suits(source.lengths, parts, part_rows):
            frame = frame.repartition(npartitions=parts)
            note = {"repartitioned": repartitioned(source.lengths, parts)}
    if backend.is_gpu and source.library == "pandas":
        frame = frame.to_backend("cudf")
    return frame, note


def whole(source: FrameSource, columns):
    """The frame's ``columns`` as one pandas DataFrame (a baseline's, which runs in one process).

    A Dask DataFrame is computed on the scheduler in use; cuDF data is copied to the host.
    """
    frame = source.frame[list(columns)]
    if source.form == "dask":
        frame = frame.compute()
    return frame.to_pandas() if library(frame) == "cudf" else frame
