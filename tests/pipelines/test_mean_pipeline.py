"""mean-pipeline on a real CPU LocalCluster: random, .npy and Zarr input, and verification."""

from __future__ import annotations

import copy
import math

import dask
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.data import array_input, synthetic
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.execution import answers
from daskgpu.toolkit import reductions
from daskgpu.toolkit.backends import Backend
from pipelines.mean import check as mean_check

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


def computed(session, **params):
    """mean-pipeline built and computed as the runner does: its workload and raw result."""
    _spec, workload, raw = compute_as_runner(session, "mean-pipeline", **params)
    return workload, raw


def verify(session, workload, raw):
    return verify_on(session, daskgpu.get_pipeline("mean-pipeline"), workload, raw)


def test_a_constant_half_fails_verification(cpu_client):
    workload, raw = computed(cpu_client, size=1000, chunks=250, seed=1)
    assert verify(cpu_client, workload, raw).ok
    constant = reductions.BlockMean(0.5, raw.block_sums)
    check = verify(cpu_client, workload, constant)
    assert not check.ok and "mean 0.5 " in check.detail, check.detail
    assert not verify(cpu_client, workload, 0.5).ok  # a bare number carries no block sums


def test_sums_of_other_seeds_fail_verification(cpu_client):
    """Sums that add up and look uniform, but are not the blocks' own: the redrawn sample."""
    workload, _ = computed(cpu_client, size=600, chunks=200, seed=3)
    _, other = computed(cpu_client, size=600, chunks=200, seed=4)
    check = verify(cpu_client, workload, other)
    assert not check.ok and "recomputed from its seed" in check.detail, check.detail


def test_blocks_streamed_in_pieces_agree_with_blocks_redrawn_whole(cpu_client):
    with dask.config.set({"daskgpu.cpu.stream-elements": 999}):
        workload, raw = computed(cpu_client, size=700, chunks="300,700", seed=8)
    check = verify(cpu_client, workload, raw)
    assert check.ok and "2 sampled blocks redrawn" in check.detail, check.detail


def test_sampled_blocks_follow_the_seed():
    workload = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=9)
    again = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=9)
    other = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=10)
    sample = mean_check._sampled_blocks(workload.context)
    assert len(sample) == 20  # 5 % of a 20 x 20 grid
    assert sample == mean_check._sampled_blocks(again.context)
    assert sample != mean_check._sampled_blocks(other.context)


def test_the_timed_graph_draws_every_block_once_and_holds_no_verification(monkeypatch):
    drawn = []
    draw = synthetic._uniform_block_sum

    def counted(block_info=None, **kwargs):
        drawn.append(tuple(block_info[None]["chunk-location"]))
        return draw(block_info=block_info, **kwargs)

    monkeypatch.setattr(synthetic, "_uniform_block_sum", counted)
    workload = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=600, chunks=200, seed=3)
    raw = workload.collection.compute(scheduler="sync")
    assert sorted(drawn) == [(i, j) for i in range(3) for j in range(3)]
    assert raw.block_sums.shape == (3, 3)
    names = {dask.utils.key_split(key) for key in dict(workload.collection.dask)}
    assert not any("redrawn" in n or "region" in n for n in names), names


# What each mutation's alteration of an input's result is caught by (an input has no seeds:
# its whole total, re-read from the file, or a re-read block names what disagreed).
INPUT_CATCHES = {
    "constant 0.5": "mean",
    "dropped block": "block sums",
    "duplicated block": "block sums",
    "repeated per-block seed": "total",
    "wrong divisor": "mean",
    "block sums accumulated in float32": "total",
    "a block's sum lost (zero)": "total",
    "block sums in the wrong places": "recomputed from the input file",
}


@pytest.fixture(params=["npy", "zarr"])
def random_input(request, tmp_path):
    values = np.random.default_rng(7).normal(2.0, 3.0, size=(900, 130))
    if request.param == "npy":
        path = tmp_path / "in.npy"
        np.save(path, np.asfortranarray(values))
    else:
        zarr = pytest.importorskip("zarr")
        path = tmp_path / "in.zarr"
        zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(200, 130),
                        dtype=values.dtype)[:] = values
    return str(path), values


def test_input_verification_catches_every_declared_mutation(cpu_client, random_input):
    path, values = random_input
    spec = daskgpu.get_pipeline("mean-pipeline")
    assert set(INPUT_CATCHES) == {m.name for m in spec.mutations}
    workload, raw = computed(cpu_client, input=path, chunks="100,50")
    assert raw.block_sums.shape == (9, 3)
    check = verify(cpu_client, workload, raw)
    assert check.ok, check.detail
    assert float(raw) == pytest.approx(values.mean(), rel=1e-12)
    for mutation in spec.mutations:
        before = copy.deepcopy(raw)
        altered = verify(cpu_client, workload, mutation.alter(copy.deepcopy(raw)))
        assert not altered.ok, f"{mutation.name} still verifies: {altered.detail}"
        assert INPUT_CATCHES[mutation.name] in altered.detail, (mutation.name, altered.detail)
        assert "\n" not in altered.detail
        assert verify(cpu_client, workload, before).ok


def test_input_baseline_gives_the_runs_answer(cpu_client, random_input):
    path, values = random_input
    spec = daskgpu.get_pipeline("mean-pipeline")
    result = daskgpu.run(spec, cpu_client, input=path)
    assert result.verified, result.verification
    assert isinstance(result.value, float) and type(result.value) is float
    seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert seconds > 0
    assert answers.difference(result.value, answer) is None
    assert answers.difference(result.value * 1.01, answer) is not None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"size": 100}, "--size: applies to generated data, not to an --input; drop it"),
        ({"seed": 3}, "--seed: applies to generated data"),
        ({"dtype": "float32"}, "--dtype: applies to generated data"),
        ({"size": 100, "seed": 3, "dtype": "float32"},
         "--size, --dtype, --seed: apply to generated data, not to an --input; drop them"),
    ],
)
def test_options_of_generated_data_are_refused_with_an_input(npy_file, given, message):
    path, _ = npy_file
    spec = daskgpu.get_pipeline("mean-pipeline")
    with pytest.raises(ParameterError) as raised:
        spec.resolve(CPU2, input=str(path), **given)
    assert str(raised.value).startswith(message), str(raised.value)
    with pytest.raises(ParameterError, match="generated data"):  # and from Python, keywords
        spec.workload(CPU2, input=str(path), **given)


def test_an_input_run_records_what_it_used(npy_file):
    path, _ = npy_file
    spec = daskgpu.get_pipeline("mean-pipeline")
    resolved = spec.resolve(CPU2, input=str(path), dtype="float64")  # the default: accepted
    assert resolved["size"] is None and resolved["seed"] is None and resolved["dtype"] is None
    assert spec.resolve(CPU2, **resolved.as_dict()).as_dict() == resolved.as_dict()


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
