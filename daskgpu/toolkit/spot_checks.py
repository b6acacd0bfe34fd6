"""Seeded spot checks: how many of a run's blocks to check again, and what that establishes.

A fast check recomputes a seeded sample of a run's blocks (shards, partitions, cells) by an
independent path. Drawn without replacement from ``population`` items of which at least
``fraction`` are wrong, ``k`` items miss every wrong one with the hypergeometric probability
``C(N - b, k) / C(N, k)``; :func:`sample_size` is the fewest ``k`` that keeps that at or below
``1 - confidence``, and :func:`detection` says so in words for the report.
"""

from __future__ import annotations

import math

import numpy as np

#: What a fast check promises by default: a fault in at least a tenth of the items is caught
#: with probability at least 99.9 %.
FRACTION = 0.1
CONFIDENCE = 0.999


def miss_probability(population: int, wrong: int, drawn: int) -> float:
    """Probability that ``drawn`` items, drawn without replacement, include no wrong one.

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
    """The fewest items to check so that a fault in ``fraction`` of them is caught.

    Parameters
    ----------
    population : int
        The items a run computed (blocks, shards, partitions, cells).
    fraction, confidence : float
        At least ``ceil(fraction * population)`` wrong items are caught with probability at
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


def seeded_sample(population: int, size: int, seed: int) -> np.ndarray:
    """``size`` distinct items of ``range(population)``, sorted, drawn from ``seed``.

    >>> seeded_sample(10, 3, 1).tolist() == seeded_sample(10, 3, 1).tolist()
    True
    """
    rng = np.random.default_rng(np.random.SeedSequence((int(seed), 0x5B07)))
    return np.sort(rng.choice(population, size=min(size, population), replace=False))


def detection(drawn: int, population: int, unit: str = "blocks",
              fraction: float = FRACTION) -> str:
    """What checking ``drawn`` of ``population`` items establishes, in words.

    >>> print(detection(66, 10_000))  # doctest: +NORMALIZE_WHITESPACE
    66 of 10000 blocks checked again: a fault in at least 10 % of the blocks is caught with
    probability at least 99.9 %
    >>> detection(4, 4)
    'all 4 blocks checked again'
    >>> detection(15, 16)
    '15 of 16 blocks checked again: a fault in at least 10 % of the blocks is always caught'
    """
    if drawn >= population:
        return f"all {population} {unit} checked again"
    wrong = max(1, math.ceil(fraction * population))
    missed = miss_probability(population, wrong, drawn)
    if missed == 0:
        return (f"{drawn} of {population} {unit} checked again: a fault in at least "
                f"{fraction * 100:g} % of the {unit} is always caught")
    caught = 1 - missed
    shown = math.floor(caught * 1000) / 10  # never rounded up
    return (f"{drawn} of {population} {unit} checked again: a fault in at least "
            f"{fraction * 100:g} % of the {unit} is caught with probability at least "
            f"{shown:g} %")
