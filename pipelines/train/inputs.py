"""train-pipeline's own data: a feature array (``--input``) and its labels (``--labels``).

Both are ``.npy`` files or Zarr arrays, opened and checked in the client before any cluster
starts (:func:`open_inputs`): features ``samples x features`` of float32 or float64, labels
one integer per row in ``0 .. classes - 1``. The held-out test rows are a seeded share of
the rows (:func:`held_out`: ``input_held_out(rows)`` of them, drawn without replacement by
``Generator.choice`` of ``SeedSequence(seed, spawn_key=(HELD_OUT,))``); the others, in file
order, are the training rows, cut into shards of consecutive training rows. Each shard reads
one contiguous range of the file on its worker (:func:`make_input_shard`) and keeps the test
rows of that range apart, as its test shard.
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu.data import array_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.params import refuse_with_input
from pipelines.train.shared import HELD_OUT, input_held_out

FEATURE_DTYPES = ("float32", "float64")
LABEL_BLOCK = 1 << 22  # labels read at once while checking their range
# Options that describe generated data: refused with --input.
GENERATED_ONLY = ("samples", "features")


def open_inputs(values: dict, default_dtype: str, params=()) -> dict:
    """Open and check ``--input`` and ``--labels``; fill ``values`` from them.

    ``samples`` and ``features`` stay ``None`` (the inputs give them) and ``dtype`` is set
    to the features'.

    Raises
    ------
    ParameterError
        One of the two without the other; options for generated data; a mismatched dtype.
    InputFileError
        A missing or unreadable file; features not 2-D or not float; labels not 1-D, not
        integers, of another length, or out of ``0 .. classes - 1``.
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
    values["dtype"] = x.dtype.name
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
    low, high = 0, 0
    for start in range(0, y.shape[0], LABEL_BLOCK):
        block = np.asarray(y.reader[start:start + LABEL_BLOCK])
        low, high = min(low, int(block.min())), max(high, int(block.max()))
    if low < 0 or high >= classes:
        raise InputFileError(f"--labels {y.path}: labels from {low} to {high}; with --classes "
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
    xp = importlib.import_module(library)
    x = _rows(features, start, stop)
    y = _rows(labels, start, stop).astype(np.int32)
    keep = np.ones(stop - start, dtype=bool)
    keep[test] = False
    return {"x": xp.asarray(x[keep], dtype=dtype), "y": xp.asarray(y[keep]), "best": 0.0,
            "index": index, "test_x": xp.asarray(x[test], dtype=dtype),
            "test_y": xp.asarray(y[test])}


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
