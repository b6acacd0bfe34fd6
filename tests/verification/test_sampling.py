"""The check's sampler: uniform over the parts, the same for the same run, and independent of
the run's own random streams and of the check's other samples."""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest

from daskgpu.verification import (
    Sampler,
    bounds,
    certificates,
    declared,
    depths,
    plans,
    probes,
    replay,
    sampling,
    verdict,
)

SEEDS = 4000
POPULATION, SIZE = 40, 4


def _chosen(purpose: str = "cells") -> np.ndarray:
    """Which of POPULATION parts each of SEEDS seeds chooses: a (SEEDS, POPULATION) 0/1 table."""
    table = np.zeros((SEEDS, POPULATION), dtype=np.int64)
    for seed in range(SEEDS):
        table[seed, Sampler(seed, purpose).choose(POPULATION, SIZE)] = 1
    return table


@pytest.fixture(scope="module")
def chosen():
    return _chosen()


def test_every_part_is_equally_likely(chosen):
    """Pearson's chi-square of how often each part is chosen: a sampler that favours some parts
    (the first k, the last, every tenth) fails it by far."""
    counts = chosen.sum(axis=0)
    expected = SEEDS * SIZE / POPULATION
    statistic = float(((counts - expected) ** 2 / expected).sum())
    dof = POPULATION - 1
    assert bounds.chi_square_log_tail(statistic, dof) > math.log(1e-6), (statistic, counts)
    assert chosen.sum(axis=1).tolist() == [SIZE] * SEEDS  # distinct parts, always SIZE of them


def test_pairs_are_equally_likely(chosen):
    """Every pair of parts is chosen together as often as uniform sampling without replacement
    says: a sampler of consecutive runs (a random start, the k after it) fails it."""
    together = chosen.T @ chosen
    expected = SEEDS * SIZE * (SIZE - 1) / (POPULATION * (POPULATION - 1))
    pairs = [together[i, j] for i, j in itertools.combinations(range(POPULATION), 2)]
    statistic = float(sum((p - expected) ** 2 / expected for p in pairs))
    # Pairs are not independent cells, but their spread still fits a chi-square far from 1e-6.
    assert bounds.chi_square_log_tail(statistic, len(pairs) - 1) > math.log(1e-6), statistic
    adjacent = sum(together[i, i + 1] for i in range(POPULATION - 1)) / (POPULATION - 1)
    assert adjacent < 2 * expected


def test_first_k_is_not_a_sample():
    """The test above is able to fail: a sampler that returns the first k parts."""
    counts = np.zeros(POPULATION)
    counts[:SIZE] = SEEDS
    expected = SEEDS * SIZE / POPULATION
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert bounds.chi_square_log_tail(statistic, POPULATION - 1) < math.log(1e-6)


def test_the_sample_is_independent_of_the_runs_own_draws(chosen):
    """Whether part 0 is checked says nothing of the run's first value of block 0, drawn from
    SeedSequence(seed, spawn_key=(0,)): their correlation over many seeds is within noise."""
    first = np.array([replay.stream(seed, 0).random() for seed in range(SEEDS)])
    picked = chosen[:, 0].astype(np.float64)
    r = np.corrcoef(first, picked)[0, 1]
    assert abs(r) < 5 / math.sqrt(SEEDS), r


def test_two_purposes_draw_independently(chosen):
    other = _chosen("blocks")
    agree = (chosen & other).sum() / SEEDS
    expected = SIZE * SIZE / POPULATION  # parts two independent samples share, on average
    assert abs(agree - expected) < 5 * math.sqrt(expected / SEEDS), agree


def test_the_same_run_checks_the_same_parts():
    assert Sampler(9, "cells").choose(1000, 20).tolist() == Sampler(9, "cells").choose(
        1000, 20).tolist()
    assert Sampler(9, "cells").choose(1000, 20).tolist() != Sampler(10, "cells").choose(
        1000, 20).tolist()
    assert Sampler(9).choose(5, 9).tolist() == [0, 1, 2, 3, 4]
    assert Sampler(2**70).choose(10, 3).size == 3  # any int seed


@pytest.mark.parametrize("module", [bounds, certificates, declared, depths, plans, probes,
                                    replay, sampling, verdict])
def test_the_documented_examples_hold(module):
    failed, tried = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)[:2]
    assert failed == 0 and (tried > 0 or module in (declared, replay))
