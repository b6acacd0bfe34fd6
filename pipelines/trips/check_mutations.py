"""The wrong results trips-pipeline's check must reject, at both depths (``MUTATIONS``).

Each alters the summed table (``raw["table"]``); the partitions' certificates stay as they were.
"""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Mutation


def _altered(raw: dict, **columns) -> dict:
    """``raw`` with some of its table's columns replaced."""
    return {**raw, "table": {**raw["table"], **columns}}


def _swap_two_groups(raw: dict) -> dict:
    """The sums of the groups with the fewest and the most trips exchanged."""
    table = raw["table"]
    rows = [int(np.argmin(table["trips"])), int(np.argmax(table["trips"]))]
    order = np.arange(len(table["trips"]))
    order[rows] = rows[::-1]
    return _altered(raw, **{name: table[name][order]
                            for name in ("trips", "fare_sum", "distance_sum")})


MUTATIONS = (
    Mutation("fare_sum tripled", lambda raw: _altered(raw, fare_sum=raw["table"]["fare_sum"] * 3),
             r"passengers -?\d+: fare_mean \S+ reported"),
    Mutation("distance_sum set to 1",
             lambda raw: _altered(raw, distance_sum=np.ones_like(raw["table"]["distance_sum"])),
             r"passengers -?\d+: distance_mean_km \S+ reported"),
    Mutation("one group's trips +1",
             lambda raw: _altered(raw, trips=raw["table"]["trips"] + np.eye(
                 1, len(raw["table"]["trips"]), dtype=np.int64)[0]),
             r"passengers -?\d+: trips \d+ reported"),
    Mutation("two groups swapped", _swap_two_groups,
             r"passengers -?\d+: trips \d+ reported, \S+ \w+ \(2 of \d+ groups differ\)"),
    Mutation("a group dropped",
             lambda raw: {**raw, "table": {k: v[1:] for k, v in raw["table"].items()}},
             r"passengers -?\d+: missing \(reported: none"),
)
