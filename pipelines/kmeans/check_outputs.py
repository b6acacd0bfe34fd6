"""kmeans-pipeline: the check of the cluster sizes and of what a run writes to files.

Called by :func:`pipelines.kmeans.check.verify` once the iterations have checked out, with
what that check counted at the final centroids over all points (``final``: ``counts`` nearest
each, ``near`` of them by a rounding tie, ``points`` counted), at either depth:

- the reported cluster sizes (the last pass's counts) are those counts, within the points in a
  rounding tie;
- ``--output`` read back with NumPy's, Zarr's or the ``csv`` module's own reader is the final
  centroids exactly: a ``(k, d)`` float64 array, or a table of ``k`` rows ``x0 .. x{d-1}``;
- ``--labels`` read back block by block on the workers: one int32 per point, each ``-1`` or a
  centroid's index, ``-1`` exactly as often as points were left uncounted, and every centroid
  labelled as often as the last pass counted points nearest it (within the points in a
  rounding tie); then each label recomputed, independently, as the nearest final centroid by
  direct float64 differences: at ``fast`` in a seeded sample of cells of the points the run
  kept (:func:`pipelines.kmeans.shared.label_cell_rows`; a fault in a tenth of the cells is
  caught with probability at least 99.9 %), at ``full`` every point, drawn or read again.

A label is right where its centroid is the nearest, or within the rounding of both the run's
distances and these of the nearest (the kernel's rule for a tie, in the data's dtype).

The result's ``labels`` says what the run wrote; its ``edits`` (none in a run) are entries
that differ from the file, so that a declared mutation can alter the written labels without
touching the file: ``{"start", "stop", "step", "add", "modulo"}`` adds ``add`` to the labels of
rows ``range(start, stop, step)``, modulo ``modulo`` where it is not 0.

Nothing here is shared with the run: it reads :mod:`pipelines.kmeans.shared`'s constants only,
and the points through the check's own readers.
"""

from __future__ import annotations

import csv
import importlib

import dask
import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.registry import Verification
from pipelines.kmeans.check_kept import _err
from pipelines.kmeans.shared import NO_LABEL, cells_of, label_cell_rows

#: Entries ``points x centroids x features`` of the differences held at once.
DIFFERENCES = 1 << 22
#: The spot checks' own stream: ``seed + LABEL_SAMPLE``.
LABEL_SAMPLE = 3


def check_outputs(ctx: dict, raw: dict, written: dict, final: dict, verdict: Verification,
                  depth: str) -> Verification:
    """``verdict`` (the iterations' check, passed) with the cluster sizes and outputs checked.

    ``written``: the temporaries this run wrote, by option (``output``, ``labels``).
    """
    said = [verdict.detail]
    failure = _sizes_problem(ctx, raw, final)
    if not failure and written.get("output"):
        failure = _centroids_problem(ctx, raw, written["output"])
        said.append(f"--output read back holds the {ctx['k']} final centroids")
    if not failure and ctx.get("labels"):
        failure, words = _labels_problem(ctx, raw, written.get("labels"), final, depth)
        said.append(words)
    if failure:
        return Verification(False, failure)
    return Verification(True, "; ".join(said[:1] + ["the cluster sizes agree"] + said[1:]))


# --------------------------------------------------------------------------- sizes, centroids


def _sizes_problem(ctx: dict, raw: dict, final: dict) -> str | None:
    sizes = np.asarray(raw.get("counts", ()), dtype=np.float64)
    if sizes.shape != (ctx["k"],):
        return f"cluster sizes: {sizes.size} reported for --k {ctx['k']} centroids"
    off = np.abs(sizes - final["counts"]) - final["near"]
    if np.any(off > 0):
        j = int(np.argmax(off))
        return (f"cluster size {j}: {sizes[j]:.0f} points reported, {final['counts'][j]:.0f} "
                f"counted nearest it ({final['near'][j]:.0f} by a rounding tie)")
    return None


def _read_centroids(path: str, output: str, d: int) -> np.ndarray:
    """The array saved at ``path`` in ``output``'s format (a table's columns in order)."""
    if output.lower().endswith(".csv"):
        with open(path, newline="") as f:
            table = csv.reader(f)
            header = next(table)
            if header != [f"x{f}" for f in range(d)]:
                raise ValueError(f"columns {header[:4]}..., x0 .. x{d - 1} expected")
            return np.array([[float(v) for v in row] for row in table], dtype=np.float64)
    if output.lower().endswith(".zarr"):
        import zarr

        return np.asarray(zarr.open_array(path, mode="r")[...])
    return np.load(path, allow_pickle=False)


def _centroids_problem(ctx: dict, raw: dict, path: str) -> str | None:
    output, k, d = ctx["output"], ctx["k"], ctx["features"]
    try:
        saved = _read_centroids(path, output, d)
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        return f"--output {output}: cannot be read back ({exc})"
    want = np.asarray(raw["centroids"], dtype=np.float64)[-1]
    if saved.shape != (k, d) or saved.dtype != np.float64:
        return (f"--output {output}: holds {saved.dtype} of shape {saved.shape}; the final "
                f"centroids, float64 of shape {(k, d)}, expected")
    differ = np.argwhere(saved != want)
    if len(differ):
        j, f = differ[0]
        return (f"--output {output}: centroid {j} feature {f} = {saved[j, f]:.9g} saved, "
                f"{want[j, f]:.9g} reported")
    return None


# --------------------------------------------------------------------------- labels


def read_labels(source: dict, start: int, stop: int) -> np.ndarray:
    """Labels ``start .. stop - 1`` as the result describes them: the file's, edited."""
    if source["kind"] == "zarr":
        import zarr

        labels = np.asarray(zarr.open_array(source["path"], mode="r")[start:stop])
    else:
        labels = np.array(np.load(source["path"], mmap_mode="r")[start:stop])
    labels = labels.astype(np.int64)
    for edit in source["edits"]:
        first, last = max(start, edit["start"]), min(stop, edit["stop"])
        if first >= last:
            continue
        offset = (-(first - edit["start"])) % edit["step"]  # the first edited row >= first
        rows = np.arange(first + offset, last, edit["step"]) - start
        labels[rows] += edit["add"]
        if edit["modulo"]:
            labels[rows] %= edit["modulo"]
    return labels


def count_labels(source: dict, start: int, stop: int, k: int) -> dict:
    """The labels of rows ``start .. stop - 1`` counted (runs on a worker)."""
    labels = read_labels(source, start, stop)
    outside = np.flatnonzero((labels < NO_LABEL) | (labels >= k))
    inside = labels[labels >= 0]
    return {"counts": np.bincount(inside[inside < k], minlength=k),
            "none": int((labels == NO_LABEL).sum()),
            "outside": (start + int(outside[0]), int(labels[outside[0]])) if len(outside)
            else None}


def _labels_file(ctx: dict, path: str | None) -> tuple[dict | None, str | None]:
    """Where the labels are and how to read them; or why they cannot be read."""
    name = ctx["labels"]
    if path is None:
        return None, f"--labels {name}: this run wrote no labels"
    kind = "zarr" if name.lower().endswith(".zarr") else "npy"
    try:
        if kind == "zarr":
            import zarr

            opened = zarr.open_array(path, mode="r")
        else:
            opened = np.load(path, mmap_mode="r")
        shape, dtype = tuple(opened.shape), np.dtype(opened.dtype)
    except (OSError, ValueError, KeyError) as exc:
        return None, f"--labels {name}: cannot be read back ({exc})"
    if shape != (ctx["samples"],) or dtype != np.int32:
        return None, (f"--labels {name}: {dtype} of shape {shape}; int32 of shape "
                      f"({ctx['samples']},) expected")
    return {"path": path, "kind": kind}, None


def _labels_problem(ctx: dict, raw: dict, path: str | None, final: dict, depth: str
                    ) -> tuple[str | None, str]:
    name, sizes = ctx["labels"], [int(s) for s in ctx["sizes"]]
    report = raw.get("labels")
    rows = list(report.get("rows", ())) if isinstance(report, dict) else None
    if rows != sizes:
        return (f"--labels {name}: the run reports writing {rows} points by shard; {sizes} "
                "expected"), ""
    source, failure = _labels_file(ctx, path)
    if failure:
        return failure, ""
    source["edits"] = list(report.get("edits", ()))
    failure = _counts_problem(ctx, raw, source, final)
    if failure:
        return failure, ""
    if depth == "fast":
        failure, recomputed = _recompute_kept(ctx, raw, source)
    else:
        failure, recomputed = _recompute_all(ctx, raw, source)
    words = (f"--labels read back: {ctx['samples']} labels whose counts are the last pass's "
             f"cluster sizes; {recomputed}")
    return failure, words


def _counts_problem(ctx: dict, raw: dict, source: dict, final: dict) -> str | None:
    name, k = ctx["labels"], ctx["k"]
    edges = np.cumsum((0, *ctx["sizes"]))
    parts = dask.compute(*[dask.delayed(count_labels, pure=False)(
        source, int(edges[i]), int(edges[i + 1]), k) for i in range(len(ctx["sizes"]))])
    for part in parts:
        if part["outside"] is not None:
            row, label = part["outside"]
            return (f"--labels {name}: row {row} is labelled {label}, outside -1 .. {k - 1} "
                    f"(--k {k})")
    counted = sum(part["counts"] for part in parts)
    unlabelled = sum(part["none"] for part in parts)
    left_out = ctx["samples"] - int(final["points"])
    if unlabelled != left_out:
        return (f"--labels {name}: {unlabelled} points labelled -1, {left_out} points have a "
                "NaN or infinite coordinate")
    sizes = np.asarray(raw["counts"], dtype=np.float64)
    off = np.abs(counted - sizes) - final["near"]
    if np.any(off > 0):
        j = int(np.argmax(off))
        return (f"--labels {name}: {counted[j]} points labelled {j}, the last pass counted "
                f"{sizes[j]:.0f} nearest it ({final['near'][j]:.0f} by a rounding tie)")
    return None


def wrong_label(points, labels: np.ndarray, centroids: np.ndarray, unit: float) -> tuple | None:
    """The first of ``points`` whose label is not its nearest centroid, or None.

    Direct float64 differences; a label within the rounding of the nearest (both the run's
    and these distances') is right too. A point with a NaN or infinite coordinate must be
    labelled ``NO_LABEL``. Returns ``(row, label, nearest)``, the row within ``points``.
    """
    xp = importlib.import_module(type(points).__module__.split(".")[0])
    k, d = centroids.shape
    c = xp.asarray(centroids)
    c_norm2 = (c * c).sum(axis=1)
    slab = max(1, DIFFERENCES // max(1, k * d))
    for first in range(0, points.shape[0], slab):
        x = points[first:first + slab].astype(np.float64)
        given = labels[first:first + slab]
        finite = to_host(xp.isfinite(x).all(axis=1))
        x = xp.where(xp.asarray(finite)[:, None], x, 0.0)
        dist = ((x[:, None, :] - c[None]) ** 2).sum(axis=2)
        x_norm2 = (x * x).sum(axis=1)
        best = xp.argmin(dist, axis=1)
        low = dist[xp.arange(len(best)), best]
        allowed = _err(dist, x_norm2[:, None], c_norm2[None], d, unit) + _err(
            low, x_norm2, c_norm2[best], d, unit)[:, None]
        right = to_host((dist - low[:, None]) <= allowed)  # (points, k): the labels allowed
        best = to_host(best)
        ok = np.where(finite, (given >= 0) & (given < k), given == NO_LABEL)
        inside = np.flatnonzero(ok & finite)
        ok[inside] = right[inside, given[inside]]
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            return first + i, int(given[i]), int(best[i]) if finite[i] else NO_LABEL
    return None


def _kept_cells(x, source: dict, centroids: np.ndarray, cell: int, cells: list, start: int,
                unit: float) -> tuple | None:
    """The first wrong label in the sampled ``cells`` of kept shard ``x`` (global row)."""
    for c in cells:
        lo, hi = c * cell, min(x.shape[0], (c + 1) * cell)
        found = wrong_label(x[lo:hi], read_labels(source, start + lo, start + hi), centroids,
                            unit)
        if found is not None:
            return (start + lo + found[0], *found[1:])
    return None


def _redrawn_shard(ctx: dict, index: int, start: int, size: int, source: dict,
                   centroids: np.ndarray, unit: float) -> tuple | None:
    """The first wrong label of shard ``index``, its points drawn or read again (global row)."""
    from pipelines.kmeans.check import redrawn_points  # it draws the data the check's way

    points = redrawn_points(ctx, index, start, size)
    found = wrong_label(points, read_labels(source, start, start + size), centroids, unit)
    return None if found is None else (start + found[0], *found[1:])


def _wrong_words(ctx: dict, found: tuple) -> str:
    row, label, nearest = found
    return (f"--labels {ctx['labels']}: row {row} is labelled {label}, its nearest final "
            f"centroid is {nearest}")


def _recompute_kept(ctx: dict, raw: dict, source: dict) -> tuple[str | None, str]:
    """A seeded sample of cells of the kept points, labelled again."""
    cell = label_cell_rows(ctx["samples"])
    per_shard = [cells_of(n, cell) for n in ctx["sizes"]]
    population = sum(per_shard)
    drawn = spot_checks.sample_size(population)
    seed = ctx["seed"] if ctx["seed"] is not None else ctx["samples"]
    offsets = np.cumsum((0, *per_shard))
    sampled = [[] for _ in per_shard]
    for g in spot_checks.seeded_sample(population, drawn, seed + LABEL_SAMPLE):
        s = int(np.searchsorted(offsets, g, side="right")) - 1
        sampled[s].append(int(g - offsets[s]))
    edges = np.cumsum((0, *ctx["sizes"]))
    final = np.asarray(raw["centroids"], dtype=np.float64)[-1]
    unit = float(np.finfo(ctx["dtype"]).eps) / 2
    found = dask.compute(*[dask.delayed(_kept_cells, pure=False)(
        future, source, final, cell, sampled[i], int(edges[i]), unit)
        for i, future in enumerate(ctx["shards"].futures) if sampled[i]])
    wrong = [f for f in found if f is not None]
    words = (f"{spot_checks.detection(drawn, population, 'cells')} (each label recomputed as "
             "the nearest final centroid)")
    return (_wrong_words(ctx, wrong[0]) if wrong else None), words


def _recompute_all(ctx: dict, raw: dict, source: dict) -> tuple[str | None, str]:
    """Every label recomputed, on the points drawn or read again."""
    edges = np.cumsum((0, *ctx["sizes"]))
    final = np.asarray(raw["centroids"], dtype=np.float64)[-1]
    unit = float(np.finfo(ctx["dtype"]).eps) / 2
    found = dask.compute(*[dask.delayed(_redrawn_shard, pure=True)(
        ctx_for_workers(ctx), i, int(edges[i]), int(size), source, final, unit)
        for i, size in enumerate(ctx["sizes"])])
    wrong = [f for f in found if f is not None]
    words = "every label recomputed as the nearest final centroid"
    return (_wrong_words(ctx, wrong[0]) if wrong else None), words


def ctx_for_workers(ctx: dict) -> dict:
    """What a worker needs of the context to draw or read a shard again (picklable, small)."""
    return {name: ctx[name] for name in ("seed", "clusters", "features", "dtype", "library",
                                         "input")}
