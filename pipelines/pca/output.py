"""What pca-pipeline writes: the components (``--output``) and the projected data (``--project``).

Both are written atomically (:mod:`daskgpu.toolkit.output`). And how the run's data shows the
fit's larger arrays (:func:`by_shape`).
"""

from __future__ import annotations

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


def _picked(found: dict, key: str, dtype) -> np.ndarray:
    return np.asarray(found[key], dtype=dtype)


def projection(x, result, resolved: Resolved):
    """The lazy ``(X - mean) V^T`` (samples x components), once the components are known.

    The data are read (or drawn) again for it, block by block, after the summaries' pass.
    """
    import dask.array as da

    k, features = resolved["components"], resolved["features"]
    pick = dask.delayed(_picked, pure=True)
    mean = da.from_delayed(pick(result, "mean", x.dtype), (features,), dtype=x.dtype,
                           meta=np.empty((0,), x.dtype))
    components = da.from_delayed(pick(result, "components", x.dtype), (k, features),
                                 dtype=x.dtype, meta=np.empty((0, 0), x.dtype))
    to_device = resolved.backend.to_device()
    if to_device is not None:
        mean = mean.map_blocks(to_device, dtype=x.dtype, meta=mean._meta)
        components = components.map_blocks(to_device, dtype=x.dtype, meta=components._meta)
    return (x - mean) @ components.T
