"""matmul-pipeline's CuPy branch, run on CPU through the strict CuPy stand-in: a block of C
summarised where it lives, the whole run's graph on device blocks and its check (whose draws
come to the host by ``.get()``), and the one-block peak timed on the device.

The stand-in refuses implicit host conversions and host operands, as CuPy does, so each of these
passes only where the device values reach the host through ``.get()``/``cupy.asnumpy``. Every
value is compared with NumPy's on the same numbers.
"""

from __future__ import annotations

import types

import dask
import numpy as np
import pytest
import strict_cupy

import daskgpu
from daskgpu.toolkit.backends import Backend
from daskgpu.toolkit.numeric import CounterGenerator
from pipelines.matmul import check as matmul_check
from pipelines.matmul import check_replay
from pipelines.matmul import peak as matmul_peak
from pipelines.matmul import shared as matmul_data
from pipelines.matmul import tasks as matmul_tasks

GPU = Backend("gpu", "cupy", "pandas", (types.SimpleNamespace(memory_total=10**12),), 1, 1)


@pytest.fixture
def to_host_calls(cupy_stand_in, monkeypatch):
    """The stand-in, recording the device values that reach the host: the shapes given to
    ``.get()`` (``cupy.asnumpy`` copies through it too)."""
    calls = []
    get = strict_cupy.ndarray.get

    def counted_get(self, stream=None):
        calls.append(self.shape)
        return get(self, stream)

    monkeypatch.setattr(strict_cupy.ndarray, "get", counted_get)
    return calls


def _expected_summary(c: np.ndarray, location, n: int, m: int, seed: int, width: int):
    """A block's packed summary written out in NumPy from its definition (float64)."""
    (r0, r1), (c0, c1) = location
    wide = c.astype(np.float64)
    rows, cols = matmul_data.sampled_cells(n, m, seed)
    held = (rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1)
    picks = np.where(held, wide[np.clip(rows - r0, 0, r1 - r0 - 1),
                                np.clip(cols - c0, 0, c1 - c0 - 1)], 0.0)
    partial = wide @ matmul_data.vectors(m, seed)[c0:c1]
    out = np.zeros(width)
    out[:2] = (wide * wide).sum(), wide.sum()
    out[2:2 + len(rows)] = picks
    out[2 + len(rows):2 + len(rows) + partial.size] = partial.ravel()
    return out.reshape(1, 1, width), int(held.sum())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("location", [((0, 25), (0, 9)), ((13, 25), (3, 9))],
                         ids=["whole C", "a corner block"])
def test_a_device_block_is_summarised_as_numpy_and_reaches_the_host_explicitly(
        cupy_stand_in, to_host_calls, dtype, location):
    n, m, seed = 25, 9, 3
    width = 2 + matmul_data.SAMPLED_CELLS + 25 * matmul_data.VECTORS
    (r0, r1), (c0, c1) = location
    c = np.random.default_rng(2).standard_normal((r1 - r0, c1 - c0)).astype(dtype)
    info = {0: {"array-location": [location[0], location[1]]}}
    packing = {"m": m, "check_seed": seed, "n": n, "width": width}
    got = matmul_tasks._block_summary(cupy_stand_in.asarray(c), info, **packing,
                                      library="cupy")
    want, held = _expected_summary(c, location, n, m, seed, width)
    assert held > 0  # some sampled cells lie in the block: their values are picked on device
    assert type(got) is np.ndarray and got.dtype == np.float64 and got.shape == (1, 1, width)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got, matmul_tasks._block_summary(c, info, **packing),
                               rtol=1e-14, atol=1e-14)
    # the products, the squares, the sum and the picked cells came over from the device
    assert sorted(to_host_calls) == [(), (), (held,), (r1 - r0, matmul_data.VECTORS)]


def _drawn_whole(seed: int, shape, blocks, dtype: str) -> np.ndarray:
    """An operand as the device draws it (the documented per-block scheme), in NumPy."""
    (rows, cols), (br, bc) = shape, blocks
    grid = -(-cols // bc)
    out = np.empty(shape, dtype)
    for i in range(0, rows, br):
        for j in range(0, cols, bc):
            number = (i // br) * grid + j // bc
            sequence = np.random.SeedSequence(seed, spawn_key=(number,))
            height, width = min(br, rows - i), min(bc, cols - j)
            out[i:i + height, j:j + width] = CounterGenerator(np, sequence).random(
                (height, width), dtype=dtype)
    return out


def test_the_run_on_device_blocks_gives_c_of_the_device_operands_and_its_check_holds(
        cupy_stand_in, to_host_calls):
    """The whole graph (operands drawn on the device, C's blocks multiplied and summarised
    where they are made) computed on stand-in blocks; its check at both depths, drawing the
    blocks again on the device (the full one multiplying them again there) and taking what it
    compares to the host with ``.get()``."""
    spec = daskgpu.get_pipeline("matmul-pipeline")
    resolved = spec.resolve(GPU, shape="40,30,20", chunks="20,15,10", seed=3, dtype="float32")
    workload = spec.workload(GPU, resolved)
    a, b, _ = matmul_tasks.operands(resolved)
    with dask.config.set(scheduler="sync"):
        assert isinstance(a.blocks[1, 1].compute(), cupy_stand_in.ndarray)
        raw = dask.compute(workload.collection)[0]
    seed_a, seed_b = matmul_data.operand_seeds(3)
    a_host = _drawn_whole(seed_a, (40, 30), (20, 15), "float32").astype(np.float64)
    b_host = _drawn_whole(seed_b, (30, 20), (15, 10), "float32").astype(np.float64)
    c = a_host @ b_host
    result = raw["result"]
    assert result["frobenius_norm"] == pytest.approx(float(np.sqrt((c * c).sum())), rel=1e-6)
    assert result["sum"] == pytest.approx(float(c.sum()), rel=1e-6)
    assert result["block_sums"].shape == (2, 2)

    ctx = workload.context
    assert ctx.library == "cupy"
    block = check_replay.operand(ctx, 0, (1, 1))  # drawn on the device, in float64 there
    assert isinstance(block, cupy_stand_in.ndarray) and block.dtype == np.float64
    np.testing.assert_array_equal(block.get(), a_host[20:40, 15:30])
    gets = len(to_host_calls)
    with dask.config.set(scheduler="sync"):
        for depth in ("full", "fast"):
            assert spec.check(workload, raw, depth).ok, depth
        scaled = matmul_check.MUTATIONS[0]
        failed = spec.check(workload, scaled.alter(raw), "full")
        assert not failed.ok and scaled.named_in(failed.detail), failed.detail
    assert len(to_host_calls) > gets  # the checks' device values came over explicitly


class _Worker:
    """The little of a distributed client ``measure_peak`` uses: ``submit`` runs at once."""

    def __init__(self):
        self.released = 0

    def submit(self, function, *args, pure=True):
        value = function(*args)
        return types.SimpleNamespace(result=lambda: value, release=self._release)

    def _release(self):
        self.released += 1


def test_the_one_block_peak_times_a_device_product_of_the_blocks_side(cupy_stand_in,
                                                                     monkeypatch):
    timed = []
    time_call = matmul_peak.time_call

    def recorded(backend, fn):
        out = []
        seconds = time_call(backend, lambda: out.append(fn()))
        timed.append((seconds, out[0]))
        return seconds

    monkeypatch.setattr(matmul_peak, "time_call", recorded)
    assert matmul_peak.measure_peak(GPU, np.float32, (24, 15, 10)) == {
        "peak_gflop_per_s": None, "peak_block": 24}  # no cluster: the client computes nothing
    assert cupy_stand_in.seeds == [] and timed == []

    worker = _Worker()
    with dask.config.set(scheduler=worker):
        peak = matmul_peak.measure_peak(GPU, np.float32, (24, 15, 10))
    assert peak["peak_block"] == 24 and worker.released == 1
    assert cupy_stand_in.seeds == [0] and len(timed) == 2  # drawn on the device, timed twice
    rng = strict_cupy.Generator(0, [], cupy_stand_in.generator_states)
    a = rng.random((24, 24), dtype=np.float32).get()
    b = rng.random((24, 24), dtype=np.float32).get()
    for _seconds, product in timed:
        assert isinstance(product, cupy_stand_in.ndarray) and product.dtype == np.float32
        np.testing.assert_allclose(product.get(), a @ b, rtol=1e-6)
    fastest = min(seconds for seconds, _ in timed)
    assert peak["peak_gflop_per_s"] == round(2 * 24**3 / fastest / 1e9, 3)
    assert ("sync",) in cupy_stand_in.events  # the device's queued work waited for


def test_the_baseline_on_device_operands_multiplies_what_the_device_draws(cupy_stand_in):
    """Generated operands with a GPU backend: drawn on the device block by block as the run
    draws them, made whole there; its C's norm and sum are those of NumPy's product of the
    same numbers."""
    spec = daskgpu.get_pipeline("matmul-pipeline")
    resolved = spec.resolve(GPU, shape="30,20,25", chunks="10,20,10", seed=8)
    seconds, answer = spec.baseline(resolved)
    seed_a, seed_b = matmul_data.operand_seeds(8)
    c = (_drawn_whole(seed_a, (30, 20), (10, 20), "float64")
         @ _drawn_whole(seed_b, (20, 25), (20, 10), "float64"))
    assert len(cupy_stand_in.seeds) == 3 + 3  # every block of A and of B drawn on the device
    assert seconds > 0 and type(answer["frobenius_norm"]) is float
    assert answer["frobenius_norm"] == pytest.approx(float(np.sqrt((c * c).sum())), rel=1e-12)
    assert answer["sum"] == pytest.approx(float(c.sum()), rel=1e-12)
