"""histogram-pipeline on arrays in hand: NumPy and Dask arrays as ``input=``, verified as files."""

from __future__ import annotations

import copy

import dask.array
import distributed
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.toolkit.backends import Backend
from pipelines.histogram import tasks as histogram_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
DEPTHS = ("fast", "full")
# 800 x 50 normal values, some NaN, in 8 blocks of 100 rows (one checked cell a block).
CHUNKS = "100"
OTHER_BLOCKS = (64, 25)  # a Dask array's own blocks, which the run rechunks to 100 rows


def _values() -> np.ndarray:
    values = np.random.default_rng(31).standard_normal((800, 50))
    values[::53, 7] = np.nan
    return values


def _given(kind: str, values: np.ndarray, workers_only: bool = False):
    """The values as they are, or as a Dask array in blocks that are not the run's; with
    ``workers_only``, one whose blocks fail where they are computed anywhere but a worker."""
    if kind == "numpy":
        return values
    given = dask.array.from_array(values, chunks=OTHER_BLOCKS)
    return given.map_blocks(_on_a_worker, meta=given._meta) if workers_only else given


def _on_a_worker(block):
    distributed.get_worker()  # raises ValueError outside a worker: the graph pulled elsewhere
    return block


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_every_mutation_of_a_run_on_an_array_in_memory_is_caught(cpu_client, kind):
    spec, workload, raw = compute_as_runner(cpu_client, "histogram-pipeline",
                                            input=_given(kind, _values()), bins=24, chunks=CHUNKS)
    assert workload.description["format"] == "memory" and workload.description["blocks"] == 8
    if kind == "dask":
        assert workload.description["rechunked"] == (
            "rechunked from blocks of (64, 25) to (100, 50), the pipeline's")
    else:
        assert "rechunked" not in workload.description
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "numpy.histogram" in check.detail, (depth, check.detail)
        for mutation in spec.mutations:
            altered = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                                depth)
            assert not altered.ok and mutation.named_in(altered.detail), (
                depth, mutation.name, altered.detail)


# One block of the eight: a random one (a seeded draw, not the first), and the last.
ONE_BLOCK = {"random": int(np.random.default_rng(40).integers(1, 7)), "last": 7}


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_of_an_array_in_memory_binned_too_wide_fails_both_depths(
        in_process_client, monkeypatch, kind, where):
    """The run's own binning of one block (found by its values) uses a range 0.1 % too wide:
    both depths read that block again from the object and name it. A Dask array is computed
    on the workers only, by the run and by the checks."""
    values, faulty = _values(), ONE_BLOCK[where]
    wrong_block = values[faulty * 100:(faulty + 1) * 100]
    original = histogram_tasks.given_block_rows

    def wide(block, lo, hi, *rest):
        if np.array_equal(block, wrong_block, equal_nan=True):
            hi = hi + 0.001 * (hi - lo)
        return original(block, lo, hi, *rest)

    monkeypatch.setattr(histogram_tasks, "given_block_rows", wide)
    spec, workload, raw = compute_as_runner(in_process_client, "histogram-pipeline",
                                            input=_given(kind, values, workers_only=True),
                                            bins=32, chunks=CHUNKS, range=(-3, 3))
    fast, full = (verify_on(in_process_client, spec, workload, raw, d) for d in DEPTHS)
    assert not fast.ok and f"(block {faulty}, rows " in fast.detail, fast.detail
    assert "by the kernel, numpy.histogram" in fast.detail, fast.detail
    assert not full.ok and f"block {faulty}: its bin counts' total" in full.detail, full.detail


def test_an_array_in_memory_gives_the_files_histogram_and_is_named_not_held(cpu_client,
                                                                            tmp_path):
    values = _values().astype(np.float32)
    path = tmp_path / "values.npy"
    np.save(path, values)
    from_file = daskgpu.run("histogram-pipeline", cpu_client, input=str(path), bins=20,
                            chunks=CHUNKS)
    label = "numpy.ndarray float32 (800, 50)"
    for given in (values, dask.array.from_array(values, chunks=OTHER_BLOCKS)):
        in_hand = daskgpu.run("histogram-pipeline", cpu_client, input=given, bins=20,
                              chunks=CHUNKS)
        assert in_hand.verified, in_hand.verification
        counts, edges = in_hand.value["counts"], in_hand.value["edges"]
        assert counts.dtype == np.int64 and counts.shape == (20,)
        assert edges.dtype == np.float64 and edges.shape == (21,)
        np.testing.assert_array_equal(counts, from_file.value["counts"])
        np.testing.assert_array_equal(edges, from_file.value["edges"])
        assert (in_hand.value["nan"], in_hand.value["in_range"]) == (
            from_file.value["nan"], from_file.value["in_range"]) == (16, 800 * 50 - 16)
        named = label if isinstance(given, np.ndarray) else label.replace(
            "numpy.ndarray", "dask.array.Array")
        assert in_hand.params["input"] == named and in_hand.data["source"] == named
    np.testing.assert_array_equal(from_file.value["counts"], np.histogram(
        values[np.isfinite(values)], 20, range=from_file.value["edges"][[0, -1]])[0])


@pytest.mark.parametrize(("given", "kind", "message"), [
    (np.zeros((40, 3), dtype=np.int32), ValueError,
     "--input numpy.ndarray int32 (40, 3): holds int32 values; a numeric array of float32 or "
     "float64 is needed"),
    (np.zeros((0, 3)), ValueError, "numpy.ndarray float64 (0, 3): the array is empty"),
    (np.float64(2.0), TypeError, "a float64 is not an input daskgpu reads"),
    (dask.array.ones(10, chunks=5)[dask.array.ones(10, chunks=5) > 0], ValueError,
     "sizes are unknown; call its compute_chunk_sizes() first"),
    ([1.0, 2.0], TypeError, "a list is not an input daskgpu reads"),
])
def test_an_object_it_cannot_bin_is_refused_in_one_line_by_kind(given, kind, message):
    with pytest.raises(kind) as caught:
        daskgpu.get_pipeline("histogram-pipeline").resolve(CPU2, input=given)
    assert isinstance(caught.value, daskgpu.DaskGPUError)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
