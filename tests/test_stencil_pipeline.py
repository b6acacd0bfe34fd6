"""stencil-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import json
import math

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import run_cli

import daskgpu
from daskgpu.backends import Backend
from daskgpu.errors import ParameterError
from daskgpu.kernels.stencil import heat_step_numpy
from pipelines import stencil_pipeline

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _reference(grid: np.ndarray, steps: int, alpha: float) -> np.ndarray:
    padded = np.pad(grid, 1)
    for _ in range(steps):
        padded = heat_step_numpy(padded, alpha)
    return padded[1:-1, 1:-1]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("block", [(7, 9), (30, 11), (13, 40)])
def test_evolve_matches_numpy_slicing_for_any_blocks_and_depth(k, block):
    grid = np.random.default_rng(k).random((30, 40))
    steps = 7
    got = stencil_pipeline.evolve(da.from_array(grid, chunks=block), steps, 0.23, k)
    np.testing.assert_allclose(got.compute(scheduler="sync"), _reference(grid, steps, 0.23),
                               rtol=0, atol=1e-14)


def test_temporal_blocking_matches_one_step_exchanges():
    u0 = stencil_pipeline.initial_grid(64, (20, 30), "float64", CPU2)
    one = stencil_pipeline.evolve(u0, 10, 0.2, 1).compute(scheduler="threads")
    four = stencil_pipeline.evolve(u0, 10, 0.2, 4).compute(scheduler="threads")
    np.testing.assert_allclose(four, one, rtol=0, atol=1e-15)


def test_initial_grid_is_the_sine_mode():
    n = 23
    u0 = stencil_pipeline.initial_grid(n, (5, 7), "float64", CPU2).compute(scheduler="sync")
    i = np.arange(1, n + 1)
    expected = np.outer(np.sin(np.pi * i / (n + 1)), np.sin(np.pi * i / (n + 1)))
    np.testing.assert_allclose(u0, expected, rtol=1e-15)


def test_pipeline_verifies_against_the_closed_form(cpu_client):
    result = daskgpu.run("stencil-pipeline", client=cpu_client, size=300, steps=25,
                         chunks="110", steps_per_exchange=3)
    assert result.verified, result.verification
    assert result.data["exchanges"] == 9 and result.data["blocks"] == 9
    lam = stencil_pipeline.eigenvalue(300, 0.2)
    n = 300
    norm0 = (n + 1) / 2  # ||u0||_2 for the sine mode
    assert result.value["l2_norm"] == pytest.approx(lam**25 * norm0, rel=1e-10)
    assert result.throughput["elements_per_s"] == pytest.approx(
        300 * 300 * 25 / result.timings["compute_s"])


def test_float32_and_zero_steps(cpu_client):
    r32 = daskgpu.run("stencil-pipeline", client=cpu_client, size=120, steps=10,
                      dtype="float32", chunks="50")
    assert r32.verified and r32.data["dtype"] == "float32"
    r0 = daskgpu.run("stencil-pipeline", client=cpu_client, size=50, steps=0)
    assert r0.verified and r0.value["max_error"] == 0


def test_a_wrong_answer_fails_verification():
    spec = daskgpu.get_pipeline("stencil-pipeline")
    workload = spec.workload(CPU2, size=60, steps=5, chunks="30")
    raw = dask.compute(workload.collection, scheduler="sync")[0]
    assert spec.verify(workload, raw).ok
    planted = dict(raw, max_error=raw["max_error"] + 1e-6)
    assert not spec.verify(workload, planted).ok


def test_halo_deeper_than_the_grid_is_refused():
    spec = daskgpu.get_pipeline("stencil-pipeline")
    with pytest.raises(ParameterError, match="steps_per_exchange=9"):
        spec.workload(CPU2, size=8, steps=10, steps_per_exchange=9)


@pytest.mark.parametrize(
    "params, message",
    [({"alpha": 0.3}, "unstable"), ({"alpha": -0.1}, "between"), ({"steps": -1}, "--steps"),
     ({"steps_per_exchange": 0}, "positive"), ({"chunks": "1,2,3"}, "axes"),
     ({"output": "/nonexistent-dir/x.npy"}, "does not exist"),
     ({"output": "grid.txt"}, ".npy or .zarr")],
)
def test_bad_parameters(params, message):
    with pytest.raises(ParameterError, match=message):
        daskgpu.get_pipeline("stencil-pipeline").resolve(**params)


@pytest.mark.parametrize("suffix", [".npy", ".zarr"])
def test_cli_writes_the_final_grid_atomically(tmp_path, suffix):
    target = tmp_path / f"grid{suffix}"
    proc = run_cli("run", "stencil-pipeline", "--size", "90", "--steps", "6", "--chunks", "40",
                   "--steps-per-exchange", "2", "--workers", "2", "--no-dashboard", "--json",
                   "--output", str(target))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True
    if suffix == ".npy":
        grid = np.load(target)
    else:
        import zarr

        grid = np.asarray(zarr.open_array(str(target), mode="r"))
    lam = stencil_pipeline.eigenvalue(90, 0.2)
    u0 = stencil_pipeline.initial_grid(90, (90, 90), "float64", CPU2).compute()
    np.testing.assert_allclose(grid, lam**6 * u0, rtol=0, atol=1e-14)
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary left


def test_cli_bad_alpha_is_one_line(tmp_path):
    proc = run_cli("run", "stencil-pipeline", "--alpha", "0.3", "--no-dashboard")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "unstable" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_eigenvalue_is_the_decay_of_one_numpy_step():
    n, alpha = 17, 0.21
    i = np.arange(1, n + 1)
    u0 = np.pad(np.outer(np.sin(np.pi * i / (n + 1)), np.sin(np.pi * i / (n + 1))), 1)
    stepped = heat_step_numpy(u0, alpha)
    np.testing.assert_allclose(stepped, stencil_pipeline.eigenvalue(n, alpha) * u0, atol=1e-15)
    assert math.isclose(stencil_pipeline.eigenvalue(n, 0.0), 1.0)
