"""GPU workers compile the CUDA kernels a pipeline launches as they start (its warm-up), so
that no run's compute time holds a compilation; run on CPU through the strict CuPy stand-in,
the launches recorded where a GPU would compile."""

from __future__ import annotations

import functools
import inspect

import dask
import numpy as np
import pytest

from daskgpu.kernels import histogram as histogram_kernel
from daskgpu.kernels import kmeans as kmeans_kernel
from daskgpu.kernels import stencil as stencil_kernel
from daskgpu.kernels import trips as trips_kernel
from daskgpu.toolkit import backends, registry
from pipelines.fft import pipeline as fft_pipeline
from pipelines.histogram import pipeline as histogram_pipeline
from pipelines.kmeans import pipeline as kmeans_pipeline
from pipelines.pca import pipeline as pca_pipeline
from pipelines.stencil import pipeline as stencil_pipeline
from pipelines.train import pipeline as train_pipeline
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
        return (xp.zeros((trips_kernel.HOURS, trips_kernel.WIDTH), np.int64),
                xp.zeros((2, trips_kernel.HOURS, trips_kernel.WIDTH), np.float64))

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


# ------------------------------------------ fft, pca, train: CuPy's own kernels and libraries
#
# These pipelines launch no kernel of daskgpu's: their first device step pays for cuFFT's and
# cuBLAS's loading and CuPy's compilation of the elementwise and reduction kernels they use, per
# element type. Their warm-ups run the run's own tasks on tiny device arrays. A run's device
# calls are recorded here as patterns (which task, the element type of each device array it
# was given, the flags and names it was given; not the sizes), and every pattern a run makes
# on the device, for every element type the pipeline accepts, must be one its warm-up makes.

GPU = backends.Backend("gpu", "cupy", "cudf", (), 1, 1)


def _pattern(value, device_type):
    """What of an argument a device task's compilation depends on: element types, flags."""
    if isinstance(value, device_type):
        return f"device {value.dtype}"
    if isinstance(value, np.ndarray):
        return "host array"
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        items = value.values() if isinstance(value, dict) else value
        return (type(value).__name__,
                tuple(sorted({_pattern(item, device_type) for item in items}, key=repr)))
    return type(value).__name__


class TaskCalls:
    """Records the device calls of a pipeline's task functions (patched where they live)."""

    def __init__(self, cupy, monkeypatch):
        self.cupy, self.monkeypatch = cupy, monkeypatch
        self.calls: list[tuple] = []  # the device calls' patterns
        self.names: list[str] = []  # every call's function, on the device or not

    def watch(self, *modules, driving=(), imported_by=()):
        """Record every function of ``modules`` but those that drive a run from its client,
        there and where the modules ``imported_by`` bound them to their own names."""
        for module in modules:
            for name, function in list(vars(module).items()):
                if (inspect.isfunction(function) and function.__module__ == module.__name__
                        and name not in driving):
                    recorded = self._recorded(function)
                    for holder in (module, *imported_by):
                        for alias, value in list(vars(holder).items()):
                            if value is function:
                                self.monkeypatch.setattr(holder, alias, recorded)

    def _recorded(self, function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def recorded(*args, **kwargs):
            self.names.append(function.__name__)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            call = (function.__name__, tuple((name, _pattern(value, self.cupy.ndarray))
                                             for name, value in bound.arguments.items()))
            if "device " in repr(call) or "'cupy'" in repr(call):
                self.calls.append(call)
            return function(*args, **kwargs)
        return recorded

    def taken(self) -> set:
        """The patterns recorded so far, forgotten here."""
        calls, self.calls = set(self.calls), []
        return calls


@pytest.fixture
def task_calls(cupy_stand_in, monkeypatch):
    return TaskCalls(cupy_stand_in, monkeypatch)


def _dtypes(pipeline_module) -> tuple[str, ...]:
    return next(p.choices for p in pipeline_module.PARAMS if p.name == "dtype")


def _assert_warm_up_covers(module, run: set, task_calls) -> None:
    """``module``'s GPU warm-up makes every device call pattern of ``run``, every dtype."""
    assert run and not task_calls.calls
    module.warm_up("gpu")
    warmed = task_calls.taken()
    missing = sorted(run - warmed, key=repr)
    assert not missing, f"{len(missing)} device calls of a run the warm-up does not make: " \
                        f"{missing[:3]}"
    for dtype in _dtypes(module):  # also said by the above: every type on the device
        assert any(f"device {dtype}" in repr(call) for call in warmed), dtype


def _computed(spec, **params) -> None:
    """A run's graph built for GPU workers and computed here, on the stand-in's arrays."""
    workload = spec.workload(GPU, **params)
    dask.compute(workload.collection, scheduler="sync")


def test_fft_warm_up_makes_every_device_call_of_its_runs_for_each_dtype(task_calls, tmp_path):
    from pipelines.fft import tasks as fft_tasks

    spec = registry.get("fft-pipeline")
    task_calls.watch(fft_tasks)
    for dtype in _dtypes(fft_pipeline):
        half = tmp_path / f"half-{dtype}.npy"
        np.save(half, np.full((9, 6), 1 + 1j, dtype))
        for transform in ({}, {"inverse": True}, {"real": True},
                          {"inverse": True, "real": True, "input": str(half)}):
            shape = None if "input" in transform else (9, 10)  # other sides than the warm-up's
            for layout in ("slabs", "whole"):
                _computed(spec, shape=shape, chunks=5, seed=3, dtype=dtype, layout=layout,
                          **transform)
    _assert_warm_up_covers(fft_pipeline, task_calls.taken(), task_calls)
    cupy = task_calls.cupy
    assert ("fft", "irfft") in cupy.events and ("fft", "rfft") in cupy.events
    assert cupy.fft.config.get_plan_cache().get_curr_size() == 0  # no tiny plan kept


def test_pca_warm_up_makes_every_device_call_of_its_runs_for_each_dtype(task_calls):
    from pipelines.pca import tasks as pca_tasks

    spec = registry.get("pca-pipeline")
    task_calls.watch(pca_tasks)
    for dtype in _dtypes(pca_pipeline):
        for method in ("covariance", "exact", "randomized"):  # auto: the first, then the next
            _computed(spec, samples=30, features=5, components=3, method=method,
                      power_iters=2, chunks=11, dtype=dtype, seed=3)
    _assert_warm_up_covers(pca_pipeline, task_calls.taken(), task_calls)


class SyncClient:
    """The little of ``distributed.Client`` train-pipeline's build and steps use: each task
    computed here at once (on the stand-in's arrays, as a GPU worker computes it)."""

    class Done:
        def __init__(self, value):
            self.value, self.key = value, id(self)

        def result(self):
            return self.value

        def release(self):
            pass

    def submit(self, function, *args, pure=True, workers=None, allow_other_workers=False):
        return self.Done(function(*(a.value if isinstance(a, self.Done) else a for a in args)))

    def scatter(self, value, broadcast=False, hash=True):  # noqa: A002 - distributed's name
        return self.Done(value)

    def results(self, futures):
        return [future.result() for future in futures]

    gather = results

    def wait(self, futures):
        pass

    class scheduler:  # noqa: N801 - the client's connection to its scheduler
        @staticmethod
        def identity():
            return {"workers": {"tcp://here:1": {"nthreads": 1}}}

    def sync(self, function, *args, **kwargs):
        return function(*args, **kwargs)


def test_train_warm_up_makes_every_device_call_of_its_runs_for_each_dtype(task_calls,
                                                                          tmp_path):
    from pipelines.train import hidden, inputs
    from pipelines.train import tasks as train_tasks

    spec = registry.get("train-pipeline")
    # train drives the steps from the client; shard_best reads a number kept on the host.
    task_calls.watch(train_tasks, hidden, inputs, driving=("train", "shard_best"),
                     imported_by=(train_pipeline,))
    client = SyncClient()
    np.save(tmp_path / "labels.npy", np.arange(40) % 3)
    for dtype in _dtypes(train_pipeline):
        np.save(tmp_path / f"x-{dtype}.npy",
                np.random.default_rng(0).standard_normal((40, 5)).astype(dtype))
        data = ({"samples": 40, "features": 5},
                {"input": str(tmp_path / f"x-{dtype}.npy"),
                 "labels": str(tmp_path / "labels.npy")})
        for source in data:
            for model in ({}, {"hidden": 4}):
                for batch in ({}, {"batch_size": 12}):
                    with dask.config.set(scheduler=client):
                        workload = spec.workload(GPU, **source, **model, **batch, classes=3,
                                                 steps=2, chunks=15, dtype=dtype, seed=3)
                    workload.drive(workload, client)
    _assert_warm_up_covers(train_pipeline, task_calls.taken(), task_calls)


def test_cpu_warm_ups_of_fft_pca_and_train_do_nothing_on_the_device(task_calls):
    from pipelines.fft import tasks as fft_tasks
    from pipelines.pca import tasks as pca_tasks
    from pipelines.train import hidden, inputs
    from pipelines.train import tasks as train_tasks

    task_calls.watch(fft_tasks, pca_tasks, train_tasks, hidden, inputs,
                     imported_by=(fft_pipeline, pca_pipeline, train_pipeline))
    for module in (fft_pipeline, pca_pipeline, train_pipeline):
        module.warm_up("cpu")
    assert task_calls.names == [] and task_calls.cupy.events == []  # nothing, not even on CPU


def test_an_fft_graph_for_gpu_workers_touches_no_device_in_the_client(cupy_stand_in, tmp_path):
    """Built in the client for an input on GPU workers, the graph infers no block's type by
    running a device task on an empty array there (its device wait would make a CUDA context
    in the client)."""
    np.save(tmp_path / "x.npy", np.ones((12, 10), np.complex64))
    for layout in ("slabs", "whole"):
        registry.get("fft-pipeline").workload(GPU, input=str(tmp_path / "x.npy"), chunks=5,
                                              seed=3, layout=layout)
    assert cupy_stand_in.events == []
