"""bench's comparison of a run's value with a baseline's answer: what the baseline answers."""

from __future__ import annotations

import dask.array as da
import numpy as np

from daskgpu.execution import answers


def test_what_a_run_gives_beyond_the_baselines_answer_is_not_compared():
    value = {"l2_norm": 2.0, "grid": da.zeros((4, 4)), "components": np.ones((2, 3))}
    assert answers.difference(value, {"l2_norm": 2.0}) is None
    assert answers.difference(value, {"l2_norm": 2.5}) == "l2_norm: 2.0 against 2.5"


def test_a_key_the_baseline_answers_and_the_run_lacks_is_a_difference():
    assert answers.difference({"n": 3}, {"n": 3, "m": 1}) == "value: keys ['n'] against ['m', 'n']"
