"""stencil-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.kernels.stencil import heat_step_numpy, heat_steps, heat_steps_in_place
from daskgpu.toolkit.backends import Backend
from daskgpu.toolkit.registry import Resolved
from pipelines.stencil import shared as stencil_data
from pipelines.stencil import tasks as stencil_exchange

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _reference(grid: np.ndarray, steps: int, alpha: float) -> np.ndarray:
    padded = np.pad(grid, 1)
    for _ in range(steps):
        padded = heat_step_numpy(padded, alpha)
    return padded[1:-1, 1:-1]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("block", [(7, 9), (30, 11), (13, 40)])
def test_evolve_matches_numpy_slicing_for_any_blocks_and_depth(k, block):
    grid = np.random.default_rng(k).random((30, 40))
    steps = 7
    got = stencil_exchange.evolve(da.from_array(grid, chunks=block), steps, 0.23, k)
    np.testing.assert_allclose(got.compute(scheduler="sync"), _reference(grid, steps, 0.23),
                               rtol=0, atol=1e-14)


def test_temporal_blocking_matches_one_step_exchanges():
    u0 = stencil_exchange.initial_grid(64, (20, 30), "float64", CPU2)
    one = stencil_exchange.evolve(u0, 10, 0.2, 1).compute(scheduler="threads")
    four = stencil_exchange.evolve(u0, 10, 0.2, 4).compute(scheduler="threads")
    np.testing.assert_allclose(four, one, rtol=0, atol=1e-15)


def test_initial_grid_is_the_sine_mode():
    n = 23
    u0 = stencil_exchange.initial_grid(n, (5, 7), "float64", CPU2).compute(scheduler="sync")
    i = np.arange(1, n + 1)
    expected = np.outer(np.sin(np.pi * i / (n + 1)), np.sin(np.pi * i / (n + 1)))
    np.testing.assert_allclose(u0, expected, rtol=1e-15)


def test_pipeline_verifies_against_the_closed_form(cpu_client):
    result = daskgpu.run("stencil-pipeline", client=cpu_client, size=300, steps=25,
                         chunks="110", steps_per_exchange=3)
    assert result.verified, result.verification
    assert result.data["exchanges"] == 9 and result.data["blocks"] == 9
    lam = stencil_data.eigenvalue(300, 0.2)
    n = 300
    norm0 = (n + 1) / 2  # ||u0||_2 for the sine mode
    assert result.value["l2_norm"] == pytest.approx(lam**25 * norm0, rel=1e-10)
    assert result.throughput["elements_per_s"] == pytest.approx(
        300 * 300 * 25 / result.timings["compute_s"])


def test_float32_and_zero_steps(cpu_client):
    r32 = daskgpu.run("stencil-pipeline", client=cpu_client, size=120, steps=10,
                      dtype="float32", chunks="50")
    assert r32.verified and r32.data["dtype"] == "float32", r32.verification
    r0 = daskgpu.run("stencil-pipeline", client=cpu_client, size=50, steps=0)
    assert r0.verified, r0.verification
    assert r0.value["l2_norm"] == pytest.approx(51 / 2, rel=1e-14)  # ||u0||_2 = (n + 1) / 2


def computed(session, **params):
    return compute_as_runner(session, "stencil-pipeline", **params)


verified = verify_on


SMALL = {"size": 60, "chunks": "20", "steps": 12}


@pytest.fixture(scope="module")
def small_runs(cpu_client):
    return {dtype: computed(cpu_client, dtype=dtype, **SMALL) for dtype in ("float32", "float64")}


DEPTHS = ("fast", "full")


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mutation", daskgpu.get_pipeline("stencil-pipeline").mutations,
                         ids=lambda m: m.name)
def test_every_mutation_is_caught_in_both_dtypes(cpu_client, small_runs, dtype, mutation,
                                                 depth):
    spec, workload, raw = small_runs[dtype]
    assert verified(cpu_client, spec, workload, raw, depth).ok
    check = verified(cpu_client, spec, workload, mutation.alter(dict(raw)), depth)
    assert not check.ok, f"{mutation.name} still verifies: {check.detail}"
    assert mutation.named_in(check.detail) and "\n" not in check.detail


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("really", "needle"),
    [({"steps": 0}, "u did not move from u0"),
     ({"steps": 13}, "as after 13 steps of alpha 0.2, not 12"),
     ({"steps": 11}, "as after 11 steps"),
     ({"alpha": 0.21}, "probe u(29, 29)")],
)
def test_a_real_run_with_other_steps_or_alpha_fails(cpu_client, small_runs, dtype, really,
                                                    needle, depth):
    """What a stencil that skipped a step, or used another alpha, really computes."""
    spec, workload, _raw = small_runs[dtype]
    _spec, other, raw = computed(cpu_client, dtype=dtype, **{**SMALL, **really})
    # checked as the run asked for, its seeded rows and columns those the other run drew
    asked = dataclasses.replace(workload, context=dataclasses.replace(
        workload.context, sample_seed=other.context.sample_seed))
    check = verified(cpu_client, spec, asked, raw, depth)
    assert not check.ok and needle in check.detail, check.detail


def test_float32_on_a_larger_grid_verifies_and_a_no_op_does_not(cpu_client):
    spec, workload, raw = computed(cpu_client, size=1000, steps=100, dtype="float32",
                                   chunks="500")
    no_op = next(m for m in spec.mutations if m.name.startswith("no-op"))
    for depth in DEPTHS:
        check = verified(cpu_client, spec, workload, raw, depth)
        assert check.ok, check.detail
        assert not verified(cpu_client, spec, workload, no_op.alter(dict(raw)), depth).ok


@pytest.mark.parametrize("n, alpha", [(61, 0.25), (300, 0.05), (1000, 0.2)])
def test_the_rounding_bound_is_above_the_real_float32_error(n, alpha):
    steps = 100
    i = np.arange(1, n + 1)
    mode = np.outer(np.sin(np.pi * i / (n + 1)), np.sin(np.pi * i / (n + 1)))
    u = heat_steps(np.pad(mode.astype(np.float32), 1), alpha, steps)[1:-1, 1:-1]
    error = np.abs(u - stencil_data.decay(n, alpha, steps) * mode).max()
    bound = stencil_data.rounding_bound(steps, "float32") * mode.max()
    assert 0 < error < bound / 1.5  # measured at most 0.6 per step against 1.0 in the bound


def test_decay_is_the_power_of_the_eigenvalue():
    for n, alpha, steps in [(60, 0.2, 12), (4000, 0.05, 1000), (1, 0.25, 3)]:
        assert stencil_data.decay(n, alpha, steps) == pytest.approx(
            stencil_data.eigenvalue(n, alpha) ** steps, rel=1e-12, abs=1e-15)
    assert stencil_data.decay(5, 0.2, 0) == 1.0


def test_a_broken_kernel_fails_the_random_grid(cpu_client, small_runs, monkeypatch):
    """The random grid runs through the run's own kernel: here one with 0.9 alpha, in-process."""
    spec, workload, raw = small_runs["float64"]

    def off_alpha(u, scratch, alpha, steps, window=None):
        return heat_steps_in_place(u, scratch, 0.9 * alpha, steps, window)

    monkeypatch.setattr(stencil_exchange, "heat_steps_in_place", off_alpha)
    with dask.config.set(scheduler="sync"):
        check = spec.verify(workload, raw, "full")
    # the grid evolved again for max_error runs through the same broken kernel
    assert not check.ok and "random 41x37 grid" in check.detail, check.detail
    assert "max_error" in check.detail and "above" in check.detail


def test_a_workload_that_cannot_be_verified_says_so():
    """Past settle (which refuses it), a run whose steps change nothing still fails."""
    spec = daskgpu.get_pipeline("stencil-pipeline")
    given = {"size": 30, "chunks": 15, "steps": 12, "alpha": 0.0}
    values = {p.name: p.convert(given.get(p.name)) for p in spec.params}
    workload = spec.prepare(Resolved("stencil-pipeline", CPU2, values))
    workload.resolved = Resolved("stencil-pipeline", CPU2, values)
    raw = dask.compute(workload.collection, scheduler="sync")[0]
    with dask.config.set(scheduler="sync"):
        check = spec.verify(workload, raw)
    assert not check.ok and check.detail.startswith("cannot verify: --size 30"), check.detail


@pytest.mark.parametrize(
    "params, needle",
    [({"size": 4000, "steps": 100, "alpha": 0.05, "dtype": "float32"}, "--dtype float64"),
     ({"size": 4000, "steps": 2, "dtype": "float32"}, "--steps"),
     ({"size": 60, "steps": 12, "alpha": 0.0}, "--alpha"),
     ({"size": 80_000, "dtype": "float32"}, "--size")],
)
def test_steps_too_small_to_tell_from_rounding_are_refused_with_ways_that_work(params, needle):
    spec = daskgpu.get_pipeline("stencil-pipeline")
    with pytest.raises(ParameterError) as refused:
        spec.resolve(**params)
    message = str(refused.value)
    assert "\n" not in message and "could not be verified" in message and needle in message
    assert message.startswith(f"--size {params['size']}, --steps ")
    ways = re.findall(r"--(dtype|size|alpha|steps) ([^\s,]+)", message.split("; use ")[1])
    assert ways
    for option, value in ways:  # every way it names is accepted
        spec.resolve(**{**params, option: value})


def test_the_refusal_names_python_keywords_from_python():
    with pytest.raises(ParameterError, match=r"^size=60, steps=12, alpha=0, dtype=float64: "):
        daskgpu.get_pipeline("stencil-pipeline").workload(CPU2, size=60, steps=12, alpha=0.0)


def test_what_stays_verifiable():
    spec = daskgpu.get_pipeline("stencil-pipeline")
    assert spec.resolve(dtype="float32")["size"] == 4000  # the CPU default, 100 steps
    assert spec.resolve(size=50, steps=0, alpha=0.0)["steps"] == 0  # nothing to tell apart


def test_halo_deeper_than_the_grid_is_refused():
    spec = daskgpu.get_pipeline("stencil-pipeline")
    with pytest.raises(ParameterError, match="steps_per_exchange=9"):
        spec.workload(CPU2, size=8, steps=10, steps_per_exchange=9)


@pytest.mark.parametrize(
    "params, message",
    [({"alpha": 0.3}, "unstable"), ({"alpha": -0.1}, "between"), ({"steps": -1}, "--steps"),
     ({"steps_per_exchange": 0}, "positive"), ({"chunks": "1,2,3"}, "axes"),
     ({"output": "/nonexistent-dir/x.npy"}, "does not exist"),
     ({"output": "grid.txt"}, ".npy or .zarr")],
)
def test_bad_parameters(params, message):
    with pytest.raises(ParameterError, match=message):
        daskgpu.get_pipeline("stencil-pipeline").resolve(**params)


@pytest.mark.parametrize("suffix", [".npy", ".zarr"])
def test_cli_writes_the_final_grid_atomically(tmp_path, suffix):
    target = tmp_path / f"grid{suffix}"
    proc = run_cli("run", "stencil-pipeline", "--size", "90", "--steps", "6", "--chunks", "40",
                   "--steps-per-exchange", "2", "--workers", "2", "--no-dashboard", "--json",
                   "--output", str(target))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True
    if suffix == ".npy":
        grid = np.load(target)
    else:
        import zarr

        grid = np.asarray(zarr.open_array(str(target), mode="r"))
    lam = stencil_data.eigenvalue(90, 0.2)
    u0 = stencil_exchange.initial_grid(90, (90, 90), "float64", CPU2).compute()
    np.testing.assert_allclose(grid, lam**6 * u0, rtol=0, atol=1e-14)
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary left


def test_cli_bad_alpha_is_one_line(tmp_path):
    proc = run_cli("run", "stencil-pipeline", "--alpha", "0.3", "--no-dashboard")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "unstable" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_eigenvalue_is_the_decay_of_one_numpy_step():
    n, alpha = 17, 0.21
    i = np.arange(1, n + 1)
    u0 = np.pad(np.outer(np.sin(np.pi * i / (n + 1)), np.sin(np.pi * i / (n + 1))), 1)
    stepped = heat_step_numpy(u0, alpha)
    np.testing.assert_allclose(stepped, stencil_data.eigenvalue(n, alpha) * u0, atol=1e-15)
    assert math.isclose(stencil_data.eigenvalue(n, 0.0), 1.0)


# --- the exchange: u0 generated in the first exchange, two buffers a block, no check timed ------

def test_u0_is_generated_inside_the_first_exchange():
    u = stencil_exchange.evolve_sine(60, (20, 30), "float64", "numpy", 10, 0.2, 4)
    graph = u.__dask_graph__()
    layers = list(graph.layers)
    assert len(layers) == 3  # one layer per exchange (4 + 4 + 2 steps), no u0 pass of its own
    first = next(name for name in layers if not graph.dependencies[name])
    assert first.startswith("stencil-exchange-")
    assert all(not any(word in name for word in ("pad", "concatenate", "overlap"))
               for name in layers), layers
    i = np.arange(1, 61)
    u0 = np.outer(np.sin(np.pi * i / 61), np.sin(np.pi * i / 61))
    np.testing.assert_allclose(u.compute(scheduler="sync"),
                               stencil_data.decay(60, 0.2, 10) * u0, rtol=0, atol=1e-14)


def test_an_interior_block_takes_two_buffers_and_no_padded_copy():
    import tracemalloc

    k, (h, w) = 3, (200, 150)
    rng = np.random.default_rng(1)
    center = rng.random((h, w))
    neighbours = [stencil_exchange._strip(rng.random((h, w)), -di, -dj, k)
                  for di, dj in stencil_exchange.NEIGHBOURS]
    kwargs = {"k": k, "steps": k, "alpha": 0.2, "edges": (False,) * 4, "origin": (0, 0),
              "n": 0, "shape": (h, w), "dtype": center.dtype, "library": "numpy"}
    stencil_exchange._advance(center, neighbours, **kwargs)  # compiled already
    tracemalloc.start()
    try:
        got = stencil_exchange._advance(center, neighbours, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    buffer = (h + 2 * k) * (w + 2 * k) * 8
    assert peak < 2.2 * buffer, (peak, buffer)  # its buffer and one scratch, nothing else
    # the buffer the result is not in goes back for the next task's scratch: 3 steps end in it
    spare = stencil_exchange._SPARE[-1]
    assert spare.shape == (h + 2 * k, w + 2 * k) and not np.shares_memory(spare, got)
    again = stencil_exchange._advance(center, neighbours, **kwargs)
    assert again.base is spare
    np.testing.assert_array_equal(again, got)
    assert got.base is not None and got.base.shape == (h + 2 * k, w + 2 * k)  # a view
    full = np.zeros((h + 2 * k, w + 2 * k))
    full[k:-k, k:-k] = center
    for (di, dj), strip in zip(stencil_exchange.NEIGHBOURS, neighbours, strict=True):
        rows = slice(k, k + h) if di == 0 else (slice(0, k) if di < 0 else slice(k + h, None))
        cols = slice(k, k + w) if dj == 0 else (slice(0, k) if dj < 0 else slice(k + w, None))
        full[rows, cols] = strip
    want = heat_steps(full, 0.2, k)[k:-k, k:-k]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_the_timed_graph_holds_no_check_of_every_cell(cpu_client):
    spec, workload, raw = computed(cpu_client, size=60, chunks="20", steps=4)
    assert sorted(workload.collection) == ["cols", "l2_norm", "line_sums", "probes",
                                           "probes_u0", "rows"]
    timed_layers = {name for part in workload.collection.values()
                    for name in part.__dask_graph__().layers}
    assert not any("deviation" in name for name in timed_layers), timed_layers
    assert "max_error" not in raw and verified(cpu_client, spec, workload, raw).ok


# --- depth fast: the run's certificates, and faults injected into the computing functions ------

def test_the_certificates_are_the_grids_weighted_line_sums_and_seeded_lines(cpu_client):
    spec, workload, raw = computed(cpu_client, size=90, chunks="40", steps=6)
    grid = (stencil_data.decay(90, 0.2, 6) * np.outer(*[np.sin(np.pi * np.arange(1, 91) / 91)]
                                                      * 2))
    down, across = stencil_data.line_weights(90)
    heights, widths = workload.context.grid.chunks
    assert (heights, widths) == ((40, 40, 10), (40, 40, 10))
    sums = raw["line_sums"]
    assert sums.shape == (3, 3, 80)
    block = grid[40:80, 80:90]  # block (1, 2): 40 rows, 10 columns
    np.testing.assert_allclose(sums[1, 2, :40], block @ across[80:90], rtol=1e-12)
    np.testing.assert_allclose(sums[1, 2, 40:50], down[40:80] @ block, rtol=1e-12)
    assert not sums[1, 2, 50:].any()  # zero-padded to the largest block's width
    rows, cols = stencil_data.sampled_lines(90, workload.context.sample_seed)
    np.testing.assert_allclose(raw["rows"], grid[rows], rtol=0, atol=1e-14)
    np.testing.assert_allclose(raw["cols"], grid[:, cols], rtol=0, atol=1e-14)
    check = verified(cpu_client, spec, workload, raw, "fast")
    assert check.ok and "all 9 blocks" in check.detail, check.detail
    assert f"{len(rows)} of 90 rows checked again: a fault in at least 10 % of the rows" \
        in check.detail


def _one_sum_nan(raw):
    sums = np.array(raw["line_sums"], copy=True)
    sums[1, 2, 3] = np.nan
    return dict(raw, line_sums=sums)


@pytest.mark.parametrize(("alter", "needle"), [
    (lambda raw: dict(raw, line_sums=raw["line_sums"][:, :-1]), "a block dropped"),
    (_one_sum_nan, "block (1, 2), row 23"),
    (lambda raw: dict(raw, line_sums=raw["line_sums"] * (1 + 1e-9)), "line sums: block"),
    (lambda raw: dict(raw, rows=raw["rows"][:-1]), "sampled rows shaped"),
    (lambda raw: dict(raw, cols=raw["cols"] * (1 + 1e-9)), "sampled column"),
], ids=["a block dropped", "a sum NaN", "the sums 1e-9 off", "a row missing",
        "the columns 1e-9 off"])
def test_fast_fails_certificates_that_do_not_fit(cpu_client, small_runs, alter, needle):
    spec, workload, raw = small_runs["float64"]
    check = verified(cpu_client, spec, workload, alter(raw), "fast")
    assert not check.ok and needle in check.detail, check.detail


def test_a_block_on_the_array_module_path(cupy_stand_in, monkeypatch):
    """A block's exchange and its certificate as on GPU workers (the strict CuPy stand-in; the
    steps' kernel run by its CPU twin on the stand-in's memory): the NumPy branch's values."""
    import strict_cupy

    cupy = cupy_stand_in
    monkeypatch.setattr(stencil_exchange, "heat_steps_in_place",
                        strict_cupy.host_kernel(heat_steps_in_place, device=(0, 1)))
    k, (h, w) = 2, (7, 5)
    kwargs = {"k": k, "steps": 3, "alpha": 0.2, "edges": (True, False, True, False),
              "origin": (0, 0), "n": 20, "shape": (h, w), "dtype": np.float32}
    block = stencil_exchange._advance(None, [None] * 8, **kwargs, library="cupy")
    assert isinstance(block, cupy.ndarray) and block.dtype == np.float32
    host = stencil_exchange._advance(None, [None] * 8, **kwargs, library="numpy")
    np.testing.assert_array_equal(block.get(), host)
    neighbours = [None if di < 0 or dj < 0 else stencil_exchange._strip(block, -di, -dj, k)
                  for di, dj in stencil_exchange.NEIGHBOURS]
    again = stencil_exchange._advance(block, neighbours, **kwargs, library="cupy")
    np.testing.assert_array_equal(again.get(), stencil_exchange._advance(
        host, [None if s is None else s.get() for s in neighbours], **kwargs, library="numpy"))
    weights = stencil_data.line_weights(20)
    got = stencil_exchange._line_sums(block, 4, 9, weights, library="cupy")
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_array_equal(got, stencil_exchange._line_sums(host, 4, 9, weights))
    wide = host.astype(np.float64)
    np.testing.assert_allclose(got, np.concatenate([wide @ weights[1][9:14],
                                                    weights[0][4:11] @ wide]), rtol=1e-13)
    info = {0: {"array-location": [(4, 11), (9, 14)]}}
    summary = {"rows": [5, 0], "cols": [10, 0], "weights": weights, "sizes": (8, 6)}
    np.testing.assert_array_equal(
        stencil_exchange._block_summary(block, info, **summary, library="cupy"),
        stencil_exchange._block_summary(host, info, **summary))
    assert stencil_exchange._block_deviation(block, info, n=20, library="cupy") == \
        stencil_exchange._block_deviation(host, info, n=20)


FAULTED = {"size": 200, "chunks": "50", "steps": 12}  # 16 blocks; faults on 2 of them
FAULTY_ORIGINS = {(50, 100), (150, 0)}


def _alpha_off(advance):
    def faulty(center, neighbours, *, alpha, origin, **kwargs):
        if origin in FAULTY_ORIGINS:
            alpha *= 1.001
        return advance(center, neighbours, alpha=alpha, origin=origin, **kwargs)
    return faulty


def _a_step_skipped(advance):
    def faulty(center, neighbours, *, steps, origin, **kwargs):
        if origin in FAULTY_ORIGINS and steps > 1:
            steps -= 1
        return advance(center, neighbours, steps=steps, origin=origin, **kwargs)
    return faulty


def _strip_one_row_off(strip):
    def faulty(block, di, dj, k):
        if di == 0:
            return strip(block, di, dj, k)
        rows = slice(-k - 1, -1) if di > 0 else slice(1, k + 1)
        return strip(block[rows], 0, dj, k)
    return faulty


def _squares_off(summary):
    def faulty(block, block_info=None, **kwargs):
        out = summary(block, block_info, **kwargs)
        (r0, _), (c0, _) = block_info[0]["array-location"]
        if (r0, c0) in FAULTY_ORIGINS:
            out[..., 0] *= 1.001
        return out
    return faulty


def _kernel_off(kernel):
    def faulty(u, scratch, alpha, steps, window=None):
        return kernel(u, scratch, alpha * 1.0005, steps, window)
    return faulty


# What each fault replaces in pipelines.stencil.tasks, and the wrapper that breaks it.
FAULTS = {
    "alpha 0.1 % off on 2 of 16 blocks": ("_advance", _alpha_off),
    "a step skipped per exchange on 2 of 16 blocks": ("_advance", _a_step_skipped),
    "halo strips taken one row off": ("_strip", _strip_one_row_off),
    "a block's sum of squares 0.1 % off on 2 of 16 blocks": ("_block_summary", _squares_off),
    "the kernel's alpha 0.05 % off": ("heat_steps_in_place", _kernel_off),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_in_the_computation_fails_both_depths(in_process_client, monkeypatch, fault):
    """Faults injected into the tasks themselves (threads of this process run them)."""
    spec, workload, raw = computed(in_process_client, **FAULTED)
    for depth in DEPTHS:
        check = verified(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)
    name, breaking = FAULTS[fault]
    monkeypatch.setattr(stencil_exchange, name, breaking(getattr(stencil_exchange, name)))
    spec, workload, raw = computed(in_process_client, **FAULTED)
    for depth in DEPTHS:
        check = verified(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"


# One block of the 16, a random one (not the first) or the last, wrong from the first of the
# three exchanges on (an early iteration): a cell moved by 1e-7 of u0's peak, far above rounding
# (about 1e-14) and far below what a look at the grid would see.
_ORIGINS = [(50 * i, 50 * j) for i in range(4) for j in range(4)]
ONE_BLOCK = {"random": _ORIGINS[1:-1][int(np.random.default_rng(21).integers(0, 14))],
             "last": _ORIGINS[-1]}


def _one_cell_off(advance, origin_wrong):
    def faulty(center, neighbours, *, origin, **kwargs):
        out = advance(center, neighbours, origin=origin, **kwargs)
        if origin == origin_wrong and center is None:  # the first exchange
            out[7, 11] += 1e-7
        return out
    return faulty


@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_wrong_from_the_first_exchange_on_fails_both_depths(in_process_client,
                                                                      monkeypatch, where):
    monkeypatch.setattr(stencil_exchange, "_advance",
                        _one_cell_off(stencil_exchange._advance, ONE_BLOCK[where]))
    spec, workload, raw = computed(in_process_client, **FAULTED)
    for depth in DEPTHS:
        check = verified(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"
        named = "line sums: block" if depth == "fast" else "max_error"
        assert named in check.detail, check.detail


@pytest.mark.gpu
def test_on_gpu_workers_both_depths_verify_and_a_wrong_alpha_fails_them():
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        assert session.backend.is_gpu
        spec, workload, raw = computed(session, **FAULTED)
        assert isinstance(raw["line_sums"], np.ndarray) and isinstance(raw["rows"], np.ndarray)
        for depth in DEPTHS:
            check = verified(session, spec, workload, raw, depth)
            assert check.ok and check.depth == depth, check.detail
        _spec, _other, wrong = computed(session, **{**FAULTED, "alpha": 0.2002})
        asked = dataclasses.replace(workload, context=dataclasses.replace(
            workload.context, sample_seed=_other.context.sample_seed))
        for depth in DEPTHS:
            assert not verified(session, spec, asked, wrong, depth).ok


def test_from_python_the_final_grid_stays_on_the_workers_as_a_dask_array(cpu_client):
    result = daskgpu.run("stencil-pipeline", cpu_client, size=120, chunks=40, steps=6)
    grid = result.value["grid"]
    assert isinstance(grid, dask.array.Array) and grid.shape == (120, 120)
    # persisted: its graph is its 9 blocks on the workers, not the steps that made them
    assert len(dict(grid.__dask_graph__())) == 9
    values = grid.compute(scheduler=cpu_client.client)  # the session's: its blocks are there
    assert isinstance(values, np.ndarray)
    assert math.sqrt((values.astype(np.float64) ** 2).sum()) == pytest.approx(
        result.value["l2_norm"], rel=1e-12)
    assert result.verified
