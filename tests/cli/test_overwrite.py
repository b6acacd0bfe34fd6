"""An existing ``--output`` is kept unless ``--overwrite``; with it, it is replaced atomically."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from conftest import fake_nvml_env, run_cli
from fault_injection import assert_no_cluster_started, run_faulty_cli

import daskgpu
import pipelines  # noqa: F401  (registers the built-in pipelines)
from daskgpu.cli import options as cli_options
from daskgpu.errors import ParameterError
from daskgpu.execution import bench as benchmarks
from daskgpu.toolkit import backends, output, registry

CPU = backends.Backend("cpu", "numpy", "pandas", workers=1, threads=1)
WITH_OUTPUT = {"histogram-pipeline": "hist.csv", "stencil-pipeline": "grid.zarr",
               "trips-pipeline": "trips.csv"}


def _env() -> dict:
    env = fake_nvml_env({"error": "LibraryNotFound"})
    env["DASK_DISTRIBUTED__DIAGNOSTICS__NVML"] = "False"
    return env


def _snapshot(path) -> dict:
    """Bytes and mtime of every file under ``path`` (a file or a Zarr directory)."""
    path = str(path)
    if os.path.isfile(path):
        return {"": (open(path, "rb").read(), os.stat(path).st_mtime_ns)}
    out = {}
    for folder, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            out[os.path.relpath(full, path)] = (open(full, "rb").read(), os.stat(full).st_mtime_ns)
    return out


def _make_existing(path) -> None:
    if str(path).endswith(".zarr"):
        os.mkdir(path)
        (path / "precious.txt").write_text("keep me\n")
    else:
        path.write_text("keep me\n")


# ------------------------------------------------------------------------- the library


def test_outputs_are_the_params_parsed_as_outputs():
    outputs = {n for n in registry.names() if any(p.is_output for p in registry.get(n).params)}
    assert outputs >= set(WITH_OUTPUT)
    assert "mean-pipeline" not in outputs and "join-pipeline" not in outputs


@pytest.mark.parametrize("pipeline", sorted(WITH_OUTPUT))
def test_check_outputs_refuses_an_existing_output(tmp_path, pipeline):
    spec = registry.get(pipeline)
    target = tmp_path / WITH_OUTPUT[pipeline]
    resolved = spec.resolve(output=str(target))
    spec.check_outputs(resolved)  # not there yet: fine
    _make_existing(target)
    with pytest.raises(ParameterError, match="exists; pass --overwrite") as err:
        spec.check_outputs(resolved)
    assert str(target) in str(err.value) and "--output" in str(err.value)
    spec.check_outputs(resolved, overwrite=True)


def test_a_dangling_link_counts_as_existing(tmp_path):
    link = tmp_path / "hist.csv"
    link.symlink_to(tmp_path / "nowhere")
    spec = registry.get("histogram-pipeline")
    with pytest.raises(ParameterError, match="exists"):
        spec.check_outputs(spec.resolve(output=str(link)))


def test_run_refuses_before_computing(tmp_path):
    target = tmp_path / "hist.npz"
    _make_existing(target)
    before = _snapshot(target)

    class NoClient:  # any use of the client would fail the test
        def __getattr__(self, name):
            raise AssertionError(f"client.{name} used before the output check")

    with pytest.raises(ParameterError, match="overwrite"):
        daskgpu.run("histogram-pipeline", client=NoClient(), backend=CPU, values=100,
                    output=str(target))
    assert _snapshot(target) == before


def test_bench_refuses_before_any_cluster(tmp_path, monkeypatch):
    target = tmp_path / "grid.npy"
    _make_existing(target)
    monkeypatch.setattr(benchmarks.sessions, "start", lambda plan: pytest.fail("cluster started"))
    with pytest.raises(ParameterError, match="exists"):
        benchmarks.bench("stencil-pipeline", {"size": 16, "output": str(target)}, {"cpu": True})
    with pytest.raises(ParameterError, match="exists"):  # as the command line passes it
        benchmarks.bench("stencil-pipeline", {"size": 16, "output": str(target),
                                              "overwrite": False}, {"cpu": True})


def test_run_with_overwrite_replaces_the_file(cpu_client, tmp_path):
    target = tmp_path / "hist.csv"
    _make_existing(target)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, values=1000, bins=4,
                         range=(0, 1), seed=1, output=str(target), overwrite=True)
    assert result.verified
    with open(target) as f:
        counts = [int(row["count"]) for row in csv.DictReader(f)]
    assert counts == list(result.value["counts"]) and sum(counts) == 1000
    assert os.listdir(tmp_path) == ["hist.csv"]


@pytest.mark.parametrize("existing", ["file", "directory"])
def test_commit_replaces_a_zarr_directory_whole(tmp_path, existing):
    target = tmp_path / "grid.zarr"
    if existing == "file":
        target.write_text("old\n")
    else:
        target.mkdir()
        (target / "old-chunk").write_text("old\n")
    new = tmp_path / ".grid.zarr.partial-1"
    new.mkdir()
    (new / "new-chunk").write_text("new\n")
    output.commit(str(new), str(target))
    assert sorted(os.listdir(target)) == ["new-chunk"]
    assert os.listdir(tmp_path) == ["grid.zarr"]  # no temporary, nothing set aside


def test_commit_puts_the_old_output_back_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "grid.zarr"
    target.mkdir()
    (target / "old-chunk").write_text("old\n")
    new = tmp_path / ".grid.zarr.partial-2"
    new.mkdir()
    real = os.replace

    def failing(src, dst):
        if str(src) == str(new):
            raise OSError("disk full")
        return real(src, dst)

    monkeypatch.setattr(output.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        output.commit(str(new), str(target))
    assert os.listdir(target) == ["old-chunk"]


def test_overwrite_flag_only_where_there_is_an_output():
    for name in registry.names():
        spec = registry.get(name)
        names = [o.name for o in cli_options.pipeline_options(spec)]
        assert ("overwrite" in names) == any(p.is_output for p in spec.params), name


# ---------------------------------------------------------------------- the command line


@pytest.fixture
def cluster_log(tmp_path_factory):
    """Where tests/faulty_cli.py records each cluster a run starts (``watch_clusters``)."""
    return tmp_path_factory.mktemp("clusters") / "started"


def _assert_refused(proc, target, cluster_log):
    assert_no_cluster_started(cluster_log)
    shown = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 2, shown
    assert proc.stdout == "" and "Traceback" not in proc.stderr, shown
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, shown
    assert lines[0] == (f"error: --output {target} exists; pass --overwrite (overwrite=True in "
                        "Python) to replace it, or choose another path"), shown


@pytest.mark.parametrize("pipeline", sorted(WITH_OUTPUT))
def test_cli_keeps_an_existing_output(tmp_path, cluster_log, pipeline):
    target = tmp_path / WITH_OUTPUT[pipeline]
    _make_existing(target)
    before = _snapshot(target)
    size = {"trips-pipeline": ["--rows", "1000"],
            "histogram-pipeline": ["--values", "100"]}.get(pipeline, ["--size", "100"])
    proc = run_faulty_cli("run", pipeline, *size, "--output", str(target), "--workers", "1",
                          "--no-dashboard", env=_env(), timeout=60,
                          watch_clusters=str(cluster_log))
    _assert_refused(proc, target, cluster_log)
    assert _snapshot(target) == before
    assert sorted(os.listdir(tmp_path)) == [target.name]


def test_cli_overwrite_replaces_a_zarr_output(tmp_path):
    target = tmp_path / "grid.zarr"
    _make_existing(target)
    proc = run_cli("run", "stencil-pipeline", "--size", "40", "--steps", "2", "--chunks", "20",
                   "--output", str(target), "--overwrite", "--workers", "1", "--no-dashboard",
                   "--json", env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    import zarr

    grid = np.asarray(zarr.open_array(str(target), mode="r"))
    assert grid.shape == (40, 40) and grid.max() > 0
    assert not (target / "precious.txt").exists()
    assert os.listdir(tmp_path) == ["grid.zarr"]


def test_cli_bench_with_output_replaces_it_per_repeat(tmp_path, cluster_log):
    target = tmp_path / "hist.npz"
    args = ["bench", "histogram-pipeline", "--values", "2000", "--bins", "4", "--range", "0", "1",
            "--cpu", "--workers", "1", "--repeat", "2", "--warmup", "1", "--no-dashboard",
            "--output", str(target)]
    proc = run_cli(*args, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr  # its own repeats replace what it wrote
    assert int(np.load(target)["counts"].sum()) == 2000
    before = _snapshot(target)
    again = run_faulty_cli(*args, env=_env(), timeout=60, watch_clusters=str(cluster_log))
    _assert_refused(again, target, cluster_log)
    assert _snapshot(target) == before
