"""matmul-pipeline on a real CPU LocalCluster: random and .npy operands, C written, verification."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
from conftest import assert_one_error_line, compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.data import synthetic
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend
from pipelines.matmul import layout as matmul_layout
from pipelines.matmul import shared as matmul_data

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
    assert again.value == result.value


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
    r = matmul_data.vectors(120, workload.context["check_seed"])
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
def test_bad_parameters_are_refused_up_front(npy_pair, params, error, message):
    params = {k: str(npy_pair / v) if k.startswith("input") else v for k, v in params.items()}
    started = time.perf_counter()
    with pytest.raises(error, match=message) as caught:
        daskgpu.get_pipeline("matmul-pipeline").resolve(**params)
    assert "\n" not in str(caught.value) and time.perf_counter() - started < 5


def test_cli_shape_mismatch_is_one_error_line(npy_pair):
    started = time.perf_counter()
    proc = run_cli("run", "matmul-pipeline", "--input-a", str(npy_pair / "a.npy"), "--input-b",
                   str(npy_pair / "b.npy"), "--workers", "1", "--no-dashboard")
    assert_one_error_line(proc, started, "shape mismatch")
