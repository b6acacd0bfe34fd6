"""The short way to write a table pipeline: ``@daskgpu.table_pipeline``.

The twin of :func:`~daskgpu.toolkit.array_pipeline.array_pipeline` for a pipeline over one
table, random or read from an ``--input`` (Parquet or CSV: a file, a directory or a glob; from
Python also a pandas, cuDF or Dask DataFrame in memory, :mod:`daskgpu.data.frame_input`). The
pipeline declares its columns; the decorator gives it the data options (``--rows``,
``--partitions``, ``--seed``, ``--input``), their refusals, the input's opening and checking,
the workload's sizes and description, and a reported value ready for JSON. The function it
decorates only turns a ready Dask DataFrame into the result::

    @daskgpu.table_pipeline(
        "top-values", "The k largest values of each key",
        columns={"key": daskgpu.Column.integers(0, 1000), "value": daskgpu.Column.uniform()},
        params=[daskgpu.Param("k", daskgpu.positive_int, 3, "Values kept per key.")],
        check=daskgpu.checks.groups_recomputed(reference, by="key"))
    def top_values(frame, k):
        return frame.reduction(top, top, chunk_kwargs={"k": k}, aggregate_kwargs={"k": k})

Random tables follow one documented scheme, so a check can draw any partition again: the
``rows`` are split into ``partitions`` parts as evenly as possible (part ``p`` holds rows
``p * rows // partitions`` up to ``(p + 1) * rows // partitions``), and part ``p`` is drawn
column by column, in the declared order, from
``numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(p,)))`` (see
:class:`Column` for each kind's draw). Partitions are drawn with NumPy and pandas on the workers
and handed to cuDF there on GPU workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from daskgpu.data import frame_input, table_input
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, chunking, registry
from daskgpu.toolkit.array_pipeline import LIST_LIMIT, json_ready, named_like, one_check
from daskgpu.toolkit.params import (
    Param,
    non_negative_int,
    path_or_frame,
    positive_int,
    refuse_with_input,
)
from daskgpu.toolkit.workload import Mutation, Workload

__all__ = ["Column", "TableData", "draw_partition", "every_tenth_group_changed",
           "partition_bounds", "table_pipeline"]

#: The parameters every table pipeline has, in this order after its own.
STANDARD_PARAMS = ("rows", "partitions", "seed", "input")
#: Those that only describe generated data: refused, where set, with an ``--input``.
GENERATED_ONLY = ("rows", "partitions", "seed")
#: Bytes per value of a random column (int64 or float64), for sizes and the partition check.
VALUE_BYTES = 8


@dataclass(frozen=True)
class Column:
    """One declared column: its kind, and how random tables draw it.

    Build one with :meth:`integers`, :meth:`uniform` or :meth:`normal`. An ``--input`` must
    hold the column with values of its ``kind`` (``"integer"`` or ``"number"``).

    Attributes
    ----------
    kind : {"integer", "number"}
    distribution : {"integers", "uniform", "normal"}
    low, high : float
        ``integers``: int64 values in ``[low, high)`` (``Generator.integers``); ``uniform``:
        float64 in ``[low, high)`` (``Generator.uniform``); ``normal``: mean ``low`` and
        standard deviation ``high`` (``Generator.normal``).
    """

    kind: str
    distribution: str
    low: float
    high: float

    @classmethod
    def integers(cls, low: int = 0, high: int = 1000) -> Column:
        """An integer column; random tables draw int64 values in ``[low, high)``."""
        if int(low) != low or int(high) != high or not low < high:
            raise ValueError(f"Column.integers({low}, {high}): give whole numbers, low < high")
        return cls("integer", "integers", int(low), int(high))

    @classmethod
    def uniform(cls, low: float = 0.0, high: float = 1.0) -> Column:
        """A number column; random tables draw float64 values uniform in ``[low, high)``."""
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"Column.uniform({low}, {high}): give finite low < high")
        return cls("number", "uniform", float(low), float(high))

    @classmethod
    def normal(cls, mean: float = 0.0, std: float = 1.0) -> Column:
        """A number column; random tables draw float64 values, normally distributed."""
        if not (math.isfinite(mean) and math.isfinite(std) and std > 0):
            raise ValueError(f"Column.normal({mean}, {std}): give a finite mean and std > 0")
        return cls("number", "normal", float(mean), float(std))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` random values of this column from ``rng``."""
        if self.distribution == "integers":
            return rng.integers(int(self.low), int(self.high), n, dtype=np.int64)
        if self.distribution == "uniform":
            return rng.uniform(self.low, self.high, n)
        return rng.normal(self.low, self.high, n)


@dataclass(frozen=True)
class TableData:
    """What a run's table is, for its checks: ``workload.context["table"]``.

    Enough to draw a partition of a random table again from its seed, or read the input's
    files again, on a worker, or a DataFrame in memory again from the object itself, without
    the run's graph.

    Attributes
    ----------
    columns : dict of str to Column
        The declared columns, in order.
    rows : int
        Rows of the table.
    dataframe_library : str
        The workers' partitions: ``"pandas"`` or ``"cudf"``.
    seed, partitions : int or None
        Random tables: the seed, and how many parts the rows are split into.
    source : str or None
        The input's path, or a DataFrame in memory's label (None for a random table).
    source_kind : str or None
        ``"parquet"``, ``"csv"`` or ``"memory"`` for an input.
    files : tuple of str
        The input's files.
    frame : DataFrame or None
        A DataFrame in memory, as the user gave it (pandas, cuDF or Dask): the checks read it
        again from here. Never sent to the workers with the rest of this description
        (:meth:`described`).
    """

    columns: dict[str, Column]
    rows: int
    dataframe_library: str
    seed: int | None = None
    partitions: int | None = None
    source: str | None = None
    source_kind: str | None = None
    files: tuple[str, ...] = ()
    frame: Any = field(default=None, repr=False, compare=False)

    def described(self) -> TableData:
        """The description without the DataFrame in memory: what a task may carry."""
        return replace(self, frame=None)

    @property
    def sample_seed(self) -> int:
        """The seed spot checks draw their sample from: the table's, or an input's rows."""
        return self.seed if self.seed is not None else self.rows


def partition_bounds(rows: int, partitions: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each part of ``rows`` split into ``partitions`` near-equal parts."""
    return [(p * rows // partitions, (p + 1) * rows // partitions) for p in range(partitions)]


def draw_partition(columns: dict[str, Column], seed: int, part: int, n: int) -> pd.DataFrame:
    """Part ``part`` (``n`` rows) of a random table: the scheme this module documents."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(part,)))
    return pd.DataFrame({name: column.draw(rng, n) for name, column in columns.items()})


def _random_partition(part: tuple[int, int, int], declared: tuple, seed: int, library: str):
    number, start, stop = part
    return backends.from_pandas(draw_partition(dict(declared), seed, number, stop - start),
                                library)


# --------------------------------------------------------------------------- parameters


def _standard_params(rows: int) -> tuple[Param, ...]:
    return (
        Param("rows", positive_int, rows, "Rows of the random table.", "N"),
        Param("partitions", _partitions, "auto", "Parts the random table is split into: auto "
              "(sized for the device) or N.", "auto|N"),
        Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
        Param("input", path_or_frame, None, "Read this Parquet or CSV table (a file, a "
              "directory of them, or a glob) instead of random rows (from Python also a "
              "pandas, cuDF or Dask DataFrame).", "PATH"),
    )


def _partitions(value: Any) -> str | int:
    """``"auto"`` or a positive number of partitions."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(value)
    except ValueError:
        raise ValueError("give auto or a positive number of partitions") from None


def _settler(params: tuple[Param, ...], columns: dict[str, Column]):
    row_bytes = VALUE_BYTES * len(columns)

    def settle(backend, values: dict) -> tuple[dict, dict]:
        """Open and check the input's files and columns, or the random table's layout.

        A DataFrame in memory is named in the values by its label and kept in the inputs.
        """
        values = dict(values)
        if values["input"] is None:
            _check_layout(values["rows"], values["partitions"], row_bytes)
            return values, {}
        refuse_with_input(params, values, GENERATED_ONLY)
        kinds = {name: column.kind for name, column in columns.items()}
        source = table_input.open_table(values["input"], kinds, backend=backend)
        values["rows"] = values["partitions"] = None  # the input's own, reported with the data
        values["input"] = source.path  # a frame in memory: named, never held in the values
        return values, {"input": source}

    return settle


def _check_layout(rows: int, parts: str | int, row_bytes: int) -> None:
    """Refuse more parts than rows, and a layout no cluster can run (as arrays' blocks)."""
    if parts == "auto":
        chunking.check_blocks("auto", (rows,), row_bytes, "--rows")
        return
    if parts > rows:
        raise ParameterError(f"--partitions {parts}: more parts than --rows {rows}; give at "
                             f"most {rows}")
    if parts > chunking.MAX_BLOCKS:
        raise ParameterError(f"--partitions {parts}: at most {chunking.MAX_BLOCKS:.0e} fit in "
                             "one graph; give fewer, or auto")
    part_bytes = -(-rows // parts) * row_bytes
    if part_bytes > chunking.MAX_BLOCK_BYTES:
        raise ParameterError(f"--partitions {parts}: each part of {rows} rows would hold "
                             f"{part_bytes / 2**40:.3g} TiB, more than any worker's memory; "
                             "give more partitions, or auto")


# --------------------------------------------------------------------------- present, mutate


def present_table(workload: Workload, raw: Any) -> Any:
    """The default reported value: a small table as a list of row dicts, numbers as Python's.

    A pandas (or cuDF) DataFrame of at most :data:`LIST_LIMIT` cells becomes
    ``[{column: value, ...}, ...]`` (its index dropped unless named); a Series becomes a
    DataFrame first; a larger table stays a pandas DataFrame. Anything else goes through
    :func:`~daskgpu.toolkit.array_pipeline.json_ready`.
    """
    table = host_table(raw)
    if table is None:
        return json_ready(raw)
    if table.size > LIST_LIMIT:
        return table
    return json_ready(table.to_dict(orient="records"))


def host_table(raw: Any) -> pd.DataFrame | None:
    if hasattr(raw, "to_pandas") and not isinstance(raw, (pd.DataFrame, pd.Series)):
        raw = raw.to_pandas()  # cuDF
    if isinstance(raw, pd.Series):
        raw = raw.to_frame()
    if not isinstance(raw, pd.DataFrame):
        return None
    named = any(name is not None for name in raw.index.names)
    return raw.reset_index(drop=not named)


def every_tenth_group_changed(by: str) -> Mutation:
    """A mutation for a per-group result: the rows of every tenth group changed.

    The result's groups (the distinct values of column ``by``, sorted) at positions 0, 10,
    20, ... get every number of their other columns moved by ``1 + |value|``. The failed check
    of :func:`~daskgpu.toolkit.checks.groups_recomputed` names one (``key 0: ...``).
    """

    def change(raw: Any) -> pd.DataFrame:
        table = host_table(raw)
        if table is None or by not in table.columns:
            raise ValueError(f"every_tenth_group_changed: the result has no column {by!r}")
        table = table.copy()
        keys = np.sort(table[by].unique())
        changed = table[by].isin(keys[::10])
        for name in table.columns:
            if name != by and pd.api.types.is_numeric_dtype(table[name]):
                values = table.loc[changed, name]
                table.loc[changed, name] = values + 1 + values.abs()
        return table

    return Mutation("every tenth group changed", change, rf"{by} \S+:")


# --------------------------------------------------------------------------- the decorator


def _refuse_bad_definition(name: str, params: Sequence[Param], columns: dict,
                           rows: int) -> None:
    clash = sorted({p.name for p in params} & set(STANDARD_PARAMS))
    if clash:
        raise ValueError(f"{name}: parameter {', '.join(clash)} is one table_pipeline gives "
                         f"every pipeline ({', '.join(STANDARD_PARAMS)}); choose another name")
    if not columns or not all(isinstance(c, Column) for c in columns.values()):
        raise ValueError(f"{name}: columns: give {{name: daskgpu.Column.integers(...) or "
                         ".uniform(...) or .normal(...)}}, at least one")
    positive_int(rows)


def table_pipeline(
    name: str,
    summary: str,
    *,
    columns: dict[str, Column],
    check: Callable[..., Any] | Sequence[Callable[..., Any]],
    params: Sequence[Param] = (),
    rows: int = 1_000_000,
    mutations: Sequence[Mutation] | None = None,
    present: Callable[[Workload, Any], Any] | None = None,
    baseline: Callable[[registry.Resolved], tuple[float, Any]] | None = None,
    warm_up: Callable[[str], None] | None = None,
) -> Callable[[Callable[..., Any]], registry.Pipeline]:
    """Register the decorated ``build(frame, **params)`` as a pipeline over one table.

    ``build`` receives the table as a ready, lazy Dask DataFrame holding the declared
    ``columns`` (random, or the ``--input``'s), and the pipeline's own parameters as keywords;
    it returns the lazy result (a Dask DataFrame or Series, or any Dask collection). The
    pipeline gets the standard parameters after its own:

    - ``--rows`` (default ``rows``), ``--partitions`` (``auto``: sized for the device, or a
      number) and ``--seed`` (default: a fresh one, drawn and reported) of a random table,
      drawn on the workers partition by partition (the scheme in this module's docstring);
    - ``--input``: a Parquet or CSV table instead (a file, a directory of them, or a glob),
      which must hold the declared columns with values of their kinds; its partitions are
      Dask's (``dask.dataframe.read_parquet`` or ``read_csv``, cuDF's on GPU workers). From
      Python ``input=`` also takes a pandas, cuDF or Dask DataFrame, checked the same way: a
      pandas or cuDF frame becomes partitions sized as a random table's, each sent to the
      workers once (``dask.dataframe.from_pandas``, ``dask_cudf.from_cudf``); a Dask
      DataFrame is used as its own graph, repartitioned where its partitions do not suit
      (the run's data says so); cuDF data only on GPU workers.

    Before any cluster starts (one line, exit code 2 on the command line) it refuses options
    of random data given with an ``--input``, a missing, corrupt or empty input or one that
    lacks a column or holds the wrong kind of values in it, more partitions than rows, and a
    layout no cluster can run. The workload's rows, bytes and description are filled in.

    Parameters
    ----------
    name, summary : str
        As for :func:`daskgpu.pipeline`.
    columns : dict of str to Column
        The table's columns, in order.
    check : callable or sequence of callables
        ``verify(workload, raw, depth) -> Verification``, usually
        :func:`daskgpu.checks.groups_recomputed`; several are all run. It reads the table's
        description from ``workload.context["table"]`` (:class:`TableData`) and the
        pipeline's parameters from ``workload.context["params"]``.
    params : sequence of Param
        The pipeline's own parameters, given to ``build`` (and to the check helpers'
        functions) as keywords. None may be called rows, partitions, seed or input.
    rows : int
        The default number of rows of a random table.
    mutations : sequence of Mutation, optional
        Alterations of the computed result the check must catch. Default: none; for a
        per-group result checked by ``groups_recomputed(..., by=KEY)``, give
        ``[every_tenth_group_changed(KEY)]``.
    present : callable, optional
        ``present(workload, raw) -> value``. Default: :func:`present_table`.
    baseline, warm_up : callable, optional
        As for :func:`daskgpu.pipeline`.

    Returns
    -------
    callable
        A decorator returning the registered :class:`~daskgpu.toolkit.registry.Pipeline`.

    Notes
    -----
    ``frame``'s partitions are pandas DataFrames on CPU workers and cuDF DataFrames on GPU
    workers: a pipeline written with the methods both share runs on either.
    """
    columns = dict(columns)
    _refuse_bad_definition(name, params, columns, rows)
    verify = one_check(check)
    every = (*params, *_standard_params(rows))
    own = tuple(p.name for p in params)

    def register(build: Callable[..., Any]) -> registry.Pipeline:
        def prepare(resolved: registry.Resolved) -> Workload:
            backends.require_dataframe_library(resolved.backend, name)
            frame, table, described = _data(resolved, columns)
            user = {key: resolved[key] for key in own}
            return Workload(
                collection=build(frame, **user),
                elements=table.rows * len(columns),
                nbytes=table.rows * len(columns) * VALUE_BYTES,
                bytes_are="generated" if table.source is None else "read",
                description={**described, "rows": table.rows, "columns": list(columns),
                             "partitions": frame.npartitions},
                context={"table": table, "params": user},
                present=present or present_table,
            )

        named_like(prepare, build)
        return registry.pipeline(
            name, summary, every, verify, settle=_settler(every, columns), baseline=baseline,
            mutations=tuple(mutations or ()), warm_up=warm_up,
        )(prepare)

    return register


def _data(resolved: registry.Resolved, columns: dict[str, Column]):
    """The run's lazy table, its :class:`TableData`, and what a report shows of its source."""
    import dask
    import dask.dataframe as dd

    library = resolved.backend.dataframe_library
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        if source.kind == "memory":
            return _frame_data(source, columns, resolved.backend)
        with dask.config.set({"dataframe.backend": library}):
            if source.kind == "parquet":
                frame = dd.read_parquet(list(source.files), columns=list(columns))
            else:
                frame = dd.read_csv(list(source.files), usecols=list(columns))
        table = TableData(columns, source.rows, library, source=source.path,
                          source_kind=source.kind, files=tuple(source.files))
        return frame, table, {"source": source.path, "format": source.kind}
    rows, seed = resolved["rows"], resolved["seed"]
    parts = resolved["partitions"]
    if parts == "auto":
        per_part = chunking.auto_chunks((rows,), VALUE_BYTES * len(columns), resolved.backend)
        parts = -(-rows // per_part[0])
    bounds = partition_bounds(rows, parts)
    meta = pd.DataFrame({name: np.empty(0, np.int64 if c.kind == "integer" else np.float64)
                         for name, c in columns.items()})
    frame = dd.from_map(_random_partition, [(p, a, b) for p, (a, b) in enumerate(bounds)],
                        args=(tuple(columns.items()), seed, library), meta=meta,
                        label="random-table", enforce_metadata=False)
    table = TableData(columns, rows, library, seed=seed, partitions=parts)
    return frame, table, {"source": "random", "seed": seed}


def _frame_data(source, columns: dict[str, Column], backend):
    """A DataFrame in memory as the run's lazy table, its :class:`TableData`, its description.

    Partitioned as a random table of its rows would be (:func:`~daskgpu.toolkit.chunking.
    auto_chunks`): a pandas or cuDF frame cut so, a Dask DataFrame's own partitions kept where
    they suit (its rows counted on the cluster first).
    """
    source = frame_input.counted(source)
    per_part = chunking.auto_chunks((source.rows,), VALUE_BYTES * len(columns), backend)[0]
    parts = -(-source.rows // per_part)
    frame, note = frame_input.to_dask(source, columns, parts, per_part, backend)
    table = TableData(columns, source.rows, backend.dataframe_library, source=source.label,
                      source_kind="memory", frame=source.frame)
    return frame, table, {"source": source.label, "format": "memory", **note}
