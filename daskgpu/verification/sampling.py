"""Seeded choices of a check, and what checking a sample of a run's parts establishes.

A fast check recomputes a seeded sample of a run's parts (blocks, shards, partitions, cells,
iterations) by an independent path. Drawn without replacement from ``population`` parts of
which at least ``fraction`` are wrong, ``k`` parts miss every wrong one with the
hypergeometric probability ``C(N - b, k) / C(N, k)``; :func:`sample_size` is the fewest ``k``
that keeps that at or below ``1 - confidence``, and :func:`detection` says so in words.

A :class:`Sampler` draws a check's choices from the run's seed, on streams of their own: the
run draws its data from ``SeedSequence(seed, spawn_key=(block,))``, a check from
``SeedSequence([seed, DOMAIN, crc32(purpose), *key])``, entropy no spawned child of the run's
sequence shares, so the parts checked tell nothing of the data in them and a check's samples
for two purposes are independent of each other.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

#: What a fast check promises by default: a fault in at least a tenth of the parts is caught
#: with probability at least 99.9 %.
FRACTION = 0.1
CONFIDENCE = 0.999
#: The word that keeps a check's streams apart from the run's.
DOMAIN = 0x5EC7_C4EC


class Sampler:
    """The seeded choices of one check, independent of the run's own random streams.

    Parameters
    ----------
    seed : int
        The run's seed (for data read from an input: something fixed about the run, such as
        its element count, so the same run checks the same parts).
    purpose : str
        What the choices are for ("cells", "probes", ...): two purposes draw independently.

    >>> Sampler(7, "cells").choose(10, 3).tolist() == Sampler(7, "cells").choose(10, 3).tolist()
    True
    """

    def __init__(self, seed: int, purpose: str = "parts"):
        self.seed = int(seed)
        self.purpose = purpose

    def __repr__(self) -> str:
        return f"Sampler({self.seed}, {self.purpose!r})"

    def sequence(self, *key: int) -> np.random.SeedSequence:
        """The seed sequence of this sampler's stream ``key`` (a tuple of ints)."""
        tag = zlib.crc32(self.purpose.encode())
        return np.random.SeedSequence([self.seed % 2**64, DOMAIN, tag, *map(int, key)])

    def generator(self, *key: int) -> np.random.Generator:
        """NumPy's generator on stream ``key``."""
        return np.random.default_rng(self.sequence(*key))

    def choose(self, population: int, size: int, *key: int) -> np.ndarray:
        """``size`` distinct parts of ``range(population)``, uniform, sorted (int64).

        Every subset of ``size`` parts is equally likely: a sample of all of them where
        ``size >= population``.
        """
        size = min(int(size), int(population))
        if size >= population:
            return np.arange(population, dtype=np.int64)
        chosen = self.generator(*key).choice(population, size=size, replace=False)
        return np.sort(chosen).astype(np.int64)

    def signs(self, shape, *key: int) -> np.ndarray:
        """Independent random signs (±1.0, float64) of ``shape``: probes for Freivalds' check."""
        return self.generator(*key).integers(0, 2, size=shape).astype(np.float64) * 2 - 1

    def normal(self, shape, *key: int) -> np.ndarray:
        """Independent standard normal values (float64) of ``shape``."""
        return self.generator(*key).standard_normal(shape)


def run_seed(seed: int | None, *facts: int) -> int:
    """The seed a check draws its choices from: the run's, or one derived from ``facts``.

    Data read from an input has no seed; ``facts`` about it (its shape, its row count) then
    give one, so that the same input is checked the same way every time.

    >>> run_seed(7, 100), run_seed(None, 100) == run_seed(None, 100) != run_seed(None, 101)
    (7, True)
    """
    if seed is not None:
        return int(seed)
    words = np.random.SeedSequence([DOMAIN, *(int(f) % 2**64 for f in facts)])
    return int(words.generate_state(1, np.uint64)[0])


def miss_probability(population: int, wrong: int, drawn: int) -> float:
    """Probability that ``drawn`` parts, drawn without replacement, include no wrong one.

    >>> miss_probability(10, 1, 10)
    0.0
    >>> round(miss_probability(100, 10, 1), 3)
    0.9
    """
    if wrong <= 0:
        return 1.0
    if drawn > population - wrong:
        return 0.0
    return math.prod((population - wrong - i) / (population - i) for i in range(drawn))


def sample_size(population: int, fraction: float = FRACTION,
                confidence: float = CONFIDENCE) -> int:
    """The fewest parts to check so that a fault in ``fraction`` of them is caught.

    Parameters
    ----------
    population : int
        The parts a run computed.
    fraction, confidence : float
        At least ``ceil(fraction * population)`` wrong parts are caught with probability at
        least ``confidence``.

    Returns
    -------
    int
        Between 1 and ``population`` (all of them where fewer cannot promise it).

    >>> sample_size(10_000), sample_size(4), sample_size(1)
    (66, 4, 1)
    """
    if population <= 0:
        return 0
    wrong = max(1, math.ceil(fraction * population))
    low, high = 1, population  # miss_probability falls as more are drawn
    while low < high:
        middle = (low + high) // 2
        if miss_probability(population, wrong, middle) <= 1 - confidence:
            high = middle
        else:
            low = middle + 1
    return low


def detection(drawn: int, population: int, unit: str = "blocks",
              fraction: float = FRACTION) -> str:
    """What checking ``drawn`` of ``population`` parts establishes, in words.

    >>> print(detection(66, 10_000))  # doctest: +NORMALIZE_WHITESPACE
    66 of 10000 blocks checked again: a fault in at least 10 % of the blocks is caught with
    probability at least 99.9 %, one in a single block with probability 0.66 %
    >>> detection(4, 4)
    'all 4 blocks checked again'
    """
    if drawn >= population:
        return f"all {population} {unit} checked again"
    one = _singular(unit)
    single = f"one in a single {one} with probability {_floor_percent(drawn / population)} %"
    wrong = max(1, math.ceil(fraction * population))
    missed = miss_probability(population, wrong, drawn)
    if missed == 0:
        return (f"{drawn} of {population} {unit} checked again: a fault in at least "
                f"{fraction * 100:g} % of the {unit} is always caught, {single}")
    return (f"{drawn} of {population} {unit} checked again: a fault in at least "
            f"{fraction * 100:g} % of the {unit} is caught with probability at least "
            f"{_floor_percent(1 - missed, 1)} %, {single}")


def _floor_percent(probability: float, digits: int = 2) -> str:
    """A probability in percent, never rounded up."""
    scale = 10**digits
    return f"{math.floor(probability * 100 * scale) / scale:g}"


def _singular(unit: str) -> str:
    return unit[:-1] if unit.endswith("s") else unit
