"""``cli.py bench``: repeated runs, baselines, scaling sweeps, JSON and plot outputs."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli

import daskgpu
import pipelines  # noqa: F401  (registers the built-in pipelines)
from daskgpu.errors import ParameterError
from daskgpu.execution import bench as benchmarks

# Tiny parameters per built-in pipeline, for calling its baseline here on CPU.
TINY = {
    "mean-pipeline": {"size": 200, "seed": 1},
    "matmul-pipeline": {"size": 200, "seed": 1},
    "fft-pipeline": {"size": 128, "seed": 1},
    "histogram-pipeline": {"values": 10_000, "bins": 16, "seed": 1},
    "stencil-pipeline": {"size": 64, "steps": 4},
    "trips-pipeline": {"rows": 5_000, "seed": 1},
    "join-pipeline": {"rows": 5_000, "seed": 1},
    "train-pipeline": {"samples": 2_000, "features": 16, "classes": 3, "steps": 3, "seed": 5},
    "kmeans-pipeline": {"samples": 3_000, "features": 3, "clusters": 3, "seed": 5},
    "pca-pipeline": {"samples": 2_000, "features": 16, "components": 3, "seed": 1},
}


def test_strong_sweep_writes_json_and_png(tmp_path):
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    proc = run_cli("bench", "mean-pipeline", "--size", "1000", "--cpu", "--sweep", "--workers",
                   "2", "--repeat", "2", "--warmup", "1", "--no-dashboard", "--json", str(out),
                   "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "baseline" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["pipeline"] == "mean-pipeline" and doc["mode"] == "strong"
    ms = doc["measurements"]
    assert [m["devices"] for m in ms] == [1, 2]
    for m in ms:
        assert len(m["compute_s"]) == 2
        assert m["min_s"] <= m["median_s"] <= m["max_s"]
        assert m["elements"] == 1000 * 1000
        assert m["elements_per_s"] > 0 and m["bytes_per_s"] > 0
        assert m["baseline_s"] > 0 and m["ratio"] > 0
        assert m["speedup"] > 0 and m["efficiency"] > 0 and m["verified"]
    assert ms[0]["speedup"] == pytest.approx(1.0) and ms[0]["efficiency"] == pytest.approx(1.0)
    assert ms[1]["efficiency"] == pytest.approx(ms[1]["speedup"] / 2)
    assert doc["hardware"]["cpu_count"] >= 1 and doc["hardware"]["gpus"] == []
    for lib in ("dask", "distributed", "numpy", "pandas", "numba", "daskgpu"):
        assert doc["versions"][lib]
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG")
    import matplotlib.image

    image = matplotlib.image.imread(str(png))
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_weak_sweep_grows_the_size(tmp_path):
    out = tmp_path / "weak.json"
    proc = run_cli("bench", "histogram-pipeline", "--values", "20000", "--bins", "8", "--cpu",
                   "--sweep", "--weak", "--workers", "2", "--repeat", "1", "--warmup", "0",
                   "--no-dashboard", "--quiet", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    ms = json.loads(out.read_text())["measurements"]
    assert [m["devices"] for m in ms] == [1, 2]
    assert [m["params"]["values"] for m in ms] == [20_000, 40_000]
    assert [m["elements"] for m in ms] == [20_000, 40_000]
    assert ms[1]["efficiency"] == pytest.approx(ms[0]["median_s"] / ms[1]["median_s"])


def test_weak_sweep_of_a_square_array_scales_its_side():
    spec = daskgpu.get_pipeline("mean-pipeline")
    m = benchmarks.Measurement(1, {"size": 100}, 10_000, [1.0], 1.0, 1.0, 1.0, None, None,
                               None, None, None, shape=[100, 100])
    assert benchmarks._dimensions(m) == 2
    assert benchmarks._size_param(spec) == "size"


@pytest.mark.parametrize("name", sorted(TINY))
def test_every_baseline_gives_the_runs_answer_and_bench_compares_it(cpu_client, name):
    """A baseline's answer is compared with the run's before any ratio; a different one is an
    error, not a ratio."""
    assert set(TINY) >= set(daskgpu.pipeline_names()), "add tiny parameters to TINY"
    spec = daskgpu.get_pipeline(name)
    assert spec.baseline is not None, f"{name} declares no baseline"
    result = daskgpu.run(name, cpu_client, **TINY[name])
    assert result.verified, result.verification
    resolved = spec.resolve(cpu_client.backend, **result.params)  # the values the run used
    seconds, answer = spec.baseline(resolved)
    assert isinstance(seconds, float) and seconds > 0, name
    assert benchmarks.answers.difference(result.value, answer) is None
    assert benchmarks._baseline(spec, cpu_client, resolved, 1, result.value) > 0
    with pytest.raises(benchmarks.BaselineDisagrees, match=name):
        benchmarks._baseline(spec, cpu_client, resolved, 1, _altered(result.value))


def _altered(value):
    """The value with its first number changed (a count by one, a float by 1 %)."""
    if isinstance(value, dict):
        key = next(iter(value))
        return {**value, key: _altered(value[key])}
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = list(value.tolist() if hasattr(value, "tolist") else value)
        return [_altered(items[0]), *items[1:]]
    if isinstance(value, int):
        return value + 1
    return value * 1.01 + 1e-3


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--repeat", "0"], "--repeat 0"),
        (["--warmup", "-1"], "--warmup -1"),
        (["--weak"], "--weak needs --sweep"),
        (["--json", "/nonexistent-dir/out.json"], "does not exist"),
        (["--json", "out.txt"], ".json"),
        (["--plot", "out.jpg"], ".png"),
        (["--size", "0"], "--size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    proc = run_cli("bench", "mean-pipeline", "--cpu", "--workers", "1", "--no-dashboard", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines


def test_weak_needs_a_size():
    with pytest.raises(ParameterError, match="--size"):
        benchmarks.bench("mean-pipeline", {}, {"cpu": True, "workers": 1}, 1, 0, sweep=True,
                         weak=True)


def test_json_path_that_is_a_directory(tmp_path):
    (tmp_path / "d.json").mkdir()
    proc = run_cli("bench", "mean-pipeline", "--cpu", "--json", str(tmp_path / "d.json"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "is a directory" in proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_json_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        proc = run_cli("bench", "mean-pipeline", "--cpu", "--size", "100", "--repeat", "1",
                       "--json", str(locked / "o.json"))
    finally:
        locked.chmod(0o700)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_bench_is_listed_and_run_is_unchanged():
    proc = run_cli("bench", "--help")
    assert proc.returncode == 0 and "mean-pipeline" in proc.stdout
    proc = run_cli("bench", "mean-pipelin")
    assert proc.returncode == 2 and "did you mean 'mean-pipeline'" in proc.stderr
