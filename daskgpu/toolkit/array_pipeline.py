"""The short way to write an array pipeline: ``@daskgpu.array_pipeline``.

A pipeline over one array, random or read from an ``--input``, is mostly the same ceremony:
the data options (``--shape``, ``--chunks``, ``--dtype``, ``--seed``, ``--input``), their
refusals, opening the input, refusing a layout no cluster can run, the workload's sizes and
description, and a reported value ready for JSON. :func:`array_pipeline` does all of it and
registers an ordinary :class:`~daskgpu.toolkit.registry.Pipeline`; the function it decorates
only turns a ready Dask array into the result::

    @daskgpu.array_pipeline(
        "threshold-count", "Values above a threshold, per row",
        params=[daskgpu.Param("threshold", daskgpu.finite_float, 0.5, "Count values above.")],
        check=daskgpu.checks.rows_recomputed(lambda rows, threshold: (rows > threshold).sum(1)))
    def threshold_count(data, threshold):
        return data.map_blocks(above, threshold, drop_axis=1, dtype=np.int64, meta=...)

The answer checks to give as ``check=`` are in :mod:`daskgpu.toolkit.checks`
(``daskgpu.checks``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.data import array_input, synthetic
from daskgpu.errors import InputFileError
from daskgpu.toolkit import checks, chunking, registry
from daskgpu.toolkit.params import (
    Param,
    choice,
    chunks,
    non_negative_int,
    path_or_array,
    positive_int,
    refuse_with_input,
)
from daskgpu.toolkit.workload import Mutation, Verification, Workload

__all__ = ["ArrayData", "LIST_LIMIT", "array_pipeline", "array_shape", "checks",
           "every_tenth_row_changed", "json_ready"]

#: The parameters every array pipeline has, in this order after its own.
STANDARD_PARAMS = ("shape", "chunks", "dtype", "seed", "input")
#: Those that only describe generated data: refused, where set, with an ``--input``.
GENERATED_ONLY = ("shape", "dtype", "seed")
#: The default ``present`` turns arrays of at most this many values into lists.
LIST_LIMIT = 100_000


@dataclass(frozen=True)
class ArrayData:
    """What a run's data is, for its checks: ``workload.context["array"]``.

    Enough to draw a block of random data again from its seed, or read it again from the
    input file, on a worker, without the run's graph.

    Attributes
    ----------
    shape : tuple of int
    chunks : tuple of tuple of int
        Every block's size along every axis (Dask's ``array.chunks``).
    dtype : str
        The element type.
    library : str
        The workers' array library: ``"numpy"`` or ``"cupy"``.
    seed : int or None
        The seed of random data (None for an input).
    distribution : str or None
        ``"uniform"`` ([0, 1)) or ``"normal"`` for random data; None for an input.
    source : str or None
        The input's path (None for random data); an array in memory's label.
    source_kind : str or None
        ``"npy"``, ``"zarr"`` or ``"memory"`` for an input (the input itself, the
        :class:`~daskgpu.data.array_input.ArraySource`, is ``workload.context["input"]``).
    """

    shape: tuple[int, ...]
    chunks: tuple[tuple[int, ...], ...]
    dtype: str
    library: str
    seed: int | None = None
    distribution: str | None = None
    source: str | None = None
    source_kind: str | None = None

    @property
    def sample_seed(self) -> int:
        """The seed spot checks draw their sample from: the data's, or for an input its size."""
        return self.seed if self.seed is not None else math.prod(self.shape)


# --------------------------------------------------------------------------- parameters


def array_shape(ndim: int) -> Callable[[Any], tuple[int, ...]]:
    """A parser of an array's shape with ``ndim`` axes: ``"3000,3000"`` or ``(3000, 3000)``.

    >>> array_shape(2)("3000, 2e3")
    (3000, 2000)
    """
    example = ",".join(["1000"] * ndim)

    def parse(value: Any) -> tuple[int, ...]:
        if isinstance(value, (tuple, list)):
            parts = list(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            parts = [value]
        else:
            parts = [p.strip() for p in str(value).split(",")]
        if len(parts) != ndim:
            raise ValueError(f"give {ndim} sizes, one per axis ({example})")
        try:
            return tuple(positive_int(p) for p in parts)
        except ValueError:
            raise ValueError(f"give {ndim} positive sizes, one per axis ({example})") from None

    return parse


def _standard_params(shape: tuple[int, ...], dtype: str, dtypes: tuple[str, ...]):
    placeholder = ",".join("NMKL"[i] if i < 4 else "N" for i in range(len(shape)))
    return (
        Param("shape", array_shape(len(shape)), shape, "Shape of the random array.",
              placeholder),
        Param("chunks", chunks, "auto", "Block size: auto (sized for the device), N, or one "
              "per axis.", f"auto|N|{placeholder}"),
        Param("dtype", choice(dtypes), dtype, "Element type of random data.", "|".join(dtypes),
              dtypes),
        Param("seed", non_negative_int, None, "Random seed [default: fresh, reported].", "INT"),
        Param("input", path_or_array, None, "Read this .npy file or Zarr array instead of "
              "random data (from Python also a NumPy, CuPy or Dask array).", "PATH"),
    )


def _settler(name: str, params: tuple[Param, ...], ndim: int, dtypes: tuple[str, ...]):
    def settle(backend, values: dict) -> tuple[dict, dict]:
        """Open and check the input, or the random array's shape; refuse impossible layouts."""
        values = dict(values)
        if values["input"] is None:
            itemsize = np.dtype(values["dtype"]).itemsize
            chunking.check_blocks(values["chunks"], values["shape"], itemsize, "--shape",
                                  memory=chunking.worker_memory(backend))
            return values, {}
        refuse_with_input(params, values, GENERATED_ONLY)
        source = array_input.open_array(values["input"], dtypes=dtypes)
        if len(source.shape) != ndim:
            raise InputFileError(array_input.printable(
                f"--input {source.path}: holds an array of shape {source.shape}; {name} needs "
                f"{ndim} axes (as its --shape has)"))
        chunking.check_blocks(values["chunks"], source.shape, source.dtype.itemsize, "--input",
                              memory=chunking.worker_memory(backend))
        values["shape"] = values["dtype"] = None  # the input's own, reported with the data
        values["input"] = source.path  # an array in memory: named, never held in the values
        return values, {"input": source}

    return settle


# --------------------------------------------------------------------------- present, mutate


def json_ready(value: Any, list_limit: int = LIST_LIMIT) -> Any:
    """``value`` with NumPy scalars as Python numbers, and small arrays as (nested) lists.

    Arrays of more than ``list_limit`` values stay NumPy arrays: a list of Python numbers costs
    several times their memory. Dicts, lists and tuples are converted item by item.

    >>> json_ready({"n": np.int64(3), "rows": np.arange(3)})
    {'n': 3, 'rows': [0, 1, 2]}
    """
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= list_limit else value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: json_ready(v, list_limit) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v, list_limit) for v in value]
    return value


def present_json_ready(workload: Workload, raw: Any) -> Any:
    """The default reported value: the computed result through :func:`json_ready`."""
    return json_ready(raw)


def _changed(values: np.ndarray) -> np.ndarray:
    """Every value made different: booleans flipped, numbers moved by 1 + their size."""
    if values.dtype == bool:
        return ~values
    moved = values + 1 + np.abs(values)
    if values.dtype.kind in "fc":
        moved = np.where(np.isfinite(values), moved, 0)
    return moved.astype(values.dtype)


def _change_every_tenth_row(raw: Any) -> np.ndarray:
    result = np.array(raw, copy=True)
    if result.ndim == 0:
        return _changed(result)
    result[::10] = _changed(result[::10])
    return result


def every_tenth_row_changed() -> Mutation:
    """The default mutation: rows 0, 10, 20, ... of the result each changed (+1 + |value|).

    Rows a tenth apart fall in every row block of ten rows or more, and in at least a tenth of
    the row blocks of any layout: :func:`~daskgpu.toolkit.checks.rows_recomputed` catches it
    always at ``full``, and at ``fast`` with the probability its detail states (99.9 % for a
    fault in a tenth of the row blocks; always where every row block holds ten rows or more).
    The failed check names a row (``row 10: ...``).
    """
    return Mutation("every tenth row changed", _change_every_tenth_row, r"row [0-9]+")


# --------------------------------------------------------------------------- the decorator


def named_like(prepare: Callable, build: Callable) -> None:
    """Give the generated ``prepare`` the module, name and docstring of the user's ``build``.

    The registry tells a definition run again (a notebook cell) from another module claiming
    the name by the function's module and name: those of ``build``.
    """
    prepare.__module__, prepare.__qualname__ = build.__module__, build.__qualname__
    prepare.__name__, prepare.__doc__ = build.__name__, build.__doc__


def one_check(check) -> Callable[..., Verification]:
    """``check`` as one ``verify``: a callable as it is, a sequence through ``all_of``."""
    if callable(check):
        return check
    if isinstance(check, Sequence) and all(callable(c) for c in check):
        return checks.all_of(check)
    raise TypeError("check: give verify(workload, raw, depth), or a list of them "
                    "(daskgpu.checks.rows_recomputed(reference), ...)")


def _refuse_bad_definition(name, params, shape, dtype, dtypes, distribution) -> None:
    clash = sorted({p.name for p in params} & set(STANDARD_PARAMS))
    if clash:
        raise ValueError(f"{name}: parameter {', '.join(clash)} is one array_pipeline gives "
                         f"every pipeline ({', '.join(STANDARD_PARAMS)}); choose another name")
    if dtype not in dtypes:
        raise ValueError(f"{name}: dtype {dtype!r} is not among dtypes {dtypes}")
    if distribution not in synthetic.DISTRIBUTIONS:
        raise ValueError(f"{name}: distribution {distribution!r}; choose one of "
                         f"{', '.join(synthetic.DISTRIBUTIONS)}")
    array_shape(len(shape))(shape)  # positive sizes


def array_pipeline(
    name: str,
    summary: str,
    *,
    check: Callable[..., Verification] | Sequence[Callable[..., Verification]],
    params: Sequence[Param] = (),
    shape: tuple[int, ...] = (3000, 3000),
    dtype: str = "float64",
    dtypes: Sequence[str] = ("float32", "float64"),
    distribution: str = "uniform",
    mutations: Sequence[Mutation] | None = None,
    present: Callable[[Workload, Any], Any] | None = None,
    baseline: Callable[[registry.Resolved], tuple[float, Any]] | None = None,
    warm_up: Callable[[str], None] | None = None,
) -> Callable[[Callable[..., Any]], registry.Pipeline]:
    """Register the decorated ``build(data, **params)`` as a pipeline over one array.

    ``build`` receives the data as a ready, lazy Dask array (random, or the ``--input``'s
    values), and the pipeline's own parameters as keywords; it returns the lazy result (a Dask
    array, or any Dask collection). Everything else is done here: the pipeline gets the
    standard parameters after its own,

    - ``--shape`` (default ``shape``), ``--dtype`` (one of ``dtypes``) and ``--seed`` (default:
      a fresh one, drawn and reported) of random data, drawn on the workers block by block
      (:func:`daskgpu.data.synthetic.random_array` with ``distribution``);
    - ``--chunks``: ``auto`` (sized for the device) or block sizes;
    - ``--input``: a ``.npy`` file or Zarr array instead (its shape and dtype are the data's;
      it must have as many axes as ``shape`` and one of ``dtypes``);

    and before any cluster starts, in one line (exit code 2 on the command line): options of
    random data given with an ``--input``, a missing or malformed input, and a layout no
    cluster can run (more than a million blocks, or a block beyond any worker's memory). The
    workload's elements, bytes (generated or read) and description (source, shape, chunks,
    blocks, dtype, seed) are filled in.

    Parameters
    ----------
    name, summary : str
        As for :func:`daskgpu.pipeline`.
    check : callable or sequence of callables
        ``verify(workload, raw, depth) -> Verification``: the answer check, usually from
        :mod:`daskgpu.toolkit.checks` (:func:`~daskgpu.toolkit.checks.rows_recomputed`);
        several are all run (:func:`~daskgpu.toolkit.checks.all_of`). It reads the data's
        description from ``workload.context["array"]`` (:class:`ArrayData`) and the
        pipeline's parameters from ``workload.context["params"]``.
    params : sequence of Param
        The pipeline's own parameters, given to ``build`` (and to the check helpers'
        functions) as keywords. None may be called shape, chunks, dtype, seed or input.
    shape : tuple of int
        The default shape of random data; its length is the data's number of axes.
    dtype : str
        The default element type of random data, one of ``dtypes``.
    dtypes : sequence of str
        The element types ``build`` handles (random data's choices, and an input's allowed
        types).
    distribution : {"uniform", "normal"}
        Random data: uniform on [0, 1), or standard normal.
    mutations : sequence of Mutation, optional
        Alterations of the computed result the check must catch. Default:
        :func:`every_tenth_row_changed`, for a result with one row per data row checked by
        :func:`~daskgpu.toolkit.checks.rows_recomputed`; give your own for other results.
    present : callable, optional
        ``present(workload, raw) -> value``. Default: :func:`present_json_ready`, NumPy
        scalars to Python numbers and arrays of at most :data:`LIST_LIMIT` values to lists
        (larger ones stay NumPy arrays).
    baseline, warm_up : callable, optional
        As for :func:`daskgpu.pipeline` (``baseline(resolved)`` reads ``resolved.values`` and
        ``resolved.inputs["input"]``).

    Returns
    -------
    callable
        A decorator returning the registered :class:`~daskgpu.toolkit.registry.Pipeline`.

    Notes
    -----
    ``data``'s blocks are the workers' arrays: NumPy on CPU workers, CuPy on GPU workers. A
    ``numba.njit`` kernel takes NumPy arrays only: on GPU workers its tasks fail (one line,
    exit code 3) unless the kernel dispatches CuPy blocks to a CUDA kernel itself.
    """
    dtypes = tuple(dtypes)
    shape = tuple(shape)
    _refuse_bad_definition(name, params, shape, dtype, dtypes, distribution)
    verify = one_check(check)
    every = (*params, *_standard_params(shape, dtype, dtypes))
    own = tuple(p.name for p in params)
    chosen_mutations = (every_tenth_row_changed(),) if mutations is None else tuple(mutations)

    def register(build: Callable[..., Any]) -> registry.Pipeline:
        def prepare(resolved: registry.Resolved) -> Workload:
            data, array, described = _data(resolved, distribution)
            user = {key: resolved[key] for key in own}
            nbytes = math.prod(array.shape) * np.dtype(array.dtype).itemsize
            return Workload(
                collection=build(data, **user),
                elements=math.prod(array.shape),
                nbytes=nbytes,
                bytes_are="generated" if array.source is None else "read",
                description={**described, "shape": list(array.shape),
                             "chunks": list(data.chunksize), "blocks": data.npartitions,
                             "dtype": array.dtype},
                context={"array": array, "params": user,
                         "input": resolved.inputs.get("input")},
                present=present or present_json_ready,
            )

        named_like(prepare, build)
        return registry.pipeline(
            name, summary, every, verify,
            settle=_settler(name, every, len(shape), dtypes),
            baseline=baseline, mutations=chosen_mutations, warm_up=warm_up,
        )(prepare)

    return register


def _data(resolved: registry.Resolved, distribution: str):
    """The run's lazy data, its :class:`ArrayData`, and what a report shows of its source."""
    backend = resolved.backend
    library = backend.array_library
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        block = chunking.resolve_chunks(resolved["chunks"], source.shape,
                                        source.dtype.itemsize, backend)
        data = array_input.to_dask(source, block, backend)
        array = ArrayData(source.shape, data.chunks, source.dtype.name, library,
                          source=source.path, source_kind=source.kind)
        return data, array, {"source": source.path, "format": source.kind,
                             **array_input.rechunking(source, block)}
    shape, dtype, seed = resolved["shape"], np.dtype(resolved["dtype"]), resolved["seed"]
    block = chunking.resolve_chunks(resolved["chunks"], shape, dtype.itemsize, backend)
    data = synthetic.random_array(shape, block, dtype.name, seed, backend, distribution)
    array = ArrayData(shape, data.chunks, dtype.name, library, seed, distribution)
    what = "uniform [0,1)" if distribution == "uniform" else "standard normal"
    return data, array, {"source": f"random {what}", "seed": seed}
