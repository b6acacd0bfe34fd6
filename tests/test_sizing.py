"""Default sizes and refusals from the selected GPUs' memory (daskgpu.toolkit.sizing)."""

from __future__ import annotations

import dask
import pytest

from daskgpu.clusters.devices import Device
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, sizing

GB = 10**9


def _gpus(*memories: int) -> backends.Backend:
    devices = tuple(Device(i, f"GPU-{i}", "gpu", m, m, f"0000:0{i}:00.0")
                    for i, m in enumerate(memories))
    return backends.Backend("gpu", "cupy", "cudf", devices, len(devices), 1)


def test_defaults_are_a_share_of_the_smallest_gpu_times_the_gpus():
    row = 784 * 4  # a train row of float32 features
    with dask.config.set({"daskgpu.gpu.default-memory-fraction": 0.25}):
        assert sizing.default_rows(_gpus(80 * GB), row, 1000) == int(0.25 * 80 * GB // row)
        # Evenly split data: the 40 GB GPU bounds both.
        assert sizing.default_rows(_gpus(80 * GB, 40 * GB), row, 1000) == \
            int(0.25 * 80 * GB // row)
        assert sizing.default_rows(_gpus(80 * GB), row, 1000, gpu_most=5) == 5
    assert sizing.default_rows(backends.get("cpu"), row, 1000) == 1000


def test_rows_beyond_what_the_gpus_hold_are_refused_naming_what_fits():
    row = 784 * 4
    gpus = _gpus(80 * GB)
    most = sizing.held_rows_limit(gpus, row)
    assert most == int(0.6 * 80 * GB // row)
    sizing.refuse_held_beyond_memory(gpus, "--samples", most, row, "float32 features")
    with pytest.raises(ParameterError) as refused:
        sizing.refuse_held_beyond_memory(gpus, "--samples", 20_000_000, row, "float32 features")
    line = str(refused.value)
    assert line.startswith("--samples 20000000: 62.7 GB of float32 features per GPU")
    assert f"give --samples {most} or fewer, or more GPUs" in line and "\n" not in line
    # Two GPUs hold twice the rows; CPU workers are not bounded here.
    sizing.refuse_held_beyond_memory(_gpus(80 * GB, 80 * GB), "--samples", 20_000_000, row, "x")
    sizing.refuse_held_beyond_memory(backends.get("cpu"), "--samples", 10**12, row, "x")


def test_kmeans_defaults_fit_the_gpu_and_too_many_points_are_refused():
    """kmeans keeps its points on the GPUs for every iteration: sized and refused from them."""
    import daskgpu

    spec = daskgpu.get_pipeline("kmeans-pipeline")
    small = _gpus(16 * GB)  # 100 M x 32 float32 points (12.8 GB) would not fit with the rest
    chosen = spec.resolve(small).values["samples"]
    assert chosen == int(0.25 * 16 * GB // (32 * 4)) < 100_000_000
    assert spec.resolve(_gpus(141 * GB)).values["samples"] == 100_000_000  # the target size
    with pytest.raises(ParameterError, match=r"--samples 100000000: 12\.8 GB of float32 points "
                                             r"per GPU.*give --samples 75000000 or fewer"):
        spec.resolve(small, samples=100_000_000)
    spec.resolve(_gpus(16 * GB, 16 * GB), samples=100_000_000)  # two GPUs hold it


def test_train_defaults_fit_the_gpu_and_too_many_rows_are_refused():
    """train keeps its shards (features and labels) on the GPUs for every step."""
    import daskgpu

    spec = daskgpu.get_pipeline("train-pipeline")
    row = 784 * 4 + 8
    small = _gpus(80 * GB)  # 20 M x 784 float32 rows (62.7 GB) would not fit with the rest
    assert spec.resolve(small).values["samples"] == int(0.25 * 80 * GB // row) < 20_000_000
    assert spec.resolve(_gpus(141 * GB, 141 * GB)).values["samples"] == 20_000_000
    with pytest.raises(ParameterError, match=r"--samples 20000000: 62\.9 GB of float32 rows and "
                                             r"their labels per GPU.*give --samples \d+ or fewer"):
        spec.resolve(small, samples=20_000_000)
