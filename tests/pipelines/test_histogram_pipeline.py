"""histogram-pipeline on a real CPU LocalCluster and through the CLI."""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
import mmap
import tracemalloc

import dask
import numpy as np
import pytest
from conftest import assert_one_error_line, compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.data import array_input, synthetic
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend
from daskgpu.verification import FALSE_ALARM, fingerprint, fingerprint_weights
from pipelines.histogram import check as histogram_check
from pipelines.histogram import check_replay as histogram_replay
from pipelines.histogram import pipeline as histogram_pipeline
from pipelines.histogram import shared as histogram_shared
from pipelines.histogram import tasks as histogram_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def test_random_histogram_matches_numpy_on_the_same_values(cpu_client):
    result = daskgpu.run("histogram-pipeline", client=cpu_client, values=300_001, chunks="70000",
                         bins=37, seed=4, distribution="normal")
    assert result.verified, result.verification
    spec = daskgpu.get_pipeline("histogram-pipeline")
    from daskgpu.data import synthetic

    values = synthetic.random_array((300_001,), (70_000,), "float64", 4, CPU2,
                                    "normal").compute(scheduler="sync")
    lo, hi = values.min(), values.max()
    expected, edges = np.histogram(values, bins=37)
    assert result.data["range"] == [lo, hi]
    np.testing.assert_array_equal(result.value["counts"], expected)
    np.testing.assert_allclose(result.value["edges"], edges)
    assert result.value["nan"] == 0 and result.value["in_range"] == values.size
    assert spec.name == result.pipeline


def test_given_range_drops_values_outside_and_counts_nan(cpu_client, tmp_path):
    values = np.concatenate([np.linspace(-2, 2, 4001), [np.nan] * 5, [np.inf, -np.inf, 1.0, 0.5]])
    values = np.random.default_rng(0).permutation(values).reshape(-1, 2)  # 2-D input
    path = tmp_path / "v.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=8,
                         range=(-1, 1), chunks="300")
    assert result.verified, result.verification
    expected, _ = np.histogram(values, bins=8, range=(-1, 1))
    np.testing.assert_array_equal(result.value["counts"], expected)
    assert result.value["nan"] == 5
    assert result.value["in_range"] == expected.sum()


def test_default_range_ignores_nan_and_inf(cpu_client, tmp_path):
    values = np.array([np.nan, 3.0, -np.inf, 1.0, 2.0, np.inf] * 10)
    path = tmp_path / "w.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=4)
    assert result.data["range"] == [1.0, 3.0]
    np.testing.assert_array_equal(result.value["counts"],
                                  np.histogram(values[np.isfinite(values)], bins=4)[0])
    assert result.value["nan"] == 10


def test_float32_exact_on_bin_edges(cpu_client, tmp_path):
    edges = np.linspace(0, 1, 11).astype(np.float32)
    values = np.tile(edges, 50)
    path = tmp_path / "e.npy"
    np.save(path, values)
    result = daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), bins=10,
                         range=(0, 1))
    counts, edges = np.histogram(values, bins=10, range=(0, 1))
    np.testing.assert_array_equal(result.value["counts"], counts)
    assert result.verified, result.verification
    # the float32 edges numpy bins with, not float64 ones that only look the same
    assert edges.dtype == np.float32 and result.value["edges"].tolist() == edges.tolist()


def _computed(session, **params):
    return compute_as_runner(session, "histogram-pipeline", **params)


_verify = verify_on
DEPTHS = ("fast", "full")


@pytest.mark.parametrize("depth", DEPTHS)
def test_an_altered_histogram_of_an_input_fails_verification(cpu_client, tmp_path, depth):
    values = np.random.default_rng(5).standard_normal((600, 50))
    values[::97, 3] = np.nan
    path = tmp_path / "n.npy"
    np.save(path, values)
    spec, workload, raw = _computed(cpu_client, input=str(path), bins=12, chunks="3000")
    check = _verify(cpu_client, spec, workload, raw, depth)
    assert check.ok and "numpy.histogram" in check.detail, check.detail
    assert "chi-square" not in check.detail  # no distribution to test an input against
    for mutation in spec.mutations:
        altered = _verify(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not altered.ok and mutation.named_in(altered.detail), (mutation.name, altered)
    wrong_nan = dict(raw, histograms=raw["histograms"].copy())
    wrong_nan["histograms"][0, -1] -= 1
    assert "NaN: " in _verify(cpu_client, spec, workload, wrong_nan, depth).detail


def test_a_wrong_kernel_count_in_a_sampled_block_is_named(cpu_client):
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=10, seed=2)
    planted = dict(raw, histograms=raw["histograms"].copy())
    planted["histograms"][-1, 4] += 1  # the last sampled block's own counts
    check = _verify(cpu_client, spec, workload, planted)
    block = workload.context.sampled[-1]
    assert not check.ok
    assert f"block {block}: bin 4: " in check.detail and "by the kernel" in check.detail


def test_a_wrong_count_in_a_checked_cell_is_named_at_the_fast_depth(cpu_client):
    spec, workload, raw = _computed(cpu_client, values=200_000, chunks="50000", bins=10, seed=2)
    planted = dict(raw, cells=raw["cells"].copy())
    planted["cells"][-1, 4] += 1  # the last checked cell's own counts
    check = _verify(cpu_client, spec, workload, planted, "fast")
    last = len(raw["cells"]) - 1
    assert not check.ok and f"cell {last} (block 3, rows " in check.detail, check.detail
    assert "bin 4: " in check.detail and "by the kernel" in check.detail


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_a_wrong_default_range_is_caught(cpu_client, depth, distribution):
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=10, seed=2,
                                    distribution=distribution)
    # as if the first pass had found a smaller minimum
    workload.context = dataclasses.replace(workload.context, lo=workload.context.lo - 0.01)
    check = _verify(cpu_client, spec, workload, raw, depth)
    assert not check.ok and "range: " in check.detail and "finite min and max" in check.detail


def _tamper_csv(target, count: int) -> None:
    lines = target.read_text().splitlines()
    left, right, was = lines[2].split(",")
    lines[2] = ",".join([left, right, str(int(was) + count)])
    target.write_text("\n".join(lines) + "\n")


def _edit_csv(target, line: int, edit) -> None:
    lines = target.read_text().splitlines()
    lines[line] = edit(lines[line])
    target.write_text("\n".join(lines) + "\n")


def _tamper_npz(target, **changes) -> None:
    with np.load(target) as saved:
        arrays = {name: saved[name] for name in saved.files}
    for name, change in changes.items():
        arrays[name] = change(arrays.get(name))
    with open(target, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_tampered_output_file_is_caught(cpu_client, tmp_path, depth):
    spec, workload, raw = _computed(cpu_client, values=20_000, chunks="4000", bins=6, seed=3,
                                    dtype="float32", output=str(tmp_path / "h.csv"))
    for suffix, tamper, said in (
            (".csv", lambda t: _tamper_csv(t, 1), "bin 1: "),
            (".csv", lambda t: _edit_csv(t, 3, lambda row: row.replace(",", ",1", 1)),
             "a bin's right edge is not the next bin's left"),
            (".csv", lambda t: _edit_csv(t, 0, lambda row: row.replace("count", "n")),
             "columns ['left', 'right', 'n'], left, right, count expected"),
            (".csv", lambda t: _edit_csv(t, 4, lambda row: row.rsplit(",", 1)[0] + ",four"),
             "not a table of numbers: "),
            (".csv", lambda t: _edit_csv(t, 5, lambda row: row.rsplit(",", 1)[0] + ","),
             "a value is missing"),
            (".npz", lambda t: _tamper_npz(t, counts=lambda c: c + (np.arange(6) == 1)),
             "bin 1: "),
            (".npz", lambda t: _tamper_npz(t, edges=lambda e: e.astype(np.float64)),
             "edges of type float64, numpy.histogram's are float32"),
            (".npz", lambda t: _tamper_npz(t, edges=lambda e: e[::-1]),
             "edges differ from numpy.histogram's"),
            (".npz", lambda t: _tamper_npz(t, nan=lambda _: np.zeros(1)), "holds ['counts', "
             "'edges', 'nan'], counts and edges expected")):
        target = tmp_path / f"h{suffix}"
        workload.context = dataclasses.replace(workload.context, output=str(target))
        target.unlink(missing_ok=True)
        workload.save(workload, workload.present(workload, raw), str(target))
        assert _verify(cpu_client, spec, workload, raw, depth).ok
        tamper(target)
        check = _verify(cpu_client, spec, workload, raw, depth)
        assert not check.ok and f"--output {target}: {said}" in check.detail, check.detail


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_blocks_drawn_in_runs_are_the_librarys_and_their_cells_are_drawn_again(distribution,
                                                                            dtype):
    """The run's own draw (noting the generator's state at the checked cells) gives the values
    the library draws; the check draws each checked cell again, alone, from its block's seed
    (uniform: the generator advanced; normal: from the noted state, shown on the stream)."""
    workload = daskgpu.get_pipeline("histogram-pipeline").workload(
        CPU2, values=300_001, chunks="100000", bins=8, seed=7, distribution=distribution,
        dtype=dtype)
    ctx = workload.context
    library = synthetic.random_array((300_001,), (100_000,), dtype, 7, CPU2, distribution)
    plan = ctx.cell_plan()
    cells = [ctx.cell_rows(cell) for cell in plan]
    assert len(cells) >= plan.sampled > 10
    states, blocks = [], []
    for number, count in enumerate((100_000, 100_000, 100_000, 1)):
        firsts = [first for block, first, _ in cells if block == number]
        values, noted = histogram_tasks.draw_block(7, number, count, dtype, distribution, firsts)
        np.testing.assert_array_equal(values, library.blocks[number].compute(scheduler="sync"))
        states.append(noted)
        blocks.append(values)
    for cell, (block, first, stop), words in zip(plan, cells, np.concatenate(states),
                                                 strict=True):
        drawn = histogram_replay.cell_values(ctx, cell, words)
        np.testing.assert_array_equal(drawn, blocks[block][first:stop])


def test_a_noted_state_off_the_blocks_stream_is_refused(cpu_client):
    spec, workload, raw = _computed(cpu_client, values=200_000, chunks="50000", bins=10, seed=2,
                                    distribution="normal")
    assert _verify(cpu_client, spec, workload, raw, "fast").ok
    for word, message in ((1, "draws into the block's stream"), (3, "not on this block's")):
        altered = dict(raw, states=raw["states"].copy())
        altered["states"][-1, word] += np.uint64(2)  # the state (or increment) moved
        check = _verify(cpu_client, spec, workload, altered, "fast")
        assert not check.ok and message in check.detail, check.detail


def test_the_rows_are_added_by_a_tree_that_keeps_the_sampled_blocks_rows(monkeypatch):
    monkeypatch.setattr(histogram_tasks, "MAX_FAN_IN", 3)  # 10 blocks: 4, then 2, then 1 step
    with dask.config.set(scheduler="sync"):
        workload = daskgpu.get_pipeline("histogram-pipeline").workload(
            CPU2, values=100_000, chunks="10000", bins=8, seed=3)
        (raw,) = dask.compute(workload.collection)
    steps = [key for key in dict(workload.collection.dask) if key.startswith("added")]
    assert len(steps) == 4 + 2 + 1
    values = synthetic.random_array((100_000,), (10_000,), "float64", 3, CPU2).compute(
        scheduler="sync")
    lo, hi = workload.context.lo, workload.context.hi
    np.testing.assert_array_equal(raw["histograms"][0, :8], np.histogram(values, 8, (lo, hi))[0])
    for row, number in zip(raw["histograms"][1:], workload.context.sampled, strict=True):
        block = values[number * 10_000:(number + 1) * 10_000]
        np.testing.assert_array_equal(row[:8], np.histogram(block, 8, (lo, hi))[0])
    assert raw["blocks"][:, 0].tolist() == [10_000] * 10


@pytest.mark.parametrize("depth", DEPTHS)
def test_more_bins_than_a_cell_fills_checks_whole_blocks(cpu_client, depth):
    bins = histogram_shared.MAX_CELL_BINS + 1
    spec, workload, raw = _computed(cpu_client, values=120_000, chunks="30000", bins=bins,
                                    seed=5)
    assert raw["cells"].shape == (0, bins + 1)
    check = _verify(cpu_client, spec, workload, raw, depth)
    assert check.ok, check.detail
    if depth == "fast":
        assert "all 4 blocks checked again" in check.detail, check.detail
    for mutation in spec.mutations:
        altered = _verify(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not altered.ok and mutation.named_in(altered.detail), (mutation.name, altered)


def test_fingerprints_add_up_and_tell_rows_apart():
    weights = fingerprint_weights(257, 11)
    assert len(set(weights.tolist())) == 257 and all(w % 2 for w in weights.tolist())
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10**6, 257), rng.integers(0, 10**6, 257)
    added = fingerprint(a, weights) + fingerprint(b, weights)
    assert added % 2**64 == fingerprint(a + b, weights) % 2**64
    for moved in (a[::-1], np.roll(a, 1), a + np.eye(257, dtype=a.dtype)[3]):
        assert fingerprint(moved, weights) != fingerprint(a, weights)


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_chi_square_passes_correct_histograms_and_fails_moved_bins(distribution, dtype):
    rng = np.random.default_rng(11)
    draw = rng.random if distribution == "uniform" else rng.standard_normal
    threshold = math.log(FALSE_ALARM)
    # an asymmetric range first: there, reversed or shifted bins do not fit the distribution
    asymmetric = (-0.2, 0.9) if distribution == "uniform" else (-0.5, 2.0)
    for bins, (lo, hi), open_tails in [(40, asymmetric, False), (7, (-0.3, 0.6), False),
                                       (100_000, (0, 0), True), (3, (0, 0), True)]:
        values = draw(200_000, dtype=dtype)
        if open_tails:  # the data's own min and max
            lo, hi = float(values.min()), float(values.max())
        counts, _ = np.histogram(values, bins=bins, range=(lo, hi))
        edges = np.linspace(lo, hi, bins + 1)
        statistic, cells, log_bound = histogram_check.chi_square(counts, edges,
                                                                   distribution, open_tails)
        assert log_bound > threshold / 2, (bins, statistic, cells)
        if bins == 40:
            for moved in (counts[::-1], np.roll(counts, 1)):
                *_, log_bound = histogram_check.chi_square(moved, edges, distribution, False)
                assert log_bound < threshold


def test_chi_square_skips_too_few_values_and_refuses_impossible_ones():
    edges = np.linspace(0, 1, 11)
    assert histogram_check.chi_square(np.full(10, 10), edges, "uniform", False) is None
    outside = np.linspace(2, 3, 11)  # no uniform [0,1) value can fall here
    assert histogram_check.chi_square(np.full(10, 5), outside, "uniform", False)[2] == -math.inf


@pytest.mark.parametrize(
    "given, refused",
    [({"values": 10}, "--values: "), ({"seed": 3}, "--seed: "),
     ({"dtype": "float32"}, "--dtype: "), ({"distribution": "normal"}, "--distribution: "),
     ({"values": 10, "seed": 3, "distribution": "normal"},
      "--values, --seed, --distribution: apply to generated data, not to an --input; drop them")],
)
def test_an_input_refuses_options_of_generated_data(tmp_path, given, refused):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0))
    with pytest.raises(ParameterError, match="appl(y|ies) to generated data") as caught:
        daskgpu.get_pipeline("histogram-pipeline").resolve(input=str(path), **given)
    assert str(caught.value).startswith(refused) and "\n" not in str(caught.value)


def test_an_input_accepts_the_defaults_and_records_what_it_used(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0, dtype=np.float32))
    resolved = daskgpu.get_pipeline("histogram-pipeline").resolve(
        input=str(path), dtype="float64", distribution="uniform")
    assert [resolved[n] for n in ("values", "seed", "dtype", "distribution")] == [None] * 4


def test_python_api_names_the_refused_options_as_arguments(cpu_client, tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(10.0))
    with pytest.raises(ParameterError, match=r"seed=\.\.\.: applies to generated data"):
        daskgpu.run("histogram-pipeline", client=cpu_client, input=str(path), seed=1)


@pytest.mark.parametrize(
    "params, error, message",
    [({"bins": 0}, ParameterError, "--bins"), ({"bins": -3}, ParameterError, "--bins"),
     ({"range": (1, 1)}, ParameterError, "below"), ({"range": (2, 1)}, ParameterError, "below"),
     ({"range": "0 inf"}, ParameterError, "finite"), ({"distribution": "poisson"},
                                                      ParameterError, "uniform"),
     ({"output": "h.parquet"}, ParameterError, ".npz or .csv"),
     ({"output": "h.npy"}, ParameterError, r"two arrays, counts and edges: name a \.npz"),
     ({"input": "/nonexistent.npy"}, InputFileError, "no such file")],
)
def test_bad_parameters(params, error, message):
    with pytest.raises(error, match=message):
        daskgpu.get_pipeline("histogram-pipeline").resolve(**params)


def test_input_of_strings_is_refused(tmp_path):
    path = tmp_path / "s.npy"
    np.save(path, np.array(["a", "b"]))
    with pytest.raises(InputFileError, match="numeric"):
        daskgpu.get_pipeline("histogram-pipeline").resolve(input=str(path))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_cli_writes_edges_and_counts(tmp_path, suffix, dtype):
    values = np.random.default_rng(3).random(10_000).astype(dtype)
    source = tmp_path / "in.npy"
    np.save(source, values)
    target = tmp_path / f"hist{suffix}"
    proc = run_cli("run", "histogram-pipeline", "--input", str(source), "--bins", "5",
                   "--range", "0", "1", "--chunks", "3000", "--output", str(target),
                   "--workers", "2", "--no-dashboard", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    expected, edges = np.histogram(values, bins=5, range=(0, 1))
    assert doc["value"]["counts"] == expected.tolist() and doc["verified"] is True
    if suffix == ".csv":
        with open(target) as f:
            rows = list(csv.DictReader(f))
        assert [int(r["count"]) for r in rows] == expected.tolist()
        assert [float(r["left"]) for r in rows] == edges[:-1].tolist()
        assert [float(r["right"]) for r in rows] == edges[1:].tolist()
    else:
        with np.load(target) as saved:  # plain arrays: no pickle needed
            assert sorted(saved.files) == ["counts", "edges"]
            counts, saved_edges = saved["counts"], saved["edges"]
        # exactly what numpy.histogram returns, types too
        assert counts.dtype == expected.dtype and saved_edges.dtype == edges.dtype
        np.testing.assert_array_equal(counts, expected)
        np.testing.assert_array_equal(saved_edges, edges)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.npy", target.name])


@pytest.mark.parametrize(
    "args, message",
    [(["--bins", "0"], "--bins"), (["--range", "1", "0"], "below"),
     (["--range", "a", "1"], "number"), (["--input", "/nonexistent.npy"], "no such file"),
     (["--input", "cli.py", "--seed", "1"], "--seed: applies to generated data")],
)
def test_cli_bad_input_is_one_line(args, message):
    proc = run_cli("run", "histogram-pipeline", *args, "--no-dashboard")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def _mapped(block) -> bool:
    """True when ``block`` is a view of a memory-mapped file, not a copy of it."""
    while block is not None and not isinstance(block, mmap.mmap):
        block = getattr(block, "base", None) if isinstance(block, np.ndarray) else block.obj
    return block is not None


def test_npy_blocks_reach_the_kernel_as_views_of_the_mapped_file(tmp_path):
    path = tmp_path / "m.npy"
    np.save(path, np.random.default_rng(6).random(200_000))
    source = array_input.open_array(str(path), dtypes=histogram_pipeline.INPUT_DTYPES)
    data = array_input.to_dask(source, (50_000,), CPU2)
    seen = data.map_blocks(lambda block: np.array([_mapped(block), block.flags.writeable]),
                           chunks=((2,) * 4,), dtype=bool).compute(scheduler="sync")
    assert seen.reshape(4, 2).tolist() == [[True, False]] * 4
    block = source.reader[50_000:150_000]
    histogram_tasks._block_histogram(block[:10], 0.0, 1.0, 16)  # compiled, outside the trace
    peaks = []  # the least of three: a thread of another test's cluster may allocate meanwhile
    for _ in range(3):
        tracemalloc.start()
        try:
            counts = histogram_tasks._block_histogram(block, 0.0, 1.0, 16)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert min(peaks) < block.nbytes // 10, peaks  # no copy of the 800 kB block on the way
    np.testing.assert_array_equal(counts[:16], np.histogram(block, 16, (0.0, 1.0))[0])


def test_the_timed_graph_draws_and_bins_every_block_once(monkeypatch):
    """Its rows and its certificates come from one task a block (none fused twice)."""
    calls = []
    original = histogram_tasks.drawn_block_rows

    def counted(seed, number, *args):
        calls.append(number)
        return original(seed, number, *args)

    monkeypatch.setattr(histogram_tasks, "drawn_block_rows", counted)
    with dask.config.set(scheduler="sync"):
        workload = daskgpu.get_pipeline("histogram-pipeline").workload(
            CPU2, values=40_000, chunks="10000", bins=8, seed=3)
        (raw,) = dask.compute(workload.collection)
    assert sorted(calls) == [0, 1, 2, 3]
    cells = 4 * histogram_shared.slabs((10_000,))  # every cell checked: fewer than a sample
    assert raw["blocks"].shape == (4, 3) and raw["cells"].shape == (cells, 9)


def test_the_timed_collection_holds_only_the_histograms(cpu_client, tmp_path):
    path = tmp_path / "c.npy"
    np.save(path, np.random.default_rng(8).random(40_000))
    spec, workload, raw = _computed(cpu_client, input=str(path), bins=8, range=(0, 1),
                                    chunks="10000")
    assert sorted(raw) == ["blocks", "cells", "histograms", "states"]
    layers = workload.collection.dask.layers
    # read, kernel per block, the sum over blocks, the sampled rows and the certificates:
    # no check's own pass
    assert not any("isfinite" in name or "isnan" in name or "numpy" in name
                   for name in layers), list(layers)
    assert raw["histograms"].shape == (4, 9) and raw["blocks"].shape == (4, 3)
    cells = 4 * histogram_shared.slabs((10_000,))
    assert raw["cells"].shape == (cells, 9) and raw["states"].shape == (0, 6)


# ------------------------------------------------------------------ the GPU branch on CPU


def test_gpu_branch_bins_a_seeded_sample_of_blocks_with_the_named_library(cupy_stand_in,
                                                                           monkeypatch):
    """Random data drawn by CuPy (the strict stand-in; the kernel run by its CPU twin): no
    cells (its generator cannot start inside a block), so the fast depth bins a seeded sample
    of whole blocks again, where they are, with the blocks' own library's histogram (CuPy's,
    with NumPy's edges, NaN left out). The counts are NumPy's of the same values."""
    import strict_cupy

    from daskgpu.kernels.histogram import histogram as kernel
    from pipelines.histogram import tasks as histogram_tasks

    monkeypatch.setattr(histogram_tasks, "histogram", strict_cupy.host_kernel(kernel))
    calls = []
    histogram = cupy_stand_in.histogram

    def recorded(values, bins):
        calls.append(values.size)
        assert isinstance(bins, cupy_stand_in.ndarray)  # NumPy's edges, copied to the device
        return histogram(values, bins=bins)

    cupy_stand_in.histogram = recorded
    device = Backend("gpu", "cupy", "pandas", workers=1, threads=1)
    spec = daskgpu.get_pipeline("histogram-pipeline")
    with dask.config.set(scheduler="sync"):  # the first pass too: in this process
        workload = spec.workload(device, values=60_000, chunks="5000", bins=16, seed=2)
        (raw,) = dask.compute(workload.collection)
        check = spec.check(workload, raw, "fast")
        binned = len(calls)
        altered = spec.check(workload, spec.mutations[0].alter(copy.deepcopy(raw)), "fast")
        values = np.concatenate([block.get() for block in dask.compute(
            *synthetic.random_array((60_000,), (5_000,), "float64", 2, device).to_delayed())])
    assert raw["cells"].shape == (0, 17) and raw["states"].shape == (0, 6)
    assert check.ok, check.detail
    edges = workload.context.edges  # the NumPy branch's counts of the values drawn
    np.testing.assert_array_equal(workload.present(workload, raw)["counts"],
                                  np.histogram(values, bins=edges)[0])
    plan = histogram_check.block_plan(workload.context, "fast")
    extremes = {block for block, _ in workload.context.extremes}
    assert binned == len(set(plan.parts) | extremes) >= plan.sampled == 11
    assert f"{plan.sampled} of 12 blocks checked again" in check.detail, check.detail
    assert not altered.ok and "bin" in altered.detail
    assert len(cupy_stand_in.seeds) >= 12  # the blocks drawn with integer seeds, as by CuPy
    values = np.array([0.5, np.nan, 0.25, 1.0])
    row = histogram_replay.counted(cupy_stand_in.asarray(values), 0.0, 1.0, 4, "cupy")
    assert row.tolist() == histogram_replay.counted(values, 0.0, 1.0, 4).tolist()
    assert row.tolist() == [0, 1, 1, 1, 1]  # three in the bins, 1.0 in the last; one NaN


@pytest.mark.gpu
def test_fast_on_gpu_workers_bins_sampled_blocks_again_on_the_devices():
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        result = daskgpu.run("histogram-pipeline", session, values=4_000_000, chunks=500_000,
                             seed=3, verify="fast")
        assert result.verified and result.backend == "gpu", result.verification
        assert "of 8 blocks checked again" in result.verification, result.verification
        spec, workload, raw = compute_as_runner(session, "histogram-pipeline",
                                                values=4_000_000, chunks=500_000, seed=3)
        for mutation in spec.mutations:
            check = verify_on(session, spec, workload, mutation.alter(copy.deepcopy(raw)),
                              "fast")
            assert not check.ok and mutation.named_in(check.detail), check.detail


# ------------------------------------------------------------------ faults in the run itself
# Each fault is put into the run's own functions (workers are threads of this process), on at
# least a tenth of the blocks; both depths must fail the run. 400 000 values in 8 blocks, 32
# bins: 32 cells, of which the fast depth checks a seeded sample.

FAULT_CASE = {"values": 400_000, "chunks": "50000", "bins": 32, "seed": 4}
SOME_BLOCKS = {2, 5}  # a quarter of them


@pytest.fixture
def faulty_run(in_process_client):
    """Compute ``FAULT_CASE`` (updated by ``params``) on in-process workers; both checks."""
    def run(**params):
        spec, workload, raw = compute_as_runner(in_process_client, "histogram-pipeline",
                                                **{**FAULT_CASE, **params})
        return {depth: verify_on(in_process_client, spec, workload, raw, depth)
                for depth in DEPTHS}
    return run


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_the_unfaulted_run_verifies_at_both_depths(faulty_run, distribution):
    checks = faulty_run(distribution=distribution)
    assert all(check.ok for check in checks.values()), checks


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_bins_a_tenth_of_a_percent_too_wide_in_some_blocks_fail_both_depths(faulty_run,
                                                                             monkeypatch,
                                                                             distribution):
    """A quarter of the blocks are binned with a width 0.1 % too large (a bin index off by
    one for the values near the top of each bin, more so towards the last bin)."""
    original = histogram_tasks.drawn_block_rows

    def wide(seed, number, count, dtype, distribution, lo, hi, *rest):
        if number in SOME_BLOCKS:
            hi = hi + 0.001 * (hi - lo)
        return original(seed, number, count, dtype, distribution, lo, hi, *rest)

    monkeypatch.setattr(histogram_tasks, "drawn_block_rows", wide)
    checks = faulty_run(distribution=distribution)
    assert not checks["fast"].ok and "by the kernel, numpy.histogram" in checks["fast"].detail
    assert not checks["full"].ok and "bin " in checks["full"].detail, checks["full"].detail


def test_a_kernel_that_skips_the_end_of_some_blocks_fails_both_depths(faulty_run, monkeypatch):
    """A quarter of the blocks leave their last tenth unbinned."""
    original = histogram_tasks.block_rows

    def skipping(values, lo, hi, bins, cuts, weights):
        if values.shape[0] == 50_000 and values[0] in skipped:
            values = values[:45_000]
        return original(values, lo, hi, bins, cuts, weights)

    skipped = {float(histogram_tasks.draw_block(4, n, 50_000, "float64", "uniform", [])[0][0])
               for n in SOME_BLOCKS}
    monkeypatch.setattr(histogram_tasks, "block_rows", skipping)
    checks = faulty_run()
    assert not checks["fast"].ok and "total: block 2 counts 45000 of its 50000" in (
        checks["fast"].detail), checks["fast"].detail
    assert not checks["full"].ok and "total: " in checks["full"].detail, checks["full"].detail


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_blocks_drawn_from_another_stream_fail_both_depths(faulty_run, monkeypatch,
                                                           distribution):
    """A quarter of the blocks bin the values of another seed: a histogram of the wrong data,
    each count plausible (normal data: the states noted lie on another stream)."""
    original = histogram_tasks.draw_block

    def misplaced(seed, number, *args):
        return original(seed, number + 1000 if number in SOME_BLOCKS else number, *args)

    monkeypatch.setattr(histogram_tasks, "draw_block", misplaced)
    checks = faulty_run(distribution=distribution)
    expected = "numpy.histogram" if distribution == "uniform" else "not on this block's stream"
    assert not checks["fast"].ok and expected in checks["fast"].detail, checks["fast"].detail
    assert not checks["full"].ok and "bin " in checks["full"].detail, checks["full"].detail


# One block of the eight: a random one (not the first), and the last. A block holds an eighth
# of the cells, so the fast depth's sample (a tenth caught at 99.9 %) finds it; full bins all.
ONE_BLOCK = {"random": int(np.random.default_rng(12).integers(1, 7)), "last": 7}


@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_binned_too_wide_fails_both_depths(faulty_run, monkeypatch, where):
    """One block is binned with a width 0.1 % too large: fast names its cells, full its line."""
    block, original = ONE_BLOCK[where], histogram_tasks.drawn_block_rows

    def wide(seed, number, count, dtype, distribution, lo, hi, *rest):
        if number == block:
            hi = hi + 0.001 * (hi - lo)
        return original(seed, number, count, dtype, distribution, lo, hi, *rest)

    monkeypatch.setattr(histogram_tasks, "drawn_block_rows", wide)
    checks = faulty_run()
    fast, full = checks["fast"], checks["full"]
    assert not fast.ok and f"(block {block}, rows " in fast.detail, fast.detail
    assert "by the kernel, numpy.histogram" in fast.detail, fast.detail
    assert not full.ok and f"block {block}: its bin counts' total, NaN and fingerprint" in (
        full.detail) and "by the kernel" in full.detail, full.detail


def test_an_input_binned_with_a_shifted_range_fails_both_depths(faulty_run, monkeypatch,
                                                               tmp_path):
    """Every call of the kernel on an input bins with its range 0.2 % of a width too low."""
    values = np.random.default_rng(6).standard_normal((4_000, 50))
    path = tmp_path / "in.npy"
    np.save(path, values)
    original = histogram_tasks.kernel_counts

    def shifted(values, lo, hi, bins):
        step = 0.002 * (hi - lo) / bins
        return original(values, lo - step, hi - step, bins)

    monkeypatch.setattr(histogram_tasks, "kernel_counts", shifted)
    checks = faulty_run(input=str(path), chunks="1000", values=None, seed=None, range=(-2, 2))
    for check in checks.values():
        assert not check.ok and "by the kernel" in check.detail or "counted" in check.detail
    assert "by the kernel, numpy.histogram" in checks["fast"].detail, checks["fast"].detail


@pytest.mark.parametrize(("name", "fragment"), [
    ("hist.npy", "a histogram is two arrays, counts and edges: name a .npz file"),
    ("hist.parquet", "name a .npz or .csv file"),
])
def test_cli_refuses_an_output_suffix_in_one_line(tmp_path, name, fragment):
    proc = run_cli("run", "histogram-pipeline", "--values", "1000", "--cpu", "--workers", "1",
                   "--output", str(tmp_path / name), timeout=300)
    assert_one_error_line(proc, None, "--output", fragment)
    assert list(tmp_path.iterdir()) == []  # nothing written
