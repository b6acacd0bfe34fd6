"""Configuration overrides, chunk sizing, and how results are shown."""

from __future__ import annotations

import json

import dask
import pytest
from rich.console import Console

from daskgpu import config
from daskgpu.execution import report
from daskgpu.execution.runner import RunResult
from daskgpu.toolkit import chunking
from daskgpu.toolkit.backends import Backend

CPU = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
GPU2 = Backend("gpu", "cupy", "cudf", workers=2, threads=2)


def test_environment_overrides_nested_keys():
    env = {"DASKGPU_CPU__CHUNK_BYTES": "64MiB", "DASKGPU_DASHBOARD_ADDRESS": "127.0.0.1:9999",
           "DASKGPU_GPUS": "0,1", "OTHER": "x"}
    assert config._env_overrides(env) == {
        "daskgpu": {"cpu": {"chunk-bytes": "64MiB"}, "dashboard-address": "127.0.0.1:9999"}
    }


def test_packaged_defaults_are_loaded():
    assert config.get("dashboard-address") == "127.0.0.1:8787"
    assert dask.utils.parse_bytes(config.get("gpu.chunk-bytes")) > dask.utils.parse_bytes(
        config.get("cpu.chunk-bytes")
    )


@pytest.mark.parametrize("n", [1000, 10_000, 33_333, 100_000])
def test_auto_chunks_respect_limits_and_slots(n):
    for backend, key in ((CPU, "cpu"), (GPU2, "gpu")):
        rows, cols = chunking.auto_chunks((n, n), 8, backend)
        limit = dask.utils.parse_bytes(config.get(f"{key}.chunk-bytes"))
        assert rows * cols * 8 <= limit or rows == 1
        blocks = -(-n // rows)
        assert blocks >= 2  # every slot gets work
        assert cols == n


def test_gpu_chunks_are_larger_than_cpu_chunks():
    cpu = chunking.auto_chunks((40_000, 40_000), 8, CPU)
    gpu = chunking.auto_chunks((40_000, 40_000), 8, GPU2)
    assert gpu[0] > cpu[0]


def test_huge_rows_fall_back_to_square_blocks():
    with dask.config.set({"daskgpu.cpu.chunk-bytes": "1MiB"}):
        block = chunking.auto_chunks((100, 1_000_000), 8, CPU)
    assert block[1] < 1_000_000 and block[0] * block[1] * 8 <= 2**20


def _result(**over):
    base = dict(
        pipeline="mean-pipeline", backend="gpu",
        devices=[{"index": 1, "name": "Fake GPU", "uuid": "GPU-abc", "memory_total": 2**34}],
        workers=[{"address": "tcp://127.0.0.1:1", "name": "0", "nthreads": 1,
                  "memory_limit": 2**30}],
        params={"size": 10}, data={"shape": [10, 10], "chunks": [5, 10], "dtype": "float64"},
        value=0.5, verified=True, verification="checked", dashboard="http://127.0.0.1:8787/status",
        timings={"cluster_start_s": 1.0, "build_s": 0.1, "compute_s": 0.5, "total_s": 1.6},
        throughput={"bytes_per_s": 2e9, "elements_per_s": 2.5e8, "bytes": "read"},
    )
    base.update(over)
    return RunResult(**base)


def test_table_names_devices_shape_and_throughput():
    console = Console(record=True, width=120)
    report.show(_result(), console)
    text = console.export_text()
    for needle in ("GPU-abc", "Fake GPU", "16.00 GiB", "10 x 10", "5 x 10", "2.00 GB/s read",
                   "0.500 s", "http://127.0.0.1:8787/status", "yes"):
        assert needle in text, needle
    console = Console(record=True, width=120)
    report.show(_result(verified=False, dashboard=None), console)
    text = console.export_text()
    assert "NO" in text and "off" in text


def test_json_is_strict_and_complete():
    doc = json.loads(report.as_json(_result(value=float("nan"))))
    assert doc["value"] is None
    for key in ("pipeline", "backend", "devices", "workers", "params", "value", "verified",
                "verification", "timings", "throughput", "dashboard"):
        assert key in doc


def test_table_shows_bracketed_text_as_is():
    # Rich would read "[gpu]" or "[bold]" in a path or a verification detail as markup.
    result = _result(data={"input": "runs/[bold]2026[gpu].npy"},
                     verification="mean within [0.4, 0.6]")
    console = Console(record=True, width=200)
    report.show(result, console)
    text = console.export_text()
    assert "runs/[bold]2026[gpu].npy" in text
    assert "mean within [0.4, 0.6]" in text


def test_a_setting_made_before_the_defaults_loaded_does_not_take_them_along():
    """``dask.config.set`` of a daskgpu key, entered before daskgpu's defaults loaded, removes the
    whole section as it ends; the settings are still there afterwards (fresh interpreter)."""
    import subprocess
    import sys

    script = (
        "import dask\n"
        "with dask.config.set({'daskgpu.faults.close-timeout': '5s'}):\n"
        "    from daskgpu import config\n"
        "    assert config.get('faults.close-timeout') == '5s'\n"
        "print(config.get('cpu.chunk-bytes'), config.get('faults.close-timeout'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["256MiB", "30s"]
