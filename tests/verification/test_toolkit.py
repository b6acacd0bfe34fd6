"""The verification toolkit's parts: plans, bounds, verdicts, certificates, probes and the
declared check, each against what it promises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskgpu.errors import ParameterError
from daskgpu.toolkit.workload import Workload
from daskgpu.verification import (
    Cells,
    Check,
    Grid,
    Plan,
    Sampler,
    Unreadable,
    Verdict,
    compare_probes,
    depths,
    differences,
    fingerprint,
    fingerprint_weights,
    parts_add_up,
    rounding,
    sample_size,
    tolerance,
)
from daskgpu.verification.sampling import miss_probability

# --------------------------------------------------------------------------- plans


def test_full_plans_every_part_and_fast_the_promised_sample():
    sampler = Sampler(4, "blocks")
    assert Plan.at("full", 30, sampler).parts == tuple(range(30))
    fast = Plan.at("fast", 1000, sampler, always=(999, 0))
    assert fast.sampled == sample_size(1000) and {0, 999} <= set(fast.parts)
    assert len(fast.parts) <= fast.sampled + 2
    # what the promise says holds: a fault in a tenth of the parts is missed at most 0.1 %
    assert miss_probability(1000, 100, fast.sampled) <= 1e-3
    assert "checked again: a fault in at least 10 % of the blocks is caught with probability "\
        "at least 99.9 %, one in a single block with probability" in fast.promise
    assert fast.single_part() == pytest.approx(fast.sampled / 1000)
    assert Plan.at("fast", 5, sampler).promise == "all 5 blocks checked again"


def test_a_grid_numbers_locates_and_cuts_regions():
    grid = Grid(((3, 3, 2), (4, 1)))
    assert grid.shape == (3, 2) and grid.blocks == 6 and grid.array_shape == (8, 5)
    for number in range(grid.blocks):
        assert grid.number(grid.location(number)) == number
    array = np.arange(40).reshape(8, 5)
    pieces = [array[grid.region(n)] for n in range(grid.blocks)]
    assert sum(p.size for p in pieces) == array.size
    assert pieces[5].tolist() == [[34], [39]] and grid.block_shape(5) == (2, 1)
    assert grid.counts().tolist() == [[12, 3], [12, 3], [8, 2]]


def test_cells_are_numbered_part_by_part():
    cells = Cells((3, 0, 2))
    assert [cells.locate(c) for c in range(cells.total)] == [(0, 0), (0, 1), (0, 2), (2, 0),
                                                             (2, 1)]
    assert cells.owners().tolist() == [0, 0, 0, 2, 2] and list(cells.of(2)) == [3, 4]


# --------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_rounding_rule_holds_and_is_not_loose(dtype):
    """Sequential sums of a million values in [0, 1), in three orders, lie within the rule of
    the exact total, and the rule is within a small factor of the worst seen (a rule far too
    loose would let a float32 accumulation pass for a float64 one)."""
    values = np.random.default_rng(3).random(10**6).astype(dtype)
    exact = math.fsum(values.astype(np.float64).tolist())
    worst = max(abs(float(np.cumsum(order, dtype=dtype)[-1]) - exact)
                for order in (values, values[::-1], np.sort(values)))
    bound = rounding(values.size, dtype) * exact
    assert worst <= bound < 100 * worst


def test_tolerance_adds_the_checks_own_rounding():
    assert tolerance(10.0, 100, "float32") == pytest.approx(
        (rounding(100, "float32") + rounding(100)) * 10)
    assert rounding(10**20) < math.inf and rounding(1, "float32") == pytest.approx(2**-24,
                                                                                   rel=1e-6)


# --------------------------------------------------------------------------- verdicts


def test_a_verdict_lists_at_most_three_problems_and_says_how_many_more():
    verdict = Verdict("full")
    for i in range(5):
        verdict.fail(f"block {i}:\nwrong")
    assert verdict.detail() == "block 0: wrong; block 1: wrong; block 2: wrong; and 2 more problems"
    assert verdict.verification().ok is False and verdict.verification().depth == "full"
    passed = Verdict()
    passed.establish("one")
    passed.establish("two")
    assert passed.verification().detail == "one; two"


def test_differences_name_the_first_and_count_them():
    assert differences([1, 2, 3], [1, 2, 3], what="bin") is None
    assert differences([1.0, 2.0], [1.0, 2.5], what="block", tolerance=0.4,
                       reported_as="sum {} reported", expected_as="{} recomputed") == (
        "block 1: sum 2 reported, 2.5 recomputed (1 of 2 blocks differ)")
    assert differences([np.nan, 1.0], [np.nan, 1.0], what="x") is None
    assert differences([1, 2], [1, 2, 3], what="bin") == "bins: 2 reported, 3 recomputed"


# --------------------------------------------------------------------------- certificates


def test_parts_that_do_not_add_up_from_their_cells_are_named():
    cells = np.random.default_rng(1).random(12)
    owners = np.repeat([0, 1, 2], 4)
    totals = np.add.reduceat(cells, [0, 4, 8])
    assert parts_add_up(totals, cells, owners, terms=4) is None
    totals[2] *= 1 + 1e-9
    assert parts_add_up(totals, cells, owners, terms=4).startswith("block 2:")


def test_a_fingerprint_adds_up_and_sees_a_moved_count():
    weights = fingerprint_weights(8, seed=5)
    rows = np.random.default_rng(2).integers(0, 100, (5, 8))
    total = sum(fingerprint(r, weights) for r in rows) % 2**64
    assert fingerprint(rows.sum(axis=0), weights) % 2**64 == total
    moved = rows.sum(axis=0)
    moved[[1, 2]] = moved[[2, 1]] + [1, -1] if moved[1] == moved[2] else moved[[2, 1]]
    assert fingerprint(moved, weights) % 2**64 != total


# --------------------------------------------------------------------------- probes


def test_freivalds_probes_pass_a_float32_product_and_catch_one_wrong_entry():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((60, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    c = a @ b
    r = Sampler(1, "probes").signs((40, 3))
    magnitude = np.abs(a.astype(np.float64)) @ (np.abs(b.astype(np.float64)) @ np.abs(r))
    recomputed = a.astype(np.float64) @ (b.astype(np.float64) @ r)
    assert compare_probes(c.astype(np.float64) @ r, recomputed, magnitude, terms=300,
                          dtype="float32")[0]
    c[7, 11] += 0.01 * abs(c[7, 11]) + 0.01
    ok, worst, _ = compare_probes(c.astype(np.float64) @ r, recomputed, magnitude, terms=300,
                                  dtype="float32")
    assert not ok and worst // 3 == 7


# --------------------------------------------------------------------------- the declaration


def _steps():
    seen = []

    def shape(ctx, result, verdict):
        seen.append("shape")
        verdict.require(len(result) == ctx["n"], f"values: {len(result)} for {ctx['n']}")

    def total(ctx, result, verdict):
        seen.append("total")
        if verdict.require(sum(result) == ctx["total"], f"total {sum(result)}"):
            verdict.establish(f"{ctx['n']} values add up to {ctx['total']}")

    return seen, shape, total


def test_a_declared_check_runs_its_depths_steps_in_order_and_stops_at_the_first_problem():
    seen, shape, total = _steps()
    check = Check(fast=(shape, total), full=lambda ctx: (shape, total, total))
    workload = Workload(collection=None, elements=3, nbytes=24, context={"n": 3, "total": 6})
    assert check(workload, [1, 2, 3]) == check(workload, [1, 2, 3], "fast")
    assert check(workload, [1, 2, 3], "full").detail == (
        "3 values add up to 6; 3 values add up to 6")
    seen.clear()
    failed = check(workload, [1, 2], "fast")
    assert not failed.ok and failed.detail == "values: 2 for 3" and seen == ["shape"]
    every = Check(fast=(shape, total), full=(), every_problem=True)
    assert every(workload, [1, 2]).detail == "values: 2 for 3; total 3"
    with pytest.raises(ValueError, match="choose one of fast, full"):
        check(workload, [1], "off")


def test_an_unreadable_result_is_a_failed_check_not_a_crash():
    def read(workload, raw):
        raise Unreadable(f"result {raw!r} carries no sums")

    check = Check(fast=(), full=(), read=read)
    workload = Workload(collection=None, elements=1, nbytes=8)
    assert check(workload, 0.5).detail == "result 0.5 carries no sums"


def test_depths_are_parsed_in_one_place():
    assert depths.parse(None) == depths.DEFAULT == "fast"
    with pytest.raises(ParameterError, match="--verify deep: choose fast, full, off"):
        depths.parse("deep")


def test_what_the_run_kept_for_the_fast_check_is_released_after_it_and_before_full():
    events = []

    def step(ctx, result, verdict):
        events.append(f"{verdict.depth} step")
        if result == "wrong":
            raise RuntimeError("a step that crashed")

    check = Check(fast=(step,), full=(step,), release=lambda ctx: events.append("released"))
    workload = Workload(collection=None, elements=1, nbytes=8)
    check(workload, 1, "fast")
    check(workload, 1, "full")
    assert events == ["fast step", "released", "released", "full step"]
    events.clear()
    with pytest.raises(RuntimeError):
        check(workload, "wrong", "fast")
    assert events == ["fast step", "released"]


def test_draws_at_given_rows_are_the_streams_own():
    from daskgpu.verification import replay

    rows = np.array([0, 1, 2, 7, 8, 100, 4095])
    whole = replay.stream(11, 3, 5).random(4096)
    np.testing.assert_array_equal(replay.uniform_rows(11, (3, 5), rows), whole[rows])
    np.testing.assert_array_equal(replay.uniform_at(11, 3, 10, 6, "float64"),
                                  replay.stream(11, 3).random(16)[10:])


def test_parts_are_combined_in_a_tree_on_the_workers():
    import dask

    from daskgpu.verification import replay

    seen = []

    def pairwise(a, b, scale):
        seen.append((a, b))
        return a + b * scale

    parts = [dask.delayed(float)(i) for i in range(5)]
    assert dask.compute(replay.combined(parts, pairwise, 1.0, width=2),
                        scheduler="sync")[0] == 10.0
    assert len(seen) == 4  # (0+1), (2+3), then (1+5), then (6+4): a lone part passed on
    total, kept, extras = replay.summed_on_workers(
        lambda i: (np.full(3, i), i * 10), [(i,) for i in range(20)], kept=(3,))
    assert total.tolist() == [190] * 3 and kept[0].tolist() == [3] * 3
    assert extras == [i * 10 for i in range(20)]


def test_the_rule_takes_arrays_of_magnitudes_and_of_terms():
    terms = np.array([1, 100, 10**6])
    assert np.array_equal(rounding(terms, "float32"),
                          [rounding(int(n), "float32") for n in terms])
    assert np.allclose(tolerance(np.array([1.0, 2.0, 3.0]), terms),
                       [tolerance(m, int(n)) for m, n in zip([1.0, 2.0, 3.0], terms, strict=True)])
