"""What matmul-pipeline and its check (:mod:`pipelines.matmul_check`) both use.

The data's specification, not its computation: the seeds of the operands A and B derived from
the run's seed, the verification vectors R (a column of ones, then standard normal columns),
the sampled cells of C, the rounding unit of a dtype, and the block geometry of a normalised
chunking. Nothing here multiplies or sums a matrix.
"""

from __future__ import annotations

import numpy as np

# Verification vectors: a column of ones (C times it gives C's row sums) and this many
# standard normal columns (Freivalds' check; each catches a wrong C with probability 1).
NORMAL_VECTORS = 3
# Cells of C the run reports and the check recomputes as dot products.
SAMPLED_CELLS = 16


def operand_seeds(seed: int) -> tuple[int, int]:
    """The seeds of A and of B: two 64-bit words of ``SeedSequence((seed, 1))``.

    Each operand's blocks then follow the per-block scheme of :mod:`daskgpu.synthetic`
    (``SeedSequence(operand_seed, spawn_key=(block_number,))``, row-major block order).
    """
    words = np.random.SeedSequence((seed, 1)).generate_state(2, np.uint64)
    return int(words[0]), int(words[1])


def check_seed(seed: int | None, shape: tuple[int, int, int]) -> int:
    """The seed of the vectors and cells: the run's seed, or for inputs one from the shape."""
    if seed is not None:
        return int(seed)
    n, k, m = shape
    return int(np.random.SeedSequence((n, k, m, 2)).generate_state(1, np.uint64)[0])


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


def unit_roundoff(dtype) -> float:
    """Unit roundoff u = eps / 2 of a dtype (2**-24 for float32, 2**-53 for float64)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def gamma(count: int, dtype) -> float:
    """gamma_k = k u / (1 - k u): the relative rounding bound of a k-term dot product.

    Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Thm 3.5 / eq. (3.12):
    |fl(A B) - A B| <= gamma_k |A| |B| for any order of summation (FMA only tightens it).
    """
    ku = count * unit_roundoff(dtype)
    return ku / (1 - ku) if ku < 0.5 else float("inf")


def starts(sizes) -> np.ndarray:
    """The first index of every block along an axis of normalised block sizes."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
