"""daskgpu.table_pipeline over the frames a user has in hand: pandas and Dask DataFrames.

The top-values example given ``input=`` a DataFrame: the Parquet file's answer, the object named
and never held in what the run reports, a Dask DataFrame used as its own graph (repartitioned
where its partitions do not suit, and said so) whose own partitions the check reads again, both
depths catching the declared mutation and a fault in the pipeline's computing function, and bad
frames refused in one line.
"""

from __future__ import annotations

import json
import sys

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

import daskgpu
from daskgpu.errors import InputFileError, InputTypeError, ParameterError
from daskgpu.testing import check_pipeline, compute_as_a_run
from daskgpu.toolkit import registry, table_checks

EXAMPLE = ROOT / "examples" / "top_values"
sys.path.insert(0, str(EXAMPLE))
from top_values import pipeline as example  # noqa: E402  (registers "top-values")

NAME = "top-values"
DEPTHS = ("fast", "full")
# Registered for this module's tests only: other modules walk every registered pipeline.
registry._REGISTRY.pop(NAME, None)


@pytest.fixture(scope="module", autouse=True)
def _example_registered():
    registry._REGISTRY[NAME] = example.top_values
    yield
    registry._REGISTRY.pop(NAME, None)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """3,000 rows of 60 keys, and a column the pipeline does not read."""
    rng = np.random.default_rng(5)
    return pd.DataFrame({"key": rng.integers(0, 60, 3_000), "value": rng.random(3_000),
                         "other": "x"})


def test_a_frame_gives_the_parquet_files_answer_and_is_named_not_held(in_process_client, table,
                                                                      tmp_path):
    path = tmp_path / "t.parquet"
    table.to_parquet(path)
    from_file = daskgpu.run(NAME, in_process_client, input=str(path), k=3, verify="full")
    assert from_file.verified, from_file.verification
    for given in (table, dd.from_pandas(table, npartitions=3)):
        result = daskgpu.run(NAME, in_process_client, input=given, k=3, verify="full")
        assert result.verified, result.verification
        assert result.value == from_file.value
        assert result.params["input"] == result.data["source"]
        assert result.params["input"].startswith(("pandas.DataFrame (3000 rows; columns key, ",
                                                  "dask.dataframe.DataFrame (3 partitions of "))
        assert result.data["format"] == "memory" and result.data["rows"] == 3_000
        assert result.params["seed"] is None and result.params["rows"] is None
        json.dumps(result.as_dict())  # nothing of the object in what a run reports


_READ: list[int] = []  # the rows of each frame partition the check read again
_PART_ROWS = table_checks._part_rows


def _counted_part_rows(shared, part):
    """``_part_rows`` noting the frame partitions it reads (a module's function: the in-process
    workers call this very one, and append to this very list)."""
    if part[0] == "frame":
        _READ.append(len(part[1]))
    return _PART_ROWS(shared, part)


def test_a_dask_frame_of_small_partitions_is_repartitioned_and_checked_on_its_own(
        in_process_client, table, monkeypatch):
    read = _READ
    read.clear()
    monkeypatch.setattr(table_checks, "_part_rows", _counted_part_rows)
    given = dd.from_pandas(table, npartitions=40)
    for depth in DEPTHS:
        result = daskgpu.run(NAME, in_process_client, input=given, k=2, verify=depth)
        assert result.verified, result.verification
        assert result.data["repartitioned"] == (
            "repartitioned from 40 partitions (at most 75 rows) to 2, the pipeline's")
        assert result.data["partitions"] == 2
    assert read == [75] * 80  # each depth read the frame's own 40 partitions, not the run's 2


@pytest.mark.parametrize("kind", ["pandas", "dask"])
def test_both_depths_catch_the_mutation_on_a_frame(in_process_client, table, kind):
    given = table if kind == "pandas" else dd.from_pandas(table, npartitions=3)
    report = check_pipeline(NAME, session=in_process_client, input=given, k=2)
    assert report.depths == DEPTHS
    assert {(c.mutation, c.depth) for c in report.caught} == {
        ("every tenth group changed", depth) for depth in DEPTHS}


@pytest.mark.parametrize("kind", ["pandas", "dask"])
def test_a_fault_in_the_computing_function_fails_both_depths(in_process_client, table,
                                                              monkeypatch, kind):
    """``top`` keeps, for every fifth key, a value 0.1 % above the one it was given, in every
    partition it reduces: a fifth of the groups wrong."""
    real = example.top

    def off(frame, k):
        kept = real(frame, k)
        return kept.assign(value=kept["value"].where(kept["key"] % 5 != 0,
                                                     kept["value"] * 1.001))

    monkeypatch.setattr(example, "top", off)
    given = table if kind == "pandas" else dd.from_pandas(table, npartitions=3)
    spec = daskgpu.get_pipeline(NAME)
    workload, raw = compute_as_a_run(spec, in_process_client, input=given, k=2)
    for depth in DEPTHS:
        check = spec.check(workload, raw, depth)
        assert not check.ok and "0: value [" in check.detail, (depth, check.detail)
        assert "reference" in check.detail


@pytest.mark.parametrize(("case", "kind", "message"), [
    ("columns", InputFileError, "pandas.DataFrame (3000 rows; columns key int64, other str): "
                                "missing column(s) value"),
    ("types", InputFileError, "wrong column type(s): key is number, needs integer"),
    ("empty", InputFileError, "the table is empty (no rows)"),
    ("series", InputFileError, "a Series, not a table"),
    ("dict", InputTypeError, "input=...: a dict is not an input daskgpu reads; give a path"),
    ("seed", ParameterError, "seed=...: applies to generated data, not to an input=...; drop"),
])
def test_a_bad_frame_is_refused_in_one_line(table, case, kind, message):
    given = {"columns": table.drop(columns=["value"]), "types": table.assign(key=table["key"] * .5),
             "empty": table.iloc[:0], "series": table["value"], "dict": {"key": [1]},
             "seed": table}[case]
    extra = {"seed": 3} if case == "seed" else {}
    spec = daskgpu.get_pipeline(NAME)
    with pytest.raises(kind) as caught:
        spec.workload(daskgpu.get_backend("cpu"), input=given, **extra)  # Python's spelling
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert isinstance(caught.value, ValueError)
