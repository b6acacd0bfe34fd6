"""matmul-pipeline on a real CPU LocalCluster: random and .npy operands, C written, verification."""

from __future__ import annotations

import copy
import json
import time

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import (
    assert_one_error_line,
    compute_as_runner,
    run_cli,
    verify_on,
)

import daskgpu
from daskgpu.data import synthetic
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend
from daskgpu.toolkit.numeric import CounterGenerator, seed_word
from daskgpu.verification import Grid
from pipelines.matmul import check_replay
from pipelines.matmul import layout as matmul_layout
from pipelines.matmul import pipeline as matmul_pipeline
from pipelines.matmul import shared as matmul_data
from pipelines.matmul import tasks as matmul_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _operands(shape, blocks, dtype, seed):
    """A and B drawn whole here, from the run's documented per-block seeds."""
    (n, k, m), (bn, bk, bm) = shape, blocks
    seed_a, seed_b = matmul_data.operand_seeds(seed)
    a = synthetic.uniform((n, k), (bn, bk), dtype, seed_a, CPU2).compute(scheduler="sync")
    b = synthetic.uniform((k, m), (bk, bm), dtype, seed_b, CPU2).compute(scheduler="sync")
    return a, b


def _norm_and_sum(c) -> tuple[float, float]:
    wide = np.asarray(c, dtype=np.float64)
    return float(np.sqrt((wide**2).sum())), float(wide.sum())


def test_non_square_product_is_verified_and_matches_numpy(cpu_client):
    result = daskgpu.run("matmul-pipeline", client=cpu_client, shape="300,200,250",
                         chunks="100,80", seed=3)
    assert result.verified, result.verification
    assert "Freivalds" in result.verification
    assert result.data["shape"] == [300, 200, 250] and result.data["chunks"] == [100, 200, 80]
    assert result.data["blocks"] == 12 and result.data["flop"] == 2 * 300 * 200 * 250
    assert result.data["peak_gflop_per_s"] > 0  # one block product timed on a worker
    a, b = _operands((300, 200, 250), (100, 200, 80), "float64", 3)
    norm, total = _norm_and_sum(a @ b)
    assert result.value["frobenius_norm"] == pytest.approx(norm, rel=1e-12)
    assert result.value["sum"] == pytest.approx(total, rel=1e-12)
    again = daskgpu.run("matmul-pipeline", client=cpu_client, shape="300,200,250",
                        chunks="100,80", seed=3)
    assert [again.value[k] for k in ("frobenius_norm", "sum")] == [
        result.value[k] for k in ("frobenius_norm", "sum")]


def test_float32_with_the_contraction_split(cpu_client):
    """k in four blocks: dask sums the partial products; the bound still holds."""
    result = daskgpu.run("matmul-pipeline", client=cpu_client, shape="130,200,90",
                         chunks="64,50,40", dtype="float32", seed=5)
    assert result.verified, result.verification
    assert result.data["dtype"] == "float32" and result.data["chunks"] == [64, 50, 40]
    a, b = _operands((130, 200, 90), (64, 50, 40), "float32", 5)
    norm, total = _norm_and_sum(a.astype(np.float64) @ b.astype(np.float64))
    assert result.value["frobenius_norm"] == pytest.approx(norm, rel=1e-5)
    assert result.value["sum"] == pytest.approx(total, rel=1e-5)


def test_npy_inputs_and_c_written_atomically(cpu_client, tmp_path):
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((150, 70)))
    b = rng.standard_normal((70, 110)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "c.npy"
    result = daskgpu.run("matmul-pipeline", client=cpu_client, input_a=str(tmp_path / "a.npy"),
                         input_b=str(tmp_path / "b.npy"), chunks="64,48", output=str(out))
    assert result.verified, result.verification
    expected = a @ b
    norm, total = _norm_and_sum(expected)
    assert result.value["frobenius_norm"] == pytest.approx(norm, rel=1e-12)
    assert result.value["sum"] == pytest.approx(total, rel=1e-9, abs=1e-9 * norm)
    assert result.data["format"] == ["npy", "npy"] and result.data["dtype"] == "float64"
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-12, atol=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy", "c.npy"]


def test_a_product_of_other_data_fails_freivalds(cpu_client):
    spec, workload, raw = compute_as_runner(cpu_client, "matmul-pipeline", size=120, chunks=60,
                                            seed=1)
    assert verify_on(cpu_client, spec, workload, raw).ok
    _, _, other = compute_as_runner(cpu_client, "matmul-pipeline", size=120, chunks=60, seed=2)
    check = verify_on(cpu_client, spec, workload, copy.deepcopy(other))
    assert not check.ok and "Freivalds" in check.detail, check.detail


def test_one_wrong_entry_fails_freivalds(cpu_client):
    """A single entry of C off by a relative 1e-9: its row's C r moves far beyond the bound."""
    spec, workload, raw = compute_as_runner(cpu_client, "matmul-pipeline", size=120, chunks=60,
                                            seed=4)
    r = matmul_data.vectors(120, workload.context.check_seed)
    altered = copy.deepcopy(raw)
    partials = altered["result"]["partials"]
    entry = 30.0  # about k / 4: C's entries for uniform [0, 1) data, k = 120
    partials[7, 1, :] += entry * 1e-9 * r[100]  # C[7, 100] changed (column block 1)
    check = verify_on(cpu_client, spec, workload, altered)
    assert not check.ok and "block (0, 1)" in check.detail, check.detail


def test_auto_blocks_keep_k_whole_and_fit_the_budget():
    assert matmul_layout.auto_blocks((8000, 8000, 8000), 8, CPU2) == (4000, 8000, 8000)
    bn, bk, bm = matmul_layout.auto_blocks((30000, 20000, 30000), 8, CPU2)
    assert bk == 20000 and (bn * bk + bk * bm + bn * bm) * 8 <= 4 * 2**28
    bn, bk, bm = matmul_layout.auto_blocks((1000, 10**7, 1000), 8, CPU2)
    assert bk < 10**7 and (bn * bk + bk * bm + bn * bm) * 8 <= 4 * 2**28
    assert matmul_layout.explicit_blocks((100, 80), (300, 200, 250)) == (100, 200, 80)
    assert matmul_layout.explicit_blocks((500,), (300, 200, 250)) == (300, 200, 250)


def test_cli_run_json_is_verified():
    # With the workers warmed for it as they start (the default): a warm-up import racing a
    # task's unpickling once hung here (rapids-dask-dependency's import hook for dask).
    proc = run_cli("run", "matmul-pipeline", "--size", "500", "--workers", "2",
                   "--no-dashboard", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["data"]["shape"] == [500, 500, 500]
    assert set(doc["value"]) == {"frobenius_norm", "sum"}
    assert doc["data"]["flop"] == 2 * 500**3 and doc["data"]["peak_gflop_per_s"] > 0
    rate = doc["throughput"]["flop_per_s"]
    assert rate == pytest.approx(2 * 500**3 / doc["timings"]["compute_s"])


@pytest.fixture
def npy_pair(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((20, 30)))
    np.save(tmp_path / "b.npy", np.ones((31, 10)))
    np.save(tmp_path / "ints.npy", np.ones((30, 10), dtype=np.int64))
    np.save(tmp_path / "vector.npy", np.ones(30))
    return tmp_path


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"shape": "1,2"}, ParameterError, "three sizes"),
        ({"shape": "10,10,10", "size": 20}, ParameterError, "give one of them"),
        ({"shape": f"{2**40},{2**40},{2**40}"}, ParameterError, "smaller size"),
        ({"shape": "1000,1000,1000", "chunks": "1"}, ParameterError, "blocks"),
        ({"size": 100, "chunks": "1,2,3,4"}, ParameterError, "BN,BK,BM"),
        ({"input_a": "a.npy"}, ParameterError, "--input-b"),
        ({"input_a": "a.npy", "input_b": "b.npy"}, InputFileError, "shape mismatch"),
        ({"input_a": "a.npy", "input_b": "ints.npy"}, InputFileError, "float32 or float64"),
        ({"input_a": "a.npy", "input_b": "vector.npy"}, InputFileError, "2 axes"),
        ({"input_a": "a.npy", "input_b": "missing.npy"}, InputFileError, "no such file"),
        ({"input_a": "a.npy", "input_b": "b.npy", "size": 5}, ParameterError, "--size"),
    ],
)
def test_bad_parameters_are_refused_up_front(npy_pair, monkeypatch, params, error, message):
    """Refused in one line while settling: nothing drawn, read, built, measured or computed."""
    params = {k: str(npy_pair / v) if k.startswith("input") else v for k, v in params.items()}
    work = []
    for module, name in ((matmul_tasks, "operands"), (matmul_pipeline, "operands"),
                         (synthetic, "uniform"), (matmul_tasks.array_input, "to_dask"),
                         (matmul_pipeline.matmul_peak, "measure_peak"), (dask, "compute"),
                         (dask.base, "compute")):
        monkeypatch.setattr(module, name, lambda *a, _name=name, **k: work.append(_name))
    with pytest.raises(error, match=message) as caught:
        daskgpu.get_pipeline("matmul-pipeline").resolve(**params)
    assert "\n" not in str(caught.value) and work == []


def test_cli_shape_mismatch_is_one_error_line(npy_pair):
    started = time.perf_counter()
    proc = run_cli("run", "matmul-pipeline", "--input-a", str(npy_pair / "a.npy"), "--input-b",
                   str(npy_pair / "b.npy"), "--workers", "1", "--no-dashboard")
    assert_one_error_line(proc, started, "shape mismatch")


# ------------------------------------------------------------------ the fast depth's data path


def _ctx(library="numpy", dtype="float64"):
    """A check context for A (25 x 7, two row blocks) and B (7 x 9, two column blocks)."""
    return matmul_data.MatmulContext(Grid(((13, 12), (7,))), Grid(((7,), (5, 4))), dtype,
                                     library, check_seed=3, seeds=(5, 6))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_streamed_pieces_and_slabs_are_the_rows_of_the_block_drawn_whole(monkeypatch, dtype):
    """A piece may start mid-block (PCG64 advanced; a float32 is half a draw, odd offsets too)."""
    monkeypatch.setattr(check_replay, "SLAB_ELEMENTS", 15)  # two rows of 7 a slab
    ctx = _ctx(dtype=dtype)
    sequence = np.random.SeedSequence(5, spawn_key=(1,))  # A's block (1, 0)
    whole = np.random.default_rng(sequence).random((12, 7), dtype=dtype)
    for piece in [(0, 12), (3, 12), (5, 8), (11, 12)]:
        slabs = [(first, rows.copy())  # a slab is a reused buffer: copied before the next
                 for first, rows in check_replay.row_slabs(ctx, 0, (1, 0), piece)]
        assert [first for first, _ in slabs] == list(range(piece[0], piece[1], 2))
        got = np.concatenate([rows for _, rows in slabs])
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, whole[piece[0]:piece[1]])


def test_the_streamed_recomputation_is_that_of_whole_blocks(monkeypatch):
    """Pieces, slabs, sums over the contraction: the same numbers as A and B drawn whole and
    multiplied here, to rounding."""
    monkeypatch.setattr(check_replay, "SLAB_ELEMENTS", 300)
    monkeypatch.setattr(check_replay, "PIECE_ELEMENTS", 1000)
    resolved = daskgpu.get_pipeline("matmul-pipeline").resolve(
        CPU2, shape="130,200,90", chunks="64,50,40", dtype="float32", seed=5)
    with dask.config.set(scheduler="sync"):
        ctx = daskgpu.get_pipeline("matmul-pipeline").workload(CPU2, resolved).context
        assert check_replay.pieces(ctx, 64, 50) == [(0, 16), (16, 32), (32, 48), (48, 64)]
        again = check_replay.recompute(ctx)
    a, b = (x.astype(np.float64) for x in _operands((130, 200, 90), (64, 50, 40), "float32", 5))
    r = matmul_data.vectors(90, ctx.check_seed)
    columns = [slice(0, 40), slice(40, 80), slice(80, 90)]
    expected = {"q": np.stack([a @ (b[:, c] @ r[c]) for c in columns], axis=1),
                "q_abs": np.stack([a @ b[:, c].sum(axis=1) for c in columns], axis=1),
                "a_squares": [(a[i:i + 64] ** 2).sum() for i in (0, 64, 128)],
                "b_squares": [(b[:, c] ** 2).sum() for c in columns]}
    rows, cols = ctx.cells()
    expected["samples"] = expected["samples_abs"] = (a[rows] * b[:, cols].T).sum(axis=1)
    for key, value in expected.items():
        np.testing.assert_allclose(getattr(again, key), value, rtol=1e-13, err_msg=key)


def test_device_branch_of_the_fast_check_draws_whole_blocks_with_integer_seeds(cupy_stand_in):
    """The CuPy path (the strict stand-in): whole blocks drawn once, reduced with the library;
    the sums NumPy's of the same blocks."""
    xp = cupy_stand_in
    ctx = _ctx(library="cupy")
    assert check_replay.pieces(ctx, 13, 7) == [(0, 13)]  # a device never starts mid-block
    b_part = check_replay.b_products(ctx, 0, 1, (0, 7))
    q, _, _, a_squares, _ = check_replay.a_products(ctx, 1, 0, (0, 12), [[b_part], [b_part]])

    def drawn(seed, number, shape):
        sequence = np.random.SeedSequence(seed, spawn_key=(number,))
        return CounterGenerator(np, sequence).random(shape)  # the device's scheme

    b, a = drawn(6, 1, (7, 4)), drawn(5, 1, (12, 7))
    assert xp.seeds == [seed_word(np.random.SeedSequence(s, spawn_key=(1,))) for s in (6, 5)]
    r = matmul_data.vectors(9, 3)[5:9]
    y, y_abs, _, b_squares, _ = b_part
    np.testing.assert_allclose(y, b @ r, rtol=1e-14)
    np.testing.assert_allclose(y_abs[:, 0], np.abs(b).sum(axis=1), rtol=1e-14)
    assert b_squares == pytest.approx(float((b * b).sum()), rel=1e-14)
    np.testing.assert_allclose(q, a @ np.concatenate([b @ r, b @ r], axis=1), rtol=1e-13)
    assert a_squares == pytest.approx(float((a * a).sum()), rel=1e-14)
    # the run's summary of a block of C where it lives: as the NumPy branch's
    c = np.random.default_rng(2).random((12, 4)).astype(np.float32)
    info = {0: {"array-location": [(13, 25), (5, 9)]}}
    packing = {"m": 9, "check_seed": 3, "n": 25,
               "width": 2 + matmul_data.SAMPLED_CELLS + 13 * matmul_data.VECTORS}
    np.testing.assert_allclose(
        matmul_tasks._block_summary(xp.asarray(c), info, **packing, library="cupy"),
        matmul_tasks._block_summary(c, info, **packing), rtol=1e-14)


# ------------------------------------------------------------------ faults in the computation

FAULTY = {"shape": "200,160,180", "chunks": "50,60", "seed": 21}  # C in 4 x 3 blocks of 50 x 60


def _summarised_as(change, where):
    """``_block_summary`` of the blocks at ``where`` (i, j) changed by ``change`` first."""
    original = matmul_tasks._block_summary

    def faulty(block, block_info=None, **kwargs):
        if where(*block_info[0]["chunk-location"]):
            block, block_info = change(np.array(block, copy=True), block_info)
        return original(block, block_info=block_info, **kwargs)

    return faulty


def _scaled(block, info):
    return block * 1.001, info


def _transposed(block, info):
    block[:, :50] = block[:, :50].T.copy()  # a 50 x 50 piece of the block transposed
    return block, info


def _half_skipped(block, info):
    block[block.shape[0] // 2:] = 0.0
    return block, info


def _beside(block, info):
    (r0, r1), (c0, c1) = info[0]["array-location"]
    moved = {**info[0], "array-location": [(r0, r1), (c0 + 60, c1 + 60)]}
    return block, {**info, 0: moved}  # reduced as if it were the next column block


def _operand_off(resolved):
    a, b, about = matmul_tasks.operands(resolved)

    def off(block, block_info=None):
        return block * 1.002 if block_info[0]["chunk-location"][0] == 3 else block

    return a.map_blocks(off, dtype=a.dtype), b, about


FAULTS = {
    "a block row of C off by 0.1 %": (matmul_tasks, "_block_summary", _summarised_as(
        _scaled, lambda i, j: i == 1)),
    "a transposed piece in 2 of 12 blocks": (matmul_tasks, "_block_summary", _summarised_as(
        _transposed, lambda i, j: (i, j) in ((0, 0), (2, 1)))),
    "half the rows skipped in a column block": (matmul_tasks, "_block_summary",
                                                _summarised_as(_half_skipped,
                                                               lambda i, j: j == 2)),
    "2 blocks reduced in the wrong place": (matmul_tasks, "_block_summary", _summarised_as(
        _beside, lambda i, j: j == 1 and i < 2)),
    "a block row of A drawn 0.2 % off": (matmul_pipeline, "operands", _operand_off),
}


def test_the_unfaulted_run_verifies_at_both_depths(in_process_client):
    spec, workload, raw = compute_as_runner(in_process_client, "matmul-pipeline", **FAULTY)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_in_the_computation_fails_both_depths(in_process_client, monkeypatch, fault):
    """Faults injected into the run's own functions (workers are threads: they see them)."""
    module, name, faulty = FAULTS[fault]
    with monkeypatch.context() as patched:
        patched.setattr(module, name, faulty)
        spec, workload, raw = compute_as_runner(in_process_client, "matmul-pipeline", **FAULTY)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{fault} verifies at {depth}: {check.detail}"


# C in 4 x 3 blocks of 50 x 60; the contraction (k = 160) summed in three pieces: 60, 60, 40.
PIECES = {"shape": "200,160,180", "chunks": "50,60,60", "seed": 21}
# One block of C's twelve: a random one (a seeded draw, neither the first nor the last), the last.
ONE_BLOCK = {"random": divmod(int(np.random.default_rng(12).integers(1, 11)), 3),
             "last": (3, 2)}


def _checks_of_faulty_run(session, monkeypatch, module, name, faulty) -> dict:
    """Both depths' verification of a run computed with ``module.name`` replaced by ``faulty``."""
    with monkeypatch.context() as patched:
        patched.setattr(module, name, faulty)
        spec, workload, raw = compute_as_runner(session, "matmul-pipeline", **PIECES)
    return {depth: verify_on(session, spec, workload, raw, depth) for depth in ("fast", "full")}


@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_of_c_off_by_a_millionth_fails_both_depths_naming_it(in_process_client,
                                                                     monkeypatch, where):
    block = ONE_BLOCK[where]
    faulty = _summarised_as(lambda c, info: (c * (1 + 1e-6), info), lambda i, j: (i, j) == block)
    checks = _checks_of_faulty_run(in_process_client, monkeypatch, matmul_tasks,
                                   "_block_summary", faulty)
    for depth, check in checks.items():
        assert not check.ok and f"block {block} of C" in check.detail, (depth, check.detail)


def _first_piece_off(block, original=da.matmul):
    """``dask.array.matmul`` summing the contraction's pieces itself, the first piece of
    ``block`` of C off by a millionth."""

    def off(part, block_info=None):
        return part * (1 + 1e-6) if tuple(block_info[0]["chunk-location"]) == block else part

    def matmul(a, b):
        edges = np.cumsum((0, *a.chunks[1]))
        parts = [original(a[:, s:e], b[s:e]) for s, e in zip(edges[:-1], edges[1:], strict=True)]
        assert len(parts) == 3
        return sum(parts[1:], parts[0].map_blocks(off, dtype=parts[0].dtype))

    return matmul


def test_the_first_piece_of_the_sum_off_in_one_block_fails_both_depths(in_process_client,
                                                                         monkeypatch):
    block = ONE_BLOCK["random"]
    checks = _checks_of_faulty_run(in_process_client, monkeypatch, matmul_pipeline.da, "matmul",
                                   _first_piece_off(block))
    for depth, check in checks.items():
        assert not check.ok and f"Freivalds' check: block {block} of C" in check.detail, (
            depth, check.detail)


def test_one_blocks_squares_off_fail_the_full_depth(in_process_client, monkeypatch):
    """A sum of squares 0.1 % high stays inside the fast depth's bounds; the full depth
    multiplies every block again and names it."""
    original, block = matmul_tasks._block_summary, ONE_BLOCK["random"]

    def faulty(c, block_info=None, **packing):
        out = original(c, block_info=block_info, **packing)
        if tuple(block_info[0]["chunk-location"]) == block:
            out[0, 0, 0] *= 1.001
        return out

    check = _checks_of_faulty_run(in_process_client, monkeypatch, matmul_tasks,
                                  "_block_summary", faulty)["full"]
    assert not check.ok, check.detail
    assert f"block {block} of C: sum of squares" in check.detail, check.detail
    assert "recomputed from A and B" in check.detail, check.detail


@pytest.mark.gpu
@pytest.mark.parametrize("depth", ["fast", "full"])
def test_on_gpu_workers_both_depths_verify_and_catch_a_wrong_block(depth):
    """CuPy blocks: the fast depth draws and reduces them on the device."""
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = compute_as_runner(session, "matmul-pipeline", shape="3000,2000,2500",
                                                chunks="1000,1250", seed=3)
        assert session.backend.is_gpu
        check = verify_on(session, spec, workload, raw, depth)
        assert check.ok, check.detail
        altered = spec.mutations[0].alter(copy.deepcopy(raw))
        assert not verify_on(session, spec, workload, altered, depth).ok
