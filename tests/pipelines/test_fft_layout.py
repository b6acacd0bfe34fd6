"""fft-pipeline's layouts: the whole array in one worker or slabs over all, and the device's
waits and plan cache (through the strict CuPy stand-in)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.toolkit.backends import Backend
from pipelines.fft import check as fft_check
from pipelines.fft import layout as fft_layout
from pipelines.fft import shared as fft_data
from pipelines.fft import stages as fft_stages
from pipelines.fft import tasks as fft_blocks

SPEC = daskgpu.get_pipeline("fft-pipeline")
CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
DEPTHS = ("fast", "full")
GiB = 2**30


def _sizes(n=4096, dtype="complex128", real=False):
    resolved = SPEC.resolve(CPU2, size=n, dtype=dtype, real=real, seed=1)
    return fft_layout.layout(resolved)


def _worker(host="127.0.0.1", threads=1, memory=8 * GiB):
    return {"host": host, "nthreads": threads, "memory_limit": memory}


def test_auto_takes_the_whole_array_where_one_host_holds_it():
    workers = {"tcp://a:1": _worker(threads=1, memory=4 * GiB),
               "tcp://a:2": _worker(threads=3, memory=8 * GiB)}
    chosen = fft_layout.pick("auto", workers, _sizes(4096))
    # the worker with the most memory, with every thread of its host
    assert chosen["layout"] == "whole" and chosen["worker"] == "tcp://a:2"
    assert chosen["threads"] == 4


@pytest.mark.parametrize(("option", "workers", "why"), [
    ("auto", {"tcp://a:1": _worker("a"), "tcp://b:1": _worker("b")}, "2 hosts"),
    ("auto", {"tcp://a:1": _worker(memory=3 * GiB), "tcp://a:2": _worker(memory=3 * GiB)},
     "over one worker's 3 GiB"),
    ("slabs", {"tcp://a:1": _worker()}, "as asked"),
])
def test_auto_keeps_slabs_across_hosts_and_beyond_one_workers_memory(option, workers, why):
    sizes = _sizes(16384)  # 4 GiB of complex128: 12 GiB for the whole path
    chosen = fft_layout.pick(option, workers, sizes)
    assert chosen["layout"] == "slabs" and why in chosen["why"], chosen


def test_a_gpu_holds_the_whole_array_only_where_its_device_memory_does():
    workers = {"tcp://a:1": _worker(memory=512 * GiB)}
    assert fft_layout.pick("auto", workers, _sizes(16384), device_memory=80 * GiB)[
        "layout"] == "whole"
    assert fft_layout.pick("auto", workers, _sizes(65536), device_memory=80 * GiB)[
        "layout"] == "slabs"  # 64 GiB of complex128 in 3 copies


def test_the_whole_array_stays_in_one_worker_process(cpu_client):
    """On two worker processes of one host: one worker computes, nothing is transferred, and
    its transforms take both workers' threads."""
    from distributed import get_task_stream

    with get_task_stream(client=cpu_client.client) as stream:
        result = daskgpu.run("fft-pipeline", client=cpu_client, size=96, chunks=30, seed=5,
                             verify="off")
    assert result.data["layout"] == "whole" and result.data["transpose_bytes"] == 0
    assert result.data["threads_per_transform"] == 2
    tasks = stream.data
    assert tasks and len({task["worker"] for task in tasks}) == 1
    actions = {part["action"] for task in tasks for part in task["startstops"]}
    assert "transfer" not in actions, actions
    slabs = daskgpu.run("fft-pipeline", client=cpu_client, size=96, chunks=30, seed=5,
                        layout="slabs")
    assert slabs.data["transpose_bytes"] > 0  # what the slabs would have moved
    assert slabs.value["max_at"] == result.value["max_at"]
    assert slabs.value["sum_of_squares"] == pytest.approx(result.value["sum_of_squares"],
                                                          rel=1e-12)


@pytest.mark.parametrize(("params", "transform"), [
    ({}, np.fft.fft2),
    ({"inverse": True}, np.fft.ifft2),
    ({"real": True}, np.fft.rfft2),
    ({"dtype": "complex64"}, np.fft.fft2),
    ({"real": True, "dtype": "complex64", "inverse": False}, np.fft.rfft2),
])
def test_the_whole_path_writes_numpys_transform(cpu_client, tmp_path, params, transform):
    rng = np.random.default_rng(3)
    real = params.get("real", False)
    x = rng.standard_normal((37, 37)) if real else (rng.standard_normal((37, 37))
                                                    + 1j * rng.standard_normal((37, 37)))
    x = x.astype(np.float32 if params.get("dtype") == "complex64" and real else
                 params.get("dtype", x.dtype))
    np.save(tmp_path / "x.npy", x)
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "x.npy"),
                         chunks=10, layout="whole", output=str(tmp_path / "X.npy"), **params)
    assert result.verified and result.data["layout"] == "whole", result.verification
    written = np.load(tmp_path / "X.npy")
    expected = transform(x.astype(np.float64 if real else np.complex128))
    assert written.shape == expected.shape
    assert written.dtype == np.dtype(params.get("dtype", "complex128"))
    tol = 1e-5 if params.get("dtype") == "complex64" else 1e-12
    assert np.abs(written - expected).max() <= tol * np.abs(expected).max()


@pytest.mark.parametrize("n", [32, 33])
def test_the_whole_path_inverts_a_half_spectrum(cpu_client, tmp_path, n):
    x = np.random.default_rng(n).standard_normal((n, n))
    np.save(tmp_path / "X.npy", np.fft.rfft2(x))
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "X.npy"),
                         real=True, inverse=True, chunks=5, layout="whole", shape=(n, n),
                         output=str(tmp_path / "back.zarr"))
    assert result.verified and result.data["transform"] == "irfft2", result.verification
    import zarr

    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "back.zarr"), mode="r")[:], x,
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("params", [{"size": 40, "chunks": 11, "seed": 3},
                                    {"size": 41, "chunks": 9, "seed": 4, "real": True}])
def test_every_mutation_of_a_whole_run_is_caught(cpu_client, depth, params):
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", layout="whole",
                                            **params)
    assert verify_on(cpu_client, spec, workload, raw, depth).ok
    for mutation in fft_check.MUTATIONS:
        altered = verify_on(cpu_client, spec, workload, mutation.alter(raw), depth)
        assert not altered.ok, mutation.name
        assert mutation.named_in(altered.detail), (mutation.name, altered.detail)


def _twiddle_off(transform):
    def faulty(kind, block, axis, *args, **kwargs):
        out = transform(kind, block, axis, *args, **kwargs)
        out = out.copy()
        if axis == 1:
            out[30:40, 1::2] *= np.exp(1j * 0.002)  # a tenth of the rows, every other twiddle
        else:
            out[1::2, 30:40] *= np.exp(1j * 0.002)  # a tenth of the columns
        return out
    return faulty


def _one_axis(axis):
    def breaking(transform):
        wrong = _twiddle_off(transform)

        def faulty(kind, block, at, *args, **kwargs):
            return (wrong if at == axis else transform)(kind, block, at, *args, **kwargs)
        return faulty
    return breaking


def _columns_skipped(transform):
    def faulty(kind, block, axis, *args, **kwargs):
        return block.copy() if axis == 0 else transform(kind, block, axis, *args, **kwargs)
    return faulty


def _squares_off(summarise):
    def faulty(spectrum, c0=0, c1=1, **kwargs):
        out = summarise(spectrum, c0, c1, **kwargs)
        if c0 == 30:
            out[0, :c1 - c0] *= 1.001
        return out
    return faulty


def _input_block_off(draw):
    def faulty(block_info=None, **kwargs):
        out = draw(block_info, **kwargs)
        return out * 1.001 if block_info[None]["chunk-location"][0] == 3 else out
    return faulty


WHOLE_FAULTS = {
    "a wrong twiddle in a tenth of the rows": ("_transform", _one_axis(1)),
    "a wrong twiddle in a tenth of the columns": ("_transform", _one_axis(0)),
    "the columns left untransformed": ("_transform", _columns_skipped),
    "a column block's squares 0.1 % off": ("column_summary", _squares_off),
    "a tenth of the input drawn 0.1 % off": ("generated", _input_block_off),
}


@pytest.mark.parametrize("fault", sorted(WHOLE_FAULTS))
def test_a_fault_in_the_whole_path_fails_both_depths(in_process_client, monkeypatch, fault):
    params = {"size": 100, "chunks": 10, "seed": 3, "layout": "whole"}
    name, breaking = WHOLE_FAULTS[fault]
    monkeypatch.setattr(fft_blocks, name, breaking(getattr(fft_blocks, name)))
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **params)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"


def test_column_summary_is_the_summary_of_the_transposed_block():
    rng = np.random.default_rng(2)
    for dtype, rtol in ((np.complex128, 1e-13), (np.complex64, 1e-6)):
        x = (rng.standard_normal((37, 23)) + 1j * rng.standard_normal((37, 23))).astype(dtype)
        x[5, 9] = 40
        rows, cols = np.array([3, 5, 30, 1]), np.array([9, 2, 22, 15])
        width = fft_blocks.summary_width((10, 10, 3), 4, 37)
        weights = fft_data.projection_weights(37, 23, 3)
        base = width - 4 * fft_data.TOP - 8
        for c0, c1 in ((0, 10), (10, 20), (20, 23)):
            info = {0: {"array-location": [(c0, c1), (0, 37)]}}
            one = fft_blocks.summary(x[:, c0:c1].T, info, rows=rows, cols=cols, width=width,
                                     weights=weights)[0]
            other = fft_blocks.column_summary(x, c0, c1, rows=rows, cols=cols, width=width,
                                              weights=weights)[0]
            table = range(base, base + 4 * fft_data.TOP)
            np.testing.assert_allclose(np.delete(other, table), np.delete(one, table),
                                       rtol=rtol, atol=0)
            cells = [sorted(map(tuple, t[table].reshape(-1, 4).tolist())) for t in (one, other)]
            assert cells[0] == cells[1]  # the same largest cells


def _events_with_marks(cupy, monkeypatch):
    """Timestamps taken in pipelines.fft.tasks recorded among the stand-in's device events."""
    clock = types.SimpleNamespace(perf_counter=lambda: cupy.events.append(("mark",)) or 0.0)
    monkeypatch.setattr(fft_blocks, "time", clock)
    return cupy.events


def _waited_before_each_mark(events) -> bool:
    """Every timestamp comes after a wait that follows the last transform queued."""
    pending = False
    for event in events:
        if event[0] == "fft":
            pending = True
        elif event[0] == "sync":
            pending = False
        elif event[0] == "mark" and pending:
            return False
    return True


@pytest.mark.parametrize("params", [{}, {"real": True}, {"inverse": True}])
def test_the_whole_path_on_a_device_waits_before_each_timestamp(cupy_stand_in, monkeypatch,
                                                                 params):
    """Its stages (input, rows, columns, summaries) are timed once the device is done, its
    plans let go at the end, and its answer is the NumPy branch's."""
    cupy = cupy_stand_in
    events = _events_with_marks(cupy, monkeypatch)
    resolved = SPEC.resolve(CPU2, size=30, chunks=12, seed=5, layout="whole", **params)
    sizes = fft_layout.layout(resolved)
    certify = fft_stages.certificates(resolved, sizes)
    plan = fft_stages.whole_plan(resolved, sizes, certify, 2, keep=True)
    on_device = fft_blocks.whole({**plan, "library": "cupy"})
    marks = [e for e in events if e[0] == "mark"]
    assert len(marks) == 5 and any(e[0] == "fft" for e in events)
    assert _waited_before_each_mark(events)
    assert events[-1] == ("plans cleared",)
    assert cupy.fft.config.get_plan_cache().get_curr_size() == 0
    assert isinstance(on_device["array"], cupy.ndarray)
    assert isinstance(on_device["packed"], np.ndarray)  # summaries come back on the host
    assert isinstance(on_device["lines"], np.ndarray)


def test_the_whole_path_on_a_device_transforms_the_slab_paths_input(cupy_stand_in):
    """Its input, drawn block by block on the device, is the slab path's; its spectrum that
    input's fft2."""
    resolved = SPEC.resolve(CPU2, size=30, chunks=12, seed=5, layout="whole")
    sizes = fft_layout.layout(resolved)
    certify = fft_stages.certificates(resolved, sizes)
    plan = {**fft_stages.whole_plan(resolved, sizes, certify, 1, keep=True), "library": "cupy"}
    whole = fft_blocks.whole(plan)
    info = {None: {"array-location": [(12, 24), (0, 30)], "chunk-location": (1, 0)}}
    block = fft_blocks.generated(info, n=30, seed=5, library="cupy").get()
    drawn = _whole_input(plan).get()
    np.testing.assert_array_equal(drawn[12:24], block)
    np.testing.assert_allclose(whole["array"].get(), np.fft.fft2(drawn), rtol=0, atol=1e-9)


def _whole_input(plan):
    import cupy

    return fft_blocks._whole_input(plan, cupy)


@pytest.mark.parametrize(("task", "kwargs"), [
    (fft_blocks.along_rows, {}),
    (fft_blocks.along_rows, {"real": True}),
    (fft_blocks.along_columns, {"inverse": True}),
    (fft_blocks.along_columns, {"real_length": 8}),
])
def test_a_transforms_task_on_a_device_returns_once_done_and_keeps_no_plan(cupy_stand_in,
                                                                            task, kwargs):
    cupy = cupy_stand_in
    block = np.random.default_rng(0).standard_normal((4, 8))
    if task is fft_blocks.along_columns:
        block = block + 1j
    task(cupy.asarray(block), library="cupy", **kwargs)
    kinds = [event[0] for event in cupy.events]
    assert kinds[0] == "fft" and kinds[-2:] == ["sync", "plans cleared"], kinds
    assert cupy.fft.config.get_plan_cache().get_curr_size() == 0


def test_the_slab_tasks_on_a_device_wait_for_their_work(cupy_stand_in):
    """Drawing, cutting and joining a slab each return once the device is done."""
    cupy = cupy_stand_in
    info = {None: {"array-location": [(0, 6), (0, 8)], "chunk-location": (0, 0)}}
    x = fft_blocks.generated(info, n=8, seed=1, library="cupy")
    assert cupy.events[-1] == ("sync",)
    cupy.events.clear()
    piece = fft_blocks.piece(x, 2, 5, "cupy")
    fft_blocks.joined([piece, piece], "cupy")
    assert cupy.events == [("sync",), ("sync",)]
