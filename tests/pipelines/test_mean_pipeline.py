"""mean-pipeline on a real CPU LocalCluster: random, .npy and Zarr input, and verification."""

from __future__ import annotations

import copy
import math
import warnings

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
from daskgpu.verification import sample_size
from pipelines.mean import check as mean_check
from pipelines.mean import shared as mean_shared
from pipelines.mean import tasks as mean_tasks

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


def verify(session, workload, raw, depth="full"):
    return verify_on(session, daskgpu.get_pipeline("mean-pipeline"), workload, raw, depth)


DEPTHS = ("fast", "full")


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_constant_half_fails_verification(cpu_client, depth):
    workload, raw = computed(cpu_client, size=1000, chunks=250, seed=1)
    assert verify(cpu_client, workload, raw, depth).ok
    constant = reductions.BlockMean(0.5, raw.block_sums)
    check = verify(cpu_client, workload, constant, depth)
    assert not check.ok and "mean 0.5 " in check.detail, check.detail
    assert not verify(cpu_client, workload, 0.5, depth).ok  # a bare number carries no sums


@pytest.mark.parametrize("depth", DEPTHS)
def test_sums_of_other_seeds_fail_verification(cpu_client, depth):
    """Sums that add up and look uniform, but are not the blocks' own: the redrawn sample."""
    workload, _ = computed(cpu_client, size=600, chunks=200, seed=3)
    _, other = computed(cpu_client, size=600, chunks=200, seed=4)
    check = verify(cpu_client, workload, other, depth)
    assert not check.ok and "recomputed from its seed" in check.detail, check.detail


def test_blocks_streamed_in_pieces_agree_with_blocks_redrawn_whole(cpu_client):
    with dask.config.set({"daskgpu.cpu.stream-elements": 999}):
        workload, raw = computed(cpu_client, size=700, chunks="300,700", seed=8)
    check = verify(cpu_client, workload, raw)
    assert check.ok and "all 3 blocks checked again: their sums redrawn from their seeds agree" \
        in check.detail, check.detail
    fast = verify(cpu_client, workload, raw, "fast")
    assert fast.ok and "cells checked again" in fast.detail, fast.detail


def test_fast_checks_a_seeded_sample_of_cells_and_says_what_it_promises(cpu_client):
    workload, raw = computed(cpu_client, size=3000, chunks=1000, seed=5)
    assert raw.cell_sums.shape == (9 * mean_shared.flat_cells(10**6),)
    check = verify(cpu_client, workload, raw, "fast")
    assert check.ok, check.detail
    assert ("62 of 558 cells checked again: a fault in at least 10 % of the cells is caught "
            "with probability at least 99.9 %") in check.detail, check.detail
    assert check.depth == "fast"
    # a cell's sum wrong (its block's unchanged): the cells no longer add up to the block
    altered = copy.deepcopy(raw)
    altered.cell_sums[7] *= 1.001
    wrong = verify(cpu_client, workload, altered, "fast")
    assert not wrong.ok and "block (0, 0): sum" in wrong.detail, wrong.detail
    assert verify(cpu_client, workload, altered, "full").ok  # full reads no cells
    # a cell whose sum moved to another, inside a block and between sampled cells: redrawn
    sampled = mean_check.cell_plan(workload.context).parts
    swapped = copy.deepcopy(raw)
    first, second = int(sampled[0]), int(sampled[1])
    swapped.cell_sums[[first, second]] = swapped.cell_sums[[second, first]]
    moved = verify(cpu_client, workload, swapped, "fast")
    assert not moved.ok and "recomputed from its seed" in moved.detail, moved.detail


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("stream", [2**20, 2**15, 3 * 2**14, 1000])
def test_piece_sums_are_numpys_sum_bit_for_bit_and_fill_the_cells(dtype, stream):
    """The block's sum does not change when the run sums cells too (the reported mean)."""
    count = 3 * 2**20 + 12_345
    values = np.random.default_rng(2).random(count, dtype=dtype)
    cells = np.zeros(mean_shared.flat_cells(count))
    for offset in range(0, count, stream):
        part = values[offset:offset + stream]
        assert mean_tasks.piece_sums(part, offset, cells) == float(part.sum(dtype=np.float64))
    expected = np.add.reduceat(values, np.arange(0, count, mean_shared.CELL), dtype=np.float64)
    np.testing.assert_allclose(cells, expected, rtol=1e-13)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_block_drawn_with_its_cells_sums_as_the_library_does(dtype):
    info = {None: {"chunk-location": (1, 0)}}
    chunks = ((700, 650), (2000,))
    for stream in (2**20, 2**15, 999):
        expected = synthetic._uniform_block_sum(info, seed=4, value_dtype=dtype,
                                                chunks_of_data=chunks, stream_elements=stream)
        total, cells = mean_tasks.draw_and_sum(4, 1, 650 * 2000, dtype, stream)
        assert total == expected[0, 0]
        assert cells.size == mean_shared.flat_cells(650 * 2000)
        assert math.fsum(cells) == pytest.approx(total, rel=1e-13)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cells_drawn_again_by_advancing_the_generator_are_the_blocks_own(dtype):
    workload = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=900, chunks="400,900",
                                                              seed=6, dtype=dtype)
    ctx = workload.context
    whole = [np.random.default_rng(np.random.SeedSequence(6, spawn_key=(n,))).random(
        count, dtype=dtype) for n, count in enumerate((360_000, 360_000, 90_000))]
    seen = 0
    for cell in mean_check.cell_plan(ctx):
        block, index = ctx.cells().locate(cell)
        values = mean_check.cell_values(ctx, block, index)
        expected = whole[block][index * mean_shared.CELL:(index + 1) * mean_shared.CELL]
        assert values.sum() == float(expected.sum(dtype=np.float64))
        seen += 1
    assert seen == len(mean_check.cell_plan(ctx)) > 10


def test_sampled_blocks_follow_the_seed_and_full_takes_every_block():
    workload = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=9)
    again = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=9)
    other = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=1000, chunks=50, seed=10)
    sample = mean_check.block_plan(workload.context, "fast").parts
    assert len(sample) == sample_size(400) == 61  # a tenth of 400 blocks caught at 99.9 %
    assert sample == mean_check.block_plan(again.context, "fast").parts
    assert sample != mean_check.block_plan(other.context, "fast").parts
    assert mean_check.block_plan(workload.context, "full").parts == tuple(range(400))


def test_the_timed_graph_draws_every_block_once_and_holds_no_verification(monkeypatch):
    drawn = []
    draw = mean_tasks.draw_and_sum

    def counted(seed, number, *args):
        drawn.append(number)
        return draw(seed, number, *args)

    monkeypatch.setattr(mean_tasks, "draw_and_sum", counted)
    workload = daskgpu.get_pipeline("mean-pipeline").workload(CPU2, size=600, chunks=200, seed=3)
    raw = workload.collection.compute(scheduler="sync")
    assert sorted(drawn) == list(range(9))
    assert raw.block_sums.shape == (3, 3) and raw.cell_sums.shape == (9 * 3,)
    names = {dask.utils.key_split(key) for key in dict(workload.collection.dask)}
    assert not any("redrawn" in n or "region" in n for n in names), names


# What each mutation's alteration of an input's result is caught by (an input has no seeds:
# its whole total, re-read from the file, or a re-read block names what disagreed; fast: the
# blocks' cells, whose sums no longer add up to the altered block sums).
INPUT_CATCHES = {
    "constant 0.5": "mean",
    "dropped block": "block sums",
    "duplicated block": "block sums",
    "repeated per-block seed": "block (0, 1): sum",  # the block whose sum was replaced
    "wrong divisor": "mean",
    "block sums accumulated in float32": "recomputed from the input",
    "a block's sum lost (zero)": "sum 0 reported",
    "block sums in the wrong places": "recomputed from the input",
}
INPUT_CATCHES_FAST = {**INPUT_CATCHES, **{
    name: "cells' sums" for name in ("repeated per-block seed", "a block's sum lost (zero)",
                                     "block sums accumulated in float32",
                                     "block sums in the wrong places")}}


@pytest.fixture(params=["npy", "zarr", "numpy", "dask"])
def random_input(request, tmp_path):
    """The same values as a .npy file, a Zarr array, a NumPy array, a Dask array (odd blocks)."""
    values = np.random.default_rng(7).normal(2.0, 3.0, size=(900, 130))
    if request.param == "numpy":
        return values, values
    if request.param == "dask":
        return dask.array.from_array(values, chunks=(70, 130)), values
    if request.param == "npy":
        path = tmp_path / "in.npy"
        np.save(path, np.asfortranarray(values))
    else:
        zarr = pytest.importorskip("zarr")
        path = tmp_path / "in.zarr"
        zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(200, 130),
                        dtype=values.dtype)[:] = values
    return str(path), values


@pytest.mark.parametrize("depth", DEPTHS)
def test_input_verification_catches_every_declared_mutation(cpu_client, random_input, depth):
    path, values = random_input
    spec = daskgpu.get_pipeline("mean-pipeline")
    catches = INPUT_CATCHES_FAST if depth == "fast" else INPUT_CATCHES
    assert set(catches) == {m.name for m in spec.mutations}
    workload, raw = computed(cpu_client, input=path, chunks="100,50")
    assert raw.block_sums.shape == (9, 3)
    assert raw.cell_sums.shape == (9 * 3 * mean_shared.slabs((100, 50)),)
    check = verify(cpu_client, workload, raw, depth)
    assert check.ok, check.detail
    assert float(raw) == pytest.approx(values.mean(), rel=1e-12)
    for mutation in spec.mutations:
        before = copy.deepcopy(raw)
        altered = verify(cpu_client, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not altered.ok, f"{mutation.name} still verifies: {altered.detail}"
        assert catches[mutation.name] in altered.detail, (mutation.name, altered.detail)
        assert "\n" not in altered.detail
        assert verify(cpu_client, workload, before, depth).ok


@pytest.mark.parametrize("shape", [(5000,), (300, 7, 3), (40, 1000)])
def test_an_inputs_slabs_are_re_read_as_the_run_summed_them(cpu_client, tmp_path, shape):
    values = np.random.default_rng(3).normal(1.0, 2.0, size=shape).astype(np.float32)
    path = tmp_path / "v.npy"
    np.save(path, values)
    chunks = ",".join(str(max(1, n // 2)) for n in shape)
    workload, raw = computed(cpu_client, input=str(path), chunks=chunks)
    check = verify(cpu_client, workload, raw, "fast")
    assert check.ok and "re-read from the input" in check.detail, check.detail
    assert math.fsum(raw.cell_sums) == pytest.approx(values.astype(np.float64).sum(), rel=1e-9)


def test_input_baseline_gives_the_runs_answer(cpu_client, random_input):
    path, values = random_input
    spec = daskgpu.get_pipeline("mean-pipeline")
    result = daskgpu.run(spec, cpu_client, input=path)
    assert result.verified, result.verification
    assert isinstance(result.value, float) and type(result.value) is float
    params = {**result.params, "input": path}  # an array in memory is named in params
    seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **params))
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


# ------------------------------------------------------------------ the GPU branch on CPU


def test_gpu_branch_redraws_a_seeded_sample_of_whole_blocks_with_the_named_library(
        cupy_stand_in):
    """Random data drawn by CuPy (the strict stand-in): no cells (its generator cannot start
    inside a block), so the fast depth draws a seeded sample of whole blocks again with the
    blocks' own library. The mean is NumPy's of the same values."""
    xp = cupy_stand_in
    device = Backend("gpu", "cupy", "pandas", workers=1, threads=1)
    spec = daskgpu.get_pipeline("mean-pipeline")
    workload = spec.workload(device, size=400, chunks=100, seed=2)
    with dask.config.set(scheduler="sync"):
        raw = workload.collection.compute()
        drawn = len(xp.seeds)
        check = spec.check(workload, raw, "fast")
        redrawn = len(xp.seeds) - drawn
        misplaced = {m.name: m for m in spec.mutations}["block sums in the wrong places"]
        moved = spec.check(workload, misplaced.alter(raw), "fast")
    assert raw.cell_sums is None and drawn == 16  # the run: each block from its own seed
    assert check.ok, check.detail
    with dask.config.set(scheduler="sync"):
        values = np.block([[b.get() for b in row] for row in dask.compute(
            *synthetic.random_array((400, 400), (100, 100), "float64", 2, device)
            .to_delayed().tolist())])
    assert float(raw) == pytest.approx(values.mean(), rel=1e-13)  # NumPy's mean of the values
    assert redrawn == len(mean_check.block_plan(workload.context, "fast")) == 15
    assert ("15 of 16 blocks checked again: a fault in at least 10 % of the blocks is always "
            "caught") in check.detail and "redrawn from their seeds agree" in check.detail
    assert not moved.ok and "recomputed from its seed" in moved.detail, moved.detail


@pytest.mark.gpu
def test_fast_on_gpu_workers_draws_sampled_blocks_again_on_the_devices():
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        result = daskgpu.run("mean-pipeline", session, size=8000, chunks=2000, seed=3,
                             verify="fast")
        assert result.verified and result.backend == "gpu", result.verification
        assert "of 16 blocks checked again" in result.verification, result.verification
        spec, workload, raw = compute_as_runner(session, "mean-pipeline", size=8000,
                                                chunks=2000, seed=3)
        assert raw.cell_sums is None
        for mutation in spec.mutations:
            check = verify_on(session, spec, workload, mutation.alter(copy.deepcopy(raw)),
                              "fast")
            assert not check.ok and mutation.named_in(check.detail), check.detail


# ------------------------------------------------------------------ faults in the run itself
# Each fault is put into the run's own functions (workers are threads of this process), on at
# least a tenth of the blocks; both depths must fail the run. Random data: 9 blocks of
# 160 000 values, drawn in pieces of 2**15; the full depth draws blocks 0 and 6 again (its
# sample for seed 3), the fast depth a seeded sample of the 90 cells.

FAULT_CASE = {"size": 1200, "chunks": 400, "seed": 3}
STREAM = 2**15
FIRST_COLUMN = {0, 3, 6}  # a third of the blocks


@pytest.fixture
def faulty_run(in_process_client, monkeypatch):
    """Compute ``FAULT_CASE`` (or ``params``) on in-process workers; the check at each depth."""
    def run(**params):
        with dask.config.set({"daskgpu.cpu.stream-elements": STREAM}):
            spec, workload, raw = compute_as_runner(in_process_client, "mean-pipeline",
                                                    **(params or FAULT_CASE))
        return {depth: verify_on(in_process_client, spec, workload, raw, depth)
                for depth in DEPTHS}
    return run


def test_the_unfaulted_run_verifies_at_both_depths(faulty_run):
    checks = faulty_run()
    assert all(check.ok for check in checks.values()), checks
    assert "redrawn from their seeds agree" in checks["full"].detail


def test_a_partial_sum_off_by_a_tenth_of_a_percent_fails_both_depths(faulty_run, monkeypatch):
    """The second piece of every block adds up 0.1 % too much (its cells are right)."""
    original = mean_tasks.piece_sums

    def off(part, offset, cells):
        total = original(part, offset, cells)
        return total * 1.001 if offset == STREAM else total

    monkeypatch.setattr(mean_tasks, "piece_sums", off)
    checks = faulty_run()
    assert not checks["fast"].ok and "cells' sums" in checks["fast"].detail, checks["fast"]
    assert not checks["full"].ok and "from its seed" in checks["full"].detail, checks["full"]


def test_blocks_drawn_from_another_stream_fail_both_depths(faulty_run, monkeypatch):
    """A third of the blocks are drawn from a wrong seed: sums that look right, of other data."""
    original = mean_tasks.draw_and_sum

    def misplaced(seed, number, *args):
        return original(seed, number + 1000 if number in FIRST_COLUMN else number, *args)

    monkeypatch.setattr(mean_tasks, "draw_and_sum", misplaced)
    checks = faulty_run()
    for check in checks.values():
        assert not check.ok and "recomputed from its seed" in check.detail, check.detail


# One block of the nine: a random one (not the first), and the last. A block holds a ninth of
# the cells, so the fast depth's sample (a tenth caught at 99.9 %) finds it; full redraws all.
ONE_BLOCK = {"random": int(np.random.default_rng(12).integers(1, 8)), "last": 8}


@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_drawn_from_another_stream_fails_both_depths(faulty_run, monkeypatch, where):
    original = mean_tasks.draw_and_sum

    def misplaced(seed, number, *args):
        return original(seed, number + 1000 if number == ONE_BLOCK[where] else number, *args)

    monkeypatch.setattr(mean_tasks, "draw_and_sum", misplaced)
    checks = faulty_run()
    block = f"block ({ONE_BLOCK[where] // 3}, {ONE_BLOCK[where] % 3})"
    for check in checks.values():
        assert not check.ok and f"{block}" in check.detail, check.detail
        assert "recomputed from its seed" in check.detail, check.detail


def test_a_piece_left_undrawn_in_some_blocks_fails_both_depths(faulty_run, monkeypatch):
    """A third of the blocks skip drawing their last piece: the buffer's previous values are
    summed again in its place (every sum and cell adds up)."""
    original = mean_tasks.block_generator

    class SkipsTheLastPiece:
        def __init__(self, rng, pieces):
            self.rng, self.left = rng, pieces

        def random(self, out, dtype):
            self.left -= 1
            if self.left:
                self.rng.random(out=out, dtype=dtype)

    def skipping(seed, number):
        rng = original(seed, number)
        return SkipsTheLastPiece(rng, 5) if number in FIRST_COLUMN else rng

    monkeypatch.setattr(mean_tasks, "block_generator", skipping)
    checks = faulty_run()
    for check in checks.values():
        assert not check.ok and "recomputed from its seed" in check.detail, check.detail


def test_input_blocks_read_wrong_fail_both_depths(faulty_run, monkeypatch, tmp_path):
    """A third of an input's blocks come back from the reader scaled by 1.001."""
    values = np.random.default_rng(4).normal(2.0, 1.0, size=(900, 300))
    path = tmp_path / "in.npy"
    np.save(path, values)
    original = array_input.to_dask

    def scale(block, block_info=None):
        return block * 1.001 if block_info[None]["chunk-location"][1] == 0 else block

    def misread(source, block, backend):
        data = original(source, block, backend)
        return data.map_blocks(scale, dtype=data.dtype)

    monkeypatch.setattr(array_input, "to_dask", misread)
    checks = faulty_run(input=str(path), chunks="300,100")
    assert not checks["fast"].ok and "from the input" in checks["fast"].detail
    assert not checks["full"].ok, checks["full"].detail


# ------------------------------------------------------------------ arrays in memory


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", ["random", "last"])
def test_one_block_of_an_array_in_memory_summed_wrong_fails_both_depths(
        in_process_client, monkeypatch, kind, where):
    """The run reads an array in hand (a NumPy array; a Dask array of other blocks, rechunked)
    and one of its 9 blocks sums 0.1 % high, slabs and all: both depths re-read it and fail."""
    values = np.random.default_rng(21).normal(1.0, 1.0, size=(900, 300))
    given = values if kind == "numpy" else dask.array.from_array(values, chunks=(45, 300))
    faulty = {"random": int(np.random.default_rng(5).integers(0, 8)), "last": 8}[where]
    original = mean_tasks.block_and_slab_sums

    def off(block):
        total, slabs = original(block)
        is_faulty = np.array_equal(block, values[faulty * 100:(faulty + 1) * 100])
        return (total * 1.001, slabs * 1.001) if is_faulty else (total, slabs)

    monkeypatch.setattr(mean_tasks, "block_and_slab_sums", off)
    spec, workload, raw = compute_as_runner(in_process_client, "mean-pipeline", input=given,
                                            chunks="100,300")
    assert workload.description["blocks"] == 9
    if kind == "dask":
        assert workload.description["rechunked"] == (
            "rechunked from blocks of (45, 300) to (100, 300), the pipeline's")
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and f"block ({faulty}, 0)" in check.detail, (depth, check.detail)
        assert "from the input" in check.detail
    monkeypatch.setattr(mean_tasks, "block_and_slab_sums", original)
    spec, workload, raw = compute_as_runner(in_process_client, "mean-pipeline", input=given,
                                            chunks="100,300")
    assert all(verify_on(in_process_client, spec, workload, raw, d).ok for d in DEPTHS)


def test_an_array_in_memory_gives_the_files_answer_and_is_named_not_held(cpu_client, npy_file):
    path, values = npy_file
    from_file = daskgpu.run("mean-pipeline", cpu_client, input=str(path), chunks="128")
    in_hand = daskgpu.run("mean-pipeline", cpu_client, input=np.load(path), chunks="128")
    assert in_hand.verified and in_hand.value == from_file.value
    assert type(in_hand.value) is float
    label = f"numpy.ndarray {values.dtype} ({', '.join(map(str, values.shape))})"
    assert in_hand.params["input"] == label and in_hand.data["source"] == label
    assert in_hand.data["format"] == "memory"


@pytest.mark.parametrize(("given", "kinds", "message"), [
    ([1.0, 2.0], (TypeError, ValueError), "a list is not an input daskgpu reads"),
    (np.zeros((0, 3)), (ValueError,), "numpy.ndarray float64 (0, 3): the array is empty"),
    (np.array(["a"], dtype=object), (ValueError,), "holds Python objects"),
    ("/no/such/file.npy", (FileNotFoundError, ValueError), "no such file or directory"),
])
def test_a_bad_input_is_refused_in_one_line_by_kind(given, kinds, message):
    spec = daskgpu.get_pipeline("mean-pipeline")
    with pytest.raises(kinds) as caught:
        spec.resolve(CPU2, input=given)
    assert isinstance(caught.value, daskgpu.DaskGPUError)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_large_array_in_hand_travels_without_distributeds_large_graph_advice(cpu_client):
    values = np.ones((1500, 1000))  # 12 MB: above distributed's 10 MB warning
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = daskgpu.run("mean-pipeline", cpu_client, input=values)
    assert result.verified and result.value == 1.0
    assert not [w for w in seen if "large graph" in str(w.message)], [str(w.message) for w in seen]
