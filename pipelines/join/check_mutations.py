"""The wrong answers join-pipeline's check must reject at both depths, certificates untouched."""

from __future__ import annotations

from daskgpu.verification import Mutation


def _changed(change):
    """A mutation of the aggregate table (indexed by group): ``change(table) -> table``."""
    return lambda raw: {**raw, "aggregate": change(raw["aggregate"].copy())}


MUTATIONS = (
    Mutation("xy sums doubled", _changed(lambda t: t.assign(xy=t["xy"] * 2)),
             r"group \d+: sum_xy \S+ vs"),
    Mutation("mean y set to 0", _changed(lambda t: t.assign(y=t["y"] * 0)),
             r"group \d+: mean_y 0 vs"),
    Mutation("one group's count +1",
             _changed(lambda t: t.assign(x=t["x"] + (t.index == t.index[0]))),
             r"group \d+: count \d+ vs"),
    Mutation("two groups swapped", _changed(lambda t: t.rename(index={0: 1, 1: 0})),
             r"group 0: count \d+ vs .*; group 1: count \d+ vs"),
    Mutation("joined_rows +1", lambda raw: {**raw, "joined_rows": raw["joined_rows"] + 1},
             r"joined_rows \d+ vs"),
)
