"""The wrong results kmeans-pipeline's check (:mod:`pipelines.kmeans_check`) must reject.

Those named ``k-means|| ...`` alter what a k-means|| initialisation reports (``raw["init"]``)
and apply to such a run only.
"""

from __future__ import annotations

import numpy as np

from daskgpu.registry import Mutation
from pipelines.kmeans_check_init import ROUNDS


def _moved_centroid(raw: dict) -> dict:
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[-1, 0, 0] += 0.01
    return {**raw, "centroids": trajectory}


def _altered_inertia(raw: dict) -> dict:
    inertias = np.array(raw["inertias"], dtype=np.float64, copy=True)
    inertias[len(inertias) // 2] *= 1.01
    return {**raw, "inertias": inertias}


def _stopped_early(raw: dict) -> dict:
    return {**raw, "centroids": np.asarray(raw["centroids"])[:-1],
            "inertias": np.asarray(raw["inertias"])[:-1], "iterations": raw["iterations"] - 1}


def _moved_start(raw: dict) -> dict:
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[0, -1] += 0.5
    return {**raw, "centroids": trajectory}


def _moved_weight(raw: dict) -> dict:
    """A tenth of the heaviest candidate's weight given to another (the sum kept)."""
    weights = np.array(raw["init"]["weights"], copy=True)
    i = int(np.argmax(weights))
    moved = max(1, int(weights[i]) // 10)
    weights[i] -= moved
    weights[(i + 1) % len(weights)] += moved
    return {**raw, "init": {**raw["init"], "weights": weights}}


def _invented_candidate(raw: dict) -> dict:
    points = np.array(raw["init"]["points"], dtype=np.float64, copy=True)
    points[-1] += 0.25
    return {**raw, "init": {**raw["init"], "points": points}}


def _dropped_candidate(raw: dict) -> dict:
    """The last candidate sampled in a round left out (its weight given to the first)."""
    chosen = raw["init"]
    rounds = np.asarray(chosen["rounds"])
    i = int(np.flatnonzero((rounds >= 1) & (rounds <= ROUNDS))[-1])
    keep = np.arange(len(rounds)) != i
    weights = np.array(chosen["weights"], copy=True)
    weights[0] += weights[i]
    return {**raw, "init": {**chosen, "rows": np.asarray(chosen["rows"])[keep],
                            "points": np.asarray(chosen["points"])[keep],
                            "weights": weights[keep], "rounds": rounds[keep]}}


def _altered_cost(raw: dict) -> dict:
    costs = np.array(raw["init"]["costs"], dtype=np.float64, copy=True)
    costs[-1] *= 1.01
    return {**raw, "init": {**raw["init"], "costs": costs}}


def _unreduced_start(raw: dict) -> dict:
    """The initial centroids: the first k candidates, as if never reduced."""
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[0] = np.asarray(raw["init"]["points"])[:trajectory.shape[1]]
    return {**raw, "centroids": trajectory}


MUTATIONS = (
    Mutation("a final centroid moved by 0.01", _moved_centroid, "centroid"),
    Mutation("an inertia altered by 1 %", _altered_inertia, "inertia"),
    Mutation("iterations miscounted", lambda raw: {**raw, "iterations": raw["iterations"] + 1},
             "iterations"),
    Mutation("stopped one iteration early", _stopped_early, "iterations"),
    Mutation("an initial centroid moved", _moved_start, "initial"),
    # k-means|| only (a random initialisation reports no weighed candidates):
    Mutation("k-means|| candidate weight moved to another", _moved_weight, "weight"),
    Mutation("k-means|| candidate not a point of the data", _invented_candidate,
             "initial candidate"),
    Mutation("k-means|| candidates not reduced to k", _unreduced_start, "initial centroid"),
    Mutation("k-means|| a sampled candidate left out", _dropped_candidate, "sampled"),
    Mutation("k-means|| a round's sampling cost altered by 1 %", _altered_cost, "cost"),
)
KMEANS_PARALLEL_ONLY = "k-means||"  # the prefix of the mutations that apply to it alone
