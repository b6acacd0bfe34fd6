"""pca-pipeline's projection kept on the workers: ``(X - mean) V^T``, made once, verified.

A run from Python keeps the centred data projected on the components as ``value["projection"]``:
a Dask array (samples x components, the data's dtype) on the blocks its drive persisted, made
in one more pass over the data's blocks held since the components' pass (``--project`` writes
the same blocks where both are asked), and verified as ``--project`` is: its columns sum to 0
and their squares to s^2, summed by the check from the kept blocks. These tests drive the
workload as the runner does (``workload.keep`` set before the drive) where they count.
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
from conftest import drive_as_runner, verify_on
from distributed import futures_of

import daskgpu
from daskgpu.execution import report, runner
from daskgpu.toolkit import output, registry
from pipelines.pca import output as pca_output
from pipelines.pca import shared as pca_data

SMALL = {"samples": 3000, "features": 12, "components": 3, "chunks": 700, "seed": 9}
DEPTHS = ("fast", "full")
_PROJECT = pca_output.project_block
projected: list[int] = []  # the rows of every block the projection pass projected
MADE: list[int] = []  # the rows of every block of a Dask input made (worker threads)


def _counted_projection(block, picked):
    projected.append(int(block.shape[0]))
    return _PROJECT(block, picked)


def _made(block):
    MADE.append(int(block.shape[0]))
    return block


def generated(params: dict) -> np.ndarray:
    """The run's generated rows, drawn here from the documented scheme (z diag(sigma) V^T)."""
    sizes = da.core.normalize_chunks((params["chunks"], params["features"]),
                                     (params["samples"], params["features"]))[0]
    seed, d = pca_data.data_seed(params["seed"]), params["features"]
    z = np.concatenate([np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
                        .standard_normal((rows, d), dtype=params.get("dtype", "float64"))
                        for i, rows in enumerate(sizes)])
    return z * pca_data.spectrum(d) @ pca_data.basis(params["seed"], d).T


def recomputed(x: np.ndarray, components: np.ndarray) -> np.ndarray:
    """``(X - mean) @ components.T`` in float64, with NumPy's own column means."""
    x = x.astype(np.float64)
    return (x - x.mean(axis=0)) @ components.T


def _kept(projection, shape, dtype) -> da.Array:
    """The kept projection: of ``shape`` and ``dtype``, a graph of its persisted blocks only."""
    assert isinstance(projection, da.Array)
    assert projection.shape == shape and projection.dtype == dtype
    assert projection.chunks[1] == (shape[1],)
    assert len(dict(projection.__dask_graph__())) == projection.npartitions
    assert len(futures_of(projection)) == projection.npartitions
    return projection


def _driven(session, keep: bool, **params):
    return drive_as_runner(session, "pca-pipeline", keep, **params)


@pytest.mark.parametrize("method", ["auto", "exact", "randomized"])
def test_the_projection_is_made_once_from_data_read_once(in_process_client, monkeypatch,
                                                         tmp_path, method):
    """Kept and written (--project): each block projected once, each block of a Dask input
    made once; computing the kept projection and checking it at both depths projects nothing
    again; the file holds the kept values."""
    monkeypatch.setattr(pca_output, "project_block", _counted_projection)
    x = generated(SMALL)
    given = da.from_array(x, chunks=(700, 12)).map_blocks(_made, dtype=np.float64)
    params = {"input": given, "components": 3, "chunks": 700, "method": method,
              **({"seed": 4} if method == "randomized" else {})}
    projected.clear()
    MADE.clear()
    spec, workload, raw = _driven(in_process_client, True, **params,
                                  project=str(tmp_path / "t.npy"))
    try:
        blocks = [700] * 4 + [200]
        assert sorted(projected) == sorted(blocks) and sorted(MADE) == sorted(blocks)
        kept = _kept(workload.on_workers["projection"], (3000, 3), np.float64)
        assert raw["projection"] is kept
        values = kept.compute(scheduler=in_process_client.client)
        expected = recomputed(x, raw["result"]["components"])
        np.testing.assert_allclose(values, expected, rtol=0, atol=1e-12 * np.abs(x).max())
        np.testing.assert_array_equal(np.load(workload.written(str(tmp_path / "t.npy"))),
                                      values)
        for depth in DEPTHS:
            check = verify_on(in_process_client, spec, workload, raw, depth)
            assert check.ok, (depth, check.detail)
            assert "the kept projection's columns sum to 0" in check.detail
        assert sorted(projected) == sorted(blocks)
    finally:
        for temporary, _final in workload.outputs:
            output.discard(temporary)

    projected.clear()  # neither kept nor written: no projection, nothing on the workers
    _, light, raw = _driven(in_process_client, False, **params)
    assert projected == [] and light.on_workers == {} and "projection" not in raw


@pytest.mark.parametrize("block", [0, -1], ids=["first", "last"])
def test_a_kept_block_altered_on_its_worker_is_caught(in_process_client, block):
    """The check sums the blocks the run kept: one scaled by 1.01 in place on its worker fails
    both depths, naming the kept projection; so does a kept projection off centre."""
    spec, workload, raw = _driven(in_process_client, True, **SMALL, method="covariance")
    shifted = {**raw, "projection": raw["projection"] + 1e-9}  # every row: off centre
    for depth in DEPTHS:
        assert verify_on(in_process_client, spec, workload, raw, depth).ok
        check = verify_on(in_process_client, spec, workload, shifted, depth)
        assert not check.ok and "not centred" in check.detail, check.detail

    def scaled(part):
        part *= 1.01

    target = futures_of(raw["projection"])[block]
    in_process_client.client.submit(scaled, target, pure=False).result()
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and check.detail.startswith(
            "kept projection on component"), (depth, check.detail)


def test_the_command_lines_json_holds_no_array(in_process_client):
    spec = registry.get("pca-pipeline")
    result = runner.execute(spec, in_process_client, spec.resolve(
        in_process_client.backend, **SMALL))
    assert result.verified and "projection" not in result.data
    assert set(json.loads(report.as_json(result))["value"]) == {
        "components", "explained_variance", "explained_variance_ratio", "explained_total",
        "total_variance"}


_ROWS = (np.random.default_rng(5).standard_normal((2000, 6)) @ np.diag([4, 3, 2, 1, .5, .2])
         + np.arange(6)).astype(np.float32)


@pytest.mark.parametrize("kind", ["generated", "file", "numpy", "dask"])
def test_generated_a_file_numpy_and_dask_give_the_same_kind_of_value(cpu_client, tmp_path,
                                                                   kind):
    if kind == "generated":
        params = {"samples": 2000, "features": 6, "chunks": 500, "seed": 2, "dtype": "float32"}
    else:
        np.save(tmp_path / "x.npy", _ROWS)
        given = {"file": str(tmp_path / "x.npy"), "numpy": _ROWS,
                 "dask": da.from_array(_ROWS, chunks=(300, 6))}[kind]
        params = {"input": given, "chunks": 500}
    result = daskgpu.run("pca-pipeline", cpu_client, components=3, **params)
    assert result.verified, result.verification
    kept = _kept(result.value["projection"], (2000, 3), np.float32)
    assert kept.chunks[0] == (500,) * 4
    x = generated({**params, "components": 3}) if kind == "generated" else _ROWS
    components = np.asarray(result.data["components"])
    values = kept.compute(scheduler=cpu_client.client)
    assert isinstance(values, np.ndarray) and values.dtype == np.float32
    expected = recomputed(x.astype(np.float32), components)
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    assert set(result.value) == {"components", "explained_variance", "explained_variance_ratio",
                                 "explained_total", "total_variance", "projection"}


def test_a_run_asked_not_to_keep_and_the_estimators_fit_project_nothing(in_process_client,
                                                                       monkeypatch):
    """keep=False (PCA.fit: it needs no projection) makes no projection; keep=True does."""
    from daskgpu.ml import PCA

    monkeypatch.setattr(pca_output, "project_block", _counted_projection)
    x = generated(SMALL)
    projected.clear()
    result = daskgpu.run("pca-pipeline", in_process_client, input=x, components=3,
                         chunks=700, keep=False)
    assert result.verified and "projection" not in result.value and projected == []
    PCA(3).fit(x, session=in_process_client)
    assert projected == []
    kept = daskgpu.run("pca-pipeline", in_process_client, input=x, components=3, chunks=700)
    assert "projection" in kept.value and sorted(projected) == sorted([700] * 4 + [200])
