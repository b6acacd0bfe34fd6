"""How deeply a run checks its answer (``--verify fast|full|off``), and what an unverified run
may not do: replace a user's output.

An output is renamed into place only once the run has verified (or ``--verify off`` asked for
none); a run whose check fails leaves the old file byte for byte, removes what it wrote, and
says so in its one line.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import numpy as np
import pytest
from conftest import fake_nvml_env, run_cli

import daskgpu
from daskgpu.execution import runner
from daskgpu.toolkit import registry

# Small runs of every pipeline that writes an --output, and an output name of each.
WITH_OUTPUT = {
    "histogram-pipeline": ({"values": 40_000, "chunks": 5_000, "bins": 16, "seed": 4},
                           "hist.npz"),
    "stencil-pipeline": ({"size": 60, "chunks": 20, "steps": 12}, "grid.npy"),
    "trips-pipeline": ({"rows": 20_000, "partitions": 4, "seed": 5}, "trips.csv"),
    "kmeans-pipeline": ({"samples": 8_000, "features": 4, "clusters": 5, "chunks": 2_000,
                         "seed": 7}, "centroids.npy"),
    "matmul-pipeline": ({"shape": "150,120,130", "chunks": "60,40,50", "seed": 8}, "c.zarr"),
    "pca-pipeline": ({"samples": 3_000, "features": 16, "components": 4, "chunks": 700,
                      "seed": 9}, "components.csv"),
    "fft-pipeline": ({"size": 96, "chunks": 40, "seed": 9}, "spectrum.npy"),
    "train-pipeline": ({"samples": 4_000, "features": 16, "steps": 3, "chunks": 1_000,
                        "seed": 3}, "weights.npz"),
}


def _files(path) -> dict:
    """Every file under ``path`` (a file or a Zarr directory) and its bytes."""
    path = str(path)
    if os.path.isfile(path):
        return {"": open(path, "rb").read()}
    return {os.path.relpath(os.path.join(folder, name), path):
            open(os.path.join(folder, name), "rb").read()
            for folder, _dirs, names in os.walk(path) for name in names}


def _existing(path) -> dict:
    if str(path).endswith(".zarr"):
        os.mkdir(path)
        (path / "precious.txt").write_text("keep me\n")
    else:
        path.write_text("keep me\n")
    return _files(path)


def _wrong(spec: registry.Pipeline) -> registry.Pipeline:
    """The pipeline, its check handed an altered result (its first declared mutation)."""
    mutation = spec.mutations[0]

    def verify(workload, raw, depth):
        return spec.check(workload, mutation.alter(copy.deepcopy(raw)), depth)

    return dataclasses.replace(spec, verify=verify)


def test_every_pipeline_with_an_output_is_covered():
    with_output = {n for n in registry.names()
                   if registry.get(n).prepare.__module__.startswith("pipelines.")
                   and any(p.is_output for p in registry.get(n).params)}
    assert with_output == set(WITH_OUTPUT)


@pytest.mark.parametrize("depth", ["fast", "full"])
@pytest.mark.parametrize("name", sorted(WITH_OUTPUT))
def test_a_run_that_fails_its_check_keeps_the_old_output(cpu_client, tmp_path, name, depth):
    params, filename = WITH_OUTPUT[name]
    target = tmp_path / filename
    before = _existing(target)
    result = daskgpu.run(_wrong(registry.get(name)), client=cpu_client, output=str(target),
                         overwrite=True, verify=depth, **params)
    assert result.verified is False and result.verify == depth
    assert _files(target) == before  # byte for byte
    assert sorted(os.listdir(tmp_path)) == [filename]  # nothing left beside it
    assert [n for n in result.notices if str(target) in n] == [
        f"{target}: not written (the result did not verify); the file there is as it was"]


@pytest.mark.parametrize("name", ["histogram-pipeline", "matmul-pipeline"])
def test_a_verified_run_replaces_the_output(cpu_client, tmp_path, name):
    params, filename = WITH_OUTPUT[name]
    target = tmp_path / filename
    before = _existing(target)
    result = daskgpu.run(name, client=cpu_client, output=str(target), overwrite=True, **params)
    assert result.verified is True and result.verify == "fast"
    assert _files(target) != before and "precious.txt" not in _files(target)
    assert sorted(os.listdir(tmp_path)) == [filename]


def test_verify_off_writes_unchecked_and_says_so(cpu_client, tmp_path):
    params, filename = WITH_OUTPUT["histogram-pipeline"]
    target = tmp_path / filename
    result = daskgpu.run(_wrong(registry.get("histogram-pipeline")), client=cpu_client,
                         output=str(target), verify="off", **params)
    assert result.verified is None and result.verify == "off"
    assert "not verified" in result.verification
    saved = np.load(target)
    assert saved["counts"].sum() == 40_000  # written, as asked, though no check ran
    assert result.as_dict()["verified"] is None


def test_a_failed_check_with_no_earlier_output_leaves_nothing(cpu_client, tmp_path):
    params, filename = WITH_OUTPUT["trips-pipeline"]
    target = tmp_path / filename
    result = daskgpu.run(_wrong(registry.get("trips-pipeline")), client=cpu_client,
                         output=str(target), **params)
    assert result.verified is False
    assert os.listdir(tmp_path) == []
    assert f"{target}: not written (the result did not verify); nothing is there" in (
        result.notices)


def test_a_check_reads_back_what_this_run_wrote_not_the_old_file(cpu_client, tmp_path):
    """histogram-pipeline's check compares the saved table: the temporary, before the rename."""
    params, filename = WITH_OUTPUT["histogram-pipeline"]
    target = tmp_path / filename
    np.save(target, np.zeros(3))  # an old file the check would call wrong
    result = daskgpu.run("histogram-pipeline", client=cpu_client, output=str(target),
                         overwrite=True, **params)
    assert result.verified, result.verification
    assert np.load(target)["counts"].sum() == 40_000


def test_the_python_api_refuses_an_unknown_depth(cpu_client):
    with pytest.raises(daskgpu.ParameterError, match="verify=deep: choose fast, full, off"):
        daskgpu.run("mean-pipeline", client=cpu_client, size=100, verify="deep")
    with pytest.raises(ValueError, match="choose one of fast, full"):
        registry.get("mean-pipeline").check(None, None, "off")
    with pytest.raises(daskgpu.ParameterError):
        runner.check_depth("deep")


def test_a_verify_without_depth_is_one_check_reported_as_full(cpu_client):
    spec = registry.get("mean-pipeline")
    seen = []

    def verify(workload, raw):  # a plugin's check that knows no depths
        seen.append(raw)
        return daskgpu.Verification(True, "plugin's own check")

    plain = dataclasses.replace(spec, verify=verify)
    result = daskgpu.run(plain, client=cpu_client, size=200, seed=1, verify="fast")
    assert result.verified and result.verify == "full" and len(seen) == 1


def _env() -> dict:
    env = fake_nvml_env({"error": "LibraryNotFound"})
    env["DASK_DISTRIBUTED__DIAGNOSTICS__NVML"] = "False"
    return env


def test_the_command_line_names_the_depth(tmp_path):
    common = ("run", "mean-pipeline", "--size", "500", "--cpu", "--workers", "1",
              "--no-dashboard")
    proc = run_cli(*common, "--verify", "off", "--json", env=_env())
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["verified"] is None and document["verify"] == "off"
    assert "not verified" in document["verification"]
    proc = run_cli(*common, "--verify", "off", env=_env())
    assert proc.returncode == 0 and "not verified" in proc.stdout, proc.stdout
    proc = run_cli(*common, "--verify", "full", "--json", env=_env())
    assert json.loads(proc.stdout)["verify"] == "full"
    proc = run_cli(*common, env=_env())
    assert "yes (fast)" in proc.stdout or "yes (full)" in proc.stdout, proc.stdout
    proc = run_cli(*common, "--verify", "deep", env=_env())
    assert proc.returncode == 2 and "--verify" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("population", [1, 2, 4, 10, 37, 100, 1_000, 25_000])
def test_the_sample_size_keeps_its_promise(population):
    """Simulated: a tenth of the items wrong, the drawn sample misses them at most 0.1 % of
    the time, and one item fewer would not promise it."""
    from daskgpu.verification import sampling

    k = sampling.sample_size(population)
    wrong = max(1, -(-population // 10))
    assert sampling.miss_probability(population, wrong, k) <= 1e-3
    assert k == 1 or sampling.miss_probability(population, wrong, k - 1) > 1e-3
    rng = np.random.default_rng(population)
    misses = sum(not (rng.choice(population, size=k, replace=False) < wrong).any()
                 for _ in range(20_000))
    assert misses / 20_000 <= 3e-3


@pytest.mark.parametrize("depth", ["off", "full"])
def test_bench_says_how_its_repeats_were_checked(depth):
    from rich.console import Console

    from daskgpu.execution import bench, report

    result = bench.bench("mean-pipeline", {"size": 400, "seed": 2},
                         {"cpu": True, "workers": 1, "dashboard": False}, repeat=1, warmup=0,
                         verify=depth)
    assert result.verify == depth and result.verified
    assert result.measurements[0].verified is (None if depth == "off" else True)
    console = Console(width=250, record=True)
    console.print(report.bench_table(result))
    title = console.export_text().splitlines()[0]
    assert ("timed without a check" if depth == "off" else "each run verified (full)") in title
    with pytest.raises(daskgpu.ParameterError):
        bench.bench("mean-pipeline", {"size": 400}, {"cpu": True, "workers": 1}, repeat=1,
                    warmup=0, verify="never")
