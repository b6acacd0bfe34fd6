"""The wrong results pca-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification import Mutation


def _altered(change):
    def alter(raw: dict) -> dict:
        result = {key: np.array(value, dtype=np.float64) if isinstance(value, np.ndarray)
                  else value for key, value in raw["result"].items()}
        change(result)
        return {**raw, "result": result}
    return alter


def _rotated(result: dict) -> None:
    v, c, s = result["components"], math.cos(math.radians(5)), math.sin(math.radians(5))
    v[0], v[1] = c * v[0] + s * v[1], -s * v[0] + c * v[1]


def _scaled_value(result: dict) -> None:
    for key, factor in (("singular_values", 1.01), ("explained_variance", 1.01**2),
                        ("explained_variance_ratio", 1.01**2)):
        result[key][0] *= factor


def _perturbed(result: dict) -> None:
    last = result["components"][-1]
    last += 1e-3 * np.roll(last, 1)
    last /= np.linalg.norm(last)


def _swapped(result: dict) -> None:
    for key in ("components", "singular_values", "explained_variance", "explained_variance_ratio"):
        result[key][[0, 1]] = result[key][[1, 0]]


def _gram_altered(result: dict) -> None:
    for key, factor in (("gram", 1.01), ("r", math.sqrt(1.01))):  # R^T R: 1.01
        if key in result:
            result[key] *= factor


def _total_altered(result: dict) -> None:
    result["total_variance"] *= 1.01
    result["explained_variance_ratio"] /= 1.01


MUTATIONS = (
    Mutation("two components rotated into each other by 5 degrees", _altered(_rotated),
             r"component [01] is no eigenvector"),
    Mutation("a singular value scaled by 1.01", _altered(_scaled_value),
             r"component 0 is no eigenvector .*\(s\^2 = \S+\)"),
    Mutation("a component perturbed by 0.1 %", _altered(_perturbed),
             r"^components not orthonormal"),
    Mutation("the first two components swapped", _altered(_swapped),
             r"^explained variances not in descending order"),
    Mutation("the total variance altered by 1 %", _altered(_total_altered),
             r"^total variance \S+, trace of the Gram matrix gives"),
    # What the exact and covariance methods report beside the components (randomized: none).
    Mutation("the run's Gram matrix (R^T R) off by 1 %", _altered(_gram_altered),
             r"the run's (Gram matrix|R\^T R) is not the data's Gram matrix"),
)
