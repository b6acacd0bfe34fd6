"""kmeans-pipeline on arrays in hand: NumPy and Dask arrays as ``input=``, checked as files are.

The shards are blocks of the object's own graph (a Dask array rechunked to the shards' rows,
and said so); the checks read the points again from the object (``replay.region``), not
through the run's graph. An input run without a seed draws one, reports it, and verifies.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import dask.array
import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import DaskGPUError, InputTypeError
from daskgpu.toolkit import backends, output, registry
from pipelines.kmeans import tasks as kmeans_steps

DEPTHS = ("fast", "full")
# Four shards of 2,000 points; random initial centroids, six iterations, five of them certified
# by their cells (as the file's fault tests run).
FAULTED = {"k": 5, "chunks": 2000, "init": "random", "tol": 0.0, "max_iter": 6, "seed": 7}


def blob_points(rows: int, features: int, seed: int) -> np.ndarray:
    """Points of a few well-separated blobs, float32, one of them NaN (left out of every sum)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features)) + 9 * rng.integers(0, 5, (rows, 1))
    x = x.astype(np.float32)
    x[1234] = np.nan
    return x


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    """The points, and the same points as a .npy file."""
    x = blob_points(8000, 4, 3)
    path = tmp_path_factory.mktemp("kmeans-memory") / "x.npy"
    np.save(path, x)
    return x, str(path)


def in_hand(kind: str, x: np.ndarray):
    """``x`` as the user holds it: a NumPy array, or a Dask array of other blocks."""
    return x if kind == "numpy" else dask.array.from_array(x, chunks=(1500, 4))


@pytest.fixture(scope="module")
def file_run(cpu_client, points):
    _x, path = points
    return compute_as_runner(cpu_client, "kmeans-pipeline", input=path, k=3, chunks=2000,
                             seed=4)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_an_array_in_hand_clusters_as_its_file_and_catches_every_mutation(
        cpu_client, points, file_run, tmp_path, kind):
    x, _path = points
    labels = str(tmp_path / "labels.npy")
    spec, workload, raw = compute_as_runner(cpu_client, "kmeans-pipeline", input=in_hand(kind, x),
                                            k=3, chunks=2000, seed=4, labels=labels)
    try:
        label = "numpy.ndarray" if kind == "numpy" else "dask.array.Array"
        assert workload.description["source"] == f"{label} float32 (8000, 4)"
        assert workload.description["format"] == "memory"
        assert workload.description.get("rechunked") == (
            None if kind == "numpy" else
            "rechunked from blocks of (1500, 4) to (2000, 4), the pipeline's")
        # the same shards and seed as the file's: the same iterations, to the last bit
        np.testing.assert_array_equal(raw["centroids"], file_run[2]["centroids"])
        assert raw["counts"].sum() == 7999
        # the one-process baseline takes the same blocks of the array
        _seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, input=in_hand(kind, x),
                                                      k=3, chunks=2000, seed=4))
        assert answer["iterations"] == raw["iterations"]
        np.testing.assert_allclose(answer["centroids"], raw["centroids"][-1], rtol=1e-6)
        for depth in DEPTHS:
            check = verify_on(cpu_client, spec, workload, raw, depth)
            assert check.ok, (depth, check.detail)
            if depth == "fast":
                assert "read again from the input array" in check.detail, check.detail
            for mutation in spec.mutations:
                altered = verify_on(cpu_client, spec, workload,
                                    mutation.alter(copy.deepcopy(raw)), depth)
                assert not altered.ok and mutation.named_in(altered.detail), (
                    depth, mutation.name, altered.detail)
    finally:
        for temporary, _final in workload.outputs:
            output.discard(temporary)
        workload.context.kept.shards.release()


def test_the_fast_check_compares_the_kept_points_with_the_array(in_process_client, points):
    """A kept shard altered on its worker: no longer the user's points, and the check says so."""
    x, _path = points
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", input=x, k=3,
                                            chunks=2000, seed=4)

    def corrupt(shard):
        shard[:, 1] += 1.0  # every point: whichever cells the plan drew

    in_process_client.client.submit(corrupt, workload.context.kept.shards.futures[2],
                                    pure=False).result()
    check = verify_on(in_process_client, spec, workload, raw, "fast")
    assert not check.ok and "shard 2: kept point" in check.detail, check.detail
    assert "differs from the input array" in check.detail
    workload.context.kept.shards.release()


@pytest.fixture(scope="module")
def fault_points() -> np.ndarray:
    """kmeans-pipeline's own blobs for ``FAULTED`` (five, seed 7), drawn here into one array:
    from its random initial centroids Lloyd runs the six iterations."""
    centres = kmeans_steps.blob_centres(FAULTED["seed"], 5, 4)
    return np.concatenate([kmeans_steps.make_shard(FAULTED["seed"], i, 2000, 4, "float32",
                                                   "numpy", centres) for i in range(4)])


# One shard of the four: a random one (not the first), and the last.
ONE_SHARD = {"random": int(np.random.default_rng(8).integers(1, 3)), "last": 3}


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", sorted(ONE_SHARD))
def test_sums_off_on_one_shard_of_an_array_in_hand_fail_both_depths(
        in_process_client, monkeypatch, fault_points, kind, where):
    """The run's own per-shard pass sums 0.1 % high on one shard of an array in hand, at every
    pass (its cells' too, so the run's certificates add up): both depths recompute the shard's
    cells from the points read again from the object, and fail naming it."""
    x = fault_points
    faulty, original = ONE_SHARD[where], kmeans_steps.kmeans_pass
    first = x[faulty * 2000]

    def off(shard, centroids):
        sums, counts, inertia = original(shard, centroids)
        owner = shard if shard.base is None else shard.base
        if owner.shape[0] == 2000 and np.array_equal(owner[0], first):
            sums = sums * 1.001
        return sums, counts, inertia

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", off)
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline",
                                            input=in_hand(kind, x), **FAULTED)
    assert raw["iterations"] == 6
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and f", shard {faulty} cell " in check.detail, (depth, check.detail)
    workload.context.kept.shards.release()


# --------------------------------------------------------------------------- the seed


def test_an_input_without_a_seed_draws_one_reports_it_and_verifies(cpu_client, points,
                                                                    file_run):
    x, _path = points
    runs = [daskgpu.run("kmeans-pipeline", cpu_client, input=x, k=3, init=init, verify=depth)
            for init, depth in (("k-means||", "fast"), ("random", "full"))]
    for result in runs:
        assert result.verified, result.verification
        assert isinstance(result.params["seed"], int)
    assert runs[0].params["seed"] != runs[1].params["seed"]  # fresh, each run
    # the check's own choices follow the input, not the seed its initialisation drew
    ctx = file_run[1].context
    assert dataclasses.replace(ctx, seed=ctx.seed + 1).check_seed == ctx.check_seed
    assert dataclasses.replace(ctx, samples=7999).check_seed != ctx.check_seed


def test_the_command_line_clusters_an_input_without_a_seed(points):
    _x, path = points
    proc = run_cli("run", "kmeans-pipeline", "--input", path, "--k", "3", "--cpu", "--workers",
                   "1", "--no-dashboard", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] and doc["verify"] == "fast", doc["verification"]
    assert isinstance(doc["params"]["seed"], int)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("given", "kind", "fragment"), [
    ([[1.0, 2.0]], InputTypeError, "a list is not an input daskgpu reads"),
    (np.zeros(10, np.float32), DaskGPUError, "numpy.ndarray float32 (10,): holds an array of "
                                             "shape (10,); a matrix of samples x features"),
    (np.zeros((10, 2), np.int64), DaskGPUError, "a numeric array of float32 or float64"),
    (np.zeros((3, 2), np.float32), DaskGPUError, "--k 5: more centroids than the 3 points"),
])
def test_an_array_that_cannot_be_clustered_is_one_line(given, kind, fragment):
    with pytest.raises(kind) as caught:
        registry.get("kmeans-pipeline").resolve(input=given, k=5)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_dask_array_of_unknown_sizes_and_cupy_data_for_cpu_workers_are_refused(
        cupy_stand_in):
    x = dask.array.from_array(blob_points(3000, 3, 1), chunks=(1000, 3))
    spec = registry.get("kmeans-pipeline")
    with pytest.raises(DaskGPUError, match="compute_chunk_sizes"):
        spec.resolve(input=x[x[:, 0] > 0], k=2)
    with pytest.raises(DaskGPUError, match=r"CuPy data, and the workers are CPU workers"):
        spec.resolve(backends.get("cpu"), input=cupy_stand_in.asarray(np.ones((4, 2))), k=2)
