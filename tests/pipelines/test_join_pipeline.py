"""join-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
import pipelines.join.pipeline as jp
from daskgpu.data.synthetic_tables import left_frame, partition_bounds
from daskgpu.errors import ParameterError
from daskgpu.toolkit.backends import Backend, scheduler_workers
from daskgpu.verification import Verdict
from pipelines.join import check as join_check
from pipelines.join import check_replay
from pipelines.join import strategy as join_strategy
from pipelines.join import tasks as join_tasks
from pipelines.join.check_replay import lookup_totals
from pipelines.join.shared import BLOCK_ROWS, CELL_ROWS

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
ROWS = 200_000


def run(client, **params):
    result = daskgpu.run("join-pipeline", client=client, **params)
    assert result.verified, result.verification
    return result


def same_answer(a, b):
    """Counts exactly; sums and means up to the order of floating-point additions."""
    assert a.value["joined_rows"] == b.value["joined_rows"]
    agg_a, agg_b = a.value["aggregate"], b.value["aggregate"]
    assert agg_a["count"] == agg_b["count"]
    np.testing.assert_allclose(agg_a["sum_xy"], agg_b["sum_xy"], rtol=1e-12)
    assert [m is None for m in agg_a["mean_y"]] == [m is None for m in agg_b["mean_y"]]
    np.testing.assert_allclose([m or 0 for m in agg_a["mean_y"]],
                               [m or 0 for m in agg_b["mean_y"]], rtol=1e-12)


def pandas_tables(rows, match, seed, pieces=3):
    """The pipeline's two tables, made here in pieces by the same module functions."""
    return jp.pandas_tables(rows, match, seed, pieces)


def test_default_partitions_run_is_verified(cpu_client):
    result = run(cpu_client, rows=ROWS, seed=11)
    assert result.value["joined_rows"] == 60_000
    assert sum(result.value["aggregate"]["count"]) == 60_000
    assert result.data["seed"] == 11 and result.data["matched_rows"] == 60_000
    assert result.data["join"] == "broadcast"  # 3.2 MB of right table: broadcast
    assert "below spilling (smallest worker memory limit)" in result.data["join_reason"]
    assert result.data["left_partitions"] == 2  # a multiple of the 2 worker threads
    assert result.data["right_partitions"] == 1  # broadcast: the right table in one partition
    assert result.throughput["elements_per_s"] > 0


def test_answer_matches_pandas_on_the_whole_tables(cpu_client):
    result = run(cpu_client, rows=50_000, match=0.4, partitions=6, seed=2)
    left, right = pandas_tables(50_000, 0.4, 2)
    expected = join_tasks.aggregate(left.merge(right, on="key")).reindex(range(jp.GROUPS))
    agg = result.value["aggregate"]
    assert agg["count"] == expected["x"].fillna(0).astype(int).tolist()
    np.testing.assert_allclose(agg["sum_xy"], expected["xy"].fillna(0), rtol=1e-12)
    np.testing.assert_allclose(agg["mean_y"], expected["y"], rtol=1e-12)


@pytest.mark.parametrize("match", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("rows, partitions, broadcast", [(ROWS, 7, "auto"),
                                                         (200_003, 3, "false")])
def test_joined_count_is_exact(cpu_client, match, rows, partitions, broadcast):
    result = run(cpu_client, rows=rows, match=match, partitions=partitions, seed=5,
                 broadcast=broadcast)
    assert result.value["joined_rows"] == round(match * rows)
    assert sum(result.value["aggregate"]["count"]) == round(match * rows)
    assert result.data["left_partitions"] == partitions
    assert result.data["right_partitions"] == (1 if broadcast == "auto" else partitions)
    if match == 0:
        assert result.value["aggregate"]["mean_y"] == [None] * jp.GROUPS


def test_count_rounds_like_python(cpu_client):
    result = run(cpu_client, rows=200_001, match=0.5, partitions=4, seed=1)
    assert result.value["joined_rows"] == round(100_000.5) == 100_000


def test_tiny_tables(cpu_client):
    result = run(cpu_client, rows=3, match=1.0, partitions=3, seed=0)
    assert result.value["joined_rows"] == 3  # a right table of one row still takes every key


def test_same_seed_same_answer_whatever_the_partitions(cpu_client):
    first = run(cpu_client, rows=ROWS, partitions=4, seed=21)
    again = run(cpu_client, rows=ROWS, partitions=4, seed=21)
    assert first.value == again.value
    same_answer(first, run(cpu_client, rows=ROWS, partitions=9, seed=21))
    other = run(cpu_client, rows=ROWS, partitions=4, seed=22)
    assert other.value["aggregate"]["count"] != first.value["aggregate"]["count"]


def test_fresh_seed_is_reported(cpu_client):
    result = run(cpu_client, rows=20_000)
    assert isinstance(result.data["seed"], int)
    same_answer(result, run(cpu_client, rows=20_000, seed=result.data["seed"]))


STRATEGIES = {  # given options -> the join reported
    "auto": ({}, "broadcast"),
    "broadcast": ({"broadcast": "true"}, "broadcast"),
    "no broadcast": ({"broadcast": "false"}, "hash shuffle (tasks)"),
    "tasks": ({"shuffle": "tasks"}, "hash shuffle (tasks)"),
    "p2p": ({"shuffle": "p2p"}, "hash shuffle (p2p)"),
}


def test_every_strategy_gives_the_same_verified_answer(cpu_client):
    """Each strategy's answer passes the independent check, and all answers agree."""
    results = {name: run(cpu_client, rows=ROWS, partitions=6, seed=8, **given)
               for name, (given, _) in STRATEGIES.items()}
    for name, (_, join) in STRATEGIES.items():
        assert results[name].data["join"] == join, name
        same_answer(results["auto"], results[name])
    assert "asked for (--shuffle p2p)" == results["p2p"].data["join_reason"]
    assert results["broadcast"].data["right_partitions"] == 1
    assert results["tasks"].data["right_partitions"] == 6


def _task_names(workload) -> Counter:
    graph = dask.base.collections_to_expr(list(workload.collection.values())).optimize()
    return Counter(str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0]
                   for k in graph.__dask_graph__())


def _right_tasks(names: Counter) -> int:
    """Tasks making right-table partitions (on CPU, one making it keyed for the broadcast)."""
    return sum(n for name, n in names.items() if "join-right" in name or "_keyed" in name)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_graph_does_what_the_strategy_says(name):
    given, join = STRATEGIES[name]
    spec = daskgpu.get_pipeline("join-pipeline")
    names = _task_names(spec.workload(CPU2, rows=ROWS, partitions=5, seed=3, **given))
    shuffles = {n for n in names if "shuffle" in n or "hash-join" in n}
    if join == "broadcast":
        assert not shuffles and _right_tasks(names) == 1  # nothing of the left table moves
    elif "p2p" in join:
        assert "hash-join-transfer" in shuffles and "taskshuffle" not in shuffles
    else:
        assert "taskshuffle" in shuffles and "hash-join-transfer" not in shuffles


def test_tables_are_generated_once_in_one_graph():
    spec = daskgpu.get_pipeline("join-pipeline")
    for broadcast, right_parts in (("auto", 1), ("false", 5)):
        names = _task_names(spec.workload(CPU2, rows=ROWS, partitions=5, seed=3,
                                          broadcast=broadcast))
        assert names["join-left"] == 5 and _right_tasks(names) == right_parts
    workload = spec.workload(CPU2, rows=ROWS, partitions=5, seed=3)
    assert workload.elements == ROWS + ROWS // 10
    assert workload.nbytes == 16 * workload.elements


def test_generated_tables_have_the_promised_shape():
    rows, match, seed = 123_457, 0.37, 9
    left, right = pandas_tables(rows, match, seed, pieces=5)
    left2, right2 = pandas_tables(rows, match, seed, pieces=2)
    pd.testing.assert_frame_equal(left, left2)  # independent of the partitioning
    pd.testing.assert_frame_equal(right, right2)
    right_rows = rows // 10
    assert len(left) == rows and len(right) == right_rows
    assert list(left.dtypes) == [np.int64, np.float64]
    assert list(right.dtypes) == [np.int64, np.float64]
    assert sorted(right["key"]) == list(range(right_rows))  # unique keys 0..R-1
    assert int((left["key"] < right_rows).sum()) == round(match * rows)
    assert len(left.merge(right, on="key")) == round(match * rows)


def test_right_values_are_the_right_tables_y_whole_or_cut():
    from daskgpu.data.synthetic_tables import permutation, right_frame, right_values

    right_rows, seed = 2 * BLOCK_ROWS + 777, 4
    whole = right_values((0, right_rows), right_rows=right_rows, seed=seed)
    cuts = [0, 1000, BLOCK_ROWS, BLOCK_ROWS + 5, right_rows]
    pieces = [right_values((a, b), right_rows=right_rows, seed=seed)
              for a, b in zip(cuts, cuts[1:], strict=False)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    a, b = permutation(seed, right_rows)
    frame = right_frame((5, right_rows - 3), right_rows=right_rows, multiplier=a, offset=b,
                        seed=seed)
    np.testing.assert_array_equal(frame["y"].to_numpy(), whole[5:right_rows - 3])
    documented = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, 1)))
    np.testing.assert_array_equal(whole[BLOCK_ROWS:2 * BLOCK_ROWS],
                                  documented.random(BLOCK_ROWS))


def computed(session, **params):
    return compute_as_runner(session, "join-pipeline", **params)


check = verify_on


def altered(raw, group, column, change):
    table = raw["aggregate"].copy()
    table.loc[group, column] = change(table.loc[group, column])
    return dict(raw, aggregate=table)


def test_timed_compute_holds_only_the_reported_value():
    spec = daskgpu.get_pipeline("join-pipeline")
    workload = spec.workload(CPU2, rows=ROWS, partitions=5, seed=4)
    assert set(workload.collection) == {"joined_rows", "aggregate", "cells"}  # + certificates


def test_verification_catches_small_changes_of_any_aggregate(cpu_client):
    spec, workload, raw = computed(cpu_client, rows=ROWS, partitions=5, seed=4)
    found = check(cpu_client, spec, workload, raw)
    assert found.ok and f"all {ROWS} left rows" in found.detail, found.detail
    for column, word in (("xy", "sum_xy"), ("y", "mean_y")):
        result = check(cpu_client, spec, workload,
                       altered(raw, 5, column, lambda v: v * (1 + 1e-9)))
        assert not result.ok and f"group 5: {word}" in result.detail, result.detail
        assert "\n" not in result.detail
    result = check(cpu_client, spec, workload, altered(raw, 7, "x", lambda v: v - 1))
    assert not result.ok and "group 7: count" in result.detail, result.detail
    result = check(cpu_client, spec, workload, altered(raw, 2, "y", lambda v: float("nan")))
    assert not result.ok and "group 2: mean_y none (no rows) vs lookup" in result.detail
    missing = dict(raw, aggregate=raw["aggregate"].drop(index=3))
    result = check(cpu_client, spec, workload, missing)
    assert not result.ok and "group 3: count 0 vs lookup" in result.detail, result.detail


def test_verification_of_a_join_without_partners(cpu_client):
    spec, workload, raw = computed(cpu_client, rows=50_000, match=0.0, partitions=3, seed=2)
    assert check(cpu_client, spec, workload, raw).ok
    invented = dict(raw, aggregate=pd.DataFrame({"x": [1], "xy": [0.5], "y": [0.5]}, index=[4]))
    result = check(cpu_client, spec, workload, invented)
    assert not result.ok
    assert "group 4: count 1 vs lookup 0, sum_xy 0.5 vs lookup 0, mean_y 0.5 vs lookup none" \
        in result.detail


def test_verification_refuses_a_right_table_whose_keys_repeat(cpu_client):
    spec, workload, raw = computed(cpu_client, rows=ROWS, partitions=5, seed=4)
    right = workload.context.right.compute(scheduler=cpu_client.client).reset_index(drop=True)
    right.loc[1, "key"] = right.loc[0, "key"]
    broken = replace(workload.context, right=dd.from_pandas(right, npartitions=3))
    result = check(cpu_client, spec, replace(workload, context=broken), raw)
    assert not result.ok
    assert f"right keys: {ROWS // 10} rows hold {ROWS // 10 - 1} of the keys" in result.detail
    assert "(1 repeated); the lookup needs each once" in result.detail


def test_lookup_totals_equal_pandas_merge_and_groupby(cpu_client):
    left, right = pandas_tables(30_000, 0.6, 12)
    left_parts = dd.from_pandas(left, npartitions=4)
    cells = -(-len(left) // CELL_ROWS)
    with dask.config.set(scheduler=cpu_client.client):
        rows, right_keys, sums = lookup_totals(left_parts, dd.from_pandas(right, npartitions=2),
                                               len(right), left_parts.divisions[:-1], cells)
    joined = left.reset_index().merge(right, on="key")
    groups = joined["key"] % jp.GROUPS
    assert right_keys == (len(right), len(right), 0)  # rows, distinct keys, repeated keys
    assert rows == len(left)
    expected = joined.groupby(groups)
    totals = check_replay.Sums(*(s.sum(axis=0) for s in sums))
    np.testing.assert_array_equal(totals.count, expected.size().reindex(range(16), fill_value=0))
    np.testing.assert_allclose(totals.sum_xy,
                               (joined["x"] * joined["y"]).groupby(groups).sum(), rtol=1e-12)
    np.testing.assert_allclose(totals.sum_y, expected["y"].sum(), rtol=1e-12)
    cell = (joined["index"] // CELL_ROWS) * jp.GROUPS + groups  # and so, cell by cell
    np.testing.assert_array_equal(sums.count.ravel(), np.bincount(cell, minlength=cells * 16))
    np.testing.assert_allclose(sums.sum_y.ravel(),
                               np.bincount(cell, weights=joined["y"], minlength=cells * 16),
                               rtol=1e-12)


@pytest.mark.parametrize(
    "params, message",
    [({"rows": 0}, "--rows 0: must be a positive integer"),
     ({"rows": -5}, "--rows -5: must be a positive integer"),
     ({"rows": 10**11}, "--rows .*at most"),
     ({"match": 1.5}, "--match 1.5: must be between 0 and 1"),
     ({"match": -0.1}, "--match -0.1: must be between 0 and 1"),
     ({"match": "nan"}, "--match nan: must be a finite number"),
     ({"partitions": 0}, "--partitions 0: must be a positive integer"),
     ({"rows": 100, "partitions": 101}, "--partitions 101: more partitions than left rows "
                                        r"\(--rows 100\)"),
     ({"partitions": 10**8}, "--rows defaults to"),
     ({"broadcast": "maybe"}, "--broadcast maybe: choose one of auto, true, false"),
     ({"shuffle": "foo"}, "--shuffle foo: choose one of auto, tasks, p2p"),
     ({"broadcast": "true", "shuffle": "tasks"}, "--shuffle tasks: a broadcast join shuffles "
                                                 "nothing; give --broadcast true or --shuffle"),
     ({"seed": -1}, "--seed -1: must be 0 or more"),
     ({"size": 10}, "no parameter 'size'")],
)
def test_bad_parameters(params, message):
    with pytest.raises(ParameterError, match=message) as info:
        daskgpu.get_pipeline("join-pipeline").resolve(**params)
    assert "\n" not in str(info.value)


def test_cli_json_run():
    proc = run_cli("run", "join-pipeline", "--rows", "100_000", "--match", "0.25",
                   "--partitions", "3", "--seed", "7", "--cpu", "--workers", "2",
                   "--no-dashboard", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True, doc["verification"]
    assert doc["value"]["joined_rows"] == 25_000
    assert sum(doc["value"]["aggregate"]["count"]) == 25_000
    assert doc["params"] == {"rows": 100_000, "match": 0.25, "partitions": 3,
                             "broadcast": "auto", "shuffle": "auto", "seed": 7}
    assert doc["data"]["seed"] == 7
    assert doc["data"]["join"] == "broadcast" and doc["data"]["right_partitions"] == 1
    assert "costs less than shuffling both tables" in doc["data"]["join_reason"]


@pytest.mark.parametrize(
    "args, message",
    [(["--match", "1.5"], "--match"), (["--match", "x"], "must be a number"),
     (["--rows", "0"], "--rows"), (["--broadcast", "maybe"], "auto, true, false"),
     (["--shuffle", "foo"], "'--shuffle': choose one of auto, tasks, p2p"),
     (["--broadcast", "true", "--shuffle", "p2p"], "a broadcast join shuffles nothing"),
     (["--rows", "10", "--partitions", "11"], "more partitions than left rows")],
)
def test_cli_bad_input_is_one_line(args, message):
    proc = run_cli("run", "join-pipeline", *args, "--cpu", "--no-dashboard")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_gpu_backend_without_cudf_is_refused():
    from daskgpu.errors import BackendUnavailable

    gpu = Backend("gpu", "cupy", "cudf", workers=1, threads=1)
    with pytest.raises(BackendUnavailable, match="join-pipeline on GPUs needs cuDF"):
        daskgpu.get_pipeline("join-pipeline").workload(gpu, rows=100)


# ------------------------------------------------------------------ the strategy, by size

GIB = 2**30


def choose(memory=None, **given):
    sizes = dict(left_rows=10_000_000, right_rows=1_000_000, left_partitions=10, row_bytes=16)
    return join_strategy.choose(CPU2, **{**sizes, **given},
                                memory=memory or join_strategy.WorkerMemory(8 * GIB, 1, "test"))


def test_a_small_right_table_is_broadcast():
    strategy = choose()
    assert strategy.broadcast and strategy.name == "broadcast"
    assert strategy.reason.startswith("right table 16 MB: a copy and 1 merge(s) per worker "
                                      "need 80 MB of the 5.15 GB below spilling (test)")


def test_a_right_table_that_does_not_fit_a_worker_is_shuffled():
    # 16 MB right table, 4 merges at once: 272 MB, above 60 % of 400 MB.
    strategy = choose(memory=join_strategy.WorkerMemory(400 * 10**6, 4, "test"))
    assert not strategy.broadcast and strategy.name == "hash shuffle (tasks)"
    assert "need 272 MB, more than the 240 MB below spilling" in strategy.reason
    with dask.config.set({"distributed.worker.memory.target": 0.9}):  # Dask's threshold decides
        assert choose(memory=join_strategy.WorkerMemory(400 * 10**6, 4, "test")).broadcast


def test_a_right_table_hashed_for_too_many_left_partitions_is_shuffled():
    # Each left partition hashes the right table again: 100 x 10 M rows against 7 x 110 M.
    strategy = choose(left_rows=100_000_000, right_rows=10_000_000, left_partitions=100)
    assert not strategy.broadcast
    assert "hashing it 100 time(s) costs more than shuffling both tables" in strategy.reason
    assert choose(left_rows=100_000_000, right_rows=10_000_000, left_partitions=70).broadcast
    # Once per worker where the worker's joins share the hash table.
    assert choose(left_rows=100_000_000, right_rows=10_000_000, left_partitions=100,
                  builds=2).broadcast


def test_pandas_workers_hash_the_right_table_once_each():
    spec = daskgpu.get_pipeline("join-pipeline")
    names = _task_names(spec.workload(CPU2, rows=ROWS, partitions=5, seed=3))
    assert names["_probe"] == 5 and not any("merge" in n for n in names)
    reason = spec.workload(CPU2, rows=ROWS, partitions=5, seed=3).description["join_reason"]
    assert "hashing it 2 time(s) costs less" in reason  # once per worker, not per partition


@pytest.mark.parametrize("repeat", [False, True])
def test_probe_equals_pandas_merge(repeat):
    rng = np.random.default_rng(4)
    right = pd.DataFrame({"key": rng.permutation(1000), "y": rng.random(1000)})
    if repeat:  # a key held twice: the lookup cannot stand for the join, a merge does
        right.loc[1, "key"] = right.loc[0, "key"]
    for left in (pd.DataFrame({"key": rng.integers(-5, 1500, 5000), "x": rng.random(5000)}),
                 join_tasks.LEFT_META, pd.DataFrame({"key": [2000], "x": [0.5]})):
        got = join_tasks._probe(left, join_tasks._keyed(right))
        want = left.merge(right, on="key", how="inner")
        pd.testing.assert_frame_equal(
            got.sort_values(["key", "x", "y"]).reset_index(drop=True),
            want.sort_values(["key", "x", "y"]).reset_index(drop=True))


def test_options_override_the_choice():
    huge = join_strategy.WorkerMemory(1, 1, "test")  # nothing fits
    assert choose(memory=huge, broadcast="true").broadcast
    assert choose(broadcast="false").name == "hash shuffle (tasks)"
    assert choose(shuffle="p2p").name == "hash shuffle (p2p)"
    assert choose(broadcast="false", shuffle="p2p").reason == "asked for (--broadcast false)"
    with dask.config.set({"dataframe.shuffle.method": "disk"}):
        assert choose(broadcast="false").name == "hash shuffle (disk)"


def test_worker_memory_is_read_from_the_cluster(cpu_client):
    limits = [w["memory_limit"] for w in scheduler_workers(cpu_client.client).values()]
    memory = join_strategy.worker_memory(CPU2, cpu_client.client)
    assert memory.limit == min(limits) and memory.threads == 1
    with dask.config.set(scheduler=cpu_client.client):  # as the runner builds graphs
        assert join_strategy.worker_memory(CPU2) == memory
    assert join_strategy.worker_memory(CPU2).source == "host memory per worker"  # no cluster


# --- the fast depth: cell certificates, every block's count, faults in the computation --------

FAST = {"rows": 2_000_000, "partitions": 4, "seed": 7}  # 489 cells of 4096 left rows, 62 drawn
DEPTHS = ("fast", "full")


def _both(session, spec, workload, raw) -> dict:
    return {depth: check(session, spec, workload, raw, depth) for depth in DEPTHS}


@pytest.mark.parametrize("broadcast", ["auto", "false"])
def test_the_fast_depth_draws_cells_and_says_what_it_promises(in_process_client, broadcast):
    spec, workload, raw = computed(in_process_client, broadcast=broadcast, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert all(c.ok for c in checks.values()), {d: c.detail for d, c in checks.items()}
    assert ("62 of 489 cells checked again: a fault in at least 10 % of the cells is caught "
            "with probability at least 99.9 %") in checks["fast"].detail
    assert "each block's joined rows equal its definition's" in checks["fast"].detail
    totals = join_check.certified(raw["cells"], 489)  # none outside the cells
    assert totals.count.sum() == 600_000


def test_certified_cells_equal_a_merge_of_the_tables():
    """The run's per-cell sums, on one process: a pandas merge of each cell's rows."""
    rows, match, seed = 300_000, 0.3, 3
    spec = daskgpu.get_pipeline("join-pipeline")
    workload = spec.workload(CPU2, rows=rows, match=match, partitions=3, seed=seed)
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
    totals = join_check.certified(raw["cells"], workload.context.cells.total)
    left, right = pandas_tables(rows, match, seed)
    joined = left.reset_index().merge(right, on="key")
    cell = (joined["index"] // CELL_ROWS) * jp.GROUPS + joined["key"] % jp.GROUPS
    size = totals.count.size
    np.testing.assert_array_equal(totals.count.ravel(), np.bincount(cell, minlength=size))
    np.testing.assert_allclose(totals.sum_y.ravel(),
                               np.bincount(cell, weights=joined["y"], minlength=size),
                               rtol=1e-12)
    verdict = Verdict("fast")
    join_check.blocks_as_defined(workload.context, join_check.Reading({}, totals), verdict)
    assert verdict.ok, verdict.detail()
    block = np.arange(len(totals.count)) * CELL_ROWS // BLOCK_ROWS
    matched, edges = round(match * rows), [min(rows, b * BLOCK_ROWS) for b in range(6)]
    np.testing.assert_array_equal(  # floor(M b1 / N) - floor(M b0 / N) matching rows a block
        np.bincount(block, weights=totals.count.sum(axis=1)),
        np.diff([matched * edge // rows for edge in edges]))


def _faulty_probe(monkeypatch, change):
    """``_probe`` (the broadcast join of one left partition) changed by ``change``."""
    real = join_tasks._probe
    monkeypatch.setattr(join_tasks, "_probe", lambda left, keyed: change(real(left, keyed)))


def _y_high_in_first_rows(joined):
    """y 0.1 % high for the partners of each partition's first 200000 rows (two fifths of the
    cells)."""
    y = joined["y"].to_numpy().copy()
    y[joined.index.to_numpy() < 200_000] *= 1.001
    return joined.assign(y=y)


def _partner_shifted(joined):
    """The partners' y moved by one row in the partitions whose first joined x is below 0.5."""
    if len(joined) and joined["x"].iloc[0] < 0.5:
        return joined.assign(y=np.roll(joined["y"].to_numpy(), 1))
    return joined


def _rows_lost(joined):
    """The last 30 joined rows of each partition lost."""
    return joined.iloc[:-30]


@pytest.mark.parametrize(("change", "seen"), [
    (_y_high_in_first_rows, "drawn again"), (_partner_shifted, "drawn again"),
    (_rows_lost, "other joined rows than their definition")],
    ids=["y 0.1 % high on two fifths of the cells",
         "partners misplaced by one row in some partitions",
         "a probe losing 30 rows per partition"])
def test_a_join_fault_fails_both_depths(in_process_client, monkeypatch, change, seen):
    _faulty_probe(monkeypatch, change)
    spec, workload, raw = computed(in_process_client, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and not checks["fast"].ok, {d: c.detail for d, c in
                                                             checks.items()}
    assert seen in checks["fast"].detail, checks["fast"].detail


def test_an_aggregate_off_by_a_twentieth_percent_fails_both_depths(in_process_client,
                                                                   monkeypatch):
    """The aggregate's sums of x*y 0.05 % high in every group."""
    real = join_tasks.aggregate

    def high(joined):
        table = real(joined)
        return table.assign(xy=table["xy"] * 1.0005)

    monkeypatch.setattr(join_tasks, "aggregate", high)
    spec, workload, raw = computed(in_process_client, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and not checks["fast"].ok
    assert "sum_xy" in checks["fast"].detail and "vs cells" in checks["fast"].detail


def test_a_shuffle_join_losing_rows_fails_both_depths(in_process_client, monkeypatch):
    """A hash-shuffled merge that drops the joined rows of keys 0..9999 (a few per block)."""
    real = pd.DataFrame.merge

    def merge(self, *args, **kwargs):
        joined = real(self, *args, **kwargs)
        return joined[joined["key"] >= 10_000] if "y" in joined and "x" in joined else joined

    monkeypatch.setattr(pd.DataFrame, "merge", merge)
    spec, workload, raw = computed(in_process_client, broadcast="false", **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and not checks["fast"].ok
    assert "other joined rows than their definition" in checks["fast"].detail


# Five left partitions of one block (16 cells) each: a random one (seeded, not the first) and
# the last. A partition holds a fifth of the cells, so the fast sample (a tenth caught at
# 99.9 %) finds it; full looks every cell up.
ONE_PARTITION = {"random": int(np.random.default_rng(12).integers(1, 4)), "last": 4}
SMALL = {"rows": 5 * BLOCK_ROWS, "partitions": 5, "seed": 3}


def _first_x(partition: int) -> float:
    """The x of a left partition's first row, as the tables' definition draws it."""
    start = partition_bounds(SMALL["rows"], SMALL["partitions"])[partition][0]
    rows = SMALL["rows"]
    return float(left_frame((start, start + 1), rows=rows, right_rows=rows // 10,
                            matched=round(0.3 * rows), seed=SMALL["seed"])["x"].iloc[0])


@pytest.mark.parametrize("where", sorted(ONE_PARTITION))
def test_a_fault_in_one_partition_fails_both_depths_naming_it(in_process_client, monkeypatch,
                                                               where):
    """The partners' y 0.1 % high in the joined rows of one left partition (its probe)."""
    partition = ONE_PARTITION[where]
    first_x = _first_x(partition)
    real = join_tasks._probe

    def probe(left, keyed):
        joined = real(left, keyed)
        mine = len(left) and left["x"].iloc[0] == first_x
        return joined.assign(y=joined["y"] * 1.001) if mine else joined

    monkeypatch.setattr(join_tasks, "_probe", probe)
    spec, workload, raw = computed(in_process_client, **SMALL)
    checks = _both(in_process_client, spec, workload, raw)
    for depth, again in (("fast", "drawn again"), ("full", "looked up")):
        detail = checks[depth].detail
        assert not checks[depth].ok and f"(partition {partition}), group " in detail, detail
        assert re.search(rf"sum_xy \S+ certified, \S+ {again}", detail), detail
        assert "partition" not in detail.replace(f"partition {partition})", ""), detail


def test_the_full_depth_checks_every_cells_certificate(in_process_client):
    """One certificate's sum of y changed: the fast sample may miss it, full never does."""
    spec, workload, raw = computed(in_process_client, **SMALL)
    cells = raw["cells"].reset_index(drop=True)
    row = int(np.flatnonzero(cells["cell"].to_numpy() == 77)[0])  # a cell of partition 4
    cells.loc[cells.index[row], "sum_y"] += 1e-6
    found = check(in_process_client, spec, workload, dict(raw, cells=cells), "full")
    assert not found.ok and "cell 77 (partition 4), group" in found.detail, found.detail
    assert "sum_y" in found.detail and "looked up (1 of 1280 cell groups differ)" in found.detail


def test_redrawn_cells_compute_with_the_array_library_named(cupy_stand_in, monkeypatch):
    """The sample's lookups and sums go through the library the workers compute with (CuPy on
    GPU workers; the strict stand-in here) and give the NumPy answer."""
    names = ("asarray", "bincount")
    calls = Counter()
    for name in names:
        real = getattr(cupy_stand_in, name)
        monkeypatch.setattr(cupy_stand_in, name, lambda *a, _real=real, _name=name, **k: (
            calls.update([_name]), _real(*a, **k))[1])
    sizes = (300_000, 30_000, 90_000)  # rows, right rows, matched rows
    cells = list(range(16)) + [50]  # the first block's cells, and one of the fourth block
    got = check_replay.redrawn_cells(cells, *sizes, 5, "cupy")
    want = check_replay.redrawn_cells(cells, *sizes, 5, "numpy")
    assert calls["asarray"] == 1 + 2 * 17 and calls["bincount"] == 3 * 17
    for a, w in zip(got, want, strict=True):
        assert isinstance(a, np.ndarray) and a.shape == (17, 16)  # on the host, a row a cell
        np.testing.assert_array_equal(a, w)
    assert got.count[:16].sum() == 90_000 * BLOCK_ROWS // 300_000  # the first block's, defined


def test_cell_sums_of_device_partitions_stay_on_the_device_until_small(cupy_stand_in):
    """The run's certificates of a cuDF partition (the strict stand-ins): arrays from its
    columns (``.values``), the bincounts in their library, only the non-empty cells copied to
    the host; the pandas partition's sums."""
    import strict_cupy

    joined = pd.DataFrame({"key": [1, 17, 2, 5], "x": [0.5, 0.25, 1.0, 2.0],
                           "y": [2.0, 4.0, 1.0, 0.5], "row": [0, 1, 2 * CELL_ROWS, 3]})
    got = join_tasks._cell_sums(strict_cupy.DataFrame(joined), (0,))
    assert isinstance(got, pd.DataFrame)
    pd.testing.assert_frame_equal(got, join_tasks._cell_sums(joined, (0,)))
    assert got.to_dict("list") == {"cell": [0, 0, 2], "group": [1, 5, 2], "count": [2, 1, 1],
                                   "sum_xy": [2.0, 1.0, 1.0], "sum_y": [6.0, 0.5, 1.0]}
    by_index = joined.drop(columns="row").set_index(pd.Index([0, 1, 2 * CELL_ROWS, 3]))
    pd.testing.assert_frame_equal(
        join_tasks._cell_sums(strict_cupy.DataFrame(by_index), (0, 7), {"number": 0}), got)
    numbered = join_tasks._with_rows(strict_cupy.DataFrame(joined.drop(columns="row")), (5,))
    assert isinstance(numbered, strict_cupy.DataFrame)
    pd.testing.assert_frame_equal(numbered.to_pandas(),
                                  join_tasks._with_rows(joined.drop(columns="row"), (5,)))


@pytest.mark.gpu
@pytest.mark.parametrize("depth", DEPTHS)
def test_on_cudf_workers_both_depths_verify_and_catch_a_mutation(depth):
    pytest.importorskip("cudf")
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = computed(session, rows=1_000_000, seed=4)
        assert session.backend.is_gpu
        assert check(session, spec, workload, raw, depth).ok
        mutation = spec.mutations[0]
        found = check(session, spec, workload, mutation.alter(raw), depth)
        assert not found.ok and mutation.named_in(found.detail)
