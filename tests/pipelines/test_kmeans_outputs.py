"""kmeans-pipeline's files: the centroids as NumPy reads them, and every point's label.

``--output`` holds a plain ``(k, d)`` float64 array (``.npy``, Zarr) or a table (``.csv``);
``--labels`` one int32 per point, written shard by shard after the last iteration and renamed
into place only once the run has verified. The checks read both back, and catch them altered.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import os
import re

import numpy as np
import pytest
from conftest import assert_one_error_line, compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.toolkit import numeric, output, registry
from pipelines.kmeans import check as kmeans_check
from pipelines.kmeans import check_mutations, check_replay
from pipelines.kmeans import labels as kmeans_labels
from pipelines.kmeans import shared as kmeans_data
from pipelines.kmeans import tasks as kmeans_steps

SMALL = {"samples": 8000, "features": 4, "clusters": 5, "chunks": 2000, "seed": 7}
DEPTHS = ("fast", "full")


def generated_points(params: dict) -> np.ndarray:
    """All of a run's points at once, shard after shard as the documented scheme draws them."""
    centres = kmeans_steps.blob_centres(params["seed"], params["clusters"], params["features"])
    sizes = numeric.shard_sizes(params["samples"], params["chunks"])
    return np.concatenate([kmeans_steps.make_shard(params["seed"], i, rows, params["features"],
                                                   "float32", "numpy", centres)
                           for i, rows in enumerate(sizes)])


def plain_nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each point's nearest centroid, written out plainly; -1 where a coordinate is not finite."""
    distances = ((x.astype(np.float64)[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    labels = distances.argmin(axis=1)
    labels[~np.isfinite(x).all(axis=1)] = -1
    return labels


def _load(path: str) -> np.ndarray:
    if path.endswith(".zarr"):
        import zarr

        return zarr.open_array(path, mode="r")[...]
    return np.load(path)  # plain arrays: no pickle needed


# --------------------------------------------------------------------------- a user's run


@pytest.mark.parametrize("suffix", [".npy", ".zarr", ".csv"])
def test_the_centroids_and_labels_load_as_numpy_users_expect(cpu_client, tmp_path, suffix):
    centroids_path = str(tmp_path / f"centroids{suffix}")
    labels_path = str(tmp_path / ("labels.zarr" if suffix == ".zarr" else "labels.npy"))
    result = daskgpu.run("kmeans-pipeline", cpu_client, output=centroids_path,
                         labels=labels_path, **SMALL)
    assert result.verified, result.verification
    for words in ("the cluster sizes agree", "--output read back holds the 5 final centroids",
                  "--labels read back: 8000 labels whose counts are the last pass's",
                  "cells checked again"):
        assert words in result.verification, (words, result.verification)
    final = result.value["centroids"]
    if suffix == ".csv":
        with open(centroids_path, newline="") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["x0", "x1", "x2", "x3"] and len(rows) == 6
        saved = np.array(rows[1:], dtype=np.float64)
    else:
        saved = _load(centroids_path)
        # scikit-learn's cluster_centers_: a plain (k, d) float array, not a record array
        assert saved.dtype == np.float64 and saved.dtype.names is None
    assert saved.shape == (5, 4)
    np.testing.assert_array_equal(saved, final)
    labels = _load(labels_path)
    assert labels.dtype == np.int32 and labels.shape == (8000,)
    np.testing.assert_array_equal(labels, plain_nearest(generated_points(SMALL), final))
    np.testing.assert_array_equal(np.bincount(labels, minlength=5),
                                  result.data["cluster sizes"])
    assert result.data["labels_s"] > 0 and labels_path in result.data["labels"]
    assert sorted(os.listdir(tmp_path)) == sorted(
        os.path.basename(p) for p in (centroids_path, labels_path))


def test_labels_of_an_input_mark_points_with_no_finite_distance(cpu_client, tmp_path):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3000, 3)) + 8 * rng.integers(0, 3, (3000, 1))).astype(np.float32)
    x[[17, 2100]] = [np.nan, 0, 0], [np.inf, 1, 1]
    np.save(tmp_path / "x.npy", x)
    for depth in DEPTHS:
        target = tmp_path / f"labels-{depth}.zarr"
        result = daskgpu.run("kmeans-pipeline", cpu_client, input=str(tmp_path / "x.npy"), k=3,
                             chunks=700, seed=4, labels=str(target), verify=depth)
        assert result.verified, result.verification
        labels = _load(str(target))
        assert labels[17] == labels[2100] == -1 and (labels >= 0).sum() == 2998
        np.testing.assert_array_equal(labels, plain_nearest(x, result.value["centroids"]))
    assert "every label recomputed" in result.verification


def test_scikit_learn_agrees_on_well_separated_blobs(tmp_path):
    """Points nobody here made, clustered as a user would from the command line."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs
    from sklearn.metrics import adjusted_rand_score

    x, _truth, centres = make_blobs(n_samples=20_000, n_features=5, centers=6,
                                    center_box=(-60, 60), random_state=2, return_centers=True)
    gaps = np.sqrt(((centres[:, None] - centres[None]) ** 2).sum(axis=2))
    assert gaps[np.triu_indices(6, 1)].min() > 12  # well separated, as the test needs
    np.save(tmp_path / "points.npy", x)
    proc = run_cli("run", "kmeans-pipeline", "--input", str(tmp_path / "points.npy"), "--k",
                   "6", "--seed", "1", "--output", str(tmp_path / "c.npy"), "--labels",
                   str(tmp_path / "l.npy"), "--cpu", "--workers", "2", "--no-dashboard",
                   "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    ours, labels = np.load(tmp_path / "c.npy"), np.load(tmp_path / "l.npy")
    theirs = KMeans(n_clusters=6, n_init=10, random_state=0).fit(x)
    assert adjusted_rand_score(labels, theirs.labels_) == 1.0
    # the same clusters, numbered apart: ours j is theirs match[j]
    match = np.array([np.bincount(theirs.labels_[labels == j]).argmax() for j in range(6)])
    assert sorted(match) == list(range(6))
    np.testing.assert_array_equal(theirs.predict(x), match[labels])
    np.testing.assert_allclose(ours, theirs.cluster_centers_[match], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(theirs.predict(ours), match)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("params", "fragment"), [
    ({"labels": "l.csv"}, "--labels l.csv: name a .npy or .zarr file"),
    ({"output": "c.parquet"}, "--output c.parquet: name a .npy or .zarr or .csv file"),
    ({"labels": "/nonexistent/l.npy"}, "does not exist"),
])
def test_an_unsupported_output_is_one_line(params, fragment):
    with pytest.raises(ParameterError, match=fragment) as err:
        registry.get("kmeans-pipeline").resolve(**params)
    assert "\n" not in str(err.value)


def test_an_existing_labels_file_is_kept_without_overwrite(tmp_path):
    spec = registry.get("kmeans-pipeline")
    target = tmp_path / "labels.npy"
    target.write_text("keep me\n")
    with pytest.raises(ParameterError, match="--labels .* exists; pass --overwrite"):
        spec.check_outputs(spec.resolve(labels=str(target)))
    assert target.read_text() == "keep me\n"


def test_cli_refuses_labels_as_csv_in_one_line(tmp_path):
    proc = run_cli("run", "kmeans-pipeline", "--samples", "1000", "--cpu", "--workers", "1",
                   "--labels", str(tmp_path / "l.csv"), timeout=300)
    assert_one_error_line(proc, None, "--labels", "name a .npy or .zarr file")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the checks


@pytest.fixture(scope="module")
def labelled_run(cpu_client, tmp_path_factory):
    """A run with --labels, computed as the runner does; its labels are still a temporary."""
    folder = tmp_path_factory.mktemp("labelled")
    spec, workload, raw = compute_as_runner(cpu_client, "kmeans-pipeline", **SMALL,
                                            labels=str(folder / "labels.npy"))
    yield spec, workload, raw
    for temporary, _final in workload.outputs:
        output.discard(temporary)


def _with_edits(raw: dict, *edits: dict) -> dict:
    return {**raw, "labels": {**raw["labels"], "edits": [*raw["labels"]["edits"], *edits]}}


def _edit(row: int, add: int, k: int) -> dict:
    return {"start": row, "stop": row + 1, "step": 1, "add": add % k, "modulo": k}


def _cells(workload) -> tuple[list[np.ndarray], set[int]]:
    """The rows of every label cell (shard after shard), and those the fast check recomputes."""
    ctx = workload.context
    cell = kmeans_data.label_cell_rows(ctx.samples)
    edges = np.cumsum((0, *ctx.sizes))
    rows = [np.arange(first, min(first + cell, edges[s + 1]))
            for s in range(len(ctx.sizes)) for first in range(edges[s], edges[s + 1], cell)]
    plan = kmeans_check.plans(ctx, 1, "fast").labels
    assert plan.population == len(rows) and kmeans_check.plans(ctx, 1, "full").labels.complete
    return rows, set(plan.parts)


def test_the_labels_are_written_before_the_check_and_verify(cpu_client, labelled_run):
    spec, workload, raw = labelled_run
    written = workload.written(workload.context.labels)
    assert written != workload.context.labels and not os.path.exists(
        workload.context.labels)  # a temporary until the run has verified
    assert raw["labels"]["rows"] == [2000] * 4 and raw["labels"]["edits"] == []
    np.testing.assert_array_equal(np.load(written), plain_nearest(generated_points(SMALL),
                                                                  raw["centroids"][-1]))
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok, check.detail


def test_swapped_labels_are_caught_by_recomputing_them(cpu_client, labelled_run):
    """Two labels exchanged keep every count: only the labels recomputed show it."""
    spec, workload, raw = labelled_run
    labels = np.load(workload.written(workload.context.labels))
    cells, sampled = _cells(workload)
    rows = cells[max(sampled)]
    a = int(rows[0])
    b = int(rows[np.flatnonzero(labels[rows] != labels[a])[0]])
    swapped = _with_edits(raw, _edit(a, labels[b] - labels[a], 5),
                          _edit(b, labels[a] - labels[b], 5))
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, swapped, depth)
        assert not check.ok and (f"row {a} is labelled {labels[b]}, its nearest final "
                                 f"centroid is {labels[a]}") in check.detail, check.detail


def test_a_label_changed_outside_the_sample_is_caught_by_the_counts(cpu_client, labelled_run):
    spec, workload, raw = labelled_run
    cells, sampled = _cells(workload)
    assert len(sampled) < len(cells)
    row = int(cells[min(set(range(len(cells))) - sampled)][5])
    label = int(np.load(workload.written(workload.context.labels))[row])
    moved = _with_edits(raw, _edit(row, 1, 5))
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, moved, depth)
        # one point fewer labelled with its centroid, one more with the next
        said = re.search(r": label (\d+): (\d+) points labelled, the last pass counted (\d+) ",
                         check.detail)
        assert not check.ok and said, check.detail
        wrong, counted, sizes = map(int, said.groups())
        assert wrong in (label, (label + 1) % 5) and abs(counted - sizes) == 1


@pytest.mark.parametrize("mutation", [m for m in check_mutations.MUTATIONS
                                      if m.name.startswith(check_mutations.LABELS_ONLY)],
                         ids=lambda m: m.name)
def test_each_labels_mutation_is_caught_at_both_depths(cpu_client, labelled_run, mutation):
    spec, workload, raw = labelled_run
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not check.ok and mutation.named_in(check.detail), (depth, check.detail)


def test_a_wrong_cluster_size_is_caught(cpu_client, labelled_run):
    spec, workload, raw = labelled_run
    counts = np.array(raw["counts"], copy=True)
    counts[[0, 1]] += [1, -1]
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, {**raw, "counts": counts}, depth)
        assert not check.ok and "cluster size 0: " in check.detail, check.detail


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_tampered_centroids_file_is_caught(cpu_client, tmp_path, depth):
    target = tmp_path / "centroids.npy"
    spec, workload, raw = compute_as_runner(cpu_client, "kmeans-pipeline", **SMALL,
                                            output=str(target))
    temporary = output.temporary_name(str(target))
    workload.outputs.append((temporary, str(target)))
    final = np.asarray(raw["centroids"][-1])
    try:
        workload.save(workload, {"centroids": final}, temporary)
        assert verify_on(cpu_client, spec, workload, raw, depth).ok
        structured = np.empty(5, dtype=[(f"x{f}", "f8") for f in range(4)])
        for f in range(4):
            structured[f"x{f}"] = final[:, f]
        nudged = final.copy()
        nudged[2, 1] += 1e-9
        for saved, said in ((structured, "holds [('x0', '<f8'), "),
                            (final.astype(np.float32), "holds float32 of shape (5, 4)"),
                            (nudged, "centroid 2 feature 1: ")):
            np.save(open(temporary, "wb"), saved)
            check = verify_on(cpu_client, spec, workload, raw, depth)
            assert not check.ok and f"--output {target}: {said}" in check.detail, check.detail
    finally:
        output.discard(temporary)
        workload.context.kept.shards.release()


def test_a_run_that_fails_its_check_writes_neither_file(cpu_client, tmp_path):
    spec = registry.get("kmeans-pipeline")
    mutation = next(m for m in spec.mutations if m.name.startswith(check_mutations.LABELS_ONLY))

    def verify(workload, raw, depth):
        return spec.check(workload, mutation.alter(copy.deepcopy(raw)), depth)

    wrong = dataclasses.replace(spec, verify=verify)
    result = daskgpu.run(wrong, client=cpu_client, output=str(tmp_path / "c.npy"),
                         labels=str(tmp_path / "l.zarr"), **SMALL)
    assert result.verified is False and "--labels" in result.verification
    assert os.listdir(tmp_path) == []  # no partial file, no temporary
    assert f"{tmp_path / 'l.zarr'}: not written (the result did not verify); nothing is there" in (
        result.notices)


# --------------------------------------------------------------------------- the GPU branches


def test_the_labels_and_their_check_compute_on_cupy_as_on_numpy(cupy_stand_in):
    cupy = cupy_stand_in
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3000, 6)).astype(np.float32)
    x[7, 2] = np.nan
    centroids = rng.standard_normal((4, 6))
    on_device = kmeans_labels.nearest(cupy.asarray(x), centroids)
    assert isinstance(on_device, cupy.ndarray) and on_device.dtype == np.int32
    want = kmeans_labels.nearest(x, centroids)
    np.testing.assert_array_equal(on_device.get(), want)
    np.testing.assert_array_equal(want, plain_nearest(x, centroids))
    assert check_replay.wrong_label(cupy.asarray(x), want.astype(np.int64), centroids,
                                    "float32") is None
    wrong = want.astype(np.int64)
    wrong[100] = (wrong[100] + 1) % 4
    for points in (x, cupy.asarray(x)):
        assert check_replay.wrong_label(points, wrong, centroids, "float32") == (
            100, wrong[100], want[100])
