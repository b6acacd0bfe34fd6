"""Real GPU runs (skipped where no GPU with cupy and dask-cuda is found).

The same behaviour is covered on CPU by test_mean_pipeline, test_cluster_plan and test_cli.
Device data is inspected on the workers, never fetched here: a CuPy array in this process
would make a CUDA context here, which the design forbids (and which every test checks).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import daskgpu
from daskgpu.clusters import devices

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_client():
    with daskgpu.cluster(gpus="0", dashboard=False) as client:
        yield client


def _pids_on_gpu0() -> set[int]:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(autouse=True)
def no_cuda_context_here():
    """After every test: this process holds no CUDA context (whatever ran before it)."""
    yield
    assert os.getpid() not in _pids_on_gpu0(), "the test process made a CUDA context"


def _on_worker(gpu_client, function, *args):
    """``function(*args)`` run on the GPU worker, its result here; this module's functions are
    shipped by value (the workers do not import the tests)."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return gpu_client.submit(function, *args, pure=False).result()


def _describe_block(block) -> dict:
    """On the worker: what a block is, without moving it."""
    return {"module": type(block).__module__.split(".")[0], "dtype": str(block.dtype),
            "min": float(block.min()), "max": float(block.max())}


def test_mean_pipeline_on_gpu_is_verified(gpu_client):
    result = daskgpu.run("mean-pipeline", client=gpu_client, size=8000, seed=3)
    assert result.backend == "gpu" and result.verified, result.verification
    first = devices.select("0", devices.inventory())[0]
    assert [d["uuid"] for d in result.devices] == [first.uuid]
    assert len(result.workers) == 1


def test_gpu_blocks_are_cupy_and_uniform(gpu_client):
    backend = gpu_client.backend
    from daskgpu.data import synthetic

    arr = synthetic.uniform((1000, 1000), (500, 1000), "float32", 1, backend)
    block = gpu_client.compute(arr.blocks[0, 0])  # a future: the block stays on the worker
    seen = _on_worker(gpu_client, _describe_block, block)
    assert seen["module"] == "cupy" and seen["dtype"] == str(np.dtype(np.float32))
    assert 0 <= seen["min"] and seen["max"] < 1


def test_npy_input_matches_cpu(gpu_client, cpu_client, tmp_path):
    values = np.random.default_rng(1).normal(size=(2000, 500))
    path = tmp_path / "x.npy"
    np.save(path, values)
    on_gpu = daskgpu.run("mean-pipeline", client=gpu_client, input=str(path))
    on_cpu = daskgpu.run("mean-pipeline", client=cpu_client, input=str(path))
    assert on_gpu.verified and on_gpu.backend == "gpu"
    assert on_gpu.value == pytest.approx(on_cpu.value, rel=1e-9, abs=1e-12)


def test_client_process_holds_no_cuda_context(gpu_client):
    daskgpu.run("mean-pipeline", client=gpu_client, size=2000)
    assert os.getpid() not in _pids_on_gpu0()


def test_histogram_pipeline_on_gpu_matches_cpu(gpu_client, cpu_client, tmp_path):
    values = np.random.default_rng(2).normal(size=3_000_000)
    values[::1000] = np.nan
    path = tmp_path / "h.npy"
    np.save(path, values)
    params = dict(input=str(path), bins=300, range=(-3, 3), chunks="1000000")
    on_gpu = daskgpu.run("histogram-pipeline", client=gpu_client, **params)
    on_cpu = daskgpu.run("histogram-pipeline", client=cpu_client, **params)
    assert on_gpu.backend == "gpu" and on_gpu.verified, on_gpu.verification
    np.testing.assert_array_equal(on_gpu.value["counts"], on_cpu.value["counts"])
    assert on_gpu.value["nan"] == on_cpu.value["nan"] == 3000


def test_stencil_pipeline_on_gpu_matches_cpu(gpu_client, cpu_client):
    params = dict(size=1000, steps=20, steps_per_exchange=4, chunks="400")
    on_gpu = daskgpu.run("stencil-pipeline", client=gpu_client, **params)
    on_cpu = daskgpu.run("stencil-pipeline", client=cpu_client, **params)
    assert on_gpu.backend == "gpu" and on_gpu.verified, on_gpu.verification
    assert on_gpu.value["l2_norm"] == pytest.approx(on_cpu.value["l2_norm"], rel=1e-10)


def test_trips_pipeline_on_cudf_matches_pandas(gpu_client, cpu_client):
    pytest.importorskip("cudf")
    on_gpu = daskgpu.run("trips-pipeline", client=gpu_client, rows=2_000_000, seed=4)
    on_cpu = daskgpu.run("trips-pipeline", client=cpu_client, rows=2_000_000, seed=4)
    assert on_gpu.backend == "gpu" and on_gpu.verified, on_gpu.verification
    assert on_gpu.value["kept"] == on_cpu.value["kept"]
    np.testing.assert_allclose(on_gpu.value["table"]["fare_per_km"],
                               on_cpu.value["table"]["fare_per_km"], rtol=1e-9)


def test_join_pipeline_on_cudf_matches_pandas(gpu_client, cpu_client):
    pytest.importorskip("cudf")
    params = dict(rows=1_000_000, match=0.3, seed=5)
    on_gpu = daskgpu.run("join-pipeline", client=gpu_client, **params)
    on_cpu = daskgpu.run("join-pipeline", client=cpu_client, **params)
    assert on_gpu.backend == "gpu" and on_gpu.verified, on_gpu.verification
    assert on_gpu.value["joined_rows"] == on_cpu.value["joined_rows"] == 300_000


# The pipelines no GPU had run when they were written: each runs small on one GPU and verifies
# at both depths, and its one-GPU baseline (run on a GPU worker, never here) agrees with the
# run's answer in bench. Their CuPy branches are also covered on CPU through the strict CuPy
# stand-in (tests/pipelines/test_*_pipeline.py, tests/pipelines/test_gpu_branches_on_cpu.py).
SMALL = {
    "train-pipeline": dict(samples=200_000, features=64, steps=5, seed=3),
    "kmeans-pipeline": dict(samples=200_000, features=8, clusters=4, seed=3),
    "matmul-pipeline": dict(shape="2000,1500,1800", seed=3),
    "pca-pipeline": dict(samples=200_000, features=64, seed=3),
    "fft-pipeline": dict(size=1024, seed=3),
}


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("depth", ["fast", "full"])
def test_pipeline_verifies_on_a_gpu(gpu_client, name, depth):
    result = daskgpu.run(name, client=gpu_client, verify=depth, **SMALL[name])
    assert result.backend == "gpu" and result.verified, result.verification


@pytest.mark.parametrize("name", sorted(SMALL))
def test_baseline_runs_on_a_gpu_worker_and_agrees(name):
    from daskgpu.execution import bench

    outcome = bench.bench(name, dict(SMALL[name]), {"gpus": "0", "dashboard": False},
                          repeat=1, warmup=0)
    (measured,) = outcome.measurements
    assert outcome.backend == "gpu" and measured.verified
    assert measured.baseline_s and measured.baseline_s > 0 and measured.ratio > 0


# Device paths covered on CPU through the strict CuPy stand-in (tests/kernels/
# test_launch_device.py, tests/pipelines/test_kmeans_init_device.py, tests/pipelines/
# test_gpu_warm_up.py, tests/pipelines/test_matmul_device.py, tests/pipelines/
# test_train_input_device.py), here with real CuPy on the GPU worker: never in this process.


def _launch_on_a_stream() -> dict:
    import cupy

    from daskgpu.kernels import launch

    x = cupy.arange(6, dtype=cupy.float32)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        launched_on, current = int(launch.stream_for(x)), stream.ptr
    viewed = launch.to_numba(x)
    return {"launched_on": launched_on, "current": current,
            "same_memory": viewed.__cuda_array_interface__["data"][0] == x.data.ptr,
            "values": viewed.copy_to_host().tolist()}


def test_cupy_arrays_launch_on_cupys_current_stream_in_their_own_memory(gpu_client):
    seen = _on_worker(gpu_client, _launch_on_a_stream)
    assert seen["launched_on"] == seen["current"] != 0  # a stream of its own, not the default
    assert seen["same_memory"] and seen["values"] == [0, 1, 2, 3, 4, 5]


def _kmeans_init_steps() -> dict:
    import cupy

    from pipelines.kmeans import init as kmeans_init
    from pipelines.kmeans import tasks as kmeans_steps

    host = np.random.default_rng(7).standard_normal((70_000, 4)).astype(np.float32)
    host[17] = np.nan
    host[150, 2] = -np.inf
    arguments = (host[[0, 99]].astype(np.float64), 1.0e5, 40.0, 5, 1, 2)  # over 2 slabs
    rows = np.array([7, 0, 69_999, 7])
    return {"device": kmeans_init.sample_far(cupy.asarray(host), *arguments, start=10,
                                             cell=4096),
            "numpy": kmeans_init.sample_far(host, *arguments, start=10, cell=4096),
            "picked": kmeans_steps.pick_rows(cupy.asarray(host), rows),
            "rows": host[rows].astype(np.float64)}


def test_kmeans_parallel_samples_and_picks_device_rows_as_numpy_does(gpu_client):
    seen = _on_worker(gpu_client, _kmeans_init_steps)
    (rows, points, costs, kept), want = seen["device"], seen["numpy"]
    assert all(type(part) is np.ndarray for part in seen["device"])
    np.testing.assert_array_equal(rows, want[0])
    np.testing.assert_array_equal(points, want[1])
    np.testing.assert_allclose(costs, want[2], rtol=1e-9)
    np.testing.assert_array_equal(kept, want[3])
    assert len(rows) > 100 and 27 not in rows and 160 not in rows  # non-finite: never
    np.testing.assert_array_equal(seen["picked"], seen["rows"])


def _warm_ups() -> int:
    import cupy

    from pipelines.fft import pipeline as fft
    from pipelines.pca import pipeline as pca
    from pipelines.train import pipeline as train

    for module in (fft, pca, train):
        module.warm_up("gpu")
    return cupy.fft.config.get_plan_cache().get_curr_size()


def test_fft_pca_and_train_warm_up_on_a_gpu_worker_and_keep_no_plan(gpu_client):
    assert _on_worker(gpu_client, _warm_ups) == 0


def _matmul_on_device() -> dict:
    import cupy

    from daskgpu.toolkit.numeric import CounterGenerator
    from daskgpu.verification import Grid
    from pipelines.matmul import check_replay
    from pipelines.matmul import shared as matmul_data
    from pipelines.matmul import tasks as matmul_tasks

    c = np.random.default_rng(2).standard_normal((12, 4)).astype(np.float32)
    info = {0: {"array-location": [(13, 25), (5, 9)]}}
    packing = {"m": 9, "check_seed": 3, "n": 25,
               "width": 2 + matmul_data.SAMPLED_CELLS + 12 * matmul_data.VECTORS}
    ctx = matmul_data.MatmulContext(Grid(((20, 20), (15, 15))), Grid(((15, 15), (10, 10))),
                                    "float32", "cupy", check_seed=3, seeds=(5, 6))
    block_three = np.random.SeedSequence(5, spawn_key=(3,))  # A's block (1, 1), row-major
    return {"device": matmul_tasks._block_summary(cupy.asarray(c), info, **packing,
                                                  library="cupy"),
            "numpy": matmul_tasks._block_summary(c, info, **packing),
            "drawn": check_replay.operand(ctx, 0, (1, 1)).get(),  # on the device, to the host
            "scheme": CounterGenerator(np, block_three).random((20, 15), dtype="float32")}


def test_matmul_block_summary_check_draw_and_one_block_peak_on_a_gpu_worker(gpu_client):
    import dask

    from pipelines.matmul import peak as matmul_peak

    seen = _on_worker(gpu_client, _matmul_on_device)
    assert type(seen["device"]) is np.ndarray  # a host vector, summarised on the device
    np.testing.assert_allclose(seen["device"], seen["numpy"], rtol=1e-12, atol=1e-12)
    assert type(seen["drawn"]) is np.ndarray and seen["drawn"].dtype == np.float64
    np.testing.assert_allclose(seen["drawn"], seen["scheme"], rtol=1e-7)
    with dask.config.set(scheduler=gpu_client.client):
        peak = matmul_peak.measure_peak(gpu_client.backend, "float32", (1024, 512, 1024))
    assert peak["peak_block"] == 1024 and peak["peak_gflop_per_s"] > 0


def _train_input_shards(features: str, labels: str) -> dict:
    import cupy

    from daskgpu.data import array_input
    from pipelines.train import inputs as train_inputs

    readers = [train_inputs.reader_of(array_input.open_array(p)) for p in (features, labels)]
    test = np.array([1, 7, 20])
    made = {library: train_inputs.make_input_shard(*readers, 5, 35, test, 2, "float32",
                                                   library)
            for library in ("cupy", "numpy")}
    keys = ("x", "y", "test_x", "test_y")
    return {"modules": {key: type(made["cupy"][key]).__module__.split(".")[0] for key in keys},
            "device": {key: cupy.asnumpy(made["cupy"][key]) for key in keys},
            "numpy": {key: made["numpy"][key] for key in keys}}


def test_train_input_shards_are_read_onto_the_gpu_as_numpy_reads_them(gpu_client, tmp_path):
    rng = np.random.default_rng(5)
    np.save(tmp_path / "x.npy", rng.standard_normal((50, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 50))
    seen = _on_worker(gpu_client, _train_input_shards, str(tmp_path / "x.npy"),
                      str(tmp_path / "y.npy"))
    assert set(seen["modules"].values()) == {"cupy"}
    for key, values in seen["numpy"].items():
        assert seen["device"][key].dtype == values.dtype, key
        np.testing.assert_array_equal(seen["device"][key], values, err_msg=key)
