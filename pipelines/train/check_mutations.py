"""The wrong results train-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Mutation


def _perturbed_weight(raw: dict) -> dict:
    weights = np.array(raw["weights"], copy=True)
    weights[-1].reshape(-1)[0] += 1e-3 * max(1.0, float(np.abs(weights[-1]).max()))
    return {**raw, "weights": weights}


def _doubled_last_rate(raw: dict) -> dict:
    weights = np.array(raw["weights"], copy=True)
    weights[-1] = weights[-2] - 2 * (weights[-2] - weights[-1])
    return {**raw, "weights": weights}


def _step_left_out(raw: dict) -> dict:
    weights = np.array(raw["weights"], copy=True)
    weights[-1] = weights[-2]
    return {**raw, "weights": weights}


def _altered_loss(raw: dict) -> dict:
    losses = np.array(raw["losses"], copy=True)
    losses[len(losses) // 2] *= 1.01
    return {**raw, "losses": losses}


def _inflated_train_accuracy(raw: dict) -> dict:
    right = np.array(raw["right"], copy=True)
    right[-1] += max(1, right[-1] // 100)
    return {**raw, "right": right}


# What a failed check's detail names (a regular expression, see Mutation.names).
WEIGHTS_MOVED = (r"step \d+: (probe \d+: the weights moved by \S+|"
                 r"weights\[\d+(, \d+)?\]: \S+ reported)")
MUTATIONS = (
    Mutation("one final weight perturbed", _perturbed_weight, WEIGHTS_MOVED),
    Mutation("last step with twice the learning rate", _doubled_last_rate, WEIGHTS_MOVED),
    Mutation("the last step left out (its weights the ones before)", _step_left_out,
             WEIGHTS_MOVED),
    Mutation("a step's loss altered by 1 %", _altered_loss, r"loss at step \d+: \S+ reported"),
    Mutation("rows read at the first step miscounted",
             lambda raw: {**raw, "rows": np.asarray(raw["rows"]) + np.eye(1, len(raw["rows"]),
                                                                           dtype=np.int64)[0]},
             r"rows read at step 0: \S+ reported"),
    Mutation("train accuracy inflated by 1 %", _inflated_train_accuracy,
             r"train accuracy at step \d+: \S+ reported"),
    Mutation("test accuracy inflated by 2 %",
             lambda raw: {**raw, "test_right": raw["test_right"]
                          + max(1, raw["test_right"] // 50)}, r"^test accuracy \S+ reported"),
    Mutation("teacher's best accuracy altered",
             lambda raw: {**raw, "test_best": raw["test_best"] * 1.001},
             r"teacher's best accuracy \S+ reported"),
)
