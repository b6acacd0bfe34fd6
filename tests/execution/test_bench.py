"""``cli.py bench``: repeated runs, baselines, scaling sweeps, JSON and plot outputs."""

from __future__ import annotations

import contextlib
import json
import os
import types

import pytest
from conftest import run_cli
from fault_injection import run_faulty_cli

import daskgpu
import pipelines  # noqa: F401  (registers the built-in pipelines)
from daskgpu.errors import ParameterError
from daskgpu.execution import bench as benchmarks
from daskgpu.execution import report

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
    # strong scaling: t(1)/t(2) from the reported medians, and efficiency that over 2 workers
    assert ms[1]["speedup"] == pytest.approx(ms[0]["median_s"] / ms[1]["median_s"])
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
    assert ms[1]["speedup"] == pytest.approx(2 * ms[0]["median_s"] / ms[1]["median_s"])


def _measurement(devices: int, median_s: float, size: int = 100, shape=None):
    """A made-up measurement: ``devices`` devices, every timed run ``median_s`` seconds."""
    return benchmarks.Measurement(devices, {"size": size}, size * size, [median_s], median_s,
                                  median_s, median_s, None, None, None, None, None, shape=shape)


@pytest.mark.parametrize("weak", [False, True], ids=["strong", "weak"])
def test_speedup_and_efficiency_come_from_the_medians(weak):
    medians = {1: 2.0, 2: 1.25, 4: 0.8}
    ms = [_measurement(k, t) for k, t in medians.items()]
    benchmarks._scaling(ms, sweep=True, weak=weak)
    for m in ms:
        k, ratio = m.devices, medians[1] / medians[m.devices]  # t(1)/t(k)
        if weak:  # k times the work in t(k): efficiency t(1)/t(k), speedup k t(1)/t(k)
            assert (m.efficiency, m.speedup) == pytest.approx((ratio, k * ratio)), k
        else:  # the same work: speedup t(1)/t(k), efficiency that over k
            assert (m.speedup, m.efficiency) == pytest.approx((ratio, ratio / k)), k
    assert ms[0].speedup == ms[0].efficiency == 1.0


def test_weak_sweep_of_a_square_array_scales_its_side(monkeypatch):
    """In two dimensions the side grows by sqrt(k): k devices get k times the elements."""
    spec = daskgpu.get_pipeline("mean-pipeline")
    assert benchmarks._size_param(spec) == "size"
    sides = []

    @contextlib.contextmanager
    def no_cluster(step_plan, warm_up=None):
        yield types.SimpleNamespace(notices=(), kind="cpu", backend=step_plan.backend)

    def measured(spec, session, resolved, repeat, warmup, baseline_runs, devices, note, verify):
        sides.append(resolved["size"])
        return _measurement(devices, 1.0, resolved["size"], [resolved["size"]] * 2)

    monkeypatch.setattr(benchmarks.sessions, "start", no_cluster)
    monkeypatch.setattr(benchmarks, "_measure", measured)
    result = benchmarks.bench("mean-pipeline", {"size": 100}, {"cpu": True, "workers": 4}, 1, 0,
                              sweep=True, weak=True)
    assert [m.devices for m in result.measurements] == [1, 2, 3, 4]
    assert sides == [100, 141, 173, 200]  # round(100 * k ** (1 / 2))
    elements = [m.elements for m in result.measurements]
    assert [e / elements[0] for e in elements] == pytest.approx([1, 2, 3, 4], rel=0.01)


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


def test_plot_draws_throughput_baseline_and_efficiency_per_device_count(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    drawn = []
    save = Figure.savefig

    def keep(figure, *args, **kwargs):
        drawn.append(figure)
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    ms = [_measurement(k, t) for k, t in {1: 2.0, 2: 1.25, 4: 0.8}.items()]
    for m, throughput, baseline in zip(ms, [10.0, 16.0, 25.0], [4.0, 6.0, 5.0], strict=True):
        m.elements_per_s, m.baseline_elements_per_s = throughput, baseline
    benchmarks._scaling(ms, sweep=True, weak=False)
    result = benchmarks.BenchResult("mean-pipeline", "cpu", "strong", 1, 0, ms, {}, {})
    png = tmp_path / "strong.png"
    report.write_bench_plot(result, str(png))
    assert png.read_bytes().startswith(b"\x89PNG") and len(drawn) == 1
    throughput, efficiency = drawn[0].axes
    curve, baseline = throughput.get_lines()
    assert list(curve.get_xdata()) == [1, 2, 4]
    assert list(curve.get_ydata()) == [10.0, 16.0, 25.0]
    assert list(baseline.get_ydata()) == [5.0, 5.0]  # a horizontal line at the median baseline
    assert list(efficiency.get_lines()[0].get_xdata()) == [1, 2, 4]
    assert list(efficiency.get_lines()[0].get_ydata()) == pytest.approx([1.0, 0.8, 0.625])
    assert "CPU workers" in throughput.get_xlabel() and "strong" in efficiency.get_title()


def test_json_path_that_is_a_directory(tmp_path):
    (tmp_path / "d.json").mkdir()
    proc = run_cli("bench", "mean-pipeline", "--cpu", "--json", str(tmp_path / "d.json"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "is a directory" in proc.stderr


def test_unwritable_json_path(tmp_path):
    # A folder that is a regular file: no one, root included, can create a file in it.
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    proc = run_cli("bench", "mean-pipeline", "--cpu", "--size", "100", "--repeat", "1",
                   "--json", str(not_a_folder / "o.json"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and str(not_a_folder) in lines[0]
    assert os.listdir(tmp_path) == ["file"]
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_bench_exits_1_when_the_baseline_disagrees(tmp_path):
    # sum-of-ones computes 100; its baseline answers 101 (tests/fault_injection.py)
    out = tmp_path / "out.json"
    proc = run_faulty_cli("bench", "sum-of-ones", "--cpu", "--workers", "1", "--repeat", "1",
                          "--warmup", "0", "--no-dashboard", "--json", str(out), timeout=120,
                          baseline_disagrees=True)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # no table, no ratio
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("error: sum-of-ones: the baseline's answer differs"), proc.stderr
    assert "100.0 against 101.0" in line
    assert os.listdir(tmp_path) == []  # no --json document of different work


def test_the_tolerance_follows_the_dtype_and_the_reductions_length():
    """u sqrt(length), floored at RTOL: float64 keeps 1e-6; float32 widens with the length;
    a float32 sum of 10^7 terms is within it, where it is not within 1e-6."""
    import numpy as np

    tolerance = benchmarks.answers.tolerance
    assert tolerance("float64", 10**10) == tolerance() == tolerance("int64", 10**8) == 1e-6
    assert tolerance("float32", 10**8) == pytest.approx(2.0**-24 * 10**4)
    values = np.random.default_rng(0).random(10**7).astype(np.float32)
    rough = float(np.cumsum(values, dtype=np.float32)[-1])  # float32 accumulation, in order
    exact = float(values.sum(dtype=np.float64))
    assert benchmarks.answers.difference(rough, exact) is not None
    assert benchmarks.answers.difference(rough, exact,
                                         rtol=tolerance("float32", values.size)) is None


def test_a_float32_bench_agrees_and_a_wrong_baseline_still_disagrees(monkeypatch):
    """bench pca-pipeline --dtype float32: the baseline's answer agrees with the run's within
    the float32 tolerance; one 0.5 % off is refused."""
    params = {"samples": 40_000, "features": 32, "components": 3, "dtype": "float32",
              "seed": 4}
    options = {"cpu": True, "workers": 2, "threads_per_worker": 1, "dashboard": False}
    result = benchmarks.bench("pca-pipeline", params, options, repeat=1, warmup=0)
    (m,) = result.measurements
    assert m.verified and m.baseline_s > 0 and m.ratio > 0
    from pipelines.pca import pipeline as pca_pipeline

    honest = pca_pipeline.one_process_pca

    def wrong(*args):  # the sum of squares 0.5 % off
        s, squares = honest(*args)
        return s, squares * 1.005

    monkeypatch.setattr(pca_pipeline, "one_process_pca", wrong)
    with pytest.raises(benchmarks.BaselineDisagrees, match="explained_variance_ratio"):
        benchmarks.bench("pca-pipeline", params, options, repeat=1, warmup=0)


def test_bench_is_listed_and_run_is_unchanged():
    proc = run_cli("bench", "--help")
    assert proc.returncode == 0 and "mean-pipeline" in proc.stdout
    proc = run_cli("bench", "mean-pipelin")
    assert proc.returncode == 2 and "did you mean 'mean-pipeline'" in proc.stderr
