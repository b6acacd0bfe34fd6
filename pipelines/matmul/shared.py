"""What matmul-pipeline and its check (:mod:`pipelines.matmul.check`) both use.

The data's specification, not its computation: the seeds of the operands A and B derived from
the run's seed, the seed of the verification, the verification vectors R (a column of ones,
then standard normal columns) and the sampled cells of C. Nothing here multiplies or sums a
matrix. The first index of every block and the unit roundoff of a dtype are
:mod:`daskgpu.toolkit.numeric`'s.
"""

from __future__ import annotations

import numpy as np

from daskgpu.toolkit.numeric import seed_word

# Verification vectors: a column of ones (C times it gives C's row sums) and this many
# standard normal columns (Freivalds' check; each catches a wrong C with probability 1).
NORMAL_VECTORS = 3
# Cells of C the run reports and the check recomputes as dot products.
SAMPLED_CELLS = 16


def operand_seeds(seed: int) -> tuple[int, int]:
    """The seeds of A and of B: two 64-bit words of ``SeedSequence((seed, 1))``.

    Each operand's blocks then follow the per-block scheme of :mod:`daskgpu.data.synthetic`
    (``SeedSequence(operand_seed, spawn_key=(block_number,))``, row-major block order).
    """
    words = np.random.SeedSequence((seed, 1)).generate_state(2, np.uint64)
    return int(words[0]), int(words[1])


def check_seed(seed: int | None, shape: tuple[int, int, int]) -> int:
    """The seed of the vectors and cells: the run's seed, or for inputs one from the shape."""
    if seed is not None:
        return int(seed)
    n, k, m = shape
    return seed_word(np.random.SeedSequence((n, k, m, 2)))


def vectors(m: int, seed: int) -> np.ndarray:
    """The verification vectors R, shaped (m, 1 + NORMAL_VECTORS), float64."""
    rng = np.random.default_rng(np.random.SeedSequence((seed, 3)))
    out = np.empty((m, 1 + NORMAL_VECTORS))
    out[:, 0] = 1.0
    out[:, 1:] = rng.standard_normal((m, NORMAL_VECTORS))
    return out


def sampled_cells(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the cells of C the run reports and the check recomputes."""
    rng = np.random.default_rng(np.random.SeedSequence((seed, 4)))
    count = SAMPLED_CELLS
    return (rng.integers(0, n, count, dtype=np.int64), rng.integers(0, m, count, dtype=np.int64))
