"""daskgpu.table_pipeline and checks.groups_recomputed: the top-values example runs over random
rows and Parquet/CSV inputs, checks its answer and catches wrong ones; its data options are
refused before any cluster starts."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, cli_with_plugin_no_cluster

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.testing import check_pipeline, compute_as_a_run
from daskgpu.toolkit import registry, table_checks
from daskgpu.toolkit import table_pipeline as tables

EXAMPLE = ROOT / "examples" / "top_values"
sys.path.insert(0, str(EXAMPLE))
from top_values import pipeline as example  # noqa: E402  (registers "top-values")

NAME = "top-values"
COLUMNS = {"key": daskgpu.Column.integers(0, 1000), "value": daskgpu.Column.uniform()}
# Registered for this module's tests only: other modules walk every registered pipeline.
registry._REGISTRY.pop(NAME, None)


@pytest.fixture(scope="module", autouse=True)
def _example_registered():
    registry._REGISTRY[NAME] = example.top_values
    yield
    registry._REGISTRY.pop(NAME, None)


@pytest.fixture(scope="module")
def session():
    """Two one-thread CPU workers that can import the example plugin (as if installed)."""
    with pytest.MonkeyPatch.context() as patch:
        paths = [str(EXAMPLE), str(ROOT), os.environ.get("PYTHONPATH", "")]
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1,
                             dashboard=False) as started:
            yield started


def _random_table(rows, partitions, seed) -> pd.DataFrame:
    parts = [tables.draw_partition(COLUMNS, seed, p, b - a)
             for p, (a, b) in enumerate(tables.partition_bounds(rows, partitions))]
    return pd.concat(parts, ignore_index=True)


def _pandas_top(frame: pd.DataFrame, k: int) -> list[dict]:
    """The answer by pandas alone, as the default present reports it."""
    ranked = frame.sort_values(["key", "value"], ascending=[True, False], kind="stable")
    top = ranked.groupby("key").head(k).reset_index(drop=True)
    return top.to_dict(orient="records")


# --------------------------------------------------------------------------- the example


def test_the_example_is_thirty_lines_at_most():
    lines = (EXAMPLE / "top_values" / "pipeline.py").read_text().splitlines()
    assert len(lines) <= 30, len(lines)
    assert example.top_values.name == NAME


def test_the_example_runs_and_verifies_on_random_rows(session):
    result = daskgpu.run(NAME, session, rows=5000, partitions=3, seed=4, k=2)
    assert result.verified, result.verification
    assert result.value == _pandas_top(_random_table(5000, 3, 4), 2)
    json.dumps(result.value)
    assert result.data["rows"] == 5000 and result.data["partitions"] == 3
    assert result.data["source"] == "random" and result.data["seed"] == 4
    assert result.elements == 10_000 and result.nbytes == 80_000
    assert "every group equals reference" in result.verification
    assert "keys checked again" in result.verification


def test_check_pipeline_passes_the_example_at_both_depths(session):
    report = check_pipeline(NAME, session=session, rows=3000, partitions=4, seed=7)
    assert report.depths == ("fast", "full")
    assert {c.mutation for c in report.caught} == {"every tenth group changed"}
    assert all("key " in c.detail for c in report.caught)


def test_csv_and_parquet_inputs_are_read_and_checked(session, tmp_path):
    frame = pd.DataFrame({"key": np.arange(300) % 7, "value": np.linspace(0, 1, 300) ** 2,
                          "other": 1.0})
    frame.iloc[:150].to_parquet(tmp_path / "a.parquet")
    frame.iloc[150:].to_parquet(tmp_path / "b.parquet")
    frame.to_csv(tmp_path / "t.csv", index=False)
    for path in (str(tmp_path / "*.parquet"), str(tmp_path / "t.csv")):
        for depth in ("fast", "full"):
            result = daskgpu.run(NAME, session, input=path, k=3, verify=depth)
            assert result.verified, (path, depth, result.verification)
            assert result.value == _pandas_top(frame[["key", "value"]], 3), path
            assert result.data["rows"] == 300


def test_a_wrong_answer_is_caught_naming_the_key(session):
    spec = daskgpu.get_pipeline(NAME)
    workload, raw = compute_as_a_run(spec, session, rows=4000, partitions=2, seed=1, k=2)
    assert spec.check(workload, raw, "fast").ok and spec.check(workload, raw, "full").ok
    # One key wrong: every key is checked at full.
    dropped = raw[raw["key"] != 17]
    extra = pd.concat([raw, pd.DataFrame({"key": [5000], "value": [0.5]})])
    swapped = raw.copy()
    swapped.loc[swapped.index[:2], "value"] = swapped["value"].iloc[:2].to_numpy()[::-1]
    missing = spec.check(workload, dropped, "full")
    assert not missing.ok and "key 17: 0 rows in the result, the reference gives" in \
        missing.detail
    made_up = spec.check(workload, extra, "full")
    assert not made_up.ok and "key 5000: 1 rows in the result, none in the table" in \
        made_up.detail
    reordered = spec.check(workload, swapped, "full")
    assert not reordered.ok and "key 0: value" in reordered.detail
    # A fifth of the keys wrong: the fast sample finds some.
    keys = np.arange(1000)
    fewer = spec.check(workload, raw[~raw["key"].isin(keys[::5])], "fast")
    assert not fewer.ok and "rows in the result, the reference gives 2" in fewer.detail
    invented = pd.DataFrame({"key": 1000 + keys[:300], "value": 0.5})
    more = spec.check(workload, pd.concat([raw, invented]), "fast")
    assert not more.ok and "rows in the result, none in the table" in more.detail
    lacking = spec.check(workload, raw.rename(columns={"key": "k"}), "fast")
    assert not lacking.ok and "no column 'key'" in lacking.detail


def test_full_checks_every_key_in_batches(session, monkeypatch):
    monkeypatch.setattr(table_checks, "BATCH_BYTES", 20_000 * 16 // 5)  # five passes
    spec = daskgpu.get_pipeline(NAME)
    workload, raw = compute_as_a_run(spec, session, rows=20_000, partitions=3, seed=2, k=1)
    verdict = spec.check(workload, raw, "full")
    assert verdict.ok and "all 1000 keys checked again" in verdict.detail
    changed = raw.copy()
    changed.loc[changed["key"] == 999, "value"] += 1
    verdict = spec.check(workload, changed, "full")
    assert not verdict.ok and "key 999:" in verdict.detail and "1 groups differ" in verdict.detail


def test_fast_samples_keys_with_the_promise_stated(session):
    result = daskgpu.run(NAME, session, rows=20_000, partitions=2, seed=3)
    assert result.verified
    assert "of 1000 keys checked again: a fault in at least 10 % of the keys is caught with " \
           "probability at least 99.9 %" in result.verification


# --------------------------------------------------------------------------- refusals


def _cli(*args):
    """The command line with the example registered, where starting a cluster exits 99."""
    return cli_with_plugin_no_cluster(EXAMPLE, "top_values.pipeline", *args)


def test_bad_data_options_are_one_line_and_exit_2_before_any_cluster(tmp_path):
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    pd.DataFrame({"key": [1, 2], "value": [0.1, 0.2]}).to_parquet(good)
    pd.DataFrame({"key": [1, 2], "amount": [0.1, 0.2]}).to_parquet(bad)
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
    cases = {
        ("--partitions", "10", "--rows", "5"): "--partitions 10: more parts than --rows 5",
        ("--partitions", "0"): "--partitions",
        ("--rows", "2000000", "--partitions", "2000000"): "--partitions 2000000: at most 1e+06",
        ("--rows", "200000000000", "--partitions", "1"): "more than any worker's memory",
        ("--rows", "10" + "0" * 15): "at most 1e+06 fit in one graph",
        ("--input", str(good), "--seed", "3"): "--seed: applies to generated data",
        ("--input", str(bad)): "value",
        ("--input", str(tmp_path / "corrupt.parquet")): "corrupt.parquet",
        ("--input", str(tmp_path / "missing.parquet")): "no such file or directory",
    }
    for args, expected in cases.items():
        proc = _cli("run", NAME, "--cpu", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_resolving_refuses_bad_data_options(tmp_path):
    spec = daskgpu.get_pipeline(NAME)
    with pytest.raises(ParameterError, match="more parts than --rows"):
        spec.resolve(rows=3, partitions=4)
    wrong_kind = tmp_path / "w.parquet"
    pd.DataFrame({"key": [0.5, 1.5], "value": [1.0, 2.0]}).to_parquet(wrong_kind)
    with pytest.raises(InputFileError, match="key"):
        spec.resolve(input=str(wrong_kind))


def test_a_definition_is_checked_when_it_is_made():
    groups = daskgpu.checks.groups_recomputed(lambda rows: rows, by="key")
    seed = daskgpu.Param("rows", daskgpu.positive_int, 1, "Rows.")
    with pytest.raises(ValueError, match="parameter rows is one table_pipeline gives"):
        daskgpu.table_pipeline("x-test", "x", columns={"key": daskgpu.Column.integers()},
                               params=[seed], check=groups)
    with pytest.raises(ValueError, match="columns: give"):
        daskgpu.table_pipeline("x-test", "x", columns={"key": "integer"}, check=groups)
    with pytest.raises(ValueError, match="low < high"):
        daskgpu.Column.integers(5, 5)
    with pytest.raises(ValueError, match="std > 0"):
        daskgpu.Column.normal(0, 0)


# --------------------------------------------------------------------------- the parts


def test_random_tables_follow_the_documented_scheme():
    columns = {"key": daskgpu.Column.integers(3, 9), "x": daskgpu.Column.normal(10, 2)}
    part = tables.draw_partition(columns, 11, 2, 1000)
    rng = np.random.default_rng(np.random.SeedSequence(11, spawn_key=(2,)))
    assert np.array_equal(part["key"], rng.integers(3, 9, 1000, dtype=np.int64))
    assert np.array_equal(part["x"], rng.normal(10, 2, 1000))
    assert tables.partition_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]


def test_the_default_present_and_mutation():
    raw = pd.DataFrame({"key": np.repeat(np.arange(25), 2), "value": np.arange(50.0)})
    value = tables.present_table(None, raw)
    assert value[:2] == [{"key": 0, "value": 0.0}, {"key": 0, "value": 1.0}]
    assert isinstance(value[0]["key"], int)
    big = pd.DataFrame({"a": np.zeros(tables.LIST_LIMIT + 1)})
    assert isinstance(tables.present_table(None, big), pd.DataFrame)
    changed = tables.every_tenth_group_changed("key").alter(raw)
    moved = changed["value"] != raw["value"]
    assert set(changed.loc[moved, "key"]) == {0, 10, 20}
    assert (changed["key"] == raw["key"]).all()
