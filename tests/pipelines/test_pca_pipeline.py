"""pca-pipeline on a real CPU LocalCluster: the pieces, both methods, inputs, output, the CLI."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import re

import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend, to_host
from daskgpu.toolkit.numeric import CounterGenerator, seed_word
from daskgpu.verification import Grid
from daskgpu.verification.probes import normal_reach
from pipelines.pca import check as pca_check
from pipelines.pca import check_fast, check_replay
from pipelines.pca import shared as pca_data
from pipelines.pca import tasks as pca_blocks
from pipelines.pca.shared import PcaContext

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _on_device(rows, features: int, seed: int) -> PcaContext:
    """The context of generated data on GPU workers (CuPy: the strict stand-in)."""
    return PcaContext(Grid((rows, (features,))), "float64", "exact", 2, "cupy", seed)


def _rows(ctx: PcaContext) -> np.ndarray:
    """Generated rows as the run forms them (``z diag(sigma) V^T`` in the data's dtype), their
    ``z`` drawn again by the check (on the host)."""
    z = [to_host(check_replay.z_of(ctx, i)) for i in range(ctx.grid.blocks)]
    d = ctx.features
    return pca_blocks.generate_block(np.concatenate(z), pca_data.spectrum(d),
                                     pca_data.basis(ctx.seed, d).T)


def _pca(x: np.ndarray, k: int):
    """Explained variances and components of ``x`` by NumPy's SVD of the centred array."""
    centred = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    return s[:k] ** 2 / (len(x) - 1), vt[:k]


def _same_directions(a: np.ndarray, b: np.ndarray, atol: float) -> None:
    np.testing.assert_allclose(np.abs(np.sum(a * b, axis=1)), 1.0, atol=atol)


def test_block_summaries_combine_into_the_r_of_the_centred_whole():
    """R's of blocks centred on their own means, joined pairwise: R^T R is the whole scatter."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((700, 6)) * 3 + np.arange(6) * 100.0  # a large mean, as in data
    parts = [pca_blocks.r_summary(x[i:i + 150], "numpy", 64) for i in range(0, 700, 150)]
    total = parts[0]
    for part in parts[1:]:
        total = pca_blocks.combine_r(total, part)
    rows, mean, r, squares = total
    centred = x - x.mean(axis=0)
    assert rows == 700
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(r.T @ r, centred.T @ centred, rtol=1e-10, atol=1e-8)
    assert squares == pytest.approx(float((centred**2).sum()), rel=1e-12)
    found = pca_blocks.finish(total, 3)
    variance, components = _pca(x, 3)
    np.testing.assert_allclose(found["explained_variance"], variance, rtol=1e-10)
    _same_directions(found["components"], components, 1e-10)
    assert (np.abs(found["components"]).max(axis=1) == found["components"].max(axis=1)).all()


def test_power_steps_combine_into_the_centred_gram_times_w():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 5)) + 7.0
    w = pca_blocks.starting_basis(3, 5, 3)
    parts = [pca_blocks.power_summary(x[i:i + 100], w) for i in range(0, 300, 100)]
    total = pca_blocks.combine_power(pca_blocks.combine_power(parts[0], parts[1], basis=w),
                                     parts[2], basis=w)
    centred = x - x.mean(axis=0)
    np.testing.assert_allclose(total[2], centred.T @ centred @ w, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(w.T @ w, np.eye(3), atol=1e-14)


def test_the_known_basis_is_orthonormal_and_seeded():
    v = pca_data.basis(4, 16)
    np.testing.assert_allclose(v.T @ v, np.eye(16), atol=1e-14)
    np.testing.assert_array_equal(v, pca_data.basis(4, 16))
    assert not np.allclose(v, pca_data.basis(5, 16))
    assert pca_data.spectrum(4).tolist() == pytest.approx([1.0, 0.9, 0.81, 0.729])


@pytest.mark.parametrize("method", ["auto", "covariance", "exact", "randomized"])
def test_generated_data_verify_and_match_numpy(cpu_client, method):
    params = {"samples": 3000, "features": 24, "components": 4, "chunks": 700, "seed": 3,
              "method": method}
    spec, workload, raw = compute_as_runner(cpu_client, "pca-pipeline", **params)
    check = verify_on(cpu_client, spec, workload, raw)
    assert check.ok, check.detail
    assert "sampling error" in check.detail
    variance, components = _pca(_rows(workload.context), 4)
    result = raw["result"]
    np.testing.assert_allclose(result["explained_variance"], variance, rtol=1e-8)
    _same_directions(result["components"], components, 1e-6)
    # a result computed on other data fails
    _, _, other = compute_as_runner(cpu_client, "pca-pipeline", **{**params, "seed": 4})
    assert not verify_on(cpu_client, spec, workload, copy.deepcopy(other)).ok


def test_npy_input_float32_and_components_written(cpu_client, tmp_path):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((900, 12)) * np.linspace(3, 0.2, 12) + 5).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "components.npy"
    result = daskgpu.run("pca-pipeline", client=cpu_client, input=str(tmp_path / "x.npy"),
                         components=3, chunks=200, output=str(out))
    assert result.verified, result.verification
    assert "sampling" not in result.verification  # no known spectrum for an input
    assert result.data["format"] == "npy" and result.data["dtype"] == "float32"
    variance, components = _pca(x.astype(np.float64), 3)
    np.testing.assert_allclose(result.value["explained_variance"], variance, rtol=1e-4)
    written = np.load(out)
    assert written.shape == (3, 12)
    _same_directions(written, components, 1e-4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["components.npy", "x.npy"]


def test_csv_output_has_a_row_per_component(cpu_client, tmp_path):
    out = tmp_path / "pcs.csv"
    result = daskgpu.run("pca-pipeline", client=cpu_client, samples=800, features=6,
                         components=2, seed=1, output=str(out))
    assert result.verified, result.verification
    lines = out.read_text().splitlines()
    assert lines[0].split(",")[:4] == ["component", "explained_variance",
                                       "explained_variance_ratio", "f0"]
    assert len(lines) == 3 and len(lines[1].split(",")) == 3 + 6


def _gram(r):
    """``R^T R``: what an R factor determines (its rows' signs are the QR's choice)."""
    return r.T @ r


def test_gpu_branch_computes_with_the_blocks_library(cupy_stand_in):
    """The summaries and the check's blocks on CuPy (the strict stand-in): the NumPy branch's
    values, for the same block."""
    cupy = cupy_stand_in
    host = np.random.default_rng(0).standard_normal((50, 4))
    block = cupy.asarray(host)
    rows, mean, r, squares = pca_blocks.r_summary(block, "cupy", None)
    want = pca_blocks.r_summary(host, "numpy", None)
    assert rows == want[0] == 50 and isinstance(r, np.ndarray) and r.shape == (4, 4)
    np.testing.assert_allclose(mean, want[1], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(_gram(r), _gram(want[2]), rtol=1e-12, atol=1e-12)
    assert squares == pytest.approx(want[3], rel=1e-13)
    w = pca_blocks.starting_basis(0, 4, 2)
    for summary, compared in ((pca_blocks.power_summary, np.asarray),
                              (pca_blocks.projected_r_summary, _gram)):
        got, theirs = summary(block, w, "cupy"), summary(host, w, "numpy")
        assert isinstance(got[2], np.ndarray) and got[0] == theirs[0]
        np.testing.assert_allclose(compared(got[2]), compared(theirs[2]), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(got[1], theirs[1], rtol=1e-13, atol=1e-15)
        assert got[3] == pytest.approx(theirs[3], rel=1e-13)
    z = np.random.default_rng(1).standard_normal((10, 4))
    factors = pca_data.spectrum(4), pca_data.basis(0, 4).T
    x = pca_blocks.generate_block(cupy.asarray(z), *factors, "cupy")
    assert isinstance(x, cupy.ndarray)
    np.testing.assert_allclose(x.get(), pca_blocks.generate_block(z, *factors), rtol=1e-13)
    ctx = _on_device((10, 10), 4, 0)
    drawn = check_replay.z_of(ctx, 1)
    (word,) = cupy.seeds  # CuPy's generator seeded with an integer
    z = CounterGenerator(np, np.random.SeedSequence(pca_data.data_seed(0), spawn_key=(1,))
                         ).standard_normal((10, 4))  # the device's scheme
    want = pca_blocks.generate_block(z, pca_data.spectrum(4), pca_data.basis(0, 4).T)
    np.testing.assert_allclose(drawn.get(), z, rtol=1e-13)
    f, _ = check_replay.framed(ctx, np.eye(4))  # the rows are z F
    rows, mean, product, _ = check_replay.block_products(ctx, 1, f)
    scatter = f.T @ product
    centred = want - want.mean(axis=0)
    assert rows == 10 and isinstance(scatter, np.ndarray)
    np.testing.assert_allclose(f.T @ mean, want.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(scatter, centred.T @ centred, rtol=1e-12, atol=1e-13)


def test_cli_run_json_is_verified():
    proc = run_cli("run", "pca-pipeline", "--samples", "4000", "--features", "32",
                   "--method", "randomized", "--workers", "2", "--no-dashboard", "--json",
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["data"]["shape"] == [4000, 32]
    assert doc["data"]["method"] == "randomized" and doc["data"]["passes"] == 5
    assert doc["value"]["components"] == 10 and len(doc["value"]["explained_variance"]) == 5
    assert len(doc["data"]["explained_variance"]) == 10


@pytest.fixture
def files(tmp_path):
    np.save(tmp_path / "vector.npy", np.ones(30))
    np.save(tmp_path / "ints.npy", np.ones((30, 3), dtype=np.int64))
    np.save(tmp_path / "x.npy", np.ones((30, 3)))
    return tmp_path


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"input": "vector.npy"}, InputFileError, "2 axes"),
        ({"input": "ints.npy"}, InputFileError, "float32 or float64"),
        ({"input": "x.npy", "components": 4}, ParameterError, "at most 3"),
        ({"input": "x.npy", "seed": 3}, ParameterError, "--seed"),
        ({"features": 8, "components": 9}, ParameterError, "at most 8"),
        ({"samples": 2**62, "features": 2**12}, ParameterError, "smaller size"),
        ({"features": 10**6}, ParameterError, "at most 4096"),
        ({"samples": 1}, ParameterError, "at least 2"),
        ({"samples": 10**6, "chunks": "1"}, ParameterError, "more rows per block"),
        ({"samples": 100, "features": 16, "chunks": "10,4"}, ParameterError, "whole rows"),
    ],
)
def test_bad_parameters_are_refused_up_front(files, params, error, message):
    params = {k: str(files / v) if k == "input" else v for k, v in params.items()}
    with pytest.raises(error, match=message):
        daskgpu.get_pipeline("pca-pipeline").resolve(**params)


def test_projection_written_and_checked(cpu_client, tmp_path):
    import zarr

    params = {"samples": 1500, "features": 10, "components": 3, "chunks": 400, "seed": 6,
              "project": str(tmp_path / "t.zarr")}
    result = daskgpu.run("pca-pipeline", client=cpu_client, **params)
    assert result.verified, result.verification
    assert "projection" in result.verification and result.data["passes"] == 2
    spec, workload, raw = compute_as_runner(cpu_client, "pca-pipeline",
                                            **{**params, "project": str(tmp_path / "u.zarr")})
    x = _rows(workload.context)
    expected = (x - x.mean(axis=0)) @ raw["result"]["components"].T
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "t.zarr"))[:], expected,
                               rtol=1e-9, atol=1e-9)
    for key, change in (("projected_squares", 1.001), ("projected_sums", 1e-3)):
        altered = copy.deepcopy(raw)
        altered[key] = altered[key] * change if change > 1 else altered[key] + change * 1500
        check = verify_on(cpu_client, spec, workload, altered)
        assert not check.ok and "projection" in check.detail, check.detail


# ------------------------------------------------------------------ the fast depth's pass


def _context(**params):
    import dask

    spec = daskgpu.get_pipeline("pca-pipeline")
    with dask.config.set(scheduler="sync"):
        return spec.workload(CPU2, spec.resolve(CPU2, **params)).context


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_thin_pass_gives_the_gram_matrix_times_m(monkeypatch, tmp_path, dtype):
    """Generated blocks in z's frame, an input as read, slab by slab: C M as NumPy's C of the
    rows, and the full depth's C (M = I)."""
    import dask

    monkeypatch.setattr(check_replay, "SLAB_ELEMENTS", 12 * 70)  # slabs of 70 rows
    generated = _context(samples=1000, features=12, components=3, chunks=300, seed=4,
                         dtype=dtype)
    x = _rows(generated)
    np.save(tmp_path / "x.npy", x + 50.0)
    read = _context(input=str(tmp_path / "x.npy"), components=3, chunks=300)
    m = np.random.default_rng(0).standard_normal((12, 5))
    for ctx, rows in ((generated, x), (read, np.load(tmp_path / "x.npy"))):
        wide = rows.astype(np.float64)
        centred = wide - wide.mean(axis=0)
        scatter = centred.T @ centred
        scale = np.trace(scatter)
        with dask.config.set(scheduler="sync"):
            fast, full = check_replay.products(ctx, m), check_replay.products(ctx, np.eye(12))
        assert fast["rows"] == full["rows"] == 1000
        rounding = 1e-12 if not ctx.random or dtype == "float64" else 1e-5
        np.testing.assert_allclose(fast["cm"], scatter @ m, atol=rounding * scale)
        np.testing.assert_allclose(full["cm"], scatter, atol=rounding * scale)
        assert fast["trace"] == pytest.approx(scale, rel=rounding) == full["trace"]
        np.testing.assert_allclose(fast["mean"], wide.mean(axis=0), rtol=1e-12, atol=rounding)


def test_device_branch_of_the_thin_pass_draws_a_block_whole(cupy_stand_in):
    """The CuPy path (the strict stand-in): z drawn once with an integer seed, reduced whole;
    the sums those of NumPy on the same z."""
    xp = cupy_stand_in
    ctx = _on_device((25, 15), 6, 2)
    m = np.random.default_rng(1).standard_normal((6, 3))
    rows, mean, product, squares = check_replay.block_products(ctx, 1, m)
    word = seed_word(np.random.SeedSequence(pca_data.data_seed(2), spawn_key=(1,)))
    assert xp.seeds == [word]
    z = CounterGenerator(np, np.random.SeedSequence(pca_data.data_seed(2), spawn_key=(1,))
                         ).standard_normal((15, 6))  # the device's scheme
    centred = z - z.mean(axis=0)
    assert rows == 15
    np.testing.assert_allclose(mean, z.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(product, centred.T @ centred @ m, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(squares, (centred**2).sum(axis=0), rtol=1e-13)


def test_the_certificate_test_lets_a_wrong_r_through_rarely():
    """The stated probability is the chi-square tail; a Gram matrix off R^T R in one direction
    by the stated reach passes the comparison that often (the fraction of 20000 draws, about
    0)."""
    probes = pca_data.PROBES
    floor = (2 / normal_reach(1.0, probes)) ** 2  # the chi-square's value the reach stands on
    half = floor / 2  # P(chi^2_6 <= floor) = P(Poisson(floor / 2) >= 3)
    tail = math.exp(-half) * math.fsum(half**i / math.factorial(i)
                                       for i in range(probes // 2, probes // 2 + 40))
    assert 0.9e-9 < tail <= 1e-9
    rng = np.random.default_rng(0)
    d = 16
    u = np.linalg.qr(rng.standard_normal((d, 1)))[0][:, 0]
    limit = 1.0  # each |(E q)_ij| may reach 2 limit; their norm, sqrt(d probes) limit
    off = normal_reach(limit * math.sqrt(d * probes), probes)
    passed = 0
    for _ in range(20_000):
        q = rng.standard_normal((d, probes))
        passed += bool((np.abs(off * np.outer(u, u) @ q) <= 2 * limit).all())
    assert passed <= 1


# ------------------------------------------------------------------ faults in the computation

FAULTY = {"samples": 6000, "features": 24, "components": 4, "chunks": 600, "seed": 5,
          "method": "exact"}  # 10 blocks


def _every(nth: int, fault, original):
    """``original`` with ``fault`` applied to every ``nth`` call (a block, a combine)."""
    import itertools

    calls = itertools.count()

    def faulty(*args, **kwargs):
        if next(calls) % nth == 0:
            return fault(original, *args, **kwargs)
        return original(*args, **kwargs)

    return faulty


def _r_off(original, *args, **kwargs):
    rows, mean, r, squares = original(*args, **kwargs)
    return rows, mean, r * 1.001, squares


def _columns_swapped(original, block, *args, **kwargs):
    block = block.copy()
    block[:, [0, 1]] = block[:, [1, 0]]
    return original(block, *args, **kwargs)


def _sigma_off(original, z, sigma=None, **kwargs):
    return original(z, sigma=np.asarray(sigma) * 1.001, **kwargs)


def _squares_off(original, *args, **kwargs):
    rows, mean, r, squares = original(*args, **kwargs)
    return rows, mean, r, squares * 1.001


def _top_skipped(original, total, components, *args):
    found = original(total, components + 1, *args)
    for key in ("components", "singular_values", "explained_variance",
                "explained_variance_ratio"):
        found[key] = found[key][1:]
    return found


def _scatter_off(original, *args, **kwargs):
    (rows, mean, scatter, squares), certificate = original(*args, **kwargs)
    return (rows, mean, scatter * 1.001, squares), certificate


def _uncentred_combine(original, a, b):
    rows, _, scatter, squares = original(a, b)
    return rows, (a[0] * a[1] + b[0] * b[1]) / rows, a[2] + b[2], a[3] + b[3]


def _projected_off(original, *args, **kwargs):
    rows, mean, r, squares = original(*args, **kwargs)
    return rows, mean, r * 1.002, squares


FAULTS = {
    "R factor of every other block off by 0.1 %": (
        pca_blocks, "r_summary", _every(2, _r_off, pca_blocks.r_summary)),
    "two columns swapped in every fifth block before its QR": (
        pca_blocks, "r_summary", _every(5, _columns_swapped, pca_blocks.r_summary)),
    "every third block drawn with sigma 0.1 % off": (
        pca_blocks, "generate_block", _every(3, _sigma_off, pca_blocks.generate_block)),
    "the squares of every combine off by 0.1 %": (
        pca_blocks, "combine_r", _every(1, _squares_off, pca_blocks.combine_r)),
    "the top component skipped": (
        pca_blocks, "finish", _every(1, _top_skipped, pca_blocks.finish)),
    "randomized: every projected R off by 0.2 %": (
        pca_blocks, "projected_r_summary", _every(1, _projected_off,
                                                  pca_blocks.projected_r_summary),
        {**FAULTY, "method": "randomized"}),
    "covariance: every other block's Gram matrix off by 0.1 %": (
        pca_blocks, "gram_summary", _every(2, _scatter_off, pca_blocks.gram_summary),
        {**FAULTY, "method": "covariance"}),
    "covariance: two columns swapped in every fifth block": (
        pca_blocks, "gram_summary", _every(5, _columns_swapped, pca_blocks.gram_summary),
        {**FAULTY, "method": "covariance"}),
    "covariance: every combine's mean term dropped": (
        pca_blocks, "combine_gram", _every(1, _uncentred_combine, pca_blocks.combine_gram),
        {**FAULTY, "method": "covariance"}),
    "covariance: every third block drawn with sigma 0.1 % off": (
        pca_blocks, "generate_block", _every(3, _sigma_off, pca_blocks.generate_block),
        {**FAULTY, "method": "covariance"}),
    "covariance: the top component skipped": (
        pca_blocks, "finish_covariance", _every(1, _top_skipped, pca_blocks.finish_covariance),
        {**FAULTY, "method": "covariance"}),
    "randomized: the top component skipped": (
        pca_blocks, "finish", _every(1, _top_skipped, pca_blocks.finish),
        {**FAULTY, "method": "randomized"}),
}


@pytest.mark.parametrize("method", ["exact", "covariance", "randomized"])
def test_the_unfaulted_run_verifies_at_both_depths(in_process_client, method):
    spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline",
                                            **{**FAULTY, "method": method})
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_in_the_computation_fails_both_depths(in_process_client, monkeypatch, fault):
    """Faults injected into the run's own functions (workers are threads: they see them)."""
    module, name, faulty, *params = FAULTS[fault]
    with monkeypatch.context() as patched:
        patched.setattr(module, name, faulty)
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline",
                                                **(params[0] if params else FAULTY))
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{fault} verifies at {depth}: {check.detail}"


@pytest.mark.parametrize("method", ["exact", "covariance", "randomized"])
def test_a_skipped_top_component_fails_both_depths_on_an_input(in_process_client, monkeypatch,
                                                               tmp_path, method):
    """No known spectrum to fall back on: the R certificate (exact) or the deflated quotient
    (randomized) finds the variance left out."""
    rng = np.random.default_rng(3)
    np.save(tmp_path / "x.npy", rng.standard_normal((4000, 16)) @ np.diag(np.linspace(3, 0.1, 16)))
    finish = "finish_covariance" if method == "covariance" else "finish"
    with monkeypatch.context() as patched:
        patched.setattr(pca_blocks, finish,
                        _every(1, _top_skipped, getattr(pca_blocks, finish)))
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline",
                                                input=str(tmp_path / "x.npy"), chunks=500,
                                                components=4, method=method)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        assert "largest" in check.detail or "outside" in check.detail, check.detail


# A fault confined to one part: a block chosen by a seeded draw (not the first), the last block,
# and for the randomised method an early power iteration. Ten blocks of two cells: a block holds
# a tenth of the cells, which the fast sample catches with probability at least 99.9 %.
PARTS = {"samples": 20_480, "features": 16, "components": 4, "chunks": 2048, "seed": 12}
RANDOM_BLOCK = int(np.random.default_rng(2026).integers(1, 9))  # neither the first nor the last
# What a failed detail names: the block's cells, the trace, the run's Gram matrix, a component.
NAMED = (r"cell \d of block {block}: \S+|total variance \S+, trace of the Gram matrix gives"
         r"|is not the data's Gram matrix|component \d is no eigenvector")


def _block_off(block: int):
    """``tasks.draw_block`` with block ``block``'s rows 0.1 % off (its ``z`` scaled)."""
    original = pca_blocks.draw_block

    def drawn(seed, number, *args, **kwargs):
        z, states = original(seed, number, *args, **kwargs)
        if number == block:
            z *= 1.001
        return z, states

    return drawn


@pytest.mark.parametrize("method", ["exact", "covariance", "randomized"])
@pytest.mark.parametrize("where", ["random", "last"])
def test_a_fault_in_one_block_fails_both_depths(in_process_client, monkeypatch, method, where):
    """The rows of one block 0.1 % off: its cells (fast, exact and covariance), the trace of the
    thin pass (fast, randomized) and of the blockwise Gram matrix (full) disagree."""
    block = RANDOM_BLOCK if where == "random" else PARTS["samples"] // PARTS["chunks"] - 1
    assert 0 < block
    with monkeypatch.context() as patched:
        patched.setattr(pca_blocks, "draw_block", _block_off(block))
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline", **PARTS,
                                                method=method)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        assert re.search(NAMED.format(block=block), check.detail), (depth, check.detail)
        if depth == "fast" and method != "randomized":
            assert f"of block {block}:" in check.detail, check.detail


def test_a_fault_in_an_early_power_iteration_fails_both_depths(in_process_client, monkeypatch):
    """Every power iteration multiplies by the data again, so a fault in an early one only moves
    the next one's start, which the later ones wash out, unless it takes away a direction they
    cannot bring back: the first iteration's basis losing the leading eigenvector keeps it lost
    to the end (the top component skipped)."""
    params = {**PARTS, "method": "randomized"}
    rows = _rows(_context(**params))
    centred = rows - rows.mean(axis=0)
    lead = np.linalg.eigh(centred.T @ centred)[1][:, -1]
    original = pca_blocks.next_basis

    def lost(total):  # the count lives in the module: a task's copy of this function shares it
        basis = original(total)
        if next(pca_blocks.steps_taken):
            return basis
        return np.linalg.qr(basis - np.outer(lead, lead @ basis))[0]

    with monkeypatch.context() as patched:
        patched.setattr(pca_blocks, "steps_taken", itertools.count(), raising=False)
        patched.setattr(pca_blocks, "next_basis", lost)
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline", **params)
        assert next(pca_blocks.steps_taken) == 4  # --power-iters 4: the fault in the first
    for depth, named in (("fast", "outside the components"), ("full", "largest eigenvalues")):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and named in check.detail, (depth, check.detail)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["exact", "randomized"])
def test_on_gpu_workers_both_depths_verify_and_catch_a_rotation(method):
    """CuPy blocks: the fast depth draws z and reduces it on the device, whole."""
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = compute_as_runner(session, "pca-pipeline", samples=400_000,
                                                features=64, components=5, seed=3,
                                                method=method)
        assert session.backend.is_gpu
        for depth in ("fast", "full"):
            assert verify_on(session, spec, workload, raw, depth).ok
            altered = spec.mutations[0].alter(copy.deepcopy(raw))
            check = verify_on(session, spec, workload, altered, depth)
            assert not check.ok and "eigenvector" in check.detail, check.detail


# ------------------------------------------------------------------ the fast depth's cells

CELLS = {"samples": 40_000, "features": 16, "components": 4, "chunks": 10_000, "seed": 8,
         "method": "exact"}


def _sampled(workload) -> list[int]:
    """The cells the fast depth computes again (their numbers over all blocks)."""
    return list(check_fast.cell_plan(workload.context).parts)


def _cell(raw, number: int) -> tuple[dict, int]:
    """The certificate of cell ``number`` (over all blocks): its block's part and its index."""
    for part in raw["cells"]:
        if number < len(part["counts"]):
            return part, number
        number -= len(part["counts"])
    raise IndexError(number)


def _with_cells(raw) -> dict:
    return {**raw, "cells": [{key: value.copy() for key, value in part.items()}
                             for part in raw["cells"]]}


def _hidden(raw, first: int, other: int, key: str, share: float = 1e-6) -> dict:
    """``raw`` with ``+delta`` on cell ``first``'s ``key`` and ``-delta`` on cell ``other``'s:
    the joined C Q, trace and mean do not change (the Freivalds test passes)."""
    altered = _with_cells(raw)
    (a, i), (b, j) = _cell(altered, first), _cell(altered, other)
    delta = share * np.abs(a[key][i]).max()
    a[key][i] += delta
    b[key][j] -= delta
    return altered


@pytest.fixture(scope="module")
def certified_run(cpu_client):
    return compute_as_runner(cpu_client, "pca-pipeline", **CELLS)


def test_the_cells_tile_the_blocks_and_their_certificates_join_into_the_gram_matrix(
        cpu_client, certified_run):
    spec, workload, raw = certified_run
    assert [len(part["counts"]) for part in raw["cells"]] == [10] * 4  # 9 x 1024 + 784 rows
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok, check.detail
    assert f"{len(_sampled(workload))} of 40 cells checked again" in check.detail
    ctx = workload.context
    failure, gram = check_fast.join_certificates(ctx, raw["cells"])
    full = verify_on(cpu_client, spec, workload, raw, "full")
    assert failure is None and full.ok
    x = _rows(ctx)
    centred = x - x.mean(axis=0)
    scatter = centred.T @ centred
    np.testing.assert_allclose(gram.cq, scatter @ gram.probes, rtol=1e-10,
                               atol=1e-10 * np.trace(scatter))
    assert gram.trace == pytest.approx(np.trace(scatter), rel=1e-12)
    np.testing.assert_allclose(gram.mean, x.mean(axis=0), atol=1e-14)


def test_a_sampled_cells_certificate_altered_in_a_way_the_sums_hide_is_caught(cpu_client,
                                                                            certified_run):
    """+delta on one cell, -delta on another: C Q, the trace and the mean are unchanged (the
    Freivalds test passes); the cells computed again disagree."""
    spec, workload, raw = certified_run
    first, other = _sampled(workload)[:2]
    for key in ("g", "squares"):
        check = verify_on(cpu_client, spec, workload, _hidden(raw, first, other, key), "fast")
        assert not check.ok and "disagree with the run's certificates" in check.detail, \
            check.detail
        what = "X_c^T X_c Q" if key == "g" else "sum of squares"
        assert check.detail.startswith("2 of") and what in check.detail, check.detail


def test_a_noted_state_off_the_stream_is_caught(cpu_client, certified_run):
    spec, workload, raw = certified_run
    cell = next(c for c in _sampled(workload)[::-1] if c % 10 != 9)  # not a block's last
    for word, message in ((1, "draws into the block's stream"), (3, "not on this block's"),
                          (5, "does not end at the generator state noted")):
        altered = _with_cells(raw)
        part, i = _cell(altered, cell)
        if word == 5:  # the half word of the next cell's state: the draw before it disagrees
            part, i = _cell(altered, cell + 1)
            part["states"][i, 4] ^= np.uint64(1)
        else:
            part["states"][i, word] += np.uint64(2)
        check = verify_on(cpu_client, spec, workload, altered, "fast")
        assert not check.ok and message in check.detail, (word, check.detail)


def test_float32_cells_are_drawn_again_from_states_with_a_half_word(cpu_client):
    params = {**CELLS, "samples": 12_000, "chunks": 3000, "dtype": "float32"}
    spec, workload, raw = compute_as_runner(cpu_client, "pca-pipeline", **params)
    assert {int(w) for part in raw["cells"] for w in part["states"][:, 4]} == {0, 1}
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok and "cells checked again" in check.detail, check.detail
    altered = _with_cells(raw)
    cell = _sampled(workload)[-1]
    part, i = _cell(altered, cell)
    part["states"][i, 1] += np.uint64(1)
    check = verify_on(cpu_client, spec, workload, altered, "fast")
    assert not check.ok and "draws into the block's stream" in check.detail, check.detail


def test_certificates_that_do_not_tile_the_rows_are_refused(cpu_client, certified_run):
    spec, workload, raw = certified_run
    altered = _with_cells(raw)
    altered["cells"][2]["counts"][3] -= 1
    check = verify_on(cpu_client, spec, workload, altered, "fast")
    assert not check.ok and "do not tile its 10000 rows" in check.detail, check.detail
    check = verify_on(cpu_client, spec, workload, {**raw, "cells": raw["cells"][:3]}, "fast")
    assert not check.ok and "3 blocks of them for the run's 4 blocks" in check.detail
    altered = _with_cells(raw)
    altered["cells"][0]["g"][0, 0, 0] = np.nan
    check = verify_on(cpu_client, spec, workload, altered, "fast")
    assert not check.ok and "not finite" in check.detail, check.detail


def _every_eighth_cell_off(original):
    def drawn(*args, **kwargs):
        z, states = original(*args, **kwargs)
        for j, (first, stop) in enumerate(pca_data.cells(len(z))):
            if j % 8 == 3:
                z[first:stop] *= 1.001
        return z, states

    return drawn


def test_rows_off_in_an_eighth_of_the_cells_fail_the_fast_depth(in_process_client, monkeypatch):
    """A fault in the rows the run factors: R, its certificates and the variances agree with
    one another (and with sampling error); only the cells drawn again show it."""
    with monkeypatch.context() as patched:
        patched.setattr(pca_blocks, "draw_block", _every_eighth_cell_off(pca_blocks.draw_block))
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline", **CELLS)
    check = verify_on(in_process_client, spec, workload, raw, "fast")
    assert not check.ok and "disagree with the run's certificates" in check.detail, check.detail
    assert "cell 3 of block" in check.detail, check.detail


@pytest.mark.parametrize("kind", ["npy", "zarr"])
def test_an_input_verifies_at_the_fast_depth_and_its_cells_are_read_again(cpu_client,
                                                                        tmp_path, kind):
    import zarr

    rng = np.random.default_rng(5)
    x = rng.standard_normal((5000, 8)) * np.linspace(2, 0.5, 8) + 30.0
    path = str(tmp_path / f"x.{kind}")
    if kind == "npy":
        np.save(path, x)
    else:
        stored = zarr.open_array(path, mode="w", shape=x.shape, chunks=(700, 8), dtype=x.dtype)
        stored[:] = x
    spec, workload, raw = compute_as_runner(cpu_client, "pca-pipeline", input=path,
                                            components=3, chunks=2500)
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok and "6 of 6 cells" not in check.detail, check.detail
    assert "all 6 cells checked again" in check.detail, check.detail
    check = verify_on(cpu_client, spec, workload, _hidden(raw, 1, 4, "g"), "fast")
    assert not check.ok and "X_c^T X_c Q off the certificate's" in check.detail, check.detail


def test_device_branches_certify_and_recompute_a_whole_block(cupy_stand_in):
    """The CuPy paths (the strict stand-in): the run certifies a block as one cell, as the NumPy
    branch does, and the check draws it again whole (an integer seed) and finds the same
    sums."""
    xp = cupy_stand_in
    ctx = _on_device((1500, 15), 6, 2)
    assert [ctx.cuts(b) for b in range(2)] == [[(0, 1500)], [(0, 15)]]
    q = pca_data.probes(2, 1515, 6)
    word = seed_word(np.random.SeedSequence(pca_data.data_seed(2), spawn_key=(1,)))
    x = pca_blocks.generate_block(CounterGenerator(np, np.random.SeedSequence(
        pca_data.data_seed(2), spawn_key=(1,))).standard_normal((15, 6)),
                                  pca_data.spectrum(6), pca_data.basis(2, 6).T)
    made = pca_blocks.cell_certificates(xp.asarray(x), [(0, 15)], q, "cupy")
    on_numpy = pca_blocks.cell_certificates(x, [(0, 15)], q)
    for key in ("counts", "means", "squares", "g"):
        np.testing.assert_allclose(made[key], on_numpy[key], rtol=1e-12, atol=1e-14)
    centred = x - x.mean(axis=0)
    np.testing.assert_allclose(made["g"][0], centred.T @ centred @ q, rtol=1e-12)
    f, multiplier = check_replay.framed(ctx, q)
    ((j, sums),) = check_replay.cell_sums(ctx, 1, [0], None, f, multiplier)
    assert j == 0 and xp.seeds == [word] and sums["count"] == 15
    cells = {key: made[key] for key in ("counts", "means", "squares", "g")}
    assert check_fast.cell_problem(ctx, sums, cells, 0, q) is None
    cells["g"] = cells["g"] * (1 + 1e-6)
    assert "X_c^T X_c Q" in check_fast.cell_problem(ctx, sums, cells, 0, q)


@pytest.mark.gpu
def test_on_gpu_workers_the_fast_depth_recomputes_whole_blocks():
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = compute_as_runner(session, "pca-pipeline", samples=400_000,
                                                features=64, components=5, seed=4,
                                                chunks=100_000)
        assert [len(part["counts"]) for part in raw["cells"]] == [1] * 4
        check = verify_on(session, spec, workload, raw, "fast")
        assert check.ok and "all 4 cells checked again" in check.detail, check.detail
        altered = _hidden(raw, 0, 3, "squares", 1e-8)
        check = verify_on(session, spec, workload, altered, "fast")
        assert not check.ok and "disagree with the run's certificates" in check.detail


# ------------------------------------------------------------------ the covariance method


def test_cells_gram_matrices_join_into_the_centred_gram_in_float64():
    """A block's cells centred on their own means, their scatters joined: the block's
    centred Gram matrix, summed in float64 from float32 rows; the certificates are S_c Q."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2600, 7)) * np.linspace(2, 0.1, 7) + 1000.0).astype(np.float32)
    cuts = pca_data.cells(len(x))
    q = pca_data.probes(1, 2600, 7)
    (rows, mean, scatter, squares), certificate = pca_blocks.gram_summary(x, None, cuts, q)
    wide = x.astype(np.float64)
    centred = wide - wide.mean(axis=0)
    assert rows == 2600 and len(certificate["counts"]) == 3
    np.testing.assert_allclose(mean, wide.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(scatter, centred.T @ centred, rtol=1e-11,
                               atol=1e-12 * np.trace(centred.T @ centred))
    assert squares == pytest.approx(np.trace(centred.T @ centred), rel=1e-12)
    first = wide[:1024] - wide[:1024].mean(axis=0)
    np.testing.assert_allclose(certificate["g"][0], first.T @ first @ q, rtol=1e-10)
    halves = [pca_blocks.gram_summary(x[a:b], None, pca_data.cells(b - a), q)[0]
              for a, b in ((0, 1100), (1100, 2600))]
    joined = pca_blocks.combine_gram(*halves)
    np.testing.assert_allclose(joined[2], scatter, rtol=1e-11, atol=1e-12 * squares)
    np.testing.assert_allclose(joined[1], mean, rtol=1e-14)


def test_device_branch_of_the_covariance_task_sums_a_whole_block(cupy_stand_in):
    """The CuPy path (the strict stand-in): a block is one cell, widened to float64 on the
    device; its sums and certificate are the NumPy branch's."""
    xp = cupy_stand_in
    x = (np.random.default_rng(8).standard_normal((300, 5)) + 4.0).astype(np.float32)
    q = pca_data.probes(3, 300, 5)
    made = pca_blocks.gram_summary(xp.asarray(x), None, [(0, 300)], q, "cupy")
    here = pca_blocks.gram_summary(x, None, [(0, 300)], q)
    (rows, mean, scatter, squares), certificate = made
    assert rows == 300 and isinstance(scatter, np.ndarray) and isinstance(mean, np.ndarray)
    np.testing.assert_allclose(scatter, here[0][2], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mean, here[0][1], rtol=1e-13)
    assert squares == pytest.approx(here[0][3], rel=1e-13)
    np.testing.assert_allclose(certificate["g"], here[1]["g"], rtol=1e-12, atol=1e-12)


def test_covariance_result_is_numpys_pca_and_vouched_for():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3000, 9)) * np.linspace(3, 0.3, 9) + 5.0
    total = pca_blocks.gram_summary(x, None, pca_data.cells(3000),
                                    pca_data.probes(0, 3000, 9))[0]
    found = pca_blocks.finish_covariance(total, 4, "float64")
    variance, components = _pca(x, 4)
    np.testing.assert_allclose(found["explained_variance"], variance, rtol=1e-10)
    _same_directions(found["components"], components, 1e-9)
    assert found["method"] == "covariance" and found["shortfall"] is None
    assert found["gram"].shape == (9, 9)


def test_the_accuracy_rule_is_the_squared_condition_number():
    """The covariance bound relative to variance i grows as trace / lambda_i (cond^2); the
    exact method's as its square root (cond): past ACCURACY, TSQR's is the smaller."""
    n, d = 10**6, 256
    rel = []
    for cond in (10.0, 100.0):
        lam = np.array([1.0, cond**-2])
        rel.append(pca_data.covariance_error(n, d, lam.sum()) / lam[1])
    assert rel[1] / rel[0] == pytest.approx(100.0, rel=0.02)
    assert pca_data.covariance_shortfall([1.0, 1e-4], n, d, 1.0, "float64") is None
    i, ours, theirs = pca_data.covariance_shortfall([1.0, 1e-8], n, d, 1.0, "float64")
    assert i == 1 and ours > pca_data.ACCURACY and theirs < ours
    # float32 data: TSQR in float32 is no better, so covariance (float64 sums) is kept longer
    assert pca_data.covariance_shortfall([1.0, 1e-8], n, d, 1.0, "float32") is None


@pytest.fixture
def ill_conditioned(tmp_path):
    """Columns whose scales span 5 decades: the smallest variances are 1e-10 of the largest."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 8)) * np.logspace(0, -5, 8) + 3.0
    np.save(tmp_path / "ill.npy", x)
    return str(tmp_path / "ill.npy"), x


def test_auto_takes_the_exact_method_where_covariance_cannot_vouch(cpu_client, ill_conditioned,
                                                                   tmp_path):
    path, x = ill_conditioned
    params = {"input": path, "components": 8, "chunks": 1000}
    auto = daskgpu.run("pca-pipeline", client=cpu_client, **params,
                       project=str(tmp_path / "t.npy"))
    assert auto.verified, auto.verification
    assert auto.data["method"] == "exact" and auto.data["passes"] == 3
    assert "cannot vouch for variance" in auto.data["accuracy"]
    assert "the exact method (TSQR) was taken" in auto.data["accuracy"]
    variance, components = _pca(x, 8)
    np.testing.assert_allclose(auto.data["explained_variance"], variance, rtol=1e-9)
    written = np.load(tmp_path / "t.npy")  # projected on the exact method's components
    np.testing.assert_allclose(written, (x - x.mean(axis=0)) @ components.T * np.sign(
        np.sum(written * ((x - x.mean(axis=0)) @ components.T), axis=0)), atol=1e-9)
    only = daskgpu.run("pca-pipeline", client=cpu_client, **params, method="covariance")
    assert only.verified and only.data["method"] == "covariance"
    assert "give --method exact (or auto)" in only.data["accuracy"]
    well = daskgpu.run("pca-pipeline", client=cpu_client, samples=3000, features=8,
                       components=3, seed=2)
    assert well.data["method"] == "covariance" and well.data["passes"] == 1
    assert "every reported variance within 1e-06" in well.data["accuracy"]


def test_auto_keeping_covariance_where_it_cannot_vouch_fails_the_check(cpu_client,
                                                                       ill_conditioned):
    """A covariance result reported under auto, on data it cannot vouch for: both depths
    find that the exact method should have been taken."""
    path, _ = ill_conditioned
    spec, workload, raw = compute_as_runner(cpu_client, "pca-pipeline", input=path,
                                            components=8, chunks=1000, method="covariance")
    assert raw["result"]["shortfall"] is not None
    assert verify_on(cpu_client, spec, workload, raw, "fast").ok
    workload.context = dataclasses.replace(workload.context, method="auto")
    for depth in ("fast", "full"):
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert not check.ok and "kept where it cannot vouch" in check.detail, check.detail
    raw["result"]["method"] = "randomized"
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert not check.ok and "took the randomized method" in check.detail


@pytest.mark.parametrize("method", ["covariance", "exact", "randomized"])
def test_every_method_verifies_and_catches_its_mutations(cpu_client, method):
    """daskgpu.testing.check_pipeline for each method: each mutation fails both depths."""
    from daskgpu.testing import check_pipeline

    skip = ("the run's Gram matrix (R^T R) off by 1 %",) if method == "randomized" else ()
    report = check_pipeline("pca-pipeline", session=cpu_client, skip_mutations=skip,
                            samples=3000, features=16, components=4, chunks=700, seed=9,
                            method=method)
    assert report.depths == ("fast", "full")
    caught = {(c.mutation, c.depth) for c in report.caught}
    assert len(caught) == 2 * (len(pca_check.MUTATIONS) - len(skip)), str(report)


# ------------------------------------------------------------------ the baseline


def test_the_baseline_fills_one_array_and_takes_only_singular_values(cupy_stand_in,
                                                                     monkeypatch):
    """On the device (the strict stand-in): one preallocated array filled block by block,
    centred in place, svd(compute_uv=False) of that very array (or, where CuPy's copy of it
    would not fit, the float64 Gram matrix's eigenvalues); never a concatenation."""
    import types

    from pipelines.pca import pipeline as pca_pipeline

    xp = cupy_stand_in
    made, calls = [], []
    empty, svd = xp.empty, xp.linalg.svd

    def recorded_empty(shape, *args, **kwargs):
        made.append(empty(shape, *args, **kwargs))
        return made[-1]

    def recorded_svd(a, *args, **kwargs):
        calls.append((a, kwargs))
        return svd(a, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("the baseline concatenated the blocks")

    monkeypatch.setattr(xp, "empty", recorded_empty)
    monkeypatch.setattr(xp, "concatenate", refused)
    monkeypatch.setattr(xp.linalg, "svd", recorded_svd)
    monkeypatch.setattr(pca_pipeline, "BASELINE_SLICE_ELEMENTS", 16 * 300)
    spec = daskgpu.get_pipeline("pca-pipeline")
    answers, wholes = {}, {}
    for memory in (10**12, 10**5):  # room for svd's copy; none (40000 x 16 x 8 = 5.1 MB)
        device = types.SimpleNamespace(memory_total=memory)
        gpu = Backend("gpu", "cupy", "pandas", (device,), 1, 1)
        resolved = spec.resolve(gpu, samples=40_000, features=16, components=4, chunks=9000,
                                seed=3)
        made.clear()
        seconds, answers[memory] = spec.baseline(resolved)
        whole = [a for a in made if a.shape == (40_000, 16)]
        assert len(whole) == 1 and seconds > 0
        assert float(abs(whole[0].mean(axis=0)).max()) < 1e-12  # centred in place
        wholes[memory] = whole[0]
    ((a, kwargs),) = calls  # only where the copy fits
    assert kwargs == {"compute_uv": False} and a is wholes[10**12]
    ctx = _on_device((9000,) * 4 + (4000,), 16, 3)
    x = _rows(ctx)
    variance, _ = _pca(x, 4)
    for answer in answers.values():
        np.testing.assert_allclose(answer["explained_variance"][:4], variance, rtol=1e-10)


def test_a_float32_baseline_agrees_within_the_dtypes_tolerance(cpu_client):
    """The baseline's reductions in float64 and the tolerance from the dtype and length:
    agreement; the same answer 1 % off still disagrees."""
    from daskgpu.execution import answers

    params = {"samples": 60_000, "features": 32, "components": 4, "dtype": "float32",
              "seed": 2, "chunks": 15_000}
    for method in ("auto", "exact"):
        result = daskgpu.run("pca-pipeline", client=cpu_client, **params, method=method)
        assert result.verified, result.verification
        spec = daskgpu.get_pipeline("pca-pipeline")
        _, answer = spec.baseline(spec.resolve(cpu_client.backend, **params))
        rtol = answers.tolerance("float32", result.elements)
        assert rtol < 1e-3
        assert answers.difference(result.value, answer, rtol=rtol) is None
        wrong = {**answer, "total_variance": answer["total_variance"] * 1.01}
        assert "total_variance" in answers.difference(result.value, wrong, rtol=rtol)
