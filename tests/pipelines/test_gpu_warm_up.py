"""GPU workers compile the CUDA kernels a pipeline launches as they start (its warm-up), so
that no run's compute time holds a compilation; run on CPU through the strict CuPy stand-in,
the launches recorded where a GPU would compile."""

from __future__ import annotations

import numpy as np
import pytest

from daskgpu.kernels import histogram as histogram_kernel
from daskgpu.kernels import kmeans as kmeans_kernel
from daskgpu.kernels import stencil as stencil_kernel
from daskgpu.kernels import trips as trips_kernel
from pipelines.histogram import pipeline as histogram_pipeline
from pipelines.kmeans import pipeline as kmeans_pipeline
from pipelines.stencil import pipeline as stencil_pipeline
from pipelines.trips import pipeline as trips_pipeline


@pytest.fixture
def launches(cupy_stand_in, monkeypatch):
    """``(kernel, dtypes of its arguments)`` of each device launch, instead of launching."""
    seen: list[tuple[str, tuple[str, ...]]] = []

    class Kernel:
        """``kernel[grid, block, stream](...)`` recorded: the dtype of the grid it steps."""

        def __getitem__(self, config):
            def launch(src, dst, alpha, *rest):
                seen.append(("stencil", (np.dtype(type(alpha)).name,)))
            return launch

    class View:
        def __init__(self, array):
            assert type(array).__module__.split(".")[0] == "cupy"  # a device array, as in a run
            self.array = array

        def is_c_contiguous(self):
            return True

    def trips_device(arrays, per_hour, n):
        assert all(type(x).__module__.split(".")[0] == "cupy" for x in arrays)
        seen.append(("trips", tuple(x.dtype.name for x in arrays)))
        xp = cupy_stand_in
        return (xp.zeros((trips_kernel.HOURS, trips_kernel._WIDTH), np.int64),
                xp.zeros((2, trips_kernel.HOURS, trips_kernel._WIDTH), np.float64))

    def histogram_device(x, lo, hi, bins):
        assert type(x).__module__.split(".")[0] == "cupy"
        seen.append(("histogram", (x.dtype.name,)))
        return cupy_stand_in.zeros(bins, np.int64)

    def kmeans_launch(plan, x, centroids, n, outputs):
        assert type(x).__module__.split(".")[0] == "cupy"
        kind = "pass" if len(outputs) == 3 else "counts-cost"
        seen.append((f"kmeans {kind}", (x.dtype.name, str(x.shape[1]))))

    monkeypatch.setattr(histogram_kernel, "_device", histogram_device)
    monkeypatch.setattr(kmeans_kernel, "_launch", kmeans_launch)
    monkeypatch.setattr(stencil_kernel, "_step_kernel", Kernel())
    monkeypatch.setattr(stencil_kernel.launch, "stream_for", lambda x: None)
    monkeypatch.setattr(stencil_kernel.launch, "to_numba", View)
    monkeypatch.setattr(trips_kernel, "_device", trips_device)
    return seen


def test_stencil_warm_up_launches_the_cuda_kernel_for_both_dtypes(launches):
    stencil_pipeline.warm_up("gpu")
    assert sorted(set(launches)) == [("stencil", ("float32",)), ("stencil", ("float64",))]


def test_trips_warm_up_launches_the_cuda_kernel_on_device_columns(launches):
    trips_pipeline.warm_up("gpu")
    assert [kernel for kernel, _ in launches] == ["trips"]


def test_histogram_warm_up_launches_the_cuda_kernel_for_both_dtypes(launches):
    histogram_pipeline.warm_up("gpu")
    assert sorted(launches) == [("histogram", ("float32",)), ("histogram", ("float64",))]


def test_kmeans_warm_up_launches_both_kernels_for_the_default_features(launches):
    kmeans_pipeline.warm_up("gpu")
    assert sorted(set(launches)) == [(f"kmeans {kind}", (dtype, "32"))
                                     for kind in ("counts-cost", "pass")
                                     for dtype in ("float32", "float64")]


def test_cpu_warm_ups_launch_nothing_on_the_device(launches):
    for module in (stencil_pipeline, trips_pipeline, histogram_pipeline, kmeans_pipeline):
        module.warm_up("cpu")
    assert launches == []
