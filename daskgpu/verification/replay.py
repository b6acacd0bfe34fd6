"""Replay: a part of a run recomputed by an independent path, where its data lives.

A check recomputes the parts its plan names from the data's definition, never through the run's
graph: random data drawn again from the documented per-block scheme (:func:`stream`,
:func:`redraw`, :func:`uniform_at`), an input read again with NumPy's or Zarr's own readers
(:func:`stored`, :func:`read`). :func:`on_workers` runs such recomputations as Dask tasks on the
run's cluster (a check runs with it as Dask's scheduler), so only their small results travel;
:func:`summed_on_workers` adds larger ones up there first (:func:`combined`).

The per-block scheme, which :mod:`daskgpu.data.synthetic` documents: block ``b`` (row-major) of
data with seed ``s`` is drawn by :func:`daskgpu.toolkit.numeric.generator` of
``SeedSequence(s, spawn_key=(b,))``. It is derived here again, apart from the run's code, so a
wrong seed or block number there shows here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator


def on_workers(function: Callable, calls: Iterable[tuple]) -> list:
    """``function(*args)`` for each ``args`` of ``calls``, as Dask tasks computed together.

    On the scheduler in use (a run's check: its cluster). Arguments that are Dask collections
    or delayed values are computed where they live and passed in.
    """
    tasks = [dask.delayed(function, pure=True)(*args) for args in calls]
    return list(dask.compute(*tasks)) if tasks else []


def summed_on_workers(function: Callable, calls: Iterable[tuple], kept=()) -> tuple:
    """``function(*args)`` for each ``args`` of ``calls``, each giving ``(part, extra)``, summed.

    The parts (arrays of one shape: a block's counts, say) are added up on the workers
    (:func:`combined`), so that only their total reaches the client, with the parts of the
    calls ``kept`` numbers and every call's (small) extra: ``(total, kept parts, extras)``.
    Where one result each is small, :func:`on_workers` is simpler.
    """
    parts = [dask.delayed(function, pure=True, nout=2)(*args) for args in calls]
    total = combined([part[0] for part in parts], added)
    return dask.compute(total, [parts[i][0] for i in kept], [part[1] for part in parts])


def combined(parts: list, combine: Callable, *args, width: int = 8):
    """Delayed ``parts`` combined on the workers in a tree, ``width`` at a time: one delayed.

    ``combine(*group, *args)`` makes one of a group of parts (a lone part is passed on as it
    is): :func:`added` to add them up, or a pairwise update (``width=2``) of statistics that do
    not simply add.
    """
    level = list(parts)
    while len(level) > 1:
        groups = [level[i:i + width] for i in range(0, len(level), width)]
        level = [dask.delayed(combine, pure=True)(*group, *args) if len(group) > 1 else group[0]
                 for group in groups]
    return level[0]


def added(*parts):
    """Parts computed on the workers added up: arrays as they are, dicts key by key.

    >>> added({"n": 1, "s": 2.0}, {"n": 3, "s": 0.5})
    {'n': 4, 's': 2.5}
    """
    if isinstance(parts[0], dict):
        return {key: sum(part[key] for part in parts) for key in parts[0]}
    return sum(parts)


def stored(path: str, kind: str):
    """An input opened for reading: ``numpy.load`` memory-mapped (``.npy``), or Zarr."""
    if kind == "zarr":
        import zarr

        return zarr.open_array(path, mode="r")
    return np.load(path, mmap_mode="r")


def read(path: str, kind: str, region: tuple[slice, ...], dtype=np.float64) -> np.ndarray:
    """``region`` of an input file, read again with its format's own reader, as ``dtype``."""
    return np.asarray(stored(path, kind)[tuple(region)], dtype=dtype)


def region(source, where: tuple, dtype=np.float64):
    """``where`` of any input, read again apart from the run's graph, as ``dtype``; lazy.

    A file (a ``.npy`` or Zarr :class:`~daskgpu.data.array_input.ArraySource`): a task that
    reads it with :func:`read` where it runs. An array in memory: read again apart from the
    run's graph (:func:`daskgpu.data.memory_input.region`: a Dask array's region is a graph of
    the user's own blocks; a NumPy or CuPy array's, its blocks as the workers received them).
    Pass it as an argument of the function :func:`on_workers` runs: it arrives computed.
    """
    if getattr(source, "in_memory", False):
        from daskgpu.data import memory_input

        return memory_input.region(source.reader, where, dtype, source.sent)
    return dask.delayed(read, pure=True)(source.path, source.kind, tuple(where), dtype)


def stream(seed: int, *key: int, library: str = "numpy"):
    """The generator of ``SeedSequence(seed, spawn_key=key)``: block ``b``'s is ``stream(s, b)``.

    The documented scheme of every seeded draw a run makes (blocks, shards, a model's own
    streams): a check that draws the same data again takes its generator from here.
    """
    sequence = np.random.SeedSequence(int(seed), spawn_key=tuple(int(k) for k in key))
    return generator(library, sequence)


def redraw(seed: int, block: int, shape, dtype, library: str = "numpy",
           distribution: str = "uniform"):
    """Block ``block`` of random data drawn again whole: uniform [0, 1) or standard normal."""
    rng = stream(seed, block, library=library)
    if distribution == "normal":
        return rng.standard_normal(tuple(shape), dtype=np.dtype(dtype).name)
    return rng.random(tuple(shape), dtype=np.dtype(dtype).name)


def uniform_at(seed: int, block: int, first: int, count: int, dtype,
               out: np.ndarray | None = None) -> np.ndarray:
    """Values ``first`` to ``first + count`` of block ``block``'s uniform [0, 1) values.

    NumPy's ``default_rng`` is PCG64; ``random`` takes one 64-bit output for a float64 value and
    half of one for a float32 value (the other half kept for the next), so the generator
    advanced by the words before value ``first`` draws from there, and only from there.
    ``first`` must be even for float32.
    """
    dtype = np.dtype(dtype)
    per_word = 2 if dtype == np.float32 else 1
    if first % per_word:
        raise ValueError(f"first={first}: float32 values are drawn two a word, start at an "
                         "even value")
    bits = np.random.PCG64(np.random.SeedSequence(int(seed), spawn_key=(int(block),)))
    bits.advance(first // per_word)
    values = np.empty(count, dtype=dtype) if out is None else out[:count]
    np.random.Generator(bits).random(out=values, dtype=dtype.name)
    return values


def uniform_rows(seed: int, key: tuple, rows) -> np.ndarray:
    """The uniform [0, 1) float64 draws at positions ``rows`` (increasing) of stream ``key``.

    ``stream(seed, *key)`` draws one value a 64-bit word, so PCG64 is advanced over the
    positions between runs of consecutive ones: a few rows of a long stream cost a few draws.
    """
    rows = np.asarray(rows, dtype=np.int64)
    rng, out, at = stream(seed, *key), np.empty(len(rows)), 0  # at: the draws taken
    for run in np.split(np.arange(len(rows)), np.flatnonzero(np.diff(rows) > 1) + 1):
        if len(run):
            first, last = int(rows[run[0]]), int(rows[run[-1]])
            rng.bit_generator.advance(first - at)
            out[run] = rng.random(last - first + 1)[rows[run] - first]
            at = last + 1
    return out
