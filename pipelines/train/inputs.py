"""train-pipeline's own data: a feature array (``--input``) and its labels (``--labels``).

Each is a ``.npy`` file or Zarr array or, from Python, a NumPy, CuPy or Dask array (one of
each kind works too), opened and checked in the client before any cluster starts
(:func:`open_inputs`): features ``samples x features`` of float32 or float64, labels one
integer per row in ``0 .. classes - 1`` (a Dask array's range is checked on the workers, as
the shards are made: :func:`label_range`). The held-out test rows are a seeded share of the
rows (:func:`held_out`: ``input_held_out(rows)`` of them, drawn without replacement by
``Generator.choice`` of ``SeedSequence(seed, spawn_key=(HELD_OUT,))``; none with
``--validation-fraction 0``); the others, in row order, are the training rows, cut into
shards of consecutive training rows. Each shard holds one contiguous range of the rows and
keeps the test rows of that range apart, as its test shard: a file's range read on its worker
(:func:`make_input_shard`), an array in memory's one block of the object's own graph in those
ranges (:func:`memory_blocks`: a NumPy array sent once, a Dask array used as the graph it is,
rechunked where its blocks are not the ranges), split where it will stay
(:func:`make_memory_shard`).
"""

from __future__ import annotations

import importlib

import dask
import dask.array as da
import numpy as np

from daskgpu.data import array_input, memory_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.params import refuse_with_input
from pipelines.train.shared import HELD_OUT, input_held_out

FEATURE_DTYPES = ("float32", "float64")
LABEL_BLOCK = 1 << 22  # labels read at once while checking their range
# Options that describe generated data: refused with --input.
GENERATED_ONLY = ("samples", "features")


def open_inputs(values: dict, default_dtype: str, params=(), backend=None) -> dict:
    """Open and check ``--input`` and ``--labels``; fill ``values`` from them.

    ``samples`` and ``features`` stay ``None`` (the inputs give them), ``dtype`` is set to
    the features', and ``input`` and ``labels`` to their names (an array in memory: its
    label, never the object, which stays in the sources returned).

    Raises
    ------
    ParameterError
        One of the two without the other; options for generated data; a mismatched dtype.
    InputFileError
        A missing or unreadable file; features not 2-D or not float; labels not 1-D, not
        integers, of another length, or out of ``0 .. classes - 1``; CuPy data for CPU
        workers.
    InputTypeError
        Neither a path nor an array.
    """
    given = {o: values[k] for o, k in (("--input", "input"), ("--labels", "labels"))}
    missing = [o for o, v in given.items() if v is None]
    if missing:
        present = next(o for o in given if o not in missing)
        raise ParameterError(f"{present} without {missing[0]}: give the features (--input) "
                             "and their class labels (--labels) together")
    refuse_with_input(params, values, GENERATED_ONLY)
    x = array_input.open_matrix(values["input"], "--input", FEATURE_DTYPES, "samples x features")
    if values["dtype"] not in (default_dtype, x.dtype.name):
        raise ParameterError(f"--dtype {values['dtype']}: the input holds {x.dtype}; drop "
                             "--dtype (the input's own type is used)")
    y = array_input.open_array(values["labels"], "--labels")
    _check_labels(y, x, values["classes"])
    for option, source in (("--input", x), ("--labels", y)):
        if (source.in_memory and backend is not None and not backend.is_gpu
                and memory_input.library(source.reader) == "cupy"):
            raise InputFileError(f"{option} {source.path}: CuPy data, and the workers are CPU "
                                 "workers; run on GPU workers, or give cupy.asnumpy(x)")
    values["dtype"] = x.dtype.name
    values["input"], values["labels"] = x.path, y.path
    return {"input": x, "labels": y}


def _check_labels(y, x, classes: int) -> None:
    if len(y.shape) != 1:
        raise InputFileError(f"--labels {y.path}: holds an array of shape {y.shape}; one "
                             "label per row (1 axis) is needed")
    if y.dtype.kind not in "iu":
        raise InputFileError(f"--labels {y.path}: holds {y.dtype} values; integer class "
                             "labels are needed (convert them with numpy: a.astype('int64'))")
    if y.shape[0] != x.shape[0]:
        raise InputFileError(f"--labels {y.path}: {y.shape[0]} labels for the {x.shape[0]} "
                             f"rows of --input {x.path}; give one label per row")
    if x.shape[0] < 2:
        raise InputFileError(f"--input {x.path}: a single row; at least 2 are needed (one "
                             "to train on, one held out)")
    if isinstance(y.reader, da.Array):
        return  # on the workers, as the shards are made (label_range): never gathered here
    if y.in_memory:
        low, high = int(y.reader.min()), int(y.reader.max())
    else:
        low, high = 0, 0
        for start in range(0, y.shape[0], LABEL_BLOCK):
            block = np.asarray(y.reader[start:start + LABEL_BLOCK])
            low, high = min(low, int(block.min())), max(high, int(block.max()))
    check_label_range(y.path, low, high, classes)


def check_label_range(name: str, low: int, high: int, classes: int) -> None:
    """Refuse labels from ``low`` to ``high`` outside ``0 .. classes - 1``, in one line.

    Raises
    ------
    InputFileError
        Naming the range found and the ``--classes`` that would hold it.
    """
    if low < 0 or high >= classes:
        raise InputFileError(f"--labels {name}: labels from {low} to {high}; with --classes "
                             f"{classes} they must lie in 0..{classes - 1} (give --classes "
                             f"{max(high + 1, 2)} or more)")


def held_out(seed: int, rows: int, fraction: float | None = None) -> np.ndarray:
    """The sorted held-out test rows of an input of ``rows`` rows (``--validation-fraction``)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(HELD_OUT,)))
    return np.sort(rng.choice(rows, size=input_held_out(rows, fraction), replace=False))


def file_ranges(rows: int, test: np.ndarray, sizes) -> list[tuple[int, int, np.ndarray]]:
    """Per training shard: the file rows ``[start, stop)`` it reads, and its test rows there.

    Shard ``s`` holds training rows ``sum(sizes[:s])`` onwards; training row ``r`` is file
    row ``r`` plus the held-out rows before it. Consecutive ranges meet, so every test row
    falls in one of them.
    """
    before = test - np.arange(len(test))  # training rows ahead of each held-out row
    firsts = np.cumsum((0, *sizes[:-1]))
    starts = firsts + np.searchsorted(before, firsts, side="right")
    starts[0] = 0
    stops = [*starts[1:], rows]
    return [(int(a), int(b), test[(test >= a) & (test < b)] - a)
            for a, b in zip(starts, stops, strict=True)]


def reader_of(source):
    """What a worker reads ``source`` with (picklable): its ``.npy`` view, or its path."""
    return source.reader if source.kind == "npy" else source.path


def file_block(source, start: int, stop: int):
    """Rows ``[start, stop)`` of a file, read lazily (``dask.delayed``) where a task runs."""
    return dask.delayed(_rows, pure=True)(reader_of(source), start, stop)


def _rows(reader, start: int, stop: int) -> np.ndarray:
    if isinstance(reader, str):
        import zarr

        reader = zarr.open_array(reader, mode="r")
    return np.asarray(reader[start:stop])


def make_input_shard(features, labels, start: int, stop: int, test: np.ndarray, index: int,
                     dtype: str, library: str) -> dict:
    """File rows ``[start, stop)`` read where they will stay: training rows and test rows.

    ``test`` are the held-out rows of the range, counted from ``start``.
    """
    return _split(importlib.import_module(library), _rows(features, start, stop),
                  _rows(labels, start, stop), test, index, dtype)


def _split(xp, x, y, test: np.ndarray, index: int, dtype: str) -> dict:
    """A range's rows as a shard: its training rows, and its held-out ``test`` rows apart."""
    keep = np.ones(x.shape[0], dtype=bool)
    keep[test] = False
    if xp is not np:  # on the device (a block of an array in hand may be there already)
        x, y, keep, test = (xp.asarray(a) for a in (x, y, keep, test))
    y = y.astype(np.int32)
    return {"x": xp.asarray(x[keep], dtype=dtype), "y": xp.asarray(y[keep]), "best": 0.0,
            "index": index, "test_x": xp.asarray(x[test], dtype=dtype),
            "test_y": xp.asarray(y[test])}


def memory_blocks(source, ranges, backend) -> list:
    """An array in memory as one lazy block (``dask.delayed``) per shard's range of rows.

    The blocks of :func:`daskgpu.data.array_input.to_dask` in the ranges' rows (all columns):
    tasks of the object's own graph, computed on the workers, in ``backend``'s memory.
    """
    array = array_input.to_dask(source, memory_chunks(source, ranges), backend)
    return list(array.to_delayed().ravel())


def memory_chunks(source, ranges) -> tuple:
    """The chunks of an array in memory's blocks: the shards' ranges of rows, all columns."""
    return (tuple(b - a for a, b, _ in ranges), *((n,) for n in source.shape[1:]))


def make_memory_shard(features, labels, test: np.ndarray, index: int, dtype: str,
                      library: str) -> dict:
    """A shard from its range's blocks of arrays in memory, split where it will stay."""
    return _split(importlib.import_module(library), features, labels, test, index, dtype)


def label_range(shard: dict) -> tuple[int, int]:
    """The least and the largest label a shard holds, training and held-out rows alike."""
    labels = [shard[key] for key in ("y", "test_y") if shard[key].shape[0]]
    return (min(int(y.min().item()) for y in labels), max(int(y.max().item()) for y in labels))


def held_out_part(shard: dict) -> dict:
    """The held-out rows a shard read, as a shard of their own."""
    return {"x": shard["test_x"], "y": shard["test_y"], "best": 0.0, "index": shard["index"]}


def load_initial(path: str, features: int, hidden: int | None, classes: int,
                 dtype: str) -> np.ndarray:
    """``--init-weights``: an ``.npz`` as ``--output`` writes it, as the run's start.

    ``W`` ``(features, classes)`` and ``b`` ``(classes,)``, or with ``--hidden`` ``W1``,
    ``b1``, ``W2``, ``b2``. Returns softmax regression's ``(features + 1, classes)`` weights
    (the bias as the last row) or a hidden-layer model's flat ones, in ``dtype``.

    Raises
    ------
    InputFileError
        A missing or unreadable file, other arrays, other shapes, values that are not
        finite.
    """
    what = f"--init-weights {path}"
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: np.asarray(stored[name]) for name in stored.files}
    except FileNotFoundError:
        raise InputFileError(f"{what}: no such file; give an .npz written by --output"
                             ) from None
    except (OSError, ValueError) as error:
        raise InputFileError(f"{what}: not an .npz of arrays NumPy can read "
                             f"({type(error).__name__}); give one written by --output") from None
    if hidden is None:
        shapes = {"W": (features, classes), "b": (classes,)}
    else:
        shapes = {"W1": (features, hidden), "b1": (hidden,), "W2": (hidden, classes),
                  "b2": (classes,)}
    if set(arrays) != set(shapes):
        model = ("softmax regression (W, b)" if hidden is None
                 else f"a hidden layer of {hidden} (W1, b1, W2, b2)")
        raise InputFileError(f"{what}: holds {', '.join(sorted(arrays)) or 'nothing'}; "
                             f"{model} needs {', '.join(shapes)}")
    for name, shape in shapes.items():
        array = arrays[name]
        if array.shape != shape:
            raise InputFileError(f"{what}: {name} of shape {array.shape}; {shape} is needed "
                                 f"(--features {features}, --classes {classes}"
                                 + ("" if hidden is None else f", --hidden {hidden}") + ")")
        if array.dtype.kind not in "fiu" or not np.all(np.isfinite(array)):
            raise InputFileError(f"{what}: {name} holds values that are not finite numbers")
    if hidden is None:
        return np.vstack([arrays["W"], arrays["b"][None]]).astype(dtype)
    return np.concatenate([np.vstack([arrays["W1"], arrays["b1"][None]]).reshape(-1),
                           np.vstack([arrays["W2"], arrays["b2"][None]]).reshape(-1)]
                          ).astype(dtype)
