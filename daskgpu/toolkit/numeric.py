"""Numeric helpers that pipelines and their checks share.

Seeded generators of NumPy or CuPy from a :class:`numpy.random.SeedSequence`, the first index of
every block, rows of every shard, and the unit roundoff of a floating-point type. Each is
small and documented as a scheme, so that a check may follow the same scheme as the run it
checks without sharing the run's computation.
"""

from __future__ import annotations

import importlib

import numpy as np


def seed_word(sequence: np.random.SeedSequence) -> int:
    """The first 64-bit word of ``sequence``: the integer seed of a generator that takes one.

    >>> seed_word(np.random.SeedSequence(0)) == seed_word(np.random.SeedSequence(0))
    True
    """
    return int(sequence.generate_state(1, np.uint64)[0])


def generator(library: str, sequence: np.random.SeedSequence):
    """A seeded generator of ``library``: ``default_rng`` of NumPy or CuPy.

    Parameters
    ----------
    library : str
        ``"numpy"``, or an array library with NumPy's ``random.default_rng`` (``"cupy"``).
    sequence : numpy.random.SeedSequence
        The seed. NumPy's generator takes the sequence itself; CuPy's an integer, the
        sequence's first 64-bit word (:func:`seed_word`).

    Returns
    -------
    Generator
        ``numpy.random.Generator``, or the library's own.
    """
    if library == "numpy":
        return np.random.default_rng(sequence)
    xp = importlib.import_module(library)
    return xp.random.default_rng(seed_word(sequence))


def starts(sizes) -> np.ndarray:
    """The first index of every block along an axis, from the blocks' sizes.

    >>> starts((4, 4, 2)).tolist()
    [0, 4, 8]
    """
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def shard_sizes(rows: int, per_shard: int) -> tuple[int, ...]:
    """Rows of each shard: ``per_shard`` each, the last one the rest.

    >>> shard_sizes(10, 4)
    (4, 4, 2)
    """
    full, rest = divmod(rows, per_shard)
    return (per_shard,) * full + ((rest,) if rest else ())


def unit_roundoff(dtype) -> float:
    """Unit roundoff u = eps / 2 of a floating-point type: the largest error of one rounding.

    2**-24 for float32, 2**-53 for float64, relative to the rounded value.

    >>> unit_roundoff("float64") == 2.0**-53
    True
    """
    return float(np.finfo(np.dtype(dtype)).eps) / 2
