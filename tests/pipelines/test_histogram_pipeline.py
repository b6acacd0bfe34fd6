"""histogram-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import copy
import csv
import json
import math
import mmap
import tracemalloc

import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.data import array_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend
from pipelines.histogram import check as histogram_check
from pipelines.histogram import pipeline as histogram_pipeline
from pipelines.histogram import tasks as histogram_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def test_random_histogram_matches_numpy_on_the_same_values(cpu_client):
    result = daskgpu.run("histogram-pipeline", client=cpu_client, values=300_001, chunks="70000",
                         bins=37, seed=4, distribution="normal")
    assert result.verified, result.verification
    spec = daskgpu.get_pipeline("histogram-pipeline")
    from daskgpu.data import synthetic

    values = synthetic.random_array((300_001,), (70_000,), "float64", 4, CPU2,
                                    "normal").compute(scheduler="sync")
    lo, hi = values.min(), values.max()
    expected, edges = np.histogram(values, bins=37)
    assert result.data["range"] == [lo, hi]
    np.testing.assert_array_equal(result.value["counts"], expected)
    np.testing.assert_allclose(result.value["edges"], edges)
    assert result.value["nan"] == 0 and result.value["in_range"] == values.size
    assert spec.name == result.pipeline


def test_given_range_drops_values_outside_and_counts_nan(cpu_client, tmp_path):
    values = np.concatenate([np.linspace(-2, 2, 4001), [np.nan] * 5, [np.inf, -np.inf, 1.0, 0.5]])
    values = np.random.default_rng(0).permutation(values).reshape(-1, 2)  # 2-D input
    path = tmp_path / "v.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=8,
                         range=(-1, 1), chunks="300")
    assert result.verified, result.verification
    expected, _ = np.histogram(values, bins=8, range=(-1, 1))
    np.testing.assert_array_equal(result.value["counts"], expected)
    assert result.value["nan"] == 5
    assert result.value["in_range"] == expected.sum()


def test_default_range_ignores_nan_and_inf(cpu_client, tmp_path):
    values = np.array([np.nan, 3.0, -np.inf, 1.0, 2.0, np.inf] * 10)
    path = tmp_path / "w.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=4)
    assert result.data["range"] == [1.0, 3.0]
    np.testing.assert_array_equal(result.value["counts"],
                                  np.histogram(values[np.isfinite(values)], bins=4)[0])
    assert result.value["nan"] == 10


def test_float32_exact_on_bin_edges(cpu_client, tmp_path):
    edges = np.linspace(0, 1, 11).astype(np.float32)
    values = np.tile(edges, 50)
    path = tmp_path / "e.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=10,
                         range=(0, 1))
    counts, edges = np.histogram(values, bins=10, range=(0, 1))
    np.testing.assert_array_equal(result.value["counts"], counts)
    assert result.verified, result.verification
    # the float32 edges numpy bins with, not float64 ones that only look the same
    assert edges.dtype == np.float32 and result.value["edges"].tolist() == edges.tolist()


def _computed(session, **params):
    return compute_as_runner(session, "histogram-pipeline", **params)


_verify = verify_on


def test_an_altered_histogram_of_an_input_fails_verification(cpu_client, tmp_path):
    values = np.random.default_rng(5).standard_normal((600, 50))
    values[::97, 3] = np.nan
    path = tmp_path / "n.npy"
    np.save(path, values)
    spec, workload, raw = _computed(cpu_client, input=str(path), bins=12, chunks="3000")
    check = _verify(cpu_client, spec, workload, raw)
    assert check.ok and "numpy.histogram" in check.detail, check.detail
    assert "chi-square" not in check.detail  # no distribution to test an input against
    for mutation in spec.mutations:
        altered = _verify(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)))
        assert not altered.ok and mutation.names in altered.detail, (mutation.name, altered)
    wrong_nan = dict(raw, histograms=raw["histograms"].copy())
    wrong_nan["histograms"][0, -1] -= 1
    assert "NaN: " in _verify(cpu_client, spec, workload, wrong_nan).detail


def test_a_wrong_kernel_count_in_a_sampled_block_is_named(cpu_client):
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=10, seed=2)
    planted = dict(raw, histograms=raw["histograms"].copy())
    planted["histograms"][-1, 4] += 1  # the last sampled block's own counts
    check = _verify(cpu_client, spec, workload, planted)
    block = int(np.ravel_multi_index(workload.context["sampled"][-1], (5,)))
    assert not check.ok
    assert f"block {block}: bin 4: " in check.detail and "by the kernel" in check.detail


def test_a_wrong_default_range_is_caught(cpu_client):
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=10, seed=2)
    workload.context["lo"] -= 0.01  # as if the first pass had found a smaller minimum
    check = _verify(cpu_client, spec, workload, raw)
    assert not check.ok and "range: " in check.detail and "finite min and max" in check.detail


def test_a_tampered_output_file_is_caught(cpu_client, tmp_path):
    target = tmp_path / "h.csv"
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=6, seed=3,
                                    output=str(target))
    workload.save(workload, workload.present(workload, raw))
    assert _verify(cpu_client, spec, workload, raw).ok
    lines = target.read_text().splitlines()
    left, right, count = lines[2].split(",")
    lines[2] = ",".join([left, right, str(int(count) + 1)])
    target.write_text("\n".join(lines) + "\n")
    check = _verify(cpu_client, spec, workload, raw)
    assert not check.ok and f"--output {target}: bin 1: " in check.detail, check.detail


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_chi_square_passes_correct_histograms_and_fails_moved_bins(distribution, dtype):
    rng = np.random.default_rng(11)
    draw = rng.random if distribution == "uniform" else rng.standard_normal
    threshold = math.log(histogram_check.FALSE_ALARM)
    # an asymmetric range first: there, reversed or shifted bins do not fit the distribution
    asymmetric = (-0.2, 0.9) if distribution == "uniform" else (-0.5, 2.0)
    for bins, (lo, hi), open_tails in [(40, asymmetric, False), (7, (-0.3, 0.6), False),
                                       (100_000, (0, 0), True), (3, (0, 0), True)]:
        values = draw(200_000, dtype=dtype)
        if open_tails:  # the data's own min and max
            lo, hi = float(values.min()), float(values.max())
        counts, _ = np.histogram(values, bins=bins, range=(lo, hi))
        edges = np.linspace(lo, hi, bins + 1)
        statistic, cells, log_bound = histogram_check.chi_square(counts, edges,
                                                                   distribution, open_tails)
        assert log_bound > threshold / 2, (bins, statistic, cells)
        if bins == 40:
            for moved in (counts[::-1], np.roll(counts, 1)):
                *_, log_bound = histogram_check.chi_square(moved, edges, distribution, False)
                assert log_bound < threshold


def test_chi_square_skips_too_few_values_and_refuses_impossible_ones():
    edges = np.linspace(0, 1, 11)
    assert histogram_check.chi_square(np.full(10, 10), edges, "uniform", False) is None
    outside = np.linspace(2, 3, 11)  # no uniform [0,1) value can fall here
    assert histogram_check.chi_square(np.full(10, 5), outside, "uniform", False)[2] == -math.inf


@pytest.mark.parametrize(
    "given, refused",
    [({"values": 10}, "--values: "), ({"seed": 3}, "--seed: "),
     ({"dtype": "float32"}, "--dtype: "), ({"distribution": "normal"}, "--distribution: "),
     ({"values": 10, "seed": 3, "distribution": "normal"},
      "--values, --seed, --distribution: apply to generated data, not to an --input; drop them")],
)
def test_an_input_refuses_options_of_generated_data(tmp_path, given, refused):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0))
    with pytest.raises(ParameterError, match="appl(y|ies) to generated data") as caught:
        daskgpu.get_pipeline("histogram-pipeline").resolve(input=str(path), **given)
    assert str(caught.value).startswith(refused) and "\n" not in str(caught.value)


def test_an_input_accepts_the_defaults_and_records_what_it_used(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0, dtype=np.float32))
    resolved = daskgpu.get_pipeline("histogram-pipeline").resolve(
        input=str(path), dtype="float64", distribution="uniform")
    assert [resolved[n] for n in ("values", "seed", "dtype", "distribution")] == [None] * 4


def test_python_api_names_the_refused_options_as_arguments(cpu_client, tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0))
    with pytest.raises(ParameterError, match=r"seed=\.\.\.: applies to generated data"):
        daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), seed=1)


@pytest.mark.parametrize(
    "params, error, message",
    [({"bins": 0}, ParameterError, "--bins"), ({"bins": -3}, ParameterError, "--bins"),
     ({"range": (1, 1)}, ParameterError, "below"), ({"range": (2, 1)}, ParameterError, "below"),
     ({"range": "0 inf"}, ParameterError, "finite"), ({"distribution": "poisson"},
                                                      ParameterError, "uniform"),
     ({"output": "h.parquet"}, ParameterError, ".npy or .csv"),
     ({"input": "/nonexistent.npy"}, InputFileError, "no such file")],
)
def test_bad_parameters(params, error, message):
    with pytest.raises(error, match=message):
        daskgpu.get_pipeline("histogram-pipeline").resolve(**params)


def test_input_of_strings_is_refused(tmp_path):
    path = tmp_path / "s.npy"
    np.save(path, np.array(["a", "b"]))
    with pytest.raises(InputFileError, match="numeric"):
        daskgpu.get_pipeline("histogram-pipeline").resolve(input=str(path))


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_cli_writes_edges_and_counts(tmp_path, suffix):
    values = np.random.default_rng(3).random(10_000)
    source = tmp_path / "in.npy"
    np.save(source, values)
    target = tmp_path / f"hist{suffix}"
    proc = run_cli("run", "histogram-pipeline", "--input", str(source), "--bins", "5",
                   "--range", "0", "1", "--chunks", "3000", "--output", str(target),
                   "--workers", "2", "--no-dashboard", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    expected, edges = np.histogram(values, bins=5, range=(0, 1))
    assert doc["value"]["counts"] == expected.tolist() and doc["verified"] is True
    if suffix == ".csv":
        with open(target) as f:
            rows = list(csv.DictReader(f))
        assert [int(r["count"]) for r in rows] == expected.tolist()
        assert [float(r["left"]) for r in rows] == pytest.approx(edges[:-1].tolist())
    else:
        table = np.load(target)  # a structured array of numbers: no pickle needed
        np.testing.assert_array_equal(table["count"], expected)
        np.testing.assert_allclose(table["right"], edges[1:])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.npy", target.name])


@pytest.mark.parametrize(
    "args, message",
    [(["--bins", "0"], "--bins"), (["--range", "1", "0"], "below"),
     (["--range", "a", "1"], "number"), (["--input", "/nonexistent.npy"], "no such file"),
     (["--input", "cli.py", "--seed", "1"], "--seed: applies to generated data")],
)
def test_cli_bad_input_is_one_line(args, message):
    proc = run_cli("run", "histogram-pipeline", *args, "--no-dashboard")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def _mapped(block) -> bool:
    """True when ``block`` is a view of a memory-mapped file, not a copy of it."""
    while block is not None and not isinstance(block, mmap.mmap):
        block = getattr(block, "base", None) if isinstance(block, np.ndarray) else block.obj
    return block is not None


def test_npy_blocks_reach_the_kernel_as_views_of_the_mapped_file(tmp_path):
    path = tmp_path / "m.npy"
    np.save(path, np.random.default_rng(6).random(200_000))
    source = array_input.open_array(str(path), dtypes=histogram_pipeline.INPUT_DTYPES)
    data = array_input.to_dask(source, (50_000,), CPU2)
    seen = data.map_blocks(lambda block: np.array([_mapped(block), block.flags.writeable]),
                           chunks=((2,) * 4,), dtype=bool).compute(scheduler="sync")
    assert seen.reshape(4, 2).tolist() == [[True, False]] * 4
    block = source.reader[50_000:150_000]
    histogram_tasks._block_histogram(block[:10], 0.0, 1.0, 16)  # compiled, outside the trace
    tracemalloc.start()
    try:
        counts = histogram_tasks._block_histogram(block, 0.0, 1.0, 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < block.nbytes // 10, peak  # no copy of the 800 kB block on the way
    np.testing.assert_array_equal(counts[:16], np.histogram(block, 16, (0.0, 1.0))[0])


def test_the_timed_collection_holds_only_the_histograms(cpu_client, tmp_path):
    path = tmp_path / "c.npy"
    np.save(path, np.random.default_rng(8).random(40_000))
    spec, workload, raw = _computed(cpu_client, input=str(path), bins=8, range=(0, 1),
                                    chunks="10000")
    assert list(workload.collection) == ["histograms"]
    layers = workload.collection["histograms"].dask.layers
    # read, kernel per block, the sum over blocks, the sampled rows: no check's own pass
    assert not any("isfinite" in name or "isnan" in name for name in layers), list(layers)
    assert raw["histograms"].shape == (4, 9)
