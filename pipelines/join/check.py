"""Independent verification of join-pipeline: a join-free lookup over every left row.

What it establishes: the right table's keys are ``0..R-1``, once each, and the left table has
``--rows`` rows; the reported joined row count equals both a join-free count and
``round(match * rows)``; and per group ``key % GROUPS`` the reported count equals the lookup's
exactly, ``sum(x*y)`` and ``mean(y)`` equal it up to their rounding. Right keys being unique, a
dense ``y[key]`` array built from the right table joins every left row by lookup, on the
cluster, with no ``merge``, shuffle or group-by.

That is the full depth. The fast depth (:mod:`pipelines.join.check_cells`) checks the run's
per-cell certificates instead, every block's joined rows against the tables' definition, and a
seeded sample of cells drawn again and joined by lookup.

It shares no code with the computation it checks: it imports nothing from
:mod:`pipelines.join.pipeline` or :mod:`pipelines.join.tasks`, only the group count
(:mod:`pipelines.join.shared`); it reads the reported value through ``workload.present`` and the
tables from the workload's context. The mutations declared here (:data:`MUTATIONS`) are wrong
answers it must refuse.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit import backends
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.join.check_cells import verify_fast
from pipelines.join.shared import GROUPS


def _host_keys_and_y(part):
    frame = backends.to_host(part)
    return frame["key"].to_numpy(), frame["y"].to_numpy()


def _y_by_key(pieces, right_rows: int):
    """A dense lookup ``y[key]`` built from the right table's rows, and what the rows were.

    The lookup stands for the join only if the keys are ``0..right_rows-1``, once each: the
    second value says whether they are (a row count and the distinct keys in range).
    """
    keys = np.concatenate([k for k, _ in pieces])
    y = np.concatenate([v for _, v in pieces])
    in_range = (keys >= 0) & (keys < right_rows)
    holders = np.bincount(keys[in_range], minlength=right_rows)
    lookup = np.full(right_rows, np.nan)
    lookup[keys[in_range]] = y[in_range]
    return lookup, {"rows": len(keys), "distinct": int(np.count_nonzero(holders)),
                    "repeated": int(np.count_nonzero(holders > 1))}


def _group_totals(part, lookup):
    """One left partition, joined by lookup: per group rows, sum of x*y, sum of y; its rows."""
    frame = backends.to_host(part)
    keys, x = frame["key"].to_numpy(), frame["x"].to_numpy()
    found = (keys >= 0) & (keys < len(lookup))
    keys, x = keys[found], x[found]
    y = lookup[keys]
    groups = keys % GROUPS
    return {"count": np.bincount(groups, minlength=GROUPS),
            "sum_xy": np.bincount(groups, weights=x * y, minlength=GROUPS),
            "sum_y": np.bincount(groups, weights=y, minlength=GROUPS),
            "left_rows": len(frame)}


def _add_totals(parts):
    return {name: sum(p[name] for p in parts) for name in parts[0]}


def lookup_totals(left, right, right_rows: int):
    """The aggregate's ingredients without a join, as one lazy result computed on the workers.

    Each right partition is moved to host memory on its worker; one task builds the dense
    ``y[key]`` lookup; each left partition is then joined by lookup where it lives. Only the
    per-group totals (a few hundred bytes) and the right table's key summary come back.
    """
    pieces = [dask.delayed(_host_keys_and_y)(part) for part in right.to_delayed()]
    lookup, right_keys = dask.delayed(_y_by_key, nout=2)(pieces, right_rows)
    parts = [dask.delayed(_group_totals)(part, lookup) for part in left.to_delayed()]
    return dask.delayed(dict)(totals=dask.delayed(_add_totals)(parts), right_keys=right_keys)


def _tolerance(count: int) -> float:
    """Relative tolerance of two sums of ``count`` non-negative terms added in any order.

    Each is within ``(count - 1) * eps / 2`` of the exact sum; a mean adds one rounding.
    """
    return (2 * count + 4) * float(np.finfo(np.float64).eps)


def _pair(got: float, want: float, source: str = "lookup") -> str:
    """``got vs SOURCE want`` with as few digits as show the difference."""
    for digits in (6, 10, 17):
        a, b = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if a != b:
            break
    return f"{a} vs {source} {b}"


def _mean_difference(got: float | None, want: float | None, rtol: float,
                     source: str = "lookup") -> list[str]:
    """``["mean_y ..."]`` where a reported mean disagrees (None: a group without rows)."""
    if got is None or want is None:
        return [] if got is want else [f"mean_y {_short(got)} vs {source} {_short(want)}"]
    return [] if math.isclose(got, want, rel_tol=rtol, abs_tol=0.0) else [
        f"mean_y {_pair(got, want, source)}"]


def _short(value: float | None) -> str:
    return "none (no rows)" if value is None else f"{value:.6g}"


def _group_differences(reported: dict, totals: dict, source: str = "lookup") -> list[str]:
    """``group g: field got vs SOURCE want, ...`` for each group whose numbers disagree."""
    out = []
    for g in range(GROUPS):
        count = int(totals["count"][g])
        sum_xy, sum_y = float(totals["sum_xy"][g]), float(totals["sum_y"][g])
        rtol = _tolerance(count)
        wrong = []
        if reported["count"][g] != count:
            wrong.append(f"count {reported['count'][g]} vs {source} {count}")
        if not math.isclose(reported["sum_xy"][g], sum_xy, rel_tol=rtol, abs_tol=0.0):
            wrong.append(f"sum_xy {_pair(reported['sum_xy'][g], sum_xy, source)}")
        wrong += _mean_difference(reported["mean_y"][g], sum_y / count if count else None, rtol,
                                  source)
        if wrong:
            out.append(f"group {g}: {', '.join(wrong)}")
    return out


def verify(workload: Workload, raw: dict, depth: str = "full") -> Verification:
    """The reported value against a join-free lookup, over every left row or a sample.

    Right keys are unique (a permutation of ``0..R-1``), so a left row with key ``k < R`` has
    exactly one partner, whose ``y`` a dense array built from the right table gives: per group
    the rows, ``sum(x*y)`` and ``mean(y)`` follow without any join or group-by. The counts
    must be equal, the sums and means equal up to their rounding; the joined rows must equal
    both the lookup's count and ``round(match * rows)``.

    ``depth="full"`` does that over every left row, on the cluster. ``depth="fast"`` checks the
    run's cell certificates instead: they add up to the answer, every block's joined rows
    equal its definition's, and a seeded sample of cells drawn again and joined by lookup
    equals them (:mod:`pipelines.join.check_cells`).
    """
    if depth == "fast":
        return verify_fast(workload, raw, _group_differences)
    ctx = workload.context
    reported = workload.present(workload, raw)
    found = lookup_totals(ctx["left"], ctx["right"], ctx["right_rows"]).compute()
    totals, right_keys = found["totals"], found["right_keys"]
    right_rows, rows, matched = ctx["right_rows"], ctx["rows"], ctx["matched"]
    if right_keys["rows"] != right_rows or right_keys["distinct"] != right_rows:
        return Verification(False, f"right keys: {right_keys['rows']} rows hold "
                            f"{right_keys['distinct']} of the keys 0..{right_rows - 1} "
                            f"({right_keys['repeated']} repeated); the lookup needs each once")
    if totals["left_rows"] != rows:
        return Verification(False, f"left table: {totals['left_rows']} rows generated, "
                            f"--rows {rows}")
    looked_up = int(totals["count"].sum())
    problems = []
    if reported["joined_rows"] != looked_up or looked_up != matched:
        problems.append(f"joined_rows {reported['joined_rows']} vs lookup {looked_up} "
                        f"(round(match * rows) = {matched})")
    problems += _group_differences(reported["aggregate"], totals)
    if problems:
        shown = "; ".join(problems[:4])
        more = f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
        return Verification(False, f"the reported join differs from a join-free lookup over "
                            f"all {rows} left rows: {shown}{more}")
    return Verification(True, f"joined_rows {looked_up} = round(match * rows); every group's "
                        f"count, sum_xy and mean_y equal a join-free lookup over all {rows} "
                        f"left rows (counts exactly, sums to rounding)")


def _swap_groups(raw: dict, a: int = 0, b: int = 1) -> dict:
    table = raw["aggregate"].copy()
    table.loc[[a, b]] = table.loc[[b, a]].to_numpy()
    return {**raw, "aggregate": table}


def _change_column(raw: dict, column: str, change) -> dict:
    table = raw["aggregate"].copy()
    table[column] = change(table[column])
    return {**raw, "aggregate": table}


def _first_count_plus_one(raw: dict) -> dict:
    table = raw["aggregate"].copy()
    table.loc[table.index[0], "x"] += 1
    return {**raw, "aggregate": table}


MUTATIONS = (
    Mutation("xy sums doubled", lambda raw: _change_column(raw, "xy", lambda c: c * 2),
             r"group \d+: sum_xy \S+ vs"),
    Mutation("mean y set to 0", lambda raw: _change_column(raw, "y", lambda c: c * 0),
             r"group \d+: mean_y 0 vs"),
    Mutation("one group's count +1", _first_count_plus_one, r"group \d+: count \d+ vs"),
    Mutation("two groups swapped", _swap_groups,
             r"group 0: count \d+ vs .*; group 1: count \d+ vs"),
    Mutation("joined_rows +1", lambda raw: {**raw, "joined_rows": raw["joined_rows"] + 1},
             r"joined_rows \d+ vs"),
)
