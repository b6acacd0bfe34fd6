"""mean-pipeline on a real CPU LocalCluster: random, .npy and Zarr input, and verification."""

from __future__ import annotations

import math

import dask
import numpy as np
import pytest

import daskgpu
from daskgpu import array_input, reductions, synthetic
from daskgpu.backends import Backend
from daskgpu.errors import InputFileError, ParameterError

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def test_random_mean_is_verified_and_reproducible(cpu_client):
    first = daskgpu.run("mean-pipeline", client=cpu_client, size=3000, seed=11)
    again = daskgpu.run("mean-pipeline", client=cpu_client, size=3000, seed=11)
    other = daskgpu.run("mean-pipeline", client=cpu_client, size=3000, seed=12)
    assert first.verified, first.verification
    assert abs(first.value - 0.5) < 6 / math.sqrt(12 * 3000 * 3000)
    assert first.value == again.value
    assert first.value != other.value
    assert first.backend == "cpu" and len(first.workers) == 2
    assert first.data["shape"] == [3000, 3000]
    assert first.throughput["elements_per_s"] == pytest.approx(9e6 / first.timings["compute_s"])


def test_fused_mean_equals_mean_of_materialised_array():
    shape, chunks = (301, 257), (100, 60)
    for dtype in ("float64", "float32"):
        data = synthetic.uniform(shape, chunks, dtype, 5, CPU2)
        assert data.dtype == np.dtype(dtype) and data.chunksize == chunks
        values = data.compute(scheduler="sync")
        assert values.min() >= 0 and values.max() < 1
        sums = synthetic.uniform_block_sums(shape, chunks, dtype, 5, CPU2, stream_elements=1000)
        fused = reductions.mean_from_sums(sums, values.size)
        expected = values.astype(np.float64).mean()
        assert fused.compute(scheduler="sync") == pytest.approx(expected, rel=1e-12)
        assert reductions.mean(data).compute(scheduler="sync") == pytest.approx(expected, rel=1e-12)


def test_blocks_are_independent_of_chunk_scheduling():
    a = synthetic.uniform((200, 200), (50, 200), "float64", 3, CPU2).compute(scheduler="threads")
    b = synthetic.uniform((200, 200), (50, 200), "float64", 3, CPU2).compute(scheduler="sync")
    np.testing.assert_array_equal(a, b)
    # different blocks draw different streams
    assert not np.array_equal(a[:50], a[50:100])


def test_explicit_chunks_are_honoured_and_auto_chunks_busy_every_thread(cpu_client):
    explicit = daskgpu.run("mean-pipeline", client=cpu_client, size=1000, chunks="300,1000")
    assert explicit.data["chunks"] == [300, 1000] and explicit.data["blocks"] == 4
    auto = daskgpu.run("mean-pipeline", client=cpu_client, size=1000, chunks="auto")
    assert auto.data["blocks"] % 2 == 0  # a multiple of the cluster's 2 threads


def test_float32(cpu_client):
    result = daskgpu.run("mean-pipeline", client=cpu_client, size=1200, dtype="float32", seed=2)
    assert result.verified and result.data["dtype"] == "float32"
    assert result.throughput["bytes_per_s"] == pytest.approx(
        1200 * 1200 * 4 / result.timings["compute_s"]
    )


@pytest.fixture
def npy_file(tmp_path):
    values = (np.arange(1000 * 300, dtype=np.float64).reshape(1000, 300) % 977) / 13.0
    path = tmp_path / "data.npy"
    np.save(path, values)
    return path, values


def test_npy_input_mean_matches_numpy(cpu_client, npy_file):
    path, values = npy_file
    result = daskgpu.run("mean-pipeline", client=cpu_client, input=str(path), chunks="128")
    assert result.verified, result.verification
    assert result.value == pytest.approx(values.mean(), rel=1e-12)
    assert result.data["shape"] == [1000, 300] and result.data["chunks"] == [128, 128]


def test_fortran_order_and_int_npy(cpu_client, tmp_path):
    values = np.asfortranarray(np.arange(5000, dtype=np.int64).reshape(50, 100))
    path = tmp_path / "f.npy"
    np.save(path, values)
    result = daskgpu.run("mean-pipeline", client=cpu_client, input=str(path), chunks="7")
    assert result.verified and result.value == pytest.approx(values.mean())


def test_zarr_input_mean_matches_numpy(cpu_client, tmp_path):
    zarr = pytest.importorskip("zarr")
    values = np.random.default_rng(0).normal(3.0, 2.0, size=(700, 90)).astype(np.float32)
    path = tmp_path / "data.zarr"
    arr = zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(100, 90),
                          dtype=values.dtype)
    arr[:] = values
    result = daskgpu.run("mean-pipeline", client=cpu_client, input=str(path))
    assert result.verified, result.verification
    assert result.value == pytest.approx(values.astype(np.float64).mean(), rel=1e-6)
    assert result.data["format"] == "zarr"


def test_planted_wrong_answer_fails_verification(cpu_client, npy_file):
    spec = daskgpu.get_pipeline("mean-pipeline")
    path, values = npy_file
    workload = spec.workload(CPU2, input=str(path))
    assert spec.verify(workload, values.mean()).ok
    assert not spec.verify(workload, values.mean() * (1 + 1e-6)).ok
    random_workload = spec.workload(CPU2, size=1000, seed=1)
    assert spec.verify(random_workload, 0.5).ok
    assert not spec.verify(random_workload, 0.51).ok  # 0.51 is ~35 standard errors away


def test_blockwise_reference_reads_in_pieces(npy_file):
    path, values = npy_file
    source = array_input.open_array(str(path))
    total, absolute, count = array_input.blockwise_sums(source, block_bytes=4096)
    assert count == values.size
    assert total == pytest.approx(values.sum(), rel=1e-12)
    assert absolute == pytest.approx(np.abs(values).sum(), rel=1e-12)


def test_build_returns_a_composable_lazy_collection():
    coll = daskgpu.get_pipeline("mean-pipeline").build(CPU2, size=500, seed=4)
    assert dask.is_dask_collection(coll)
    value = coll.compute(scheduler="sync")
    assert abs(value - 0.5) < 0.01
    assert (coll * 2 - 1).compute(scheduler="sync") == pytest.approx(2 * value - 1)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"size": 0}, "size=0"),  # from Python: the keyword, not the option
        ({"size": "ten"}, "size=ten"),
        ({"chunks": "0"}, "chunks=0"),
        ({"chunks": "1,2,3"}, "axes"),
        ({"dtype": "int8"}, "float64"),
        ({"seed": -1}, "seed=-1"),
        ({"sise": 10}, "did you mean 'size'"),
    ],
)
def test_bad_parameters_name_the_problem(params, message):
    with pytest.raises(ParameterError, match=message):
        daskgpu.get_pipeline("mean-pipeline").workload(CPU2, **params)


def test_bad_inputs_are_refused_before_computing(tmp_path):
    spec = daskgpu.get_pipeline("mean-pipeline")
    truncated = tmp_path / "t.npy"
    np.save(truncated, np.ones((100, 100)))
    truncated.write_bytes(truncated.read_bytes()[:-800])
    objects = tmp_path / "o.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    text = tmp_path / "x.npy"
    text.write_text("hello")
    strings = tmp_path / "s.npy"
    np.save(strings, np.array(["a", "b"]))
    empty = tmp_path / "e.npy"
    np.save(empty, np.ones((0, 3)))
    cases = {
        tmp_path / "missing.npy": "no such file",
        tmp_path: "is a directory",
        truncated: "truncated",
        objects: "Python objects",
        text: "not a valid .npy",
        strings: "numeric",
        empty: "empty",
    }
    for path, message in cases.items():
        with pytest.raises(InputFileError, match=message):
            spec.workload(CPU2, input=str(path))


def test_zarr_of_wrong_dtype_is_refused(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "s.zarr"
    arr = zarr.open_array(str(path), mode="w", shape=(4,), dtype="bool")
    arr[:] = True
    array_input.open_array(str(path))  # booleans are numbers enough
    path2 = tmp_path / "t.zarr"
    zarr.open_array(str(path2), mode="w", shape=(4,), dtype="M8[ns]")
    with pytest.raises(InputFileError, match="numeric"):
        array_input.open_array(str(path2))
