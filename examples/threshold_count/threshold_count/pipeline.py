"""threshold-count: how many values of each row lie above a threshold, by a numba.njit kernel."""

import numba
import numpy as np

import daskgpu


@numba.njit
def above(block, threshold):
    """Per-row counts of one block's values above ``threshold`` (NumPy blocks: CPU workers)."""
    out = np.zeros(block.shape[0], np.int64)
    for i in range(block.shape[0]):
        for j in range(block.shape[1]):
            out[i] += block[i, j] > threshold
    return out


@daskgpu.array_pipeline(
    "threshold-count", "Values above a threshold, per row",
    params=[daskgpu.Param("threshold", daskgpu.finite_float, 0.5, "Count values above this.")],
    check=[daskgpu.checks.rows_recomputed(lambda rows, threshold: (rows > threshold).sum(1)),
           daskgpu.checks.count_bound(lambda threshold: min(1.0, max(0.0, 1.0 - threshold)))])
def threshold_count(data, threshold):
    """Every row block through the kernel (its column blocks joined): one count per row."""
    return data.map_blocks(above, threshold, drop_axis=1, dtype=np.int64, meta=np.empty(0, int))
