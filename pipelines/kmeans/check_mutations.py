"""The wrong results kmeans-pipeline's check must reject, at both depths (``MUTATIONS``).

Those named ``k-means|| ...`` apply to a k-means|| run only; ``labels: ...`` to a run with
labels: those it kept on the workers (a run from Python), altered there (a map of their
blocks), else the ``--labels`` file's, through the result's ``edits`` (see ``read_labels``).
"""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Mutation
from pipelines.kmeans.check_replay import Labels, read_labels
from pipelines.kmeans.shared import KMEANS_PARALLEL_ROUNDS

KMEANS_PARALLEL_ONLY, LABELS_ONLY = "k-means||", "labels: "  # the prefixes of those names


def _changed(name: str, change, within: str | None = None):
    """The result with a copy of ``raw[name]`` (or ``raw[within][name]``) changed in place."""
    def alter(raw: dict) -> dict:
        part = raw[within] if within else raw
        value = np.array(part[name], dtype=np.float64 if within is None else None, copy=True)
        change(value, raw)
        return {**raw, within: {**part, name: value}} if within else {**raw, name: value}
    return alter


def _moved_weight(weights: np.ndarray, raw: dict) -> None:
    """A tenth of the heaviest candidate's weight given to another (the sum kept)."""
    i = int(np.argmax(weights))
    moved = max(1, int(weights[i]) // 10)
    weights[i] -= moved
    weights[(i + 1) % len(weights)] += moved


def _dropped_candidate(raw: dict) -> dict:
    """The last candidate sampled in a round left out (its weight given to the first)."""
    chosen, kept = raw["init"], np.ones(len(raw["init"]["rounds"]), dtype=bool)
    rounds = np.asarray(chosen["rounds"])
    i = int(np.flatnonzero((rounds >= 1) & (rounds <= KMEANS_PARALLEL_ROUNDS))[-1])
    weights, kept[i] = np.array(chosen["weights"], copy=True), False
    weights[0] += weights[i]
    return {**raw, "init": {**chosen, **{name: np.asarray(chosen[name])[kept]
                                         for name in ("rows", "points", "rounds")},
                            "weights": weights[kept]}}


def _edited_labels(add: int, step: int, modulo, last: bool = False):
    """The labels as if those of every ``step``-th point (of the last shard) were ``add`` more."""
    def alter(raw: dict) -> dict:
        labels = dict(raw.get("labels") or {})
        rows = labels.get("rows", ())
        edit = {"start": int(sum(rows[:-1])) if last else 0, "stop": int(sum(rows)),
                "step": step, "add": add, "modulo": modulo(raw)}
        if labels.get("kept") is not None:  # altered on the workers, block by block
            return {**raw, "labels": {**labels, "kept": labels["kept"].map_blocks(
                _edited_block, edit, dtype=np.int32)}}
        return {**raw, "labels": {**labels, "edits": [*labels.get("edits", ()), edit]}}
    return alter


def _edited_block(block, edit: dict, block_info=None):
    first, edits = block_info[0]["array-location"][0][0], Labels(None, "", (edit,), None, 1, ())
    return read_labels(edits, first, first + len(block), block).astype(np.int32)


def _add(where: tuple, amount: float, factor: float = 1.0):
    def change(value: np.ndarray, raw: dict) -> None:
        value[where] = value[where] * factor + amount
    return change


def _middle_raised(inertias: np.ndarray, raw: dict) -> None:
    inertias[len(inertias) // 2] *= 1.01


def _unreduced(trajectory: np.ndarray, raw: dict) -> None:
    """The initial centroids: the first k candidates, as if never reduced."""
    trajectory[0] = np.asarray(raw["init"]["points"])[:trajectory.shape[1]]


def _stopped_early(raw: dict) -> dict:
    return {**raw, "centroids": np.asarray(raw["centroids"])[:-1],
            "inertias": np.asarray(raw["inertias"])[:-1], "iterations": raw["iterations"] - 1}


# What a failed check's detail names (a regular expression, see Mutation.names).
NOT_A_FIXED_POINT = r"initial centroid \d+ feature \d+: \S+, the weighted mean"
MUTATIONS = (
    Mutation("a final centroid moved by 0.01", _changed("centroids", _add((-1, 0, 0), 0.01)),
             r"last centroid shift 0\.01 over --tol"),
    Mutation("an inertia altered by 1 %", _changed("inertias", _middle_raised),
             r"inertia at iteration \d+: \S+ reported"),
    Mutation("iterations miscounted", lambda raw: {**raw, "iterations": raw["iterations"] + 1},
             r"^\d+ iterations reported, \d+ centroid sets"),
    Mutation("stopped one iteration early", _stopped_early,
             r"iterations stopped after \d+ \(of --max-iter \d+\) with a last centroid shift"),
    Mutation("an initial centroid moved", _changed("centroids", _add((0, -1), 0.5)),
             NOT_A_FIXED_POINT),
    # --labels only: every 997th point labelled with the next centroid; every label one more.
    Mutation("labels: some points labelled with another centroid",
             _edited_labels(1, 997, lambda raw: len(raw["counts"])),
             r"(--labels \S+|the kept labels): (label \d+: \d+ points labelled, the last pass "
             r"counted|row \d+ is labelled \d+, its nearest final centroid is \d+)"),
    Mutation("labels: counted from 1", _edited_labels(1, 1, lambda raw: 0),
             r"(--labels \S+|the kept labels): row \d+ is labelled \d+, outside -1"),
    Mutation("labels: the last shard's labelled with the next centroid",
             _edited_labels(1, 1, lambda raw: len(raw["counts"]), last=True),
             r"(--labels \S+|the kept labels): label \d+: \d+ points labelled, the last pass"),
    # k-means|| only (a random initialisation reports no weighed candidates):
    Mutation("k-means|| candidate weight moved to another",
             _changed("weights", _moved_weight, "init"),
             r"initial candidate \d+: weight \d+, the run's cells count \d+"),
    Mutation("k-means|| candidate not a point of the data",
             _changed("points", _add(-1, 0.25), "init"), r"initial candidate \d+ \(row \d+\) is"),
    Mutation("k-means|| candidates not reduced to k", _changed("centroids", _unreduced),
             NOT_A_FIXED_POINT),
    Mutation("k-means|| a sampled candidate left out", _dropped_candidate,
             r"k-means\|\| round \d+: (the run's cells sampled \d+ points|row \d+ was not "
             r"sampled)"),
    Mutation("k-means|| a round's sampling cost altered by 1 %",
             _changed("costs", _add(-1, 0.0, 1.01), "init"),
             r"k-means\|\| round \d+: sampling cost \S+ reported"),
)
