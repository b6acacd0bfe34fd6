"""kmeans-pipeline's labels: each point's nearest final centroid, shard by shard, where it lives.

After the last iteration one more pass runs on every kept shard, where it lives: each point's
nearest final centroid (the least ``|c|^2 - 2 x.c`` in float64, the lowest index on a tie;
``NO_LABEL`` for a point with a NaN or infinite coordinate, which no centroid counts), int32 in
the shard's array library. A run from Python keeps them there, as a Dask array whose blocks are
the shards' labels (:func:`label_pass`); ``--labels`` writes them into the shard's rows of a
``.npy`` file or Zarr array that :func:`create` made before the run. Where both are asked, the
pass runs once and the file is written from the labels kept. Only the rows and the seconds come
back to the client; the file is a temporary that the runner renames into place once the run has
verified.
"""

from __future__ import annotations

import importlib
import time
import uuid

import numpy as np

from daskgpu.toolkit import backends, data_parallel
from pipelines.kmeans.shared import NO_LABEL

#: Distances (points x centroids, float64) computed at once on a worker.
DISTANCES = 1 << 22


def create(path: str, temporary: str, samples: int, shard_rows: int) -> dict:
    """Make the empty labels output at ``temporary`` (``path``'s format); where to write it.

    A Zarr array gets chunks of ``shard_rows`` points, so that every shard writes whole chunks
    of its own. Returns the target the shards write to (picklable): ``path`` and ``kind``.
    """
    if path.lower().endswith(".zarr"):
        import zarr

        zarr.open_array(temporary, mode="w", shape=(samples,), chunks=(max(1, shard_rows),),
                        dtype="int32", fill_value=NO_LABEL)
        return {"path": temporary, "kind": "zarr"}
    np.lib.format.open_memmap(temporary, mode="w+", dtype=np.int32, shape=(samples,)).flush()
    return {"path": temporary, "kind": "npy"}


def nearest(x, centroids: np.ndarray):
    """The nearest of ``centroids`` to every point of ``x``: int32, ``x``'s array library."""
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    c = xp.asarray(np.asarray(centroids, dtype=np.float64))
    c_norm2 = (c * c).sum(axis=1)
    out = xp.empty(x.shape[0], dtype=np.int32)
    rows = max(1, DISTANCES // max(c.shape[0], x.shape[1], 1))
    for first in range(0, x.shape[0], rows):
        part = x[first:first + rows].astype(np.float64)
        labels = xp.argmin(c_norm2[None, :] - 2 * (part @ c.T), axis=1).astype(np.int32)
        finite = xp.isfinite(part).all(axis=1)
        out[first:first + rows] = xp.where(finite, labels, np.int32(NO_LABEL))
    return out


def write_block(labels, target: dict, start: int) -> tuple[int, float]:
    """Write a shard's ``labels`` (rows ``start`` on) into ``target``: rows and seconds."""
    began = time.perf_counter()
    labels = np.asarray(backends.to_host(labels), dtype=np.int32)
    stop = start + len(labels)
    if target["kind"] == "zarr":
        import zarr

        zarr.open_array(target["path"], mode="r+")[start:stop] = labels
    else:
        mapped = np.load(target["path"], mmap_mode="r+")
        mapped[start:stop] = labels
        mapped.flush()
        del mapped
    return len(labels), time.perf_counter() - began


def counted(labels) -> tuple[int, float]:
    """The rows of a shard's labels, as :func:`write_block` reports them (none written)."""
    return len(labels), 0.0


def label_pass(client, shards, sizes, centroids: np.ndarray, target: dict | None = None,
               keep: bool = False) -> dict:
    """One more pass: every shard's labels where it lives; written to ``target``, or kept.

    Returns ``rows`` labelled in each shard (as written, where ``target``), ``labels_s`` (the
    pass's wall time) and, where ``keep``, ``kept``: a Dask array of the labels (int32,
    ``(samples,)``), its blocks the shards' labels held by their workers.
    """
    import dask.array as da

    began = time.perf_counter()
    current = data_parallel.broadcast(client, np.asarray(centroids, dtype=np.float64))
    name = f"kmeans-labels-{uuid.uuid4().hex}"
    labels = [client.submit(nearest, shard, current, key=(name, i), pure=False)
              for i, shard in enumerate(shards)]
    starts = np.cumsum((0, *sizes))
    done = data_parallel.fetch(client, [  # one line if a worker is lost
        client.submit(write_block, block, target, int(starts[i]), pure=False)
        if target is not None else client.submit(counted, block, pure=False)
        for i, block in enumerate(labels)])
    current.release()
    out = {"rows": [int(rows) for rows, _ in done], "edits": [],
           "labels_s": time.perf_counter() - began}
    if keep:
        out["kept"] = da.Array({block.key: block for block in labels}, name,
                               chunks=(tuple(int(n) for n in sizes),), dtype=np.int32,
                               meta=np.empty((0,), np.int32))
    return out
