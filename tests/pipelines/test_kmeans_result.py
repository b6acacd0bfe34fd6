"""kmeans-pipeline's labels kept on the workers: the run's own pass, each shard's where it lives.

A run from Python keeps every point's label (its nearest final centroid, int32; -1 for a point
with a NaN or infinite coordinate) as ``value["labels"]``: a Dask array whose blocks are the
shards' labels, made by one pass after the last iteration (the same pass writes ``--labels``
where both are asked) and verified as ``--labels`` is. These tests drive the workload as the
runner does (``workload.keep`` set before the drive) where they count the pass.
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
from conftest import drive_as_runner, verify_on
from distributed import futures_of

import daskgpu
from daskgpu.execution import report, runner
from daskgpu.toolkit import numeric, output, registry
from pipelines.kmeans import check_mutations
from pipelines.kmeans import labels as kmeans_labels
from pipelines.kmeans import tasks as kmeans_steps

SMALL = {"samples": 8000, "features": 4, "clusters": 5, "chunks": 2000, "seed": 7}
DEPTHS = ("fast", "full")
_NEAREST = kmeans_labels.nearest
passes: list[int] = []  # the rows of every shard the labels pass labelled (worker threads)


def _counted_nearest(x, centroids):
    passes.append(int(x.shape[0]))
    return _NEAREST(x, centroids)


def generated(params: dict) -> np.ndarray:
    """The run's points, shard after shard, drawn here as the documented scheme draws them."""
    centres = kmeans_steps.blob_centres(params["seed"], params["clusters"], params["features"])
    return np.concatenate([
        kmeans_steps.make_shard(params["seed"], i, rows, params["features"], "float32",
                                "numpy", centres)
        for i, rows in enumerate(numeric.shard_sizes(params["samples"], params["chunks"]))])


def nearest_centroid(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each point's nearest centroid by plain NumPy broadcasting; -1 without a finite one."""
    distances = ((x.astype(np.float64)[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    labels = distances.argmin(axis=1)
    labels[~np.isfinite(x).all(axis=1)] = -1
    return labels


def _kept(labels, sizes) -> da.Array:
    """The kept labels: int32 in the shards' blocks, a graph of those persisted blocks only."""
    assert isinstance(labels, da.Array) and labels.dtype == np.int32
    assert labels.chunks == (tuple(sizes),)
    assert len(dict(labels.__dask_graph__())) == labels.npartitions == len(sizes)
    assert len(futures_of(labels)) == len(sizes)
    return labels


def _driven(session, keep: bool, **params):
    return drive_as_runner(session, "kmeans-pipeline", keep, **params)


@pytest.fixture(scope="module")
def kept_run(in_process_client, tmp_path_factory):
    """A run keeping its labels and writing --labels, its labels pass counted."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(kmeans_labels, "nearest", _counted_nearest)
        passes.clear()
        spec, workload, raw = _driven(in_process_client, True, **SMALL,
                                      labels=str(tmp_path_factory.mktemp("kept") / "l.npy"))
        yield spec, workload, raw
    for temporary, _final in workload.outputs:
        output.discard(temporary)
    workload.context.kept.shards.release()


def test_one_pass_labels_every_shard_where_it_lives_written_and_kept(in_process_client,
                                                                    kept_run):
    spec, workload, raw = kept_run
    assert passes == [2000] * 4  # one labels pass: each shard once, for the file and the keep
    labels = _kept(workload.on_workers["labels"], workload.context.sizes)
    assert raw["labels"]["kept"] is labels and raw["labels"]["rows"] == [2000] * 4
    client = in_process_client.client
    shards = workload.context.kept.shards.futures
    for block, shard in zip(futures_of(labels), shards, strict=True):  # where its shard is
        assert set(client.who_has([block])[block.key]) <= set(client.who_has([shard])[shard.key])
    values = labels.compute(scheduler=client)
    expected = nearest_centroid(generated(SMALL), raw["centroids"][-1])
    np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(np.load(workload.written(workload.context.labels)), values)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok and "the labels kept on the workers the same" in check.detail, (
            depth, check.detail)
    assert passes == [2000] * 4  # computing and checking them labelled nothing again

    passes.clear()  # neither kept nor written: no labels pass, nothing on the workers
    _, light, raw = _driven(in_process_client, False, **SMALL)
    assert passes == [] and light.on_workers == {} and "labels" not in raw
    light.context.kept.shards.release()


@pytest.mark.parametrize("mutation", [m for m in check_mutations.MUTATIONS
                                      if m.name.startswith(check_mutations.LABELS_ONLY)],
                         ids=lambda m: m.name)
def test_each_labels_mutation_of_the_kept_labels_is_caught(in_process_client, kept_run,
                                                          mutation):
    spec, workload, raw = kept_run
    altered = mutation.alter(raw)
    assert altered["labels"]["kept"] is not raw["labels"]["kept"]  # the kept blocks altered
    assert altered["labels"]["edits"] == []  # and not the file's
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, altered, depth)
        assert not check.ok and mutation.named_in(check.detail), (depth, check.detail)


def test_a_kept_block_altered_on_its_worker_is_caught(in_process_client):
    """The check reads the blocks the run kept, not labels made again: one changed in place
    on its worker (the last shard's) fails both depths, in the kept labels' name."""
    spec, workload, raw = _driven(in_process_client, True, **SMALL)
    try:
        def relabel(block):
            block[::7] = (block[::7] + 1) % 5

        last = futures_of(raw["labels"]["kept"])[-1]
        in_process_client.client.submit(relabel, last, pure=False).result()
        for depth in DEPTHS:
            check = verify_on(in_process_client, spec, workload, raw, depth)
            assert not check.ok and check.detail.startswith("the kept labels: "), check.detail
    finally:
        workload.context.kept.shards.release()


def test_the_command_lines_json_holds_no_array(in_process_client):
    spec = registry.get("kmeans-pipeline")
    result = runner.execute(spec, in_process_client, spec.resolve(
        in_process_client.backend, samples=3000, features=3, clusters=3, chunks=1000, seed=2))
    assert result.verified and "labels" not in result.data
    assert set(json.loads(report.as_json(result))["value"]) == {
        "iterations", "inertia", "inertias", "centroids"}


_RNG = np.random.default_rng(11)
_POINTS = (_RNG.uniform(-20, 20, (3, 3))[_RNG.integers(0, 3, 3000)]
           + _RNG.standard_normal((3000, 3))).astype(np.float32)
_POINTS[17, 1] = np.nan  # no finite distance: labelled -1


@pytest.mark.parametrize("kind", ["generated", "file", "numpy", "dask"])
def test_generated_a_file_numpy_and_dask_give_the_same_kind_of_value(cpu_client, tmp_path,
                                                                   kind):
    if kind == "generated":
        params = {"samples": 3000, "features": 3, "clusters": 3, "chunks": 1000, "seed": 3,
                  "init": "random"}
    else:
        np.save(tmp_path / "x.npy", _POINTS)
        given = {"file": str(tmp_path / "x.npy"), "numpy": _POINTS,
                 "dask": da.from_array(_POINTS, chunks=(700, 3))}[kind]
        params = {"input": given, "k": 3, "chunks": 1000, "seed": 3, "init": "random"}
    result = daskgpu.run("kmeans-pipeline", cpu_client, **params)
    assert result.verified, result.verification
    assert "the kept labels: 3000 labels" in result.verification
    labels = _kept(result.value["labels"], (1000,) * 3)
    x = generated(params) if kind == "generated" else _POINTS
    values = labels.compute(scheduler=cpu_client.client)
    np.testing.assert_array_equal(values, nearest_centroid(x, result.value["centroids"]))
    np.testing.assert_array_equal(np.bincount(values[values >= 0], minlength=3),
                                  result.data["cluster sizes"])
    assert (values[17] == -1) == (kind != "generated")
