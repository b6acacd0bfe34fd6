"""histogram-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import csv
import json

import dask
import numpy as np
import pytest
from conftest import run_cli

import daskgpu
from daskgpu.backends import Backend
from daskgpu.errors import InputFileError, ParameterError

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def test_random_histogram_matches_numpy_on_the_same_values(cpu_client):
    result = daskgpu.run("histogram-pipeline", client=cpu_client, values=300_001, chunks="70000",
                         bins=37, seed=4, distribution="normal")
    assert result.verified, result.verification
    spec = daskgpu.get_pipeline("histogram-pipeline")
    from daskgpu import synthetic

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
    np.testing.assert_array_equal(result.value["counts"],
                                  np.histogram(values, bins=10, range=(0, 1))[0])


def test_wrong_counts_fail_verification():
    spec = daskgpu.get_pipeline("histogram-pipeline")
    workload = spec.workload(CPU2, values=5000, bins=10, seed=1)
    raw = dask.compute(workload.collection, scheduler="sync")[0]
    assert spec.verify(workload, raw).ok
    planted = dict(raw, counts=raw["counts"].copy())
    planted["counts"][3] += 1
    assert not spec.verify(workload, planted).ok
    planted = dict(raw, sample_counts=raw["sample_counts"].copy())
    planted["sample_counts"][0] -= 1
    planted["sample_counts"][1] += 1
    assert not spec.verify(workload, planted).ok


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
     (["--range", "a", "1"], "number"), (["--input", "/nonexistent.npy"], "no such file")],
)
def test_cli_bad_input_is_one_line(args, message):
    proc = run_cli("run", "histogram-pipeline", *args, "--no-dashboard")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
