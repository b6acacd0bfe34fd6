"""Array inputs (``.npy`` files, Zarr arrays, arrays in memory), checked up front, read by block.

A ``.npy`` file is memory-mapped by each task for its own block, which is a read-only view of
the mapping (never a copy, never the whole file loaded); its header is validated in the client
(magic, dtype, size against the header), so a truncated file or one holding Python objects is
refused before any work starts. Nothing here unpickles.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import dask.array as da
import numpy as np
from dask.base import tokenize

from daskgpu.data import memory_input
from daskgpu.errors import InputFileError, MissingInputError, printable

_NUMERIC_KINDS = "biuf"
_HOW = "give a .npy file (numpy.save) or a Zarr array directory"


@dataclass(frozen=True)
class NpyBlocks:
    """A picklable, array-like view of a ``.npy`` file; each read maps the file afresh."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int
    fortran_order: bool

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    def __getitem__(self, key):
        mapped = np.memmap(
            self.path,
            dtype=self.dtype,
            mode="r",
            offset=self.offset,
            shape=self.shape,
            order="F" if self.fortran_order else "C",
        )
        # A view of the mapped pages, not a copy: a task reads its block straight from the
        # page cache (the mapping lives as long as the view does).
        return mapped[key].view(np.ndarray)


@dataclass(frozen=True)
class ArraySource:
    """A validated array input: where it is, and what it holds."""

    path: str  # for an array in memory: its label (type, dtype, shape)
    kind: str  # "npy", "zarr", or "memory"
    shape: tuple[int, ...]
    dtype: np.dtype
    reader: object  # NpyBlocks, a zarr array, or the array in memory

    @property
    def sent(self) -> list:
        """An array in memory's blocks sent to the workers (Dask arrays on scattered futures).

        Held here as long as the run holds its inputs, for a graph built on them holds only
        their keys. Not a field: a copy (``dataclasses.replace``) or a pickle of the source
        carries none, so that no task is handed the data through it.
        """
        return self.__dict__.setdefault("_sent", [])

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_sent"}

    @property
    def in_memory(self) -> bool:
        """Whether the input is an array in memory (NumPy, CuPy or Dask), not a file."""
        return self.kind == "memory"

    @property
    def nbytes(self) -> int:
        """Bytes of data."""
        return math.prod(self.shape) * self.dtype.itemsize


def _is_zarr(path: str) -> bool:
    markers = (".zarray", "zarr.json")
    return path.rstrip("/").endswith(".zarr") or any(
        os.path.exists(os.path.join(path, m)) for m in markers
    )


def open_array(path, what: str = "--input", dtypes: tuple[str, ...] = ()) -> ArraySource:
    """Validate and open an array input.

    Parameters
    ----------
    path : str or array
        A ``.npy`` file or a Zarr array directory; or a NumPy, CuPy or Dask array in memory
        (see :mod:`daskgpu.data.memory_input`).
    what : str
        How the error line names the input (its option).
    dtypes : tuple of str
        The element types the caller can use (``("float32", "float64")``); any real numeric
        one when empty. Complex values are refused unless their type is named here.

    Raises
    ------
    InputFileError
        One line naming the problem: missing (MissingInputError, a FileNotFoundError too), a
        directory, not .npy/Zarr, truncated, Python objects, not numeric (or not one of
        ``dtypes``), empty.
    InputTypeError
        Neither a path nor an array.
    """
    try:
        if not isinstance(path, (str, os.PathLike)):
            return _open_object(memory_input.checked(path, what), what, dtypes)
        return _open_array(os.fspath(path), what, dtypes)
    except InputFileError as exc:
        raise type(exc)(printable(str(exc))) from None


def _open_object(array, what: str, dtypes: tuple[str, ...]) -> ArraySource:
    """An array in memory, checked as a file's header is."""
    name, dtype, shape = memory_input.label(array), np.dtype(array.dtype), tuple(array.shape)
    if not dtype.hasobject:
        _check_wanted(dtype, dtypes, name, what, convert="x")
    _check_dtype(dtype, name, what, dtypes)
    _check_shape(shape, name, what)
    return ArraySource(name, "memory", tuple(int(n) for n in shape), dtype, array)


def open_matrix(path: str, what: str = "--input", dtypes: tuple[str, ...] = (),
                rows_by: str = "") -> ArraySource:
    """:func:`open_array`, refusing an array without exactly 2 axes.

    ``rows_by`` says what the axes hold, for the error line (``"samples x features"``).

    Raises
    ------
    InputFileError
        As :func:`open_array`; or naming the shape found and that a matrix is needed.
    """
    source = open_array(path, what, dtypes)
    if len(source.shape) != 2:
        of = f" of {rows_by}" if rows_by else ""
        raise InputFileError(printable(f"{what} {source.path}: holds an array of shape "
                                       f"{source.shape}; a matrix{of} (2 axes) is needed"))
    return source


def _open_array(path: str, what: str, dtypes: tuple[str, ...]) -> ArraySource:
    if not os.path.exists(path):
        raise MissingInputError(f"{what} {path}: no such file or directory; {_HOW}")
    if os.path.isdir(path) and not _is_zarr(path):
        raise InputFileError(f"{what} {path}: is a directory, not a Zarr array; {_HOW}")
    opener = _open_zarr if _is_zarr(path) else _open_npy
    return opener(path, what, dtypes)


def _check_dtype(dtype: np.dtype, path: str, what: str, dtypes: tuple[str, ...] = ()) -> None:
    if dtype.hasobject:
        raise InputFileError(
            f"{what} {path}: holds Python objects, which daskgpu never unpickles; "
            "save a numeric array"
        )
    # Complex values only where the caller names a complex type among those it can use.
    if dtype.kind not in _NUMERIC_KINDS and dtype.name not in dtypes:
        raise InputFileError(f"{what} {path}: holds {dtype} values; a numeric array is needed")


def _check_wanted(dtype: np.dtype, dtypes: tuple[str, ...], path: str, what: str,
                  convert: str = "numpy: a") -> None:
    if dtypes and dtype.name not in dtypes:
        raise InputFileError(
            f"{what} {path}: holds {dtype} values; a numeric array of {' or '.join(dtypes)} is "
            f"needed (convert it with {convert}.astype('{dtypes[-1]}'))"
        )


def _check_shape(shape: tuple[int, ...], path: str, what: str) -> None:
    if not shape:
        raise InputFileError(f"{what} {path}: holds a single scalar; an array is needed")
    if any(n < 0 for n in shape):
        raise InputFileError(f"{what} {path}: its header gives a negative shape {shape}")
    if math.prod(shape) == 0:
        raise InputFileError(f"{what} {path}: the array is empty (shape {shape})")


def _open_npy(path: str, what: str, dtypes: tuple[str, ...] = ()) -> ArraySource:
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = {
                (1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0,
            }.get(version)
            if read_header is None:
                raise ValueError(f"unsupported .npy version {version}")
            shape, fortran_order, dtype = read_header(f, max_header_size=100_000)
            offset = f.tell()
    except (ValueError, OSError, SyntaxError) as exc:
        raise InputFileError(f"{what} {path}: not a valid .npy file ({exc}); {_HOW}") from None
    if not dtype.hasobject:
        _check_wanted(dtype, dtypes, path, what)
    _check_dtype(dtype, path, what, dtypes)
    if any(n < 0 for n in shape):
        _check_shape(tuple(shape), path, what)
    expected = math.prod(shape) * dtype.itemsize
    actual = os.path.getsize(path) - offset
    if actual < expected:
        raise InputFileError(
            f"{what} {path}: truncated: its header promises {expected} bytes of data, "
            f"the file holds {actual}"
        )
    _check_shape(tuple(shape), path, what)
    reader = NpyBlocks(path, tuple(shape), dtype, offset, bool(fortran_order))
    return ArraySource(path, "npy", tuple(shape), dtype, reader)


def _open_zarr(path: str, what: str, dtypes: tuple[str, ...] = ()) -> ArraySource:
    import zarr

    try:
        arr = zarr.open_array(path, mode="r")
        dtype = np.dtype(arr.dtype)
    except Exception as exc:  # zarr raises many types for a bad store or an unknown dtype
        raise InputFileError(f"{what} {path}: not a readable Zarr array ({exc}); {_HOW}") from None
    if not dtype.hasobject:
        _check_wanted(dtype, dtypes, path, what)
    _check_dtype(dtype, path, what, dtypes)
    _check_shape(tuple(arr.shape), path, what)
    return ArraySource(path, "zarr", tuple(arr.shape), dtype, arr)


def to_dask(source: ArraySource, chunks: tuple[int, ...], backend) -> da.Array:
    """A lazy Dask array over ``source`` with ``chunks``, in ``backend``'s memory.

    An array in memory: see :func:`daskgpu.data.memory_input.to_dask` (moved once, or used as
    the Dask graph it is, rechunked where its blocks are not ``chunks``).
    """
    if source.in_memory:
        return memory_input.to_dask(source.reader, chunks, backend, source.sent)
    if source.kind == "zarr":
        arr = da.from_zarr(source.path, chunks=chunks)
    else:
        name = "npy-" + tokenize(source.path, os.path.getmtime(source.path), source.shape, chunks)
        arr = da.from_array(
            source.reader, chunks=chunks, name=name, asarray=False, inline_array=True,
            meta=np.empty((0,) * len(source.shape), dtype=source.dtype),
        )
    to_device = backend.to_device()
    if to_device is not None:
        arr = arr.map_blocks(to_device, dtype=arr.dtype, meta=arr._meta)
    return arr


def rechunking(source: ArraySource, chunks: tuple) -> dict:
    """``{"rechunked": what was done}`` where a Dask array's blocks become ``chunks``; else {}.

    For a workload's reported data: the run says so where it does not use the user's blocks.
    """
    note = memory_input.rechunked(source.reader, chunks) if source.in_memory else None
    return {"rechunked": note} if note else {}


def blockwise_sums(source: ArraySource, block_bytes: int = 64 * 2**20) -> tuple[float, float, int]:
    """Sum, sum of absolute values, and count of ``source``, in float64 with NumPy.

    An independent check of a Dask result: reads the data in row blocks of about
    ``block_bytes`` in this process.
    """
    reader = source.reader
    rows = source.shape[0] if source.shape else 1
    row_bytes = max(1, source.nbytes // max(1, rows))
    step = max(1, block_bytes // row_bytes)
    total = absolute = 0.0
    for start in range(0, rows, step):
        if source.in_memory:
            block = memory_input.region(reader, (slice(start, start + step),))
            block = block.compute() if isinstance(block, da.Array) else block
        else:
            block = np.asarray(reader[start : start + step], dtype=np.float64)
        total += float(block.sum())
        absolute += float(np.abs(block).sum())
    return total, absolute, math.prod(source.shape)
