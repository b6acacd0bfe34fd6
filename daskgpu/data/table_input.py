"""Table inputs (Parquet or CSV: a file, a directory, or a glob; or a DataFrame), checked up front.

The check reads schemas and a few rows in the client, so a missing path, a corrupt Parquet
file, missing or mistyped columns, or an empty input is refused before a cluster starts. A
pandas, cuDF or Dask DataFrame in memory is checked the same way from its columns' types
(:mod:`daskgpu.data.frame_input`).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daskgpu.errors import InputFileError, MissingInputError, printable

if TYPE_CHECKING:
    from daskgpu.data.frame_input import FrameSource

_HOW = "give a Parquet or CSV file, a directory of them, or a glob"


@dataclass(frozen=True)
class TableSource:
    """A validated table input."""

    path: str
    kind: str  # "parquet" or "csv"
    files: tuple[str, ...]
    rows: int
    row_groups: tuple[int, ...] = ()  # Parquet: row groups of each file; CSV: none


def _files(path: str) -> list[str]:
    if any(ch in path for ch in "*?["):
        return sorted(p for p in glob.glob(path) if os.path.isfile(p))
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError:
            return []  # an unreadable directory: reported as holding no table file
        return sorted(
            os.path.join(path, name)
            for name in names
            if name.lower().endswith((".parquet", ".pq", ".csv")) and not name.startswith(".")
            and os.path.isfile(os.path.join(path, name))
        )
    return [path] if os.path.isfile(path) else []


def _kind(files: list[str], what: str, path: str) -> str:
    kinds = {"csv" if f.lower().endswith(".csv") else "parquet" for f in files}
    if len(kinds) > 1:
        raise InputFileError(f"{what} {path}: mixes CSV and Parquet files; give one kind")
    return kinds.pop()


def open_table(path, columns: dict[str, str], what: str = "--input",
               backend=None) -> TableSource | FrameSource:
    """Validate a table input against the columns a pipeline needs.

    Parameters
    ----------
    path : str, path-like or DataFrame
        File, directory or glob; or a pandas, cuDF or Dask DataFrame in memory (see
        :func:`daskgpu.data.frame_input.open_frame`).
    columns : dict
        Column name -> ``"number"``, ``"integer"`` or ``"datetime"``.
    what : str
        How the error line names the input (its option).
    backend : Backend, optional
        Where the run computes (a DataFrame of cuDF is refused for CPU workers).

    Returns
    -------
    TableSource or FrameSource
        A file's (``kind`` "parquet" or "csv"), or a frame's (``kind`` "memory").

    Raises
    ------
    InputFileError
        One line: missing path (MissingInputError, a FileNotFoundError too), corrupt file,
        missing columns (named), wrong types, no rows; a Series or an array given as a table.
    InputTypeError
        Neither a path nor a table (nor an array).
    """
    try:
        if not isinstance(path, (str, os.PathLike)):
            from daskgpu.data import frame_input

            return frame_input.open_frame(path, columns, what, backend)
        return _open_table(os.fspath(path), columns, what)
    except InputFileError as exc:
        raise type(exc)(printable(str(exc))) from None


def _open_table(path: str, columns: dict[str, str], what: str) -> TableSource:
    if not any(ch in path for ch in "*?[") and not os.path.exists(path):
        raise MissingInputError(f"{what} {path}: no such file or directory; {_HOW}")
    files = _files(path)
    if not files:
        raise InputFileError(f"{what} {path}: no Parquet or CSV file there; {_HOW}")
    kind = _kind(files, what, path)
    rows, groups = 0, []
    for file in files:
        types, count, *group_count = (_parquet_schema if kind == "parquet" else _csv_schema)(
            file, what)
        # A CSV without rows has names but no types to check.
        _check_columns(types, columns, file, what, check_types=count > 0 or kind == "parquet")
        rows += count
        groups += group_count
    if rows == 0:
        raise InputFileError(f"{what} {path}: the table is empty (no rows)")
    return TableSource(path, kind, tuple(files), rows, tuple(groups))


def _parquet_schema(file: str, what: str) -> tuple[dict[str, str], int, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(file)
        schema = meta.schema_arrow
        rows = meta.metadata.num_rows
        groups = meta.metadata.num_row_groups
    except (pa.ArrowException, OSError) as exc:
        raise InputFileError(f"{what} {file}: not a readable Parquet file ({exc})") from None
    types = {}
    for field in schema:
        t = field.type
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            types[field.name] = "datetime"
        elif pa.types.is_integer(t):
            types[field.name] = "integer"
        elif pa.types.is_floating(t):
            types[field.name] = "number"
        else:
            types[field.name] = str(t)
    return types, rows, groups


def _csv_schema(file: str, what: str) -> tuple[dict[str, str], int]:
    import pandas as pd

    try:
        head = pd.read_csv(file, nrows=1000)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise InputFileError(f"{what} {file}: not a readable CSV file ({exc})") from None
    types = {}
    for name in head.columns:
        series = head[name]
        present = series.dropna()  # missing values (empty fields) have no type to check
        if pd.api.types.is_integer_dtype(series) or _whole_with_gaps(series, present):
            types[name] = "integer"
        elif pd.api.types.is_float_dtype(series):
            types[name] = "number"
        elif len(present) and _datetimes(present):
            types[name] = "datetime"
        else:
            types[name] = str(series.dtype)
    return types, _data_lines(file)


def _whole_with_gaps(series, present) -> bool:
    """Whether a float column is integers with missing values (pandas reads those as float)."""
    import pandas as pd

    return (pd.api.types.is_float_dtype(series) and len(present) < len(series)
            and bool((present == present.round()).all()))


def _datetimes(series) -> bool:
    """Whether every value of a CSV column reads as a date and time."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        # "Could not infer format": a notice on stderr would break the one error line.
        warnings.simplefilter("ignore")
        try:
            return bool(pd.to_datetime(series, errors="coerce").notna().all())
        except (ValueError, TypeError, OverflowError):
            return False


def _data_lines(file: str) -> int:
    """Lines after a CSV's header, counted in one pass over the bytes."""
    newlines, last = 0, b"\n"
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    lines = newlines + (0 if last == b"\n" else 1)
    return max(0, lines - 1)


def _check_columns(types: dict[str, str], needed: dict[str, str], file: str, what: str,
                   check_types: bool = True):
    missing = [name for name in needed if name not in types]
    if missing:
        raise InputFileError(f"{what} {file}: missing column(s) {', '.join(missing)}")
    if not check_types:
        return
    wrong = []
    for name, kind in needed.items():
        have = types[name]
        fits = have == kind or (kind == "number" and have == "integer")
        if not fits:
            wrong.append(f"{name} is {have}, needs {kind}")
    if wrong:
        raise InputFileError(f"{what} {file}: wrong column type(s): {'; '.join(wrong)}")
