"""daskgpu.array_pipeline and daskgpu.checks: the example plugin in thirty lines runs, checks
its answer and catches wrong ones; its data options are refused before any cluster starts."""

from __future__ import annotations

import json
import math
import os
import sys
import types

import dask
import numpy as np
import pytest
from conftest import ROOT, cli_with_plugin_no_cluster

import daskgpu
from daskgpu.data import synthetic
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.testing import check_pipeline, compute_as_a_run
from daskgpu.toolkit import array_pipeline as array_pipelines
from daskgpu.toolkit import backends, checks, registry
from daskgpu.toolkit.workload import Verification, Workload
from daskgpu.verification import sample_size

EXAMPLE = ROOT / "examples" / "threshold_count"
sys.path.insert(0, str(EXAMPLE))
from threshold_count import pipeline as example  # noqa: E402  (registers "threshold-count")

NAME = "threshold-count"
# Registered for this module's tests only: other modules walk every registered pipeline.
registry._REGISTRY.pop(NAME, None)


@pytest.fixture(scope="module", autouse=True)
def _example_registered():
    registry._REGISTRY[NAME] = example.threshold_count
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


def _random_data(shape, chunks, seed, dtype="float64") -> np.ndarray:
    cpu = backends.get("cpu")
    return synthetic.random_array(shape, chunks, dtype, seed, cpu).compute(scheduler="sync")


# --------------------------------------------------------------------------- the example


def test_the_example_is_thirty_lines_at_most():
    lines = (EXAMPLE / "threshold_count" / "pipeline.py").read_text().splitlines()
    assert len(lines) <= 30, len(lines)
    assert example.threshold_count.name == NAME  # the decorator returns the Pipeline


def test_the_example_runs_and_verifies_on_random_data(session):
    result = daskgpu.run(NAME, session, shape="300,200", chunks="50,100", seed=5,
                         threshold=0.3)
    assert result.verified, result.verification
    expected = (_random_data((300, 200), (50, 100), 5) > 0.3).sum(axis=1)
    assert result.value == expected.tolist()
    json.dumps(result.value)  # the default present: plain Python numbers
    assert isinstance(result.value[0], int)
    assert result.elements == 60_000 and result.nbytes == 60_000 * 8
    assert result.data["shape"] == [300, 200] and result.data["blocks"] == 12
    assert result.data["seed"] == 5 and result.data["source"] == "random uniform [0,1)"
    assert result.params["threshold"] == 0.3 and result.params["shape"] == (300, 200)
    assert "every row equals the reference" in result.verification
    assert "within" in result.verification  # the Hoeffding bound on the total


def test_an_unset_seed_is_drawn_and_reported(session):
    result = daskgpu.run(NAME, session, shape="100,50", chunks="50")
    assert result.verified and isinstance(result.params["seed"], int)
    again = daskgpu.run(NAME, session, shape="100,50", chunks="50", seed=result.params["seed"])
    assert again.value == result.value


def test_check_pipeline_passes_the_example(session):
    report = check_pipeline(NAME, session=session, shape="600,400", chunks="100,200", seed=3)
    assert report.depths == ("fast", "full")
    assert [c.mutation for c in report.caught] == ["every tenth row changed"] * 2
    assert all(c.detail.startswith("row 0: ") for c in report.caught)


def test_fast_checks_a_sample_and_states_its_promise(session):
    workload, raw = compute_as_a_run(example.threshold_count, session, shape="600,20",
                                     chunks="10,20", seed=4)
    spec = example.threshold_count
    fast = spec.check(workload, raw, "fast")
    drawn = sample_size(60)
    assert fast.ok and 0 < drawn < 60
    assert f"{drawn} of 60 row blocks checked again: a fault in at least 10 %" in fast.detail
    assert "all 60 row blocks checked again" in spec.check(workload, raw, "full").detail


def test_an_input_is_read_and_verified(session, tmp_path):
    values = np.random.default_rng(7).random((250, 120), dtype=np.float32)
    values[3, :7] = np.nan  # never above any threshold, for the kernel as for NumPy
    path = tmp_path / "values.npy"
    np.save(path, values)
    result = daskgpu.run(NAME, session, input=str(path), chunks="50", threshold=0.75)
    assert result.verified, result.verification
    assert result.value == (values > 0.75).sum(axis=1).tolist()
    assert result.data["source"] == str(path) and result.data["dtype"] == "float32"
    assert result.params["seed"] is None and result.params["shape"] is None
    assert "not applied to an input" in result.verification
    assert result.nbytes == values.nbytes


def test_a_zarr_input_is_read_again_for_the_check(session, tmp_path):
    import zarr

    values = np.random.default_rng(8).random((120, 30))
    path = str(tmp_path / "values.zarr")
    zarr.save_array(path, values)
    workload, raw = compute_as_a_run(example.threshold_count, session, input=path,
                                     chunks="40", threshold=0.5)
    assert workload.context["array"].source_kind == "zarr"
    assert example.threshold_count.check(workload, raw, "full").ok
    wrong = raw.copy()
    wrong[41] += 1
    check = example.threshold_count.check(workload, wrong, "full")
    assert not check.ok and check.detail.startswith("row 41: ")


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_an_array_in_memory_is_read_again_from_the_object(session, kind):
    values = np.random.default_rng(9).random((120, 30))
    given = values if kind == "numpy" else dask.array.from_array(values, chunks=(7, 30))
    workload, raw = compute_as_a_run(example.threshold_count, session, input=given,
                                     chunks="40", threshold=0.5)
    assert workload.context["array"].source_kind == "memory"
    assert ("rechunked" in workload.description) == (kind == "dask")
    assert list(raw) == (values > 0.5).sum(axis=1).tolist()
    for depth in ("fast", "full"):
        assert example.threshold_count.check(workload, raw, depth).ok
    wrong = raw.copy()
    wrong[81] += 1
    check = example.threshold_count.check(workload, wrong, "full")
    assert not check.ok and check.detail.startswith("row 81: ")


def test_a_reference_that_disagrees_fails_naming_the_row(session):
    workload, raw = compute_as_a_run(example.threshold_count, session, shape="200,40",
                                     chunks="50,40", seed=2, threshold=0.5)

    def off_in_row_3_of_each_block(rows, threshold):
        counts = (rows > threshold).sum(axis=1)
        counts[3] += 1
        return counts

    for depth in ("fast", "full"):
        with dask.config.set(scheduler=session.client):
            check = checks.rows_recomputed(off_in_row_3_of_each_block)(workload, raw, depth)
        assert not check.ok
        assert check.detail.startswith("row 3: ") and "4 rows differ" in check.detail


def test_a_tolerance_accepts_rounding_and_refuses_more(session):
    workload, raw = compute_as_a_run(example.threshold_count, session, shape="100,40",
                                     chunks="50,40", seed=2, threshold=0.5)
    exact = checks.rows_recomputed(lambda rows, threshold: (rows > threshold).sum(1) * 1.001)
    close = checks.rows_recomputed(lambda rows, threshold: (rows > threshold).sum(1) * 1.001,
                                   rtol=0.01)
    with dask.config.set(scheduler=session.client):
        assert not exact(workload, raw, "full").ok
        assert close(workload, raw, "full").ok


def test_a_result_without_a_row_per_data_row_fails(session):
    workload, raw = compute_as_a_run(example.threshold_count, session, shape="100,40",
                                     chunks="50,40", seed=2)
    check = checks.rows_recomputed(lambda rows: rows)(workload, raw[:-1], "full")
    assert not check.ok and "99 rows for 100 data rows" in check.detail


# --------------------------------------------------------------------------- refusals


def _cli(*args):
    """The command line with the example registered, where starting a cluster exits 99."""
    return cli_with_plugin_no_cluster(EXAMPLE, "threshold_count.pipeline", *args)


def test_bad_data_options_are_one_line_and_exit_2_before_any_cluster(tmp_path):
    path = tmp_path / "values.npy"
    np.save(path, np.zeros((10, 4)))
    cases = {
        ("--chunks", "1"): "--chunks 1: 9e+06 blocks",
        ("--input", str(path), "--seed", "3"): "--seed: applies to generated data",
        ("--input", str(tmp_path / "missing.npy")): "no such file or directory",
    }
    for args, expected in cases.items():
        proc = _cli("run", NAME, "--cpu", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, proc.stderr)


def test_resolving_refuses_bad_data_options():
    spec = daskgpu.get_pipeline(NAME)
    with pytest.raises(ParameterError, match="--chunks 1: 9e"):
        spec.resolve(chunks="1")
    with pytest.raises(ParameterError, match="give 2 sizes"):
        spec.resolve(shape="3000")
    with pytest.raises(ParameterError, match="choose one of float32, float64"):
        spec.resolve(dtype="int8")


def test_inputs_of_the_wrong_kind_are_refused(tmp_path):
    spec = daskgpu.get_pipeline(NAME)
    flat, ints = tmp_path / "flat.npy", tmp_path / "ints.npy"
    np.save(flat, np.zeros(10))
    np.save(ints, np.zeros((4, 4), dtype=np.int32))
    with pytest.raises(InputFileError, match=r"holds an array of shape \(10,\); threshold-count "
                                             "needs 2 axes"):
        spec.resolve(input=str(flat))
    with pytest.raises(InputFileError, match="float32 or float64 is needed"):
        spec.resolve(input=str(ints))
    with pytest.raises(ParameterError, match="--shape: applies to generated data"):
        spec.resolve(input=str(ints), shape="4,4")


# --------------------------------------------------------------------------- the definition


def _build(data):
    return data.sum(axis=1)


@pytest.fixture
def registered():
    """Names of the pipelines a test defines, taken out of the registry after it."""
    names: list[str] = []
    yield names
    for name in names:
        registry._REGISTRY.pop(name, None)


def test_a_definition_is_checked_when_it_is_made():
    rows = checks.rows_recomputed(lambda rows: rows.sum(1))
    seed = daskgpu.Param("seed", daskgpu.positive_int, 1, "A seed.")
    with pytest.raises(ValueError, match="parameter seed is one array_pipeline gives"):
        daskgpu.array_pipeline("x-test", "x", params=[seed], check=rows)
    with pytest.raises(ValueError, match="dtype 'int8' is not among"):
        daskgpu.array_pipeline("x-test", "x", dtype="int8", check=rows)
    with pytest.raises(ValueError, match="distribution 'poisson'"):
        daskgpu.array_pipeline("x-test", "x", distribution="poisson", check=rows)
    with pytest.raises(TypeError, match="check: give verify"):
        daskgpu.array_pipeline("x-test", "x", check="rows")


def test_a_name_is_refused_to_another_module_and_taken_by_the_same_definition(registered):
    registered.append("row-sums-test")
    rows = checks.rows_recomputed(lambda rows: rows.sum(1))
    first = daskgpu.array_pipeline("row-sums-test", "Row sums", check=rows)(_build)
    assert daskgpu.array_pipeline("row-sums-test", "Row sums", check=rows)(_build) is not first
    assert daskgpu.get_pipeline("row-sums-test").prepare.__name__ == "_build"
    elsewhere = types.FunctionType(_build.__code__, {}, "_build")
    elsewhere.__module__ = "someone_else"
    with pytest.raises(ValueError, match="registered twice"):
        daskgpu.array_pipeline("row-sums-test", "Row sums", check=rows)(elsewhere)


def test_a_three_axis_pipeline_of_normal_values_checks_its_rows(session, registered):
    registered.append("plane-sums-test")
    @daskgpu.array_pipeline("plane-sums-test", "Sums of each plane", shape=(40, 6, 5),
                            distribution="normal", check=checks.rows_recomputed(
                                lambda rows: rows.sum(axis=(1, 2)), rtol=1e-12))
    def plane_sums(data):
        return data.sum(axis=(1, 2))

    report = check_pipeline(plane_sums, session=session, chunks="10,3,5", seed=1)
    assert "every row equals the reference" in report.verified["fast"]
    assert report.params["shape"] == (40, 6, 5)


# --------------------------------------------------------------------------- pieces


def test_json_ready_converts_small_results_and_keeps_large_arrays():
    value = {"count": np.int64(3), "mean": np.float32(0.5),
             "rows": np.arange(4), "pair": (np.int8(1), [np.float64(2.5)])}
    ready = array_pipelines.json_ready(value)
    assert ready == {"count": 3, "mean": 0.5, "rows": [0, 1, 2, 3], "pair": [1, [2.5]]}
    assert json.loads(json.dumps(ready)) == ready
    large = np.zeros(array_pipelines.LIST_LIMIT + 1)
    assert array_pipelines.json_ready(large) is large
    assert array_pipelines.json_ready(large, list_limit=10**6) == large.tolist()


def test_the_default_mutation_changes_every_tenth_row_only():
    alter = array_pipelines.every_tenth_row_changed().alter
    counts = np.arange(25)
    changed = alter(counts)
    assert np.flatnonzero(changed != counts).tolist() == [0, 10, 20]
    assert counts.tolist() == list(range(25))  # a copy, never the original
    floats = np.array([np.nan, 1.0, -3.0] * 4)
    same = np.isclose(alter(floats), floats, rtol=0, atol=0, equal_nan=True)
    assert np.flatnonzero(~same).tolist() == [0, 10] and alter(floats)[0] == 0  # NaN: 0
    assert alter(np.zeros(11, dtype=bool)).tolist() == [True] + [False] * 9 + [True]
    assert alter(np.int64(-5)) != -5 and alter(np.zeros((12, 3)))[10].tolist() == [1.0] * 3


def test_shapes_parse_with_one_size_per_axis():
    parse = array_pipelines.array_shape(2)
    assert parse("3000,3000") == (3000, 3000) and parse((4, "5")) == (4, 5)
    for bad in ("3000", "1,2,3", "0,5", "a,b"):
        with pytest.raises(ValueError, match="sizes, one per axis"):
            parse(bad)


def test_the_cuda_branch_draws_the_same_blocks_again(cupy_stand_in):
    """With CuPy's library the check draws a row block as the GPU workers drew the data."""
    gpu_like = backends.Backend("gpu", "cupy", "cudf", (), 1, 1)
    data = synthetic.random_array((30, 8), (10, 3), "float32", 9, gpu_like)
    # The data's own blocks of row block 1, each computed alone (no Dask concatenation).
    blocks = dask.get(dict(data.__dask_graph__()), [(data.name, 1, j) for j in range(3)])
    drawn = np.concatenate([block.get() for block in blocks], axis=1)
    described = array_pipelines.ArrayData((30, 8), data.chunks, "float32", "cupy", seed=9,
                                          distribution="uniform")
    rows = checks._reference_rows((described, lambda rows: rows.sum(axis=1), {}), 10, 20)
    assert isinstance(rows, np.ndarray)
    np.testing.assert_allclose(rows, drawn.sum(axis=1), rtol=1e-6)
    assert cupy_stand_in.seeds  # drawn by the (stand-in) CuPy generator


# --------------------------------------------------------------------------- the bound


def test_hoeffding_bound_is_the_formula_and_refuses_nonsense():
    assert checks.hoeffding_bound(10_000, 1e-9) == pytest.approx(
        math.sqrt(math.log(2e9) / 20_000))
    assert checks.hoeffding_bound(400) == 2 * checks.hoeffding_bound(1600)
    for n, false_alarm in ((0, 0.1), (10, 0.0), (10, 1.0)):
        with pytest.raises(ValueError):
            checks.hoeffding_bound(n, false_alarm)


def test_binomial_counts_stay_within_the_bound_as_often_as_promised():
    n, p, false_alarm = 2_000, 0.3, 0.05
    counts = np.random.default_rng(0).binomial(n, p, size=20_000)
    outside = np.abs(counts - n * p) > n * checks.hoeffding_bound(n, false_alarm)
    assert outside.mean() <= false_alarm
    # and it is not vacuous: half the bound is crossed often
    assert (np.abs(counts - n * p) > n * checks.hoeffding_bound(n, false_alarm) / 2).any()


def _counted_workload(shape=(100, 100), source=None) -> Workload:
    described = array_pipelines.ArrayData(shape, ((50, 50), (100,)), "float64", "numpy", seed=1,
                                          distribution="uniform", source=source)
    return Workload(None, 0, 0, context={"array": described, "params": {"threshold": 0.25}})


def test_count_bound_passes_plausible_totals_and_fails_others():
    bound = checks.count_bound(lambda threshold: 1 - threshold)
    half = 10_000 * checks.hoeffding_bound(10_000)
    workload = _counted_workload()
    assert bound(workload, np.array([7500]), "fast").ok
    assert bound(workload, np.array([7500 + half - 1]), "full").ok
    failed = bound(workload, np.array([7500 + half + 1]), "fast")
    assert not failed.ok and failed.detail.startswith("total count 7828 outside 7500 ± 327")
    on_input = bound(_counted_workload(source="x.npy"), np.array([0]), "fast")
    assert on_input.ok and "not applied to an input" in on_input.detail


def test_all_of_runs_every_check_and_passes_only_when_each_does():
    def passes(workload, raw):
        return Verification(True, "first fine")

    def fails(workload, raw, depth):
        return Verification(False, f"second wrong at {depth}")

    assert checks.all_of([passes, passes])(None, None, "fast").ok
    both = checks.all_of([passes, fails])(None, None, "full")
    assert not both.ok and both.detail == "first fine; second wrong at full"
    with pytest.raises(ValueError):
        checks.all_of([])


# --------------------------------------------------------------------------- low-level plugins


def test_a_low_level_plugin_with_shape_and_chunks_is_refused_an_impossible_layout(registered):
    """The block-count and memory checks apply to ``@daskgpu.pipeline`` too, before prepare."""
    built = []

    @daskgpu.pipeline("low-level-test", "x", (
        daskgpu.Param("shape", array_pipelines.array_shape(2), (3000, 3000), "Shape."),
        daskgpu.Param("chunks", daskgpu.chunks, "auto", "Blocks."),
        daskgpu.Param("dtype", daskgpu.choice(("float32", "float64")), "float64", "Type."),
    ), lambda workload, raw: Verification(True, "ok"))
    def prepare(resolved):
        built.append(resolved)
        raise AssertionError("prepare must not run for a refused layout")

    registered.append("low-level-test")
    with pytest.raises(ParameterError, match=r"--chunks 1: 9e\+06 blocks of shape \(3000, 3000\)"):
        prepare.resolve(chunks="1")
    small_gpu = backends.Backend("gpu", "cupy", "cudf", (
        daskgpu.Device(0, "GPU-0", "small", 2**30, 2**30, "0000:01:00.0"),), 1, 1)
    with pytest.raises(ParameterError, match=r"one block .* more than a worker's memory "
                                             r"\(1 GiB at most\)"):
        prepare.resolve(small_gpu, shape="20000,20000", chunks="20000")  # 3.2 GB
    assert prepare.resolve(small_gpu, chunks="1000").values["chunks"] == (1000,)
    assert prepare.resolve(chunks="1000") and not built
