"""What pca-pipeline writes: the components (``--output``) and the projected data (``--project``).

Both are written atomically (:mod:`daskgpu.toolkit.output`). And how the run's data shows the
fit's larger arrays (:func:`by_shape`).
"""

from __future__ import annotations

import importlib

import dask
import numpy as np

from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.registry import Resolved, Workload


def save(workload: Workload, value: dict, path: str) -> None:
    """Write the components found to ``path``: ``.npy`` (components x features) or ``.csv`` rows.

    The format is the ``--output``'s suffix (``path`` is a temporary beside it).
    """
    final = workload.context.output
    components = workload.context.found["components"]
    if final.lower().endswith(".npy"):
        with output_files.atomic(path) as temporary, open(temporary, "wb") as f:
            np.save(f, components)
        return
    columns = {"component": np.arange(len(components)),
               "explained_variance": workload.description["explained_variance"],
               "explained_variance_ratio": workload.description["explained_variance_ratio"]}
    columns.update({f"f{j}": components[:, j] for j in range(components.shape[1])})
    output_files.save_table(path, columns, like=final)


class ByShape(np.ndarray):
    """An array of a run's data that the run's table names by its shape (values in ``--json``).

    The components (``components x features``) and the means (``features``) would fill the
    table; JSON and Python see the array's values as any other.
    """

    def __str__(self) -> str:
        if self.ndim == 1:
            return f"{self.size} values (see --json)"
        return f"{' x '.join(map(str, self.shape))} array (see --json)"


def by_shape(values) -> ByShape:
    """``values`` as a float64 :class:`ByShape` array."""
    return np.array(values, dtype=np.float64).view(ByShape)


def _picked(found: dict, k: int, dtype) -> tuple:
    """The mean and the first ``k`` components of a result, in ``dtype``."""
    return (np.asarray(found["mean"], dtype=dtype),
            np.asarray(found["components"][:k], dtype=dtype))


def project_block(block, picked: tuple):
    """A block of rows projected: ``(block - mean) @ components.T``, in the block's library."""
    xp = importlib.import_module(type(block).__module__.split(".")[0])
    mean, components = (xp.asarray(a) for a in picked)
    return (block - mean) @ components.T


def projection(x, result, resolved: Resolved):
    """The lazy ``(X - mean) V^T`` (samples x components), once the components are known.

    A task a block of rows (:func:`project_block`), where the block is; the data are read (or
    drawn) again for it unless ``x`` is on blocks held on the workers.
    """
    k = resolved["components"]
    picked = dask.delayed(_picked, pure=True)(result, k, x.dtype)
    return x.map_blocks(project_block, picked, dtype=x.dtype, chunks=(x.chunks[0], (k,)),
                        meta=x._meta)
