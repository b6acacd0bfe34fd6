"""Results written atomically: to a temporary name beside the target, then renamed.

A run that fails or is interrupted leaves no partial file, and an existing file is replaced
only by a complete one.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from daskgpu.toolkit.backends import to_host


def temporary_name(path: str) -> str:
    """A new temporary name beside ``path`` (hidden, unique), for writing it atomically."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.partial-{uuid.uuid4().hex[:8]}")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def commit(temporary: str, path: str) -> None:
    """Move a finished temporary file (or Zarr directory) to ``path``.

    A file replaces a file in one rename. ``os.replace`` cannot replace a directory (or a
    file with a directory), so an existing one is first renamed aside, and removed only once
    the new output is in place: ``path`` never holds a half-written or half-removed output.
    """
    if os.path.isdir(path) and not os.path.islink(path) or (
        os.path.isdir(temporary) and os.path.lexists(path)
    ):
        aside = temporary_name(path) + ".old"
        os.replace(path, aside)
        try:
            os.replace(temporary, path)
        except BaseException:
            os.replace(aside, path)  # put the old output back
            raise
        _remove(aside)
        return
    os.replace(temporary, path)


@contextlib.contextmanager
def atomic(path: str) -> Iterator[str]:
    """Yield a temporary path to write; on success it becomes ``path``, else it is removed."""
    temporary = temporary_name(path)
    try:
        yield temporary
        commit(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


#: Rows of a ``.csv`` table formatted and written at a time.
CSV_ROWS_AT_ONCE = 1 << 16


def save_table(path: str, columns: dict[str, np.ndarray], like: str | None = None) -> None:
    """Write equal-length columns as ``.csv`` (with a header) or ``.npy`` (a structured array).

    The format is ``like``'s suffix (the output ``path`` is a temporary for), else ``path``'s.
    A ``.csv`` holds each value as Python's ``repr`` writes it: the shortest text that reads
    back as the same float64 (float32 values widened) or integer.
    """
    names = list(columns)
    length = len(next(iter(columns.values())))
    with atomic(path) as temporary:
        if (like or path).lower().endswith(".csv"):
            with open(temporary, "w") as f:
                f.write(",".join(names) + "\n")
                for start in range(0, length, CSV_ROWS_AT_ONCE):
                    f.write(_csv_rows([columns[n][start:start + CSV_ROWS_AT_ONCE]
                                       for n in names]))
        else:
            table = np.empty(length, dtype=[(n, np.asarray(columns[n]).dtype) for n in names])
            for n in names:
                table[n] = columns[n]
            with open(temporary, "wb") as f:
                np.save(f, table)


def _csv_rows(columns: list) -> str:
    """Rows of ``columns`` (slices of equal length) as ``.csv`` lines, each ending in a newline."""
    texts = [map(repr, np.asarray(column).tolist()) for column in columns]
    return "".join(",".join(row) + "\n" for row in zip(*texts, strict=True))


@dataclass(frozen=True)
class NpyTarget:
    """A picklable ``da.store`` target writing blocks into an ``.npy`` file created up front."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __setitem__(self, key, value) -> None:
        mapped = np.lib.format.open_memmap(self.path, mode="r+")
        mapped[key] = to_host(value)
        mapped.flush()


def store_array(arr, path: str):
    """A lazy write of dask array ``arr`` to a temporary ``.npy`` or Zarr beside ``path``.

    Returns ``(delayed_write, temporary)``; compute the write, then :func:`commit` the
    temporary to ``path`` (or remove it with :func:`discard`).
    """
    import dask.array as da

    temporary = temporary_name(path)
    if path.lower().endswith(".zarr"):
        write = da.to_zarr(arr.map_blocks(to_host, meta=np.empty((0,) * arr.ndim, arr.dtype)),
                           temporary, compute=False)
    else:
        np.lib.format.open_memmap(temporary, mode="w+", dtype=arr.dtype, shape=arr.shape)
        target = NpyTarget(temporary, tuple(arr.shape), np.dtype(arr.dtype))
        write = da.store(arr, target, lock=False, compute=False)
    return write, temporary


def discard(temporary: str) -> None:
    """Remove an unfinished temporary output."""
    _remove(temporary)


@contextlib.contextmanager
def discarding_new_temporaries(paths) -> Iterator[None]:
    """Remove the output temporaries begun inside the block if it fails (or is interrupted).

    A pipeline may begin writing an output while its graph is built (a ``.npy`` file created up
    front), before the run knows the workload's outputs; an interrupt then must not leave the
    temporary behind.
    """
    def temporaries(path: str) -> set[str]:
        folder, name = os.path.split(os.path.abspath(path))
        return set(glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.partial-*")))

    paths = [p for p in paths if p]
    before = {p: temporaries(p) for p in paths}
    try:
        yield
    except BaseException:
        for p in paths:
            for temporary in temporaries(p) - before[p]:
                discard(temporary)
        raise
